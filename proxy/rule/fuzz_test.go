package rule

import (
	"slices"
	"strings"
	"testing"
)

// fuzzConns are the connections a fuzzed rule and its re-parsed String() must
// agree on.
var fuzzConns = []struct {
	ip, sni string
	alpn    []string
}{
	{ip: "10.0.0.1"},
	{ip: "::1", sni: "a.com", alpn: []string{"h2"}},
	{ip: "::ffff:192.168.1.1", sni: "x.example.com", alpn: []string{"http/1.1"}},
	{ip: "2001:db8::1", sni: "X.Y.EXAMPLE.COM"},
	{ip: "127.0.0.2", sni: "example.com", alpn: []string{"h2", "acme"}},
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"HostSNI(`*`)",
		"HostSNI(`example.com`)",
		"HostSNI(`*.example.com`) || HostSNI(`a.com`)",
		"HostSNIRegexp(`^.+\\.example\\.com$`)",
		"ClientIP(`10.0.0.0/8`) && !ClientIP(`10.1.0.0/16`)",
		"ClientIP(`::1`) || ClientIP(`::ffff:10.0.0.0/104`)",
		"(HostSNI(`a.com`) || HostSNI(`b.com`)) && ALPN(`h2`)",
		`hostsni("a.com",) && !!ALPN("h\x32")`,
		"HostSNI(`a`) &&",
		"((HostSNI(`*`))",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			if r != nil {
				t.Fatalf("Parse(%q) returned both a rule and %v", s, err)
			}
			if !strings.HasPrefix(err.Error(), "rule ") {
				t.Fatalf("Parse(%q) error %q does not name the rule", s, err)
			}
			return
		}
		canon := r.String()
		r2, err := Parse(canon)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but Parse(String() = %q): %v", s, canon, err)
		}
		if got := r2.String(); got != canon {
			t.Fatalf("String() does not round-trip: %q -> %q -> %q", s, canon, got)
		}
		if r.NeedsTLS() != r2.NeedsTLS() || r.CatchAll() != r2.CatchAll() {
			t.Fatalf("%q and %q differ in NeedsTLS/CatchAll", s, canon)
		}
		e1, w1, ok1 := r.SNIs()
		e2, w2, ok2 := r2.SNIs()
		if ok1 != ok2 || !slices.Equal(e1, e2) || !slices.Equal(w1, w2) {
			t.Fatalf("%q and %q differ in SNIs", s, canon)
		}
		for _, fc := range fuzzConns {
			c := conn(fc.ip, fc.sni, fc.alpn...)
			if r.Match(c) != r2.Match(c) {
				t.Fatalf("%q and %q disagree on %+v", s, canon, fc)
			}
		}
	})
}
