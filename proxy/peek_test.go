package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/rule"
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

func TestTLSTableMatchesLinearOrder(t *testing.T) {
	rules := []struct {
		name, rule string
		prio       int
	}{
		{"exact", "HostSNI(`a.example.com`)", 0},
		{"wild", "HostSNI(`*.example.com`)", 0},
		{"wild-high", "HostSNI(`*.example.com`)", 500},
		{"both", "HostSNI(`b.example.com`) || HostSNI(`*.test`)", 0},
		{"regexp", "HostSNIRegexp(`^[a-c]\\.example\\.com$`)", 0},
		{"ip-and-name", "HostSNI(`a.example.com`) && ClientIP(`10.0.0.0/8`)", 0},
		{"alpn", "ALPN(`h2`)", 0},
		{"catch-all", "HostSNI(`*`)", 1},
		{"dup-exact", "HostSNI(`a.example.com`)", 0},
	}
	var all []*route
	for _, r := range rules {
		ru, err := rule.Parse(r.rule)
		if err != nil {
			t.Fatal(err)
		}
		prio := r.prio
		if prio == 0 {
			prio = len(r.rule)
		}
		all = append(all, &route{name: r.name, rule: ru, priority: prio})
	}
	// Every subset of rules, in the compiler's order, gives the same routes.
	for mask := 1; mask < 1<<len(all); mask++ {
		var rs []*route
		for i, r := range all {
			if mask&(1<<i) != 0 {
				rs = append(rs, r)
			}
		}
		slices.SortStableFunc(rs, func(a, b *route) int {
			if a.priority != b.priority {
				return b.priority - a.priority
			}
			return strings.Compare(a.name, b.name)
		})
		tab := newTable(rs, func(*route) bool { return true })
		for _, sni := range []string{"", "a.example.com", "b.example.com", "c.example.com", "d.example.com", "x.y.example.com", "example.com", "q.test", "test", ".example.com"} {
			for _, ip := range []string{"10.1.2.3", "192.0.2.1"} {
				for _, alpn := range [][]string{nil, {"h2"}} {
					c := &tcp.Conn{SNI: sni, ALPN: alpn, Peeked: []byte{sniff.RecordTypeHandshake}}
					c.Client = netipAP(ip)
					want := firstMatch(rs, c)
					if got := tab.match(c); got != want {
						t.Fatalf("routes %v, sni %q ip %s alpn %v: map gave %v, linear order gives %v", names(rs), sni, ip, alpn, nameOf(got), nameOf(want))
					}
				}
			}
		}
	}
}

func names(rs []*route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.name)
	}
	return out
}

func nameOf(r *route) string {
	if r == nil {
		return "<nil>"
	}
	return r.name
}

// Compile marks TLS tables and splits plain routes from TLS ones.
func TestCompileTLSTable(t *testing.T) {
	cfg := &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"sni":   passthrough("HostSNI(`a.test`)", "s"),
			"plain": {Rule: "HostSNI(`*`)", Service: "s", EntryPoints: []string{"tls", "tcp"}},
		},
		Services: map[string]*config.TCPService{"s": lbConfig("127.0.0.1:1")},
	}
	cfg.Routers["sni"].EntryPoints = []string{"tls"}
	tables, _ := Compile(cfg, []string{"tcp", "tls"}, NewState(nopLog, StateOptions{}), nopLog)
	if tables["tcp"].peek {
		t.Error("an entry point with only plain routes peeks")
	}
	tl := tables["tls"]
	if !tl.peek || len(tl.plain) != 1 || tl.plain[0].name != "plain" {
		t.Errorf("tls table: peek %v, plain %v", tl.peek, names(tl.plain))
	}
	if _, ok := tl.tls.exact["a.test"]; !ok {
		t.Error("a.test is not in the exact-name map")
	}
}

func netipAP(ip string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(ip), 40000) }

// The SNI lookup of a table with many TLS routes costs two map lookups and
// no allocation.
func BenchmarkTLSTableMatch(b *testing.B) {
	var rs []*route
	for i := range 1000 {
		ru, err := rule.Parse(fmt.Sprintf("HostSNI(`db%d.example.com`)", i))
		if err != nil {
			b.Fatal(err)
		}
		rs = append(rs, &route{name: fmt.Sprint(i), rule: ru})
	}
	wild, _ := rule.Parse("HostSNI(`*.wild.test`)")
	rs = append(rs, &route{name: "wild", rule: wild})
	tab := newTable(rs, func(*route) bool { return true })
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := &tcp.Conn{SNI: "db777.example.com", Peeked: []byte{sniff.RecordTypeHandshake}}
		w := &tcp.Conn{SNI: "x.wild.test", Peeked: []byte{sniff.RecordTypeHandshake}}
		for pb.Next() {
			if tab.match(c) == nil || tab.match(w) == nil {
				b.Fatal("no route")
			}
		}
	})
}
