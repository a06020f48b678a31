package quote

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQ(t *testing.T) {
	long := "HostSNI(`" + strings.Repeat("a", 1<<20) + "`)"
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"HostSNI(`db`)", "\"HostSNI(`db`)\""},
		{"a\"b\n", `"a\"b\n"`},
		{strings.Repeat("x", Max), strconv.Quote(strings.Repeat("x", Max))},
		{long, "\"HostSNI(`" + strings.Repeat("a", Max-9) + "…\" (1048587 bytes, first 256 shown)"},
		// A cut in the middle of a character moves back to its start.
		{strings.Repeat("x", Max-1) + "é" + "tail", `"` + strings.Repeat("x", Max-1) + `…" (` + fmt.Sprint(Max+5) + " bytes, first 255 shown)"},
	} {
		if got := Q(tc.in); got != tc.want {
			t.Errorf("Q(%.40q…) = %.300s, want %.300s", tc.in, got, tc.want)
		}
	}
}

// FuzzQ: whatever the input, the quoted form is bounded, is a Go string
// literal (then perhaps the length), and is exactly %q for a short input.
func FuzzQ(f *testing.F) {
	f.Add("HostSNI(`db`)")
	f.Add(strings.Repeat("é", 200))
	f.Add(strings.Repeat("\xff", 300))
	f.Fuzz(func(t *testing.T, s string) {
		q := Q(s)
		if len(q) > 4*Max+64 { // every byte shown as \xNN at worst, and the length
			t.Fatalf("Q of %d bytes is %d bytes long", len(s), len(q))
		}
		if len(s) <= Max {
			if q != strconv.Quote(s) {
				t.Fatalf("Q(%q) = %s, want %%q", s, q)
			}
			return
		}
		lit, err := strconv.QuotedPrefix(q)
		if err != nil {
			t.Fatalf("Q = %s: no quoted prefix: %v", q, err)
		}
		shown, _ := strconv.Unquote(lit)
		shown = strings.TrimSuffix(shown, "…")
		if !strings.HasPrefix(s, shown) || len(shown) > Max {
			t.Fatalf("Q shows %q, not a prefix of the input of at most %d bytes", shown, Max)
		}
		if utf8.ValidString(s) && !utf8.ValidString(shown) {
			t.Fatalf("Q cut a character: %q", shown)
		}
		if want := fmt.Sprintf(" (%d bytes, first %d shown)", len(s), len(shown)); q[len(lit):] != want {
			t.Fatalf("Q = %s, want the tail %q", q, want)
		}
	})
}
