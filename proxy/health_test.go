package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/proxy/health"
)

// hcBackend answers health probes ("PING\n" -> "PONG") while healthy and
// closes them otherwise; data connections ("DATA\n") get its name, then an
// echo. It counts each kind.
type hcBackend struct {
	name    string
	ln      *itest.Backend
	healthy atomic.Bool
	probes  atomic.Int64
	data    atomic.Int64
}

func startHCBackend(t testing.TB, name string) *hcBackend {
	t.Helper()
	b := &hcBackend{name: name}
	b.healthy.Store(true)
	b.ln = itest.StartBackend(t, nil, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		var first [5]byte
		if _, err := io.ReadFull(c, first[:]); err != nil {
			return
		}
		switch string(first[:]) {
		case "PING\n":
			b.probes.Add(1)
			if b.healthy.Load() {
				_, _ = io.WriteString(c, "PONG")
			}
		case "DATA\n":
			b.data.Add(1)
			_, _ = io.WriteString(c, b.name)
			_, _ = io.Copy(c, c)
		}
	})
	return b
}

func (b *hcBackend) addr() string { return b.ln.Addr() }

// dataGreeting opens a data connection through addr and returns the name of
// the backend that answered, or "closed".
func dataGreeting(t testing.TB, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if errors.Is(err, syscall.ECONNRESET) {
		return "closed" // rejected with a reset before connect returned
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "DATA\n"); err != nil {
		return "closed"
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return "closed"
	}
	return string(b[:])
}

func spread(t testing.TB, addr string, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for i := 0; i < n; i++ {
		got[dataGreeting(t, addr)]++
	}
	return got
}

func hcService(hc *config.TCPHealthCheck, addrs ...string) *config.TCPService {
	svc := lbConfig(addrs...)
	svc.LoadBalancer.HealthCheck = hc
	return svc
}

// waitStatus polls the live status of server addr of service until it is
// want, and returns how long that took.
func waitStatus(t *testing.T, s *Server, service, addr, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within + 2*time.Second) // report the real time on failure
	for s.State().ServerStatus(service)[addr] != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s of %s did not become %s within %v", addr, service, want, within+2*time.Second)
		}
		time.Sleep(2 * time.Millisecond)
	}
	el := time.Since(start)
	if el > within {
		t.Fatalf("%s of %s became %s after %v, want within %v", addr, service, want, el, within)
	}
	return el
}

// Acceptance: a health-checked server that stops answering stops receiving
// within two intervals, stays down across a reload, and comes back when it
// answers again.
func TestHealthCheckDownAndUpAcrossReload(t *testing.T) {
	const interval = 300 * time.Millisecond
	a := startHCBackend(t, "A")
	b := startHCBackend(t, "B")
	s := newTestServer(t, "tcp")
	t.Cleanup(s.State().Close)
	hc := &config.TCPHealthCheck{Interval: config.Duration(interval), Timeout: config.Duration(200 * time.Millisecond), Send: "PING\n", Expect: "PONG"}
	cfg := func(extra bool) *config.TCPConfiguration {
		c := &config.TCPConfiguration{
			Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}},
			Services: map[string]*config.TCPService{"s": hcService(hc, a.addr(), b.addr())},
		}
		if extra {
			c.Routers["other"] = &config.TCPRouter{Rule: "ClientIP(`192.0.2.1`)", Service: "s"}
		}
		return c
	}
	rt := apply(s, "file", cfg(false))
	if got := rt.Services["s@file"].ServerStatus; got[a.addr()] != "UP" || got[b.addr()] != "UP" {
		t.Fatalf("serverStatus at start %v, want both UP", got)
	}
	waitFor(t, "both servers to be probed", func() bool { return a.probes.Load() > 0 && b.probes.Load() > 0 })
	if got := spread(t, s.addr("tcp"), 8); got["A"] != 4 || got["B"] != 4 {
		t.Fatalf("healthy: 8 connections went %v, want 4 each", got)
	}

	a.healthy.Store(false)
	el := waitStatus(t, s, "s@file", a.addr(), "DOWN", 2*interval)
	t.Logf("A marked DOWN %v after it stopped answering (interval %v)", el, interval)
	if got := spread(t, s.addr("tcp"), 8); got["B"] != 8 {
		t.Fatalf("A down: 8 connections went %v, want all to B", got)
	}

	rt = apply(s, "file", cfg(true))
	if got := rt.Services["s@file"].ServerStatus[a.addr()]; got != "DOWN" {
		t.Fatalf("after a reload serverStatus shows A %q, want DOWN (health state must survive reloads)", got)
	}
	dataBefore := a.data.Load()
	if got := spread(t, s.addr("tcp"), 6); got["B"] != 6 {
		t.Fatalf("A down after the reload: 6 connections went %v, want all to B", got)
	}
	if a.data.Load() != dataBefore {
		t.Fatal("A received data connections while DOWN")
	}

	a.healthy.Store(true)
	el = waitStatus(t, s, "s@file", a.addr(), "UP", 2*interval)
	t.Logf("A marked UP %v after it answered again", el)
	if got := spread(t, s.addr("tcp"), 8); got["A"] != 4 || got["B"] != 4 {
		t.Fatalf("A back: 8 connections went %v, want 4 each", got)
	}
}

// Every server down: connections are closed, not sent to a dead server.
func TestHealthCheckAllDown(t *testing.T) {
	a := startHCBackend(t, "A")
	a.healthy.Store(false)
	s := newTestServer(t, "tcp")
	t.Cleanup(s.State().Close)
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}},
		Services: map[string]*config.TCPService{"s": hcService(&config.TCPHealthCheck{
			Interval: config.Duration(time.Hour), Timeout: config.Duration(time.Second), Send: "PING\n", Expect: "PONG"}, a.addr())},
	})
	// The first probe runs at once, not an interval later.
	waitStatus(t, s, "s@file", a.addr(), "DOWN", time.Second)
	if got := dataGreeting(t, s.addr("tcp")); got != "closed" {
		t.Fatalf("with every server down a connection reached %q", got)
	}
	if a.data.Load() != 0 {
		t.Fatal("a DOWN server received a data connection")
	}
}

// targetOf returns the registry's checker for a server, or nil.
func targetOf(st *State, service, addr string) *health.Checker {
	return st.health.Checker(service, addr)
}

func waitDone(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatalf("%s: checker still running", what)
	}
}

// Checkers have an owner: they stop when their server, their health check or
// their service goes away, are kept (not restarted) by a reload that leaves
// them alone, and all stop on Close.
func TestHealthCheckersStop(t *testing.T) {
	a := startHCBackend(t, "A")
	b := startHCBackend(t, "B")
	s := newTestServer(t, "tcp")
	t.Cleanup(s.State().Close)
	hc := &config.TCPHealthCheck{Interval: config.Duration(50 * time.Millisecond), Send: "PING\n", Expect: "PONG"}
	withSvc := func(svcs map[string]*config.TCPService) *config.TCPConfiguration {
		return &config.TCPConfiguration{
			Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}},
			Services: svcs,
		}
	}
	apply(s, "file", withSvc(map[string]*config.TCPService{
		"s": hcService(hc, a.addr(), b.addr()),
		"t": hcService(hc, b.addr()),
	}))
	ta, tb, tt := targetOf(s.State(), "s@file", a.addr()), targetOf(s.State(), "s@file", b.addr()), targetOf(s.State(), "t@file", b.addr())
	if ta == nil || tb == nil || tt == nil {
		t.Fatal("no checker for a health-checked server")
	}

	// Server A leaves service s: its checker stops, B's is kept as is.
	apply(s, "file", withSvc(map[string]*config.TCPService{
		"s": hcService(hc, b.addr()),
		"t": hcService(hc, b.addr()),
	}))
	waitDone(t, "server removed", ta.Done())
	if targetOf(s.State(), "s@file", b.addr()) != tb {
		t.Fatal("a reload that kept the server and its check restarted the checker")
	}
	// Service t disappears.
	apply(s, "file", withSvc(map[string]*config.TCPService{"s": hcService(hc, b.addr())}))
	waitDone(t, "service removed", tt.Done())
	if st := s.State().ServerStatus("t@file"); st != nil {
		t.Fatalf("removed service still has status %v", st)
	}
	// Service s loses its health check.
	apply(s, "file", withSvc(map[string]*config.TCPService{"s": lbConfig(b.addr())}))
	waitDone(t, "health check removed", tb.Done())
	if st := s.State().ServerStatus("s@file"); st != nil {
		t.Fatalf("service without a health check has status %v", st)
	}

	// A changed check restarts the checker with the server's state.
	apply(s, "file", withSvc(map[string]*config.TCPService{"s": hcService(hc, a.addr())}))
	a.healthy.Store(false)
	waitStatus(t, s, "s@file", a.addr(), "DOWN", time.Second)
	old := targetOf(s.State(), "s@file", a.addr())
	slower := *hc
	slower.Interval = config.Duration(time.Hour)
	rt := apply(s, "file", withSvc(map[string]*config.TCPService{"s": hcService(&slower, a.addr())}))
	waitDone(t, "check changed", old.Done())
	if got := rt.Services["s@file"].ServerStatus[a.addr()]; got != "DOWN" {
		t.Fatalf("after the check changed A shows %q, want DOWN kept", got)
	}
	cur := targetOf(s.State(), "s@file", a.addr())
	if cur == old || cur.Up() != old.Up() {
		t.Fatal("a changed check must restart the checker and keep its state")
	}

	// Close stops everything, and a later compile starts nothing.
	s.State().Close()
	waitDone(t, "Close", cur.Done())
	apply(s, "file", withSvc(map[string]*config.TCPService{"s": hcService(hc, b.addr())}))
	if t2 := targetOf(s.State(), "s@file", b.addr()); t2 == nil || t2.Running() {
		t.Fatal("a checker started after Close")
	}
}

func TestHealthCheckConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hc      config.TCPHealthCheck
		address string
		wantErr string
	}{
		{"negative interval", config.TCPHealthCheck{Interval: config.Duration(-time.Second)}, "127.0.0.1:1", "healthCheck.interval=-1s"},
		{"negative timeout", config.TCPHealthCheck{Timeout: config.Duration(-time.Second)}, "127.0.0.1:1", "healthCheck.timeout=-1s"},
		{"port out of range", config.TCPHealthCheck{Port: 70000}, "127.0.0.1:1", "healthCheck.port=70000"},
		{"port without host:port", config.TCPHealthCheck{Port: 8080}, "backend", `server address "backend" is not host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := NewState(nopLog, StateOptions{})
			defer st.Close()
			_, rt := Compile(&config.TCPConfiguration{
				Services: map[string]*config.TCPService{"s": hcService(&tc.hc, tc.address)},
			}, []string{"tcp"}, st, nopLog)
			si := rt.Services["s"]
			if si.Status != StatusDisabled || !strings.Contains(strings.Join(si.Err, "; "), tc.wantErr) {
				t.Fatalf("status %s, errors %q: want disabled with %q", si.Status, si.Err, tc.wantErr)
			}
		})
	}
	spec, _, err := health.NewSpec(&config.TCPHealthCheck{})
	if err != nil || spec.Interval != DefaultHealthCheckInterval || spec.Timeout != DefaultHealthCheckTimeout {
		t.Fatalf("defaults: %+v, %v", spec, err)
	}
}

func TestHealthProbe(t *testing.T) {
	a := startHCBackend(t, "A")
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close() // accepts (in the backlog) and never answers
	deadAddr := itest.RefusedAddr(t)
	_, aPort, _ := net.SplitHostPort(a.addr())
	aPortN, _ := strconv.Atoi(aPort)

	ctx := context.Background()
	timeout := 200 * time.Millisecond
	ping := health.Spec{Timeout: timeout, Send: "PING\n", Expect: "PONG"}
	if err := ping.Probe(ctx, a.addr()); err != nil {
		t.Errorf("healthy server: %v", err)
	}
	if err := (health.Spec{Timeout: timeout}).Probe(ctx, silent.Addr().String()); err != nil {
		t.Errorf("connect-only check against a listening port: %v", err)
	}
	if err := (health.Spec{Timeout: timeout}).Probe(ctx, deadAddr); err == nil {
		t.Error("a refused connection passed")
	}
	wrong := health.Spec{Timeout: timeout, Send: "PING\n", Expect: "PANG"}
	if err := wrong.Probe(ctx, a.addr()); !errors.Is(err, health.ErrExpect) {
		t.Errorf("wrong reply: %v, want health.ErrExpect", err)
	}
	start := time.Now()
	if err := ping.Probe(ctx, silent.Addr().String()); err == nil {
		t.Error("a server that never replies passed")
	}
	if el := time.Since(start); el > timeout+time.Second {
		t.Errorf("the timeout did not bound the probe: %v", el)
	}
	// port sends the check elsewhere than the traffic.
	withPort := health.Spec{Timeout: timeout, Port: aPortN, Send: "PING\n", Expect: "PONG"}
	target, err := withPort.Target(deadAddr)
	if err != nil || target != a.addr() {
		t.Fatalf("target with port: %q, %v", target, err)
	}
	if err := withPort.Probe(ctx, target); err != nil {
		t.Errorf("check on the health port: %v", err)
	}
	// Cancelling stops a probe at once.
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	start = time.Now()
	_ = health.Spec{Timeout: time.Minute, Send: "PING\n", Expect: "PONG"}.Probe(cctx, silent.Addr().String())
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("a cancelled probe ran for %v", el)
	}
}
