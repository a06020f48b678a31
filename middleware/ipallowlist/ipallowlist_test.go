package ipallowlist

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseAndContains(t *testing.T) {
	l, err := Parse([]string{"10.0.0.0/8", "192.0.2.7", " 2001:db8::/32 ", "::ffff:198.51.100.0/120"})
	if err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]bool{
		"10.1.2.3": true, "11.0.0.1": false, "192.0.2.7": true, "192.0.2.8": false,
		"2001:db8::1": true, "2001:db9::1": false, "::ffff:10.0.0.1": true, "198.51.100.9": true,
	} {
		if got := l.Contains(netip.MustParseAddr(ip)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", ip, got, want)
		}
	}
}

func TestParseErrorsNameTheInput(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, "empty"},
		{[]string{"10.0.0.0/33"}, `"10.0.0.0/33"`},
		{[]string{"10.0.0.1", "bogus"}, `"bogus"`},
		{[]string{""}, `stray comma`},
		{[]string{"10.0.0.1", " "}, `sourceRange[1] is empty`},
	} {
		_, err := Parse(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) error %v, want it to contain %s", tc.in, err, tc.want)
		}
	}
}

// FuzzParse: no input crashes the parser, and an accepted list never
// contains an address that none of its entries, parsed alone, contains.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "::1", "1.2.3.4/33", "::ffff:1.2.3.4/104", "fe80::1%eth0", "0.0.0.0/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := Parse([]string{s})
		if err != nil {
			if !strings.Contains(err.Error(), "sourceRange") {
				t.Fatalf("error %q does not name the option", err)
			}
			return
		}
		if len(l.prefixes) != 1 || !l.prefixes[0].IsValid() {
			t.Fatalf("%q parsed into %v", s, l.prefixes)
		}
	})
}

// Issue 10.6: entries that parse but do not mean what they read as come back
// as warnings on their entry; the list means what the warnings say.
func TestParseWarnings(t *testing.T) {
	l, notes, err := ParseWarnings([]string{"10.0.0.0/8", "127.0.0.9/8", "::ffff:0:0/96"})
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 2 || notes[0].Field != "ipAllowList.sourceRange[1]" || !strings.Contains(notes[0].Message, "host bits") || notes[1].Field != "ipAllowList.sourceRange[2]" || !strings.Contains(notes[1].Message, "every IPv4 address") {
		t.Fatalf("notes %+v", notes)
	}
	if !l.Contains(netip.MustParseAddr("127.1.2.3")) || !l.Contains(netip.MustParseAddr("203.0.113.1")) {
		t.Fatal("the list does not mean what its notes say")
	}
	if _, notes, _ := ParseWarnings([]string{"10.0.0.0/8", "192.0.2.1"}); len(notes) != 0 {
		t.Fatalf("notes on plain entries: %+v", notes)
	}
}
