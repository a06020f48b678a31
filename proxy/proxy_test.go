package proxy

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

func singleRouter(be string, mws map[string]*config.TCPMiddleware, chain ...string) *config.TCPConfiguration {
	return &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"r": {Rule: "HostSNI(`*`)", Service: "s", Middlewares: chain},
		},
		Services:    map[string]*config.TCPService{"s": lbConfig(be)},
		Middlewares: mws,
	}
}

// DESIGN §7: the four steps every form of the example must show (amount 1).
func TestInFlightConnFourSteps(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"one": limitMW(1)}, "one"))
	addr := s.addr("tcp")

	first, ok := dialFrom(t, "127.0.0.1", addr)
	if !ok {
		t.Fatal("step 1: first connection from 127.0.0.1 was not forwarded")
	}
	if _, ok := dialFrom(t, "127.0.0.1", addr); ok {
		t.Fatal("step 2: second connection from 127.0.0.1 was forwarded while the first is open")
	}
	other, ok := dialFrom(t, "127.0.0.2", addr)
	if !ok {
		t.Fatal("step 3: connection from 127.0.0.2 was not forwarded")
	}
	defer other.Close()
	first.Close()
	// The slot is freed when the proxy sees the close: poll, never sleep.
	waitFor(t, "127.0.0.1 to be admitted again", func() bool {
		c, ok := dialFrom(t, "127.0.0.1", addr)
		if ok {
			c.Close()
		}
		return ok
	})
}

// Issue acceptance: 15 held from one IP -> exactly 10; another IP gets its own
// 10; after closing, the first gets 10 again.
func TestInFlightConnExactPerIP(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"ten": limitMW(10)}, "ten"))
	addr := s.addr("tcp")

	a := holdN(t, 15, "127.0.0.2", addr)
	if len(a) != 10 {
		t.Fatalf("127.0.0.2: %d of 15 forwarded, want 10", len(a))
	}
	b := holdN(t, 15, "127.0.0.3", addr)
	if len(b) != 10 {
		t.Fatalf("127.0.0.3: %d of 15 forwarded, want 10", len(b))
	}
	closeAll(a)
	l := limiterOf(s, "ten@file")
	waitFor(t, "127.0.0.2's count to drop to 0", func() bool { return l.Count(mustAddr("127.0.0.2")) == 0 })
	again := holdN(t, 15, "127.0.0.2", addr)
	if len(again) != 10 {
		t.Fatalf("127.0.0.2 after closing: %d of 15 forwarded, want 10", len(again))
	}
}

func TestReloadKeepsCountsAndConnections(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	cfg := singleRouter(be.addr(), map[string]*config.TCPMiddleware{"five": limitMW(5)}, "five")
	apply(s, "file", cfg)
	addr := s.addr("tcp")
	held := holdN(t, 5, "127.0.0.4", addr)
	if len(held) != 5 {
		t.Fatalf("%d of 5 forwarded", len(held))
	}

	// Another router added: a new generation, same limiter.
	cfg2 := singleRouter(be.addr(), map[string]*config.TCPMiddleware{"five": limitMW(5)}, "five")
	cfg2.Routers["other"] = &config.TCPRouter{Rule: "ClientIP(`10.0.0.1`)", Service: "s"}
	apply(s, "file", cfg2)
	if _, ok := dialFrom(t, "127.0.0.4", addr); ok {
		t.Fatal("a 6th connection got in after a reload")
	}
	for i, c := range held {
		if !ping(c) {
			t.Fatalf("held connection %d stopped working after the reload", i)
		}
	}

	// Their router removed: live connections are not cut.
	apply(s, "file", &config.TCPConfiguration{Services: cfg.Services})
	for i, c := range held {
		if !ping(c) {
			t.Fatalf("held connection %d was cut when its router was removed", i)
		}
	}
	if _, ok := dialFrom(t, "127.0.0.4", addr); ok {
		t.Fatal("a connection was routed with no router")
	}
}

func TestAmountChangeAppliesToNewConnections(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"l": limitMW(3)}, "l"))
	addr := s.addr("tcp")
	held := holdN(t, 3, "127.0.0.5", addr)
	if len(held) != 3 {
		t.Fatalf("%d of 3 forwarded", len(held))
	}
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"l": limitMW(2)}, "l"))
	if _, ok := dialFrom(t, "127.0.0.5", addr); ok {
		t.Fatal("amount lowered to 2 with 3 held, yet a new connection got in")
	}
	for i, c := range held {
		if !ping(c) {
			t.Fatalf("held connection %d was cut by lowering the amount", i)
		}
	}
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"l": limitMW(4)}, "l"))
	more := holdN(t, 2, "127.0.0.5", addr)
	if len(more) != 1 {
		t.Fatalf("amount raised to 4 with 3 held: %d of 2 new forwarded, want 1", len(more))
	}
}

func TestTwoEntryPointsShareOneLimiter(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "a", "b")
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"ra": {EntryPoints: []string{"a"}, Rule: "HostSNI(`*`)", Service: "s", Middlewares: []string{"shared"}},
			"rb": {EntryPoints: []string{"b"}, Rule: "HostSNI(`*`)", Service: "s", Middlewares: []string{"shared"}},
		},
		Services:    map[string]*config.TCPService{"s": lbConfig(be.addr())},
		Middlewares: map[string]*config.TCPMiddleware{"shared": limitMW(4)},
	})
	ha := holdN(t, 3, "127.0.0.6", s.addr("a"))
	hb := holdN(t, 3, "127.0.0.6", s.addr("b"))
	if len(ha)+len(hb) != 4 {
		t.Fatalf("forwarded %d on a and %d on b: want 4 in total (one budget per IP)", len(ha), len(hb))
	}
}

func TestAllowList(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	mws := map[string]*config.TCPMiddleware{
		"allow": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.7", "127.1.0.0/16"}}},
		"limit": limitMW(1),
	}
	apply(s, "file", singleRouter(be.addr(), mws, "allow", "limit"))
	addr := s.addr("tcp")

	before := be.accepted()
	if _, ok := dialFrom(t, "127.0.0.8", addr); ok {
		t.Fatal("127.0.0.8 is not in the allow list but was forwarded")
	}
	c, ok := dialFrom(t, "127.1.2.3", addr)
	if !ok {
		t.Fatal("127.1.2.3 is in 127.1.0.0/16 but was not forwarded")
	}
	defer c.Close()
	if got := be.accepted() - before; got != 1 {
		t.Fatalf("backend saw %d connections, want 1 (the denied one must not reach it)", got)
	}
	// Chained after the allow list, the limiter still applies.
	if _, ok := dialFrom(t, "127.1.2.3", addr); ok {
		t.Fatal("limit 1 behind the allow list admitted a second connection")
	}
}

func TestInvalidAllowListFailsClosed(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	for _, ranges := range [][]string{{"10.0.0.0/33"}, {}, {"127.0.0.1", "not-an-ip"}} {
		t.Run(strings.Join(ranges, ","), func(t *testing.T) {
			mws := map[string]*config.TCPMiddleware{"allow": {IPAllowList: &config.TCPIPAllowList{SourceRange: ranges}}}
			rt := apply(s, "file", singleRouter(be.addr(), mws, "allow"))
			ri := rt.Routers["r@file"]
			if ri.Status != StatusDisabled {
				t.Fatalf("router status %q, want disabled", ri.Status)
			}
			mi := rt.Middlewares["allow@file"]
			if mi.Status != StatusDisabled || len(mi.Err) == 0 {
				t.Fatalf("middleware status %q errors %v, want disabled with an error", mi.Status, mi.Err)
			}
			for _, src := range []string{"127.0.0.1", "127.0.0.9"} {
				if _, ok := dialFrom(t, src, s.addr("tcp")); ok {
					t.Fatalf("%s got through a router whose allow list is invalid", src)
				}
			}
		})
	}
	rt := apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"allow": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/33"}}}}, "allow"))
	if got := strings.Join(rt.Middlewares["allow@file"].Err, ""); !strings.Contains(got, `"10.0.0.0/33"`) {
		t.Fatalf("error %q does not name the bad range", got)
	}
}

// A server-first protocol (SMTP, MySQL) must get its greeting to a client
// that sends nothing: HostSNI(`*`) routes without reading a byte.
func TestServerFirstBanner(t *testing.T) {
	be := startBackend(t, "220 smtp.test ESMTP\r\n")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"l": limitMW(5)}, "l"))
	c, err := net.Dial("tcp", s.addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "220 ") {
		t.Fatalf("got %q, %v; want the banner without sending anything", buf[:n], err)
	}
}

func TestNoRouteIsClosed(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"r": {Rule: "ClientIP(`10.9.9.9`)", Service: "s"}},
		Services: map[string]*config.TCPService{"s": lbConfig(be.addr())},
	})
	if _, ok := dialFrom(t, "127.0.0.1", s.addr("tcp")); ok {
		t.Fatal("a connection that matches no router was forwarded")
	}
	waitFor(t, "no-route counter", func() bool { return s.EntryPoint("tcp").NoRoute() == 1 })
}

func TestRulePriorityAndClientIP(t *testing.T) {
	a := startBackend(t, "A")
	b := startBackend(t, "B")
	s := newTestServer(t, "tcp")
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"all":     {Rule: "HostSNI(`*`)", Service: "a"},
			"special": {Rule: "HostSNI(`*`) && (ClientIP(`127.0.0.10`) || ClientIP(`127.0.0.11`)) && !ClientIP(`127.0.0.11`)", Service: "b"},
		},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr()), "b": lbConfig(b.addr())},
	})
	for src, want := range map[string]string{"127.0.0.10": "B", "127.0.0.11": "A", "127.0.0.12": "A"} {
		if got := greeting(t, src, s.addr("tcp")); got != want {
			t.Errorf("from %s reached %q, want %q", src, got, want)
		}
	}
	// Explicit priority beats rule length.
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"all":     {Rule: "HostSNI(`*`)", Service: "a", Priority: 1000},
			"special": {Rule: "HostSNI(`*`) && ClientIP(`127.0.0.10`)", Service: "b"},
		},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr()), "b": lbConfig(b.addr())},
	})
	if got := greeting(t, "127.0.0.10", s.addr("tcp")); got != "A" {
		t.Errorf("explicit priority 1000: reached %q, want A", got)
	}
}

func greeting(t *testing.T, src, addr string) string {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return "closed"
	}
	return string(b[:])
}

func TestRoundRobinAndDialFailover(t *testing.T) {
	a := startBackend(t, "A")
	b := startBackend(t, "B")
	deadAddr := itest.RefusedAddr(t)
	s := newTestServer(t, "tcp")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}},
		Services: map[string]*config.TCPService{"s": lbConfig(a.addr(), deadAddr, b.addr())},
	})
	counts := map[string]int{}
	for i := 0; i < 9; i++ {
		counts[greeting(t, "127.0.0.1", s.addr("tcp"))]++
	}
	if counts["closed"] != 0 || counts["A"]+counts["B"] != 9 || counts["A"] < 3 || counts["B"] < 3 {
		t.Fatalf("distribution %v: want every connection served by A or B despite the dead server", counts)
	}
	if n := s.State().ServiceCounters("s@file").DialErrors.Load(); n == 0 {
		t.Fatal("dial errors to the dead server were not counted")
	}
}

func TestWeighted(t *testing.T) {
	a := startBackend(t, "A")
	b := startBackend(t, "B")
	s := newTestServer(t, "tcp")
	three, one := 3, 1
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "w"}},
		Services: map[string]*config.TCPService{
			"a": lbConfig(a.addr()), "b": lbConfig(b.addr()),
			"w": {Weighted: &config.TCPWeightedRoundRobin{Services: []config.TCPWRRService{{Name: "a", Weight: &three}, {Name: "b", Weight: &one}}}},
		},
	})
	counts := map[string]int{}
	for i := 0; i < 16; i++ {
		counts[greeting(t, "127.0.0.1", s.addr("tcp"))]++
	}
	if counts["A"] != 12 || counts["B"] != 4 {
		t.Fatalf("weighted 3:1 over 16 gave %v, want A:12 B:4", counts)
	}
}

func TestHalfCloseDeliversResponse(t *testing.T) {
	// A backend that answers only after the client's write side closes.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		data, _ := io.ReadAll(c)
		_, _ = fmt.Fprintf(c, "got %d bytes", len(data))
	}()
	s := newTestServer(t, "tcp")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}},
		Services: map[string]*config.TCPService{"s": lbConfig(ln.Addr().String())},
	})
	c, err := net.Dial("tcp", s.addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("hello"))
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	got, _ := io.ReadAll(c)
	if string(got) != "got 5 bytes" {
		t.Fatalf("got %q after half-close, want the backend's answer", got)
	}
}

func TestBrokenResourcesAreIsolated(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	neg := int64(-1)
	rt := apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"good":    {Rule: "HostSNI(`*`)", Service: "s", Middlewares: []string{"ok"}},
			"badmw":   {Rule: "HostSNI(`*`)", Service: "s", Middlewares: []string{"neg"}, Priority: 100},
			"sni":     {Rule: "HostSNI(`example.com`)", Service: "s"},
			"norule":  {Service: "s"},
			"nosvc":   {Rule: "HostSNI(`*`)", Service: "missing"},
			"missmw":  {Rule: "HostSNI(`*`)", Service: "s", Middlewares: []string{"ghost"}},
			"zeroamt": {Rule: "ClientIP(`10.0.0.1`)", Service: "s", Middlewares: []string{"zero"}},
		},
		Services: map[string]*config.TCPService{"s": lbConfig(be.addr())},
		Middlewares: map[string]*config.TCPMiddleware{
			"ok":   limitMW(10),
			"neg":  limitMW(neg),
			"zero": limitMW(0),
			"two":  {InFlightConn: &config.TCPInFlightConn{Amount: 1}, IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.1"}}},
		},
	})
	want := map[string]string{
		"good@file": StatusEnabled, "badmw@file": StatusDisabled, "sni@file": StatusDisabled,
		"norule@file": StatusDisabled, "nosvc@file": StatusDisabled, "missmw@file": StatusDisabled,
		"zeroamt@file": StatusEnabled,
	}
	for name, st := range want {
		if got := rt.Routers[name].Status; got != st {
			t.Errorf("router %s: status %q (errors %v), want %q", name, got, rt.Routers[name].Err, st)
		}
	}
	if e := strings.Join(rt.Routers["sni@file"].Err, ""); !strings.Contains(e, "tls.passthrough=true") || !strings.Contains(e, "HostSNI(`*`)") {
		t.Errorf("HostSNI without TLS error %q does not say how to fix it", e)
	}
	if mi := rt.Middlewares["zero@file"]; mi.Status != StatusWarning || len(mi.Err) == 0 {
		t.Errorf("amount 0: status %q errors %v, want warning with an explanation", mi.Status, mi.Err)
	}
	if mi := rt.Middlewares["neg@file"]; mi.Status != StatusDisabled || !strings.Contains(strings.Join(mi.Err, ""), "-1") {
		t.Errorf("amount -1: status %q errors %v, want disabled naming the value", mi.Status, mi.Err)
	}
	if mi := rt.Middlewares["two@file"]; mi.Status != StatusDisabled || !strings.Contains(strings.Join(mi.Err, ""), "several types") {
		t.Errorf("two types in one block: status %q errors %v", mi.Status, mi.Err)
	}
	if _, ok := dialFrom(t, "127.0.0.1", s.addr("tcp")); !ok {
		t.Fatal("the good router stopped serving because others are broken")
	}
}

func TestZeroAmountRejectsAll(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"z": limitMW(0)}, "z"))
	if _, ok := dialFrom(t, "127.0.0.1", s.addr("tcp")); ok {
		t.Fatal("amount 0 admitted a connection")
	}
}

func TestShutdownDrains(t *testing.T) {
	be := startBackend(t, "")
	cfg := map[string]*config.EntryPoint{"tcp": {Address: "127.0.0.1:0"}}
	cfg["tcp"].SetDefaults()
	cfg["tcp"].Transport.LifeCycle.GraceTimeOut = config.Duration(200 * time.Millisecond)
	s, err := NewServer(cfg, Options{Log: nopLog})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	apply(s, "file", singleRouter(be.addr(), nil))
	c, ok := dialFrom(t, "127.0.0.1", s.addr("tcp"))
	if !ok {
		t.Fatal("not forwarded")
	}
	defer c.Close()
	start := time.Now()
	s.Shutdown(t.Context())
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("shutdown returned after %s, before the 200ms grace ended with a connection open", d)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection still open after shutdown closed it")
	}
	if _, err := net.DialTimeout("tcp", s.addr("tcp"), time.Second); err == nil {
		t.Fatal("entry point still accepting after shutdown")
	}
}
