package rule

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/expr"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

func TestParseErrors(t *testing.T) {
	deep := strings.Repeat("(", expr.MaxDepth+1) + "HostSNI(`*`)" + strings.Repeat(")", expr.MaxDepth+1)
	nots := strings.Repeat("!", expr.MaxDepth+1) + "HostSNI(`*`)"
	tests := []struct {
		name string
		rule string
		want []string // substrings of the error
	}{
		{"empty", "", []string{`rule "": empty expression`}},
		{"blank", " \t\n", []string{`empty expression`}},
		{"dangling and", "HostSNI(`a`) &&", []string{"rule \"HostSNI(`a`) &&\": unexpected end of input at 13"}},
		{"dangling or", "HostSNI(`a`) ||", []string{"unexpected end of input at 13", `after "||"`}},
		{"dangling not", "!", []string{"unexpected end of input at 0", `after "!"`}},
		{"unknown matcher", "Host(`a`)", []string{`unknown matcher "Host" at 0`}},
		{"mixed case name", "hostSni(`a`)", []string{`unknown matcher "hostSni" at 0`}},
		{"no args", "HostSNI()", []string{"HostSNI at 0: takes exactly 1 argument, got 0"}},
		{"two args", "HostSNI(`a`, `b`)", []string{"takes exactly 1 argument, got 2", "HostSNI(`a`) || HostSNI(`b`)"}},
		{"empty arg", "ALPN(``)", []string{"ALPN at 0: empty argument"}},
		{"bad cidr", "ClientIP(`10.0.0.0/33`)", []string{`ClientIP at 0: parsing CIDR "10.0.0.0/33"`}},
		{"bad ip", "HostSNI(`*`) && ClientIP(`10.0.0.256`)", []string{`ClientIP at 16: parsing IP "10.0.0.256"`}},
		{"bad regexp", "HostSNIRegexp(`(`)", []string{"HostSNIRegexp at 0: compiling \"(\""}},
		{"non-ascii regexp", "HostSNIRegexp(`é`)", []string{"not ASCII"}},
		{"bad host", "HostSNI(`a b`)", []string{`"a b" is not a valid host name`}},
		{"bad wildcard", "HostSNI(`*.`)", []string{`"*." is not a valid host name`}},
		{"inner wildcard", "HostSNI(`a.*.com`)", []string{`is not a valid host name`}},
		{"double wildcard", "HostSNI(`**.a.com`)", []string{`is not a valid host name`}},
		{"non-ascii host", "HostSNI(`bücher.de`)", []string{"punycode"}},
		{"acme alpn", "ALPN(`acme-tls/1`)", []string{"reserved for ACME"}},
		{"unbalanced open", "(HostSNI(`*`)", []string{`missing ")" for the "(" at 0`}},
		{"unbalanced close", "HostSNI(`*`))", []string{`unexpected ")" at 12: no matching "("`}},
		{"empty parens", "()", []string{`unexpected ")" at 1`}},
		{"juxtaposed", "HostSNI(`a`) HostSNI(`b`)", []string{`unexpected "HostSNI" at 13`}},
		{"single and", "HostSNI(`a`) & HostSNI(`b`)", []string{`unexpected "&" at 13: did you mean "&&"?`}},
		{"single quotes", "HostSNI('a')", []string{"single quote at 8"}},
		{"unterminated raw", "HostSNI(`a)", []string{"unterminated string starting at 8"}},
		{"unterminated quoted", `HostSNI("a)`, []string{"unterminated string starting at 8"}},
		{"bad escape", `HostSNI("\q")`, []string{`invalid string "\q" at 8`}},
		{"bare ident", "HostSNI", []string{"unexpected end of input at 0", `want "(" after HostSNI`}},
		{"missing comma", "HostSNI(`a` `b`)", []string{"unexpected string `b` at 12"}},
		{"bad char", "HostSNI(`a`) ; x", []string{`unexpected character ';' at 13`}},
		{"too deep parens", deep, []string{"nested deeper than 64"}},
		{"too deep nots", nots, []string{"nested deeper than 64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(tt.rule)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want an error", tt.rule, r)
			}
			if r != nil {
				t.Errorf("Parse(%q) returned a rule with the error", tt.rule)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) error\n  %s\nwant it to contain\n  %s", tt.rule, err, w)
				}
			}
		})
	}
}

func TestParseOK(t *testing.T) {
	tests := []struct {
		rule  string
		canon string // String()
		tls   bool
		catch bool
		exact []string
		wild  []string
		sniOK bool
	}{
		{rule: "HostSNI(`*`)", canon: "HostSNI(`*`)", catch: true},
		{rule: " ( ( HostSNI( `*` ) ) ) ", canon: "HostSNI(`*`)", catch: true},
		{rule: `HostSNI("*")`, canon: "HostSNI(`*`)", catch: true},
		{rule: "hostsni(`*`)", canon: "HostSNI(`*`)", catch: true},
		{rule: "HOSTSNI(`*`)", canon: "HostSNI(`*`)", catch: true},
		{rule: "Hostsni(`*`)", canon: "HostSNI(`*`)", catch: true},
		{rule: "HostSNI(`*`,)", canon: "HostSNI(`*`)", catch: true},
		{rule: "!HostSNI(`*`)", canon: "!HostSNI(`*`)"},
		{rule: "HostSNI(`*`) && ClientIP(`10.0.0.0/8`)", canon: "HostSNI(`*`) && ClientIP(`10.0.0.0/8`)"},
		{rule: "HostSNI(`Example.COM`)", canon: "HostSNI(`Example.COM`)", tls: true, exact: []string{"example.com"}, sniOK: true},
		{rule: "HostSNI(`example.com.`)", canon: "HostSNI(`example.com.`)", tls: true, exact: []string{"example.com"}, sniOK: true},
		{
			rule:  "HostSNI(`a.com`)||HostSNI(`*.B.com`) || (HostSNI(`c.com`) || HostSNI(`A.com`))",
			canon: "HostSNI(`a.com`) || HostSNI(`*.B.com`) || HostSNI(`c.com`) || HostSNI(`A.com`)",
			tls:   true, exact: []string{"a.com", "c.com"}, wild: []string{".b.com"}, sniOK: true,
		},
		{rule: "HostSNI(`*.example.com`)", canon: "HostSNI(`*.example.com`)", tls: true, wild: []string{".example.com"}, sniOK: true},
		{rule: "HostSNI(`a.com`) || HostSNI(`*`)", canon: "HostSNI(`a.com`) || HostSNI(`*`)", tls: true},
		{rule: "HostSNI(`a.com`) && ClientIP(`::1`)", canon: "HostSNI(`a.com`) && ClientIP(`::1`)", tls: true},
		{rule: "!HostSNI(`a.com`)", canon: "!HostSNI(`a.com`)", tls: true},
		{rule: "HostSNIRegexp(`^.+\\.example\\.com$`)", canon: "HostSNIRegexp(`^.+\\.example\\.com$`)", tls: true},
		{rule: "HostSNI(`*`) && ALPN(`h2`)", canon: "HostSNI(`*`) && ALPN(`h2`)", tls: true},
		{rule: "ClientIP(`10.0.0.1`) || ClientIP(`::ffff:10.0.0.0/104`)", canon: "ClientIP(`10.0.0.1`) || ClientIP(`::ffff:10.0.0.0/104`)"},
		{
			rule:  "(HostSNI(`*`) || ClientIP(`::1`)) && !(ALPN(`h2`) && ALPN(`x`)) || !!ClientIP(`1.2.3.4`)",
			canon: "(HostSNI(`*`) || ClientIP(`::1`)) && !(ALPN(`h2`) && ALPN(`x`)) || !!ClientIP(`1.2.3.4`)",
			tls:   true,
		},
		{rule: `ALPN("a` + "`" + `b")`, canon: `ALPN("a` + "`" + `b")`, tls: true},
		{rule: `ALPN("h\x32")`, canon: "ALPN(`h2`)", tls: true},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			r, err := Parse(tt.rule)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.rule, err)
			}
			if got := r.String(); got != tt.canon {
				t.Errorf("String() = %q, want %q", got, tt.canon)
			}
			if got := r.NeedsTLS(); got != tt.tls {
				t.Errorf("NeedsTLS() = %v, want %v", got, tt.tls)
			}
			if got := r.CatchAll(); got != tt.catch {
				t.Errorf("CatchAll() = %v, want %v", got, tt.catch)
			}
			exact, wild, ok := r.SNIs()
			if ok != tt.sniOK || !slices.Equal(exact, tt.exact) || !slices.Equal(wild, tt.wild) {
				t.Errorf("SNIs() = %q, %q, %v, want %q, %q, %v", exact, wild, ok, tt.exact, tt.wild, tt.sniOK)
			}
			r2, err := Parse(r.String())
			if err != nil {
				t.Fatalf("Parse(String()) = %v", err)
			}
			if r2.String() != r.String() {
				t.Errorf("String() does not round-trip: %q -> %q", r.String(), r2.String())
			}
		})
	}
}

func TestSNIsCopies(t *testing.T) {
	r, err := Parse("HostSNI(`a.com`) || HostSNI(`*.b.com`)")
	if err != nil {
		t.Fatal(err)
	}
	exact, wild, _ := r.SNIs()
	exact[0], wild[0] = "x", "y"
	exact, wild, _ = r.SNIs()
	if exact[0] != "a.com" || wild[0] != ".b.com" {
		t.Errorf("SNIs() shares its slices with the rule: got %q %q after modifying a copy", exact, wild)
	}
}

func conn(ip, sni string, alpn ...string) *tcp.Conn {
	c := &tcp.Conn{SNI: sni, ALPN: alpn}
	if ip != "" {
		c.Client = netip.AddrPortFrom(netip.MustParseAddr(ip), 40000)
	}
	return c
}

func TestMatch(t *testing.T) {
	type tc struct {
		ip, sni string
		alpn    []string
		want    bool
	}
	tests := []struct {
		rule  string
		cases []tc
	}{
		{"HostSNI(`*`)", []tc{
			{ip: "10.0.0.1", want: true},
			{ip: "10.0.0.1", sni: "a.com", want: true},
			{want: true}, // no client address at all
		}},
		{"HostSNI(`example.com`)", []tc{
			{sni: "example.com", want: true},
			{sni: "EXAMPLE.com", want: true},
			{sni: "www.example.com"},
			{sni: "example.co"},
			{sni: ""},
		}},
		{"HostSNI(`Example.COM.`)", []tc{
			{sni: "example.com", want: true},
		}},
		{"HostSNI(`*.example.com`)", []tc{
			{sni: "x.example.com", want: true},
			{sni: "X.Example.Com", want: true},
			{sni: "x.y.example.com"},
			{sni: "example.com"},
			{sni: ".example.com"},
			{sni: "xexample.com"},
			{sni: ""},
		}},
		{"HostSNIRegexp(`^.+\\.example\\.com$`)", []tc{
			{sni: "x.example.com", want: true},
			{sni: "x.y.example.com", want: true},
			{sni: "X.EXAMPLE.COM", want: true}, // matched lower-cased, as Traefik does
			{sni: "example.com"},
			{sni: ""},
		}},
		{"HostSNIRegexp(`^$`)", []tc{
			{sni: "", want: true},
			{sni: "a"},
		}},
		{"ClientIP(`10.0.0.0/8`)", []tc{
			{ip: "10.1.2.3", want: true},
			{ip: "::ffff:10.1.2.3", want: true}, // mapped: unmapped before the check
			{ip: "11.0.0.1"},
			{ip: "::1"},
			{ip: ""}, // invalid address
		}},
		{"ClientIP(`10.0.0.1`)", []tc{
			{ip: "10.0.0.1", want: true},
			{ip: "10.0.0.2"},
		}},
		{"ClientIP(`::ffff:10.0.0.0/104`)", []tc{
			{ip: "10.0.0.5", want: true},
			{ip: "10.1.0.5", want: true}, // /104 is 10.0.0.0/8
			{ip: "11.0.0.5"},
		}},
		{"ClientIP(`::1`)", []tc{
			{ip: "::1", want: true},
			{ip: "127.0.0.1"},
		}},
		{"ClientIP(`2001:db8::/32`)", []tc{
			{ip: "2001:db8:1::5", want: true},
			{ip: "2001:db9::5"},
			{ip: "10.0.0.1"},
		}},
		{"ALPN(`h2`)", []tc{
			{alpn: []string{"http/1.1", "h2"}, want: true},
			{alpn: []string{"H2"}},
			{},
		}},
		{"HostSNI(`a.com`) && ClientIP(`10.0.0.0/8`)", []tc{
			{ip: "10.0.0.1", sni: "a.com", want: true},
			{ip: "11.0.0.1", sni: "a.com"},
			{ip: "10.0.0.1", sni: "b.com"},
		}},
		{"HostSNI(`a.com`) || HostSNI(`b.com`) && ALPN(`h2`)", []tc{
			{sni: "a.com", want: true},
			{sni: "b.com"},
			{sni: "b.com", alpn: []string{"h2"}, want: true},
		}},
		{"(HostSNI(`a.com`) || HostSNI(`b.com`)) && ALPN(`h2`)", []tc{
			{sni: "a.com"},
			{sni: "a.com", alpn: []string{"h2"}, want: true},
		}},
		{"HostSNI(`*`) && !ClientIP(`192.168.0.0/16`)", []tc{
			{ip: "192.168.1.1"},
			{ip: "::ffff:192.168.1.1"},
			{ip: "10.0.0.1", want: true},
		}},
		{"!!ClientIP(`::1`)", []tc{
			{ip: "::1", want: true},
			{ip: "::2"},
		}},
		{"!(ClientIP(`::1`) || ClientIP(`::2`))", []tc{
			{ip: "::1"},
			{ip: "::2"},
			{ip: "::3", want: true},
		}},
	}
	for _, tt := range tests {
		r, err := Parse(tt.rule)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.rule, err)
		}
		for _, c := range tt.cases {
			t.Run(tt.rule+"/"+c.ip+"/"+c.sni+"/"+strings.Join(c.alpn, ","), func(t *testing.T) {
				if got := r.Match(conn(c.ip, c.sni, c.alpn...)); got != c.want {
					t.Errorf("Match(ip=%q sni=%q alpn=%q) = %v, want %v", c.ip, c.sni, c.alpn, got, c.want)
				}
			})
		}
	}
}

func TestNilAndZero(t *testing.T) {
	var r *Rule
	if r.Match(conn("10.0.0.1", "")) || r.NeedsTLS() || r.CatchAll() || r.String() != "" {
		t.Error("a nil *Rule must match nothing and report nothing")
	}
	if _, _, ok := r.SNIs(); ok {
		t.Error("nil *Rule: SNIs ok = true")
	}
	var z Rule
	if z.Match(conn("10.0.0.1", "")) || z.String() != "" {
		t.Error("the zero Rule must match nothing")
	}
	all, err := Parse("HostSNI(`*`)")
	if err != nil {
		t.Fatal(err)
	}
	if all.Match(nil) {
		t.Error("Match(nil) = true")
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	r, err := Parse("(HostSNI(`a.com`) || HostSNI(`*.b.com`) || HostSNIRegexp(`^c\\.[a-z]+$`)) && ALPN(`h2`) && !ClientIP(`10.0.0.0/8`) || ClientIP(`::1`)")
	if err != nil {
		t.Fatal(err)
	}
	conns := []*tcp.Conn{
		conn("192.168.0.1", "a.com", "h2"),
		conn("192.168.0.1", "X.B.COM", "h2"),
		conn("192.168.0.1", "c.example", "h2"),
		conn("10.0.0.1", "a.com", "h2"),
		conn("::1", ""),
		conn("::ffff:10.0.0.1", "zzz", "http/1.1"),
	}
	want := []bool{true, true, true, false, true, false}
	for i, c := range conns {
		if got := r.Match(c); got != want[i] {
			t.Fatalf("Match(conns[%d]) = %v, want %v", i, got, want[i])
		}
		if n := testing.AllocsPerRun(100, func() { r.Match(c) }); n != 0 {
			t.Errorf("Match(conns[%d]) allocates %v times per run", i, n)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	benches := []struct{ name, rule string }{
		{"catchall", "HostSNI(`*`)"},
		{"sni", "HostSNI(`db.example.com`)"},
		{"wildcard", "HostSNI(`*.example.com`)"},
		{"regexp", "HostSNIRegexp(`^.+\\.example\\.com$`)"},
		{"clientip", "HostSNI(`*`) && ClientIP(`10.0.0.0/8`) && !ClientIP(`10.1.0.0/16`)"},
		{"mixed", "(HostSNI(`a.com`) || HostSNI(`*.example.com`)) && ALPN(`h2`) || ClientIP(`::1`)"},
	}
	c := conn("10.2.3.4", "db.example.com", "http/1.1", "h2")
	for _, bb := range benches {
		r, err := Parse(bb.rule)
		if err != nil {
			b.Fatal(err)
		}
		if !r.Match(c) {
			b.Fatalf("%s does not match the benchmark connection", bb.rule)
		}
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.Match(c)
			}
		})
		b.Run(bb.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r.Match(c)
				}
			})
		})
	}
}

// Issue 41.6: whatever part of a rule is huge (an argument, a matcher name,
// a string literal, the whole rule), its error quotes it up to a bound and
// says how long it was.
func TestParseErrorsOfHugeRulesAreBounded(t *testing.T) {
	a := strings.Repeat("a", 1<<20)
	for _, rule := range []string{
		"HostSNI(`" + a + "!`)",           // not a host name
		"HostSNIRegexp(`" + a + "(`)",     // a regexp that does not compile
		"ClientIP(`" + a + "`)",           // not a CIDR
		a + "(`x`)",                       // an unknown matcher
		"HostSNI(`x`) && `" + a + "`",     // an unexpected string
		"HostSNI(`x`) " + a,               // an unexpected identifier
		"HostSNI(\"" + a + "\\q\")",       // an invalid string literal
		"HostSNI(`x`, `" + a + "`)",       // v2's several arguments
		"HostSNI(`x`) && " + a + "(`x`) ", // an unknown matcher, later
	} {
		_, err := Parse(rule)
		if err == nil {
			t.Fatalf("Parse(%.40q…) succeeded", rule)
		}
		if msg := err.Error(); len(msg) > 2048 || !strings.Contains(msg, "bytes, first ") {
			t.Errorf("Parse(%.40q…): error of %d bytes, want at most 2 KiB with the input's length: %.400s", rule, len(msg), msg)
		}
	}
}
