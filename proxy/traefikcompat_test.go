package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// A service that names no transport, with no static tcpServersTransport,
// dials as Traefik's services do with its default@internal: the socket to
// its server has keepalive probes after 15 s of silence (observed on the
// socket, in the kernel's table: the keepalive timer is armed, due in at
// most 15 s), and the load balancer's dial timeout is 30 s.
func TestServiceWithoutTransportDialsWithTraefikDefaults(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(ln.Addr().String(), nil))
	tab := s.EntryPoint("tcp").table.Load()
	lb := tab.routes[0].handler.(*loadBalancer)
	if lb.dialTimeout != 30*time.Second || lb.keepAlive != 15*time.Second {
		t.Errorf("dialTimeout %s, keepAlive %s; want Traefik's 30s and 15s", lb.dialTimeout, lb.keepAlive)
	}

	c, err := net.Dial("tcp", s.addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	var be net.Conn
	select {
	case be = <-accepted:
		defer be.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the server was not dialled")
	}
	out := be.RemoteAddr().(*net.TCPAddr).AddrPort() // the proxy's socket to the server
	timer, when, err := tcpTimer(out, be.LocalAddr().(*net.TCPAddr).AddrPort())
	if err != nil {
		t.Fatal(err)
	}
	// /proc/net/tcp: timer 2 is the keepalive timer (1 would be a
	// retransmission, 0 none), when in clock ticks (USER_HZ, 100 a second).
	if timer != 2 || when <= 10*100 || when > 15*100 {
		t.Errorf("the proxy's socket to the server: timer %d due in %d ticks; want the keepalive timer (2), due in at most 15 s", timer, when)
	}
}

// tcpTimer reads the timer of the IPv4 socket from local to remote in
// /proc/self/net/tcp: which timer is armed and when it is due (clock
// ticks).
func tcpTimer(local, remote netip.AddrPort) (timer int, when int64, err error) {
	b, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		return 0, 0, err
	}
	hex := func(ap netip.AddrPort) string {
		a := ap.Addr().As4()
		return fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], ap.Port())
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != hex(local) || f[2] != hex(remote) {
			continue
		}
		tr, tm, _ := strings.Cut(f[5], ":")
		n, _ := strconv.Atoi(tr)
		w, _ := strconv.ParseInt(tm, 16, 64)
		return n, w, nil
	}
	return 0, 0, fmt.Errorf("no socket from %s to %s in /proc/self/net/tcp", local, remote)
}

// Traefik's entryPoints.<name>.observability: an entry point whose
// accessLogs is false has no access log lines, one whose metrics is false
// is not in the per-router series; the other entry point's connections
// are in both.
func TestEntryPointObservability(t *testing.T) {
	be := startBackend(t, "")
	var buf syncBuffer
	al := zerolog.New(&buf)
	s := newServerOpts(t, StateOptions{Observers: ConnObservers{AccessLog: &al, Metrics: true,
		Unlogged: map[string]bool{"quiet": true}, Uncounted: map[string]bool{"quiet": true}}}, nil, "quiet", "loud")
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"q": {EntryPoints: []string{"quiet"}, Rule: "HostSNI(`*`)", Service: "s"},
			"l": {EntryPoints: []string{"loud"}, Rule: "HostSNI(`*`)", Service: "s"},
		},
		Services: map[string]*config.TCPService{"s": lbConfig(be.addr())},
	})
	for _, ep := range []string{"quiet", "loud", "quiet"} {
		c, ok := dialFrom(t, "127.0.0.1", s.addr(ep))
		if !ok {
			t.Fatalf("%s: not forwarded", ep)
		}
		exchange(t, c, "hello")
	}
	// A connection is observed before it finishes (Open counts it until
	// then): once none is open, every report is in.
	waitFor(t, "the loud entry point's line and count, and every connection finished", func() bool {
		n, _, _ := s.State().RouterCounters("l@file").Duration.Snapshot()
		return !buf.empty() && n == 1 && s.EntryPoint("quiet").Open() == 0 && s.EntryPoint("loud").Open() == 0
	})
	if lines := buf.lines(); len(lines) != 1 || !strings.Contains(lines[0], `"entrypoint":"loud"`) {
		t.Errorf("access log %q: want the loud entry point's line only", lines)
	}
	if n, _, _ := s.State().RouterCounters("q@file").Duration.Snapshot(); n != 0 {
		t.Errorf("the quiet entry point's router counted %d connections", n)
	}
}

// Traefik's providers.precedence: of two routers of equal priority, the
// one of the provider named first takes the connection; without it, the
// first by qualified name does (r@docker before r@file).
func TestProviderPrecedence(t *testing.T) {
	a, b := startBackend(t, "D"), startBackend(t, "F")
	dyn := func(be string) *config.Dynamic {
		return &config.Dynamic{TCP: &config.TCPConfiguration{
			Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s", Priority: 10}},
			Services: map[string]*config.TCPService{"s": lbConfig(be)},
		}}
	}
	for _, tc := range []struct {
		precedence []string
		want       string
	}{{nil, "D"}, {[]string{"file", "docker"}, "F"}, {[]string{"docker"}, "D"}, {[]string{"file"}, "F"}} {
		s := newServerOpts(t, StateOptions{ProviderPrecedence: tc.precedence}, nil, "tcp")
		s.Apply(provider.Merge(map[string]*config.Dynamic{"docker": dyn(a.addr()), "file": dyn(b.addr())}))
		if got := greeting(t, "127.0.0.1", s.addr("tcp")); got != tc.want {
			t.Errorf("precedence %v: reached %q, want %q", tc.precedence, got, tc.want)
		}
	}
}

// A resource that serves with a warning (a deprecated field) is logged at
// warning level, as Traefik logs deprecations; one disabled at error.
func TestStatusLogLevels(t *testing.T) {
	var buf syncBuffer
	ep := &config.EntryPoint{Address: "127.0.0.1:0"}
	ep.SetDefaults()
	s, err := NewServer(map[string]*config.EntryPoint{"tcp": ep}, Options{Log: zerolog.New(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	delay := 5
	lb := lbConfig("127.0.0.1:1")
	lb.LoadBalancer.TerminationDelay = &delay
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"ok":     {Rule: "HostSNI(`*`)", Service: "old"},
			"broken": {Rule: "HostSNI(`a.test`)", Service: "old"}, // no TLS: disabled
		},
		Services: map[string]*config.TCPService{"old": lb},
	})
	levels := map[string]string{}
	for _, line := range buf.lines() {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			levels[m["message"].(string)], _ = m["level"].(string)
		}
	}
	if levels["service warning"] != "warn" || levels["router disabled"] != "error" {
		t.Errorf("levels %v: want service warning (deprecated terminationDelay) at warn, router disabled at error", levels)
	}
}
