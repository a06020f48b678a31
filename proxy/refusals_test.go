package proxy

import (
	"net/netip"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

var minute = config.Duration(60 * 1e9)

// TestRefusalsRecorded: every refusal of a real entry point is in the
// server's record with its client, reason, router, middleware and message:
// inFlightConn's limit, an allow list's denial, a rate limit, no route.
func TestRefusalsRecorded(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	cfg := &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"limited": {Rule: "HostSNI(`*`) && ClientIP(`127.0.5.0/24`)", Service: "s", Middlewares: []string{"one"}},
			"listed":  {Rule: "HostSNI(`*`) && ClientIP(`127.0.6.0/24`)", Service: "s", Middlewares: []string{"only7"}},
			"rated":   {Rule: "HostSNI(`*`) && ClientIP(`127.0.8.0/24`)", Service: "s", Middlewares: []string{"slow"}},
		},
		Services: map[string]*config.TCPService{"s": lbConfig(be.addr())},
		Middlewares: map[string]*config.TCPMiddleware{
			"one":   limitMW(1),
			"only7": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"127.0.6.7"}}},
			"slow":  {RateLimit: &config.TCPRateLimit{Average: 1, Period: &minute}},
		},
	}
	apply(s, "file", cfg)
	if rt := s.Runtime(); rt.Middlewares["slow@file"].Status != StatusEnabled {
		t.Fatalf("slow@file: %+v", rt.Middlewares["slow@file"])
	}
	addr := s.addr("tcp")
	holdN(t, 1, "127.0.5.1", addr)
	for i := 0; i < 3; i++ {
		if _, ok := dialFrom(t, "127.0.5.1", addr); ok {
			t.Fatal("a second connection from 127.0.5.1 was forwarded")
		}
	}
	if _, ok := dialFrom(t, "127.0.6.1", addr); ok {
		t.Fatal("127.0.6.1 passed the allow list")
	}
	if _, ok := dialFrom(t, "127.0.7.1", addr); ok {
		t.Fatal("127.0.7.1 was routed")
	}
	holdN(t, 1, "127.0.8.1", addr)
	if _, ok := dialFrom(t, "127.0.8.1", addr); ok {
		t.Fatal("a second connection from 127.0.8.1 within the minute was forwarded")
	}
	rec := s.Refusals()
	find := func(ip string) []tcp.Refusal {
		got, _ := rec.Find(tcp.Match{Client: netip.MustParseAddr(ip)}, 0)
		return got
	}
	var got []tcp.Refusal
	waitFor(t, "three refusals of 127.0.5.1", func() bool {
		got = find("127.0.5.1")
		n := uint32(0)
		for _, e := range got {
			n += e.Count
		}
		return n == 3
	})
	if e := got[0]; e.Reason != tcp.ReasonLimit || e.Router != "limited@file" || e.By != "one@file" || e.EntryPoint != "tcp" ||
		e.Message != "max number of connections reached (inFlightConn.amount 1)" {
		t.Fatalf("127.0.5.1: %+v", e)
	}
	if got := find("127.0.6.1"); len(got) != 1 || got[0].Reason != tcp.ReasonAllowList || got[0].By != "only7@file" || got[0].Router != "listed@file" {
		t.Fatalf("127.0.6.1: %+v", got)
	}
	if got := find("127.0.7.1"); len(got) != 1 || got[0].Reason != tcp.ReasonNoRoute || got[0].By != "" || got[0].Router != "" {
		t.Fatalf("127.0.7.1: %+v", got)
	}
	if got := find("127.0.8.1"); len(got) != 1 || got[0].Reason != tcp.ReasonRate || got[0].By != "slow@file" ||
		got[0].Message != "connection rate limit reached (average 1 per 1m0s, burst 1)" {
		t.Fatalf("127.0.8.1: %+v", got)
	}
	if got := find("127.0.5.2"); len(got) != 0 {
		t.Fatalf("a client never refused is in the record: %+v", got)
	}
}
