package proxy

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// loopbackIPv6 adds the IPv6 addresses addrs (each a /128) to lo for the
// test and removes them at its end. Without the right to (not root, no
// CAP_NET_ADMIN, IPv6 off) the test is skipped, or fails under
// TOLLGATE_REQUIRE_INTEGRATION=1.
func loopbackIPv6(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		out, err := exec.Command("ip", "-6", "addr", "add", a+"/128", "dev", "lo", "nodad").CombinedOutput()
		if err != nil {
			itest.Need(t, "IPv6 addresses added to lo (root or CAP_NET_ADMIN, and the ip command)",
				fmt.Errorf("ip -6 addr add %s/128 dev lo: %v: %s", a, err, strings.TrimSpace(string(out))))
		}
		t.Cleanup(func() { _ = exec.Command("ip", "-6", "addr", "del", a+"/128", "dev", "lo").Run() })
	}
}

// silentFrom opens n connections to addr from src that send nothing, and
// returns those the proxy has not closed after a moment.
func silentFrom(t *testing.T, n int, src, addr string) (open []net.Conn) {
	t.Helper()
	var all []net.Conn
	for i := 0; i < n; i++ {
		if c := dialOrReset(t, src, addr); c != nil {
			all = append(all, c)
		}
	}
	t.Cleanup(func() { closeAll(all) })
	for _, c := range all {
		if stillOpen(c, 50*time.Millisecond) {
			open = append(open, c)
		}
	}
	return open
}

// Issue 41.5: the bound on unrouted connections per client keys an IPv6
// client by its /64 (entryPoints.<n>.transport.ipv6Subnet, default 64), as
// inFlightConn's ipv6Subnet does: eight addresses of one /64 together hold
// at most maxUnroutedPerIP silent connections, and an address of another
// /64 is not held back by them. Real addresses on lo, added by the test.
func TestUnroutedBoundKeysIPv6ByPrefix(t *testing.T) {
	const bound = 3
	var same []string
	for i := 2; i <= 9; i++ {
		same = append(same, fmt.Sprintf("fd00:7e57:41:5::%d", i))
	}
	other := "fd00:7e57:41:6::2"
	loopbackIPv6(t, append(same, other)...)
	a := startTLSBackend(t, "A", "a.test")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.Address = "[::1]:0"
		ep.Transport.RespondingTimeouts.ReadTimeout = config.Duration(10 * time.Second)
		ep.Transport.MaxUnroutedPerIP = bound
	}, "tls")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"a": passthrough("HostSNI(`a.test`)", "a")},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr())},
	})
	ep, addr := s.EntryPoint("tls"), s.addr("tls")
	open := 0
	for _, src := range same {
		open += len(silentFrom(t, 1, src, addr))
	}
	if open != bound {
		t.Fatalf("%d silent connections open from 8 addresses of one /64, want the bound %d for the /64", open, bound)
	}
	u := ep.Unrouted(10)
	if u.Connections != bound || u.Rejected != uint64(len(same)-bound) || len(u.Top) != 1 || u.Top[0].IP != "fd00:7e57:41:5::" || u.IPv6Subnet != 64 {
		t.Fatalf("unrouted state %+v, want fd00:7e57:41:5:: (the /64) holding %d, %d refused", u, bound, len(same)-bound)
	}
	if n := len(silentFrom(t, 1, other, addr)); n != 1 {
		t.Fatal("a client of another /64 was refused while the first /64 held its bound")
	}
	if got := tlsFrom(t, other, addr, "a.test", mergePools(a)); got != "A" {
		t.Fatalf("a client of another /64 reached %q, want A", got)
	}
}

// With ipv6Subnet 128 (or 0) every IPv6 address is its own client, as
// before the option.
func TestUnroutedBoundIPv6SubnetFullAddress(t *testing.T) {
	addrs := []string{"fd00:7e57:41:7::2", "fd00:7e57:41:7::3"}
	loopbackIPv6(t, addrs...)
	a := startTLSBackend(t, "A", "a.test")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.Address = "[::1]:0"
		ep.Transport.RespondingTimeouts.ReadTimeout = config.Duration(10 * time.Second)
		ep.Transport.MaxUnroutedPerIP = 1
		ep.Transport.IPv6Subnet = 128
	}, "tls")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"a": passthrough("HostSNI(`a.test`)", "a")},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr())},
	})
	for _, src := range addrs {
		if n := len(silentFrom(t, 2, src, s.addr("tls"))); n != 1 {
			t.Fatalf("%s: %d silent connections open, want 1 (each address its own client)", src, n)
		}
	}
}

// Issue 41.5: 40 client IPs, each within maxUnroutedPerIP, together hold no
// more than the entry point's maxUnrouted connections before routing: the
// rest are refused at accept and counted; a connection that is routed at
// once (a complete ClientHello) still passes once the silent ones go.
func TestUnroutedTotalBound(t *testing.T) {
	const total, clients = 10, 40
	a := startTLSBackend(t, "A", "a.test")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.Transport.RespondingTimeouts.ReadTimeout = config.Duration(10 * time.Second)
		ep.Transport.MaxUnroutedPerIP = 16
		ep.Transport.MaxUnrouted = new(int)
		*ep.Transport.MaxUnrouted = total
	}, "tls")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"a": passthrough("HostSNI(`a.test`)", "a")},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr())},
	})
	ep, addr := s.EntryPoint("tls"), s.addr("tls")
	var open []net.Conn
	for i := 0; i < clients; i++ {
		open = append(open, silentFrom(t, 1, fmt.Sprintf("127.0.41.%d", i+1), addr)...)
	}
	if len(open) != total {
		t.Fatalf("%d silent connections open from %d IPs, want the entry point's bound %d", len(open), clients, total)
	}
	u := ep.Unrouted(0)
	if u.Open != total || u.Max != total || u.RejectedMax != clients-total || u.Rejected != 0 {
		t.Fatalf("unrouted state %+v, want %d open at the bound %d, %d refused there", u, total, total, clients-total)
	}
	closeAll(open)
	waitFor(t, "the silent connections' places to be freed", func() bool { return ep.Unrouted(0).Open == 0 })
	if got := tlsFrom(t, "127.0.41.200", addr, "a.test", mergePools(a)); got != "A" {
		t.Fatalf("a client after the silent ones left reached %q, want A", got)
	}
	if n := ep.unrouted.Entries(); n != 0 {
		t.Fatalf("%d per-IP entries left, want 0", n)
	}
}

// The default bound on every client's unrouted connections is a quarter of
// the descriptor limit.
func TestUnroutedTotalBoundDefault(t *testing.T) {
	s := newServerWith(t, nil, "tls")
	want := int64(defaultMaxUnrouted())
	if got := s.EntryPoint("tls").Unrouted(0).Max; got != want || want < 1 {
		t.Fatalf("default maxUnrouted %d, want %d (a quarter of RLIMIT_NOFILE)", got, want)
	}
}
