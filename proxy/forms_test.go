package proxy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/health"
)

// The configuration forms Traefik v3 accepts (docs/traefik.md): the
// deprecated ipWhiteList, Traefik 3.6's health-check forms, and a servers
// transport tollgate cannot apply.

func errsOf(r ResourceStatus) string { return strings.Join(r.Err, "; ") }

// ipWhiteList applies as ipAllowList, with a warning that names the key.
func TestIPWhiteListAppliesWithWarning(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	rt := apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{
		"old": {IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.1"}}},
	}, "old"))
	mi := rt.Middlewares["old@file"]
	if mi.Status != StatusWarning || !strings.Contains(errsOf(mi.ResourceStatus), "ipWhiteList is deprecated") ||
		!strings.Contains(errsOf(mi.ResourceStatus), "rename it ipAllowList") || mi.ErrorField(0) != "ipWhiteList" {
		t.Fatalf("middleware: status %s, errors %q (field %q): want warning, deprecated, use ipAllowList, on ipWhiteList", mi.Status, mi.Err, mi.ErrorField(0))
	}
	if st := rt.Routers["r@file"].Status; st != StatusEnabled {
		t.Fatalf("router status %s, want enabled", st)
	}
	if c, ok := dialFrom(t, "127.0.0.1", s.addr("tcp")); !ok {
		t.Fatal("127.0.0.1 (in the list) was refused")
	} else {
		c.Close()
	}
	if _, ok := dialFrom(t, "127.0.0.2", s.addr("tcp")); ok {
		t.Fatal("127.0.0.2 (not in the list) was forwarded")
	}
}

// An ipWhiteList's bad entry disables it, the error naming the key as
// written; both names in one block are two types.
func TestIPWhiteListErrors(t *testing.T) {
	st := NewState(nopLog, StateOptions{})
	defer st.Close()
	_, rt := Compile(&config.TCPConfiguration{Middlewares: map[string]*config.TCPMiddleware{
		"bad":  {IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/33"}}},
		"both": {IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8"}}, IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8"}}},
	}}, []string{"tcp"}, st, nopLog)
	bad := rt.Middlewares["bad"]
	if bad.Status != StatusDisabled || !strings.Contains(errsOf(bad.ResourceStatus), `ipWhiteList.sourceRange: parsing CIDR "10.0.0.0/33"`) {
		t.Fatalf("bad: status %s, errors %q", bad.Status, bad.Err)
	}
	if f := bad.ErrorField(len(bad.Err) - 1); f != "ipWhiteList.sourceRange[0]" {
		t.Fatalf("bad: error about %q, want ipWhiteList.sourceRange[0]", f)
	}
	both := rt.Middlewares["both"]
	if both.Status != StatusDisabled || !strings.Contains(errsOf(both.ResourceStatus), "both ipAllowList and ipWhiteList") {
		t.Fatalf("both: status %s, errors %q", both.Status, both.Err)
	}
}

// A resource that applies with a warning (a deprecated key) is logged at
// warning level, a disabled one at error level.
func TestApplyLogsWarningsAtWarnLevel(t *testing.T) {
	var buf bytes.Buffer
	ep := &config.EntryPoint{Address: "127.0.0.1:0"}
	ep.SetDefaults()
	s, err := NewServer(map[string]*config.EntryPoint{"tcp": ep}, Options{Log: zerolog.New(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	delay := 50
	deprecated := lbConfig("127.0.0.1:1")
	deprecated.LoadBalancer.TerminationDelay = &delay
	apply(s, "file", &config.TCPConfiguration{
		Middlewares: map[string]*config.TCPMiddleware{
			"old":    {IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.1"}}},
			"broken": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"nope"}}},
		},
		Services: map[string]*config.TCPService{"delayed": deprecated},
	})
	levels := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var e struct{ Level, Middleware, Service string }
		if json.Unmarshal([]byte(line), &e) == nil {
			levels[e.Middleware+e.Service] = e.Level
		}
	}
	if levels["old@file"] != "warn" || levels["delayed@file"] != "warn" || levels["broken@file"] != "error" {
		t.Fatalf("log levels %v, want old@file and delayed@file warn (deprecated keys), broken@file error\n%s", levels, buf.String())
	}
}

// unhealthyInterval: the time between probes of a DOWN server; unset, the
// interval; 0, the default interval (as in Traefik), with a warning;
// negative, an error. An empty healthCheck takes Traefik's defaults.
func TestHealthCheckUnhealthyIntervalSpec(t *testing.T) {
	d := func(v time.Duration) *config.Duration { c := config.Duration(v); return &c }
	for _, tc := range []struct {
		name                string
		hc                  config.TCPHealthCheck
		interval, unhealthy time.Duration
		warn, err           string
	}{
		{"empty: Traefik's defaults", config.TCPHealthCheck{}, 30 * time.Second, 30 * time.Second, "", ""},
		{"unset: the interval", config.TCPHealthCheck{Interval: config.Duration(2 * time.Second)}, 2 * time.Second, 2 * time.Second, "", ""},
		{"set", config.TCPHealthCheck{Interval: config.Duration(time.Minute), UnhealthyInterval: d(time.Second)}, time.Minute, time.Second, "", ""},
		{"zero: the default", config.TCPHealthCheck{Interval: config.Duration(time.Second), UnhealthyInterval: d(0)}, time.Second, 30 * time.Second, "unhealthyInterval=0s means the default, 30s", ""},
		{"negative", config.TCPHealthCheck{UnhealthyInterval: d(-time.Second)}, 0, 0, "", "healthCheck.unhealthyInterval=-1s: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, warn, err := health.NewSpec(&tc.hc)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || config.FieldOf(err) != "loadBalancer.healthCheck.unhealthyInterval" {
					t.Fatalf("error %v, want %q on loadBalancer.healthCheck.unhealthyInterval", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if spec.Next(true) != tc.interval || spec.Next(false) != tc.unhealthy || spec.Timeout != 5*time.Second {
				t.Fatalf("next(up) %v, next(down) %v, timeout %v: want %v, %v, 5s", spec.Next(true), spec.Next(false), spec.Timeout, tc.interval, tc.unhealthy)
			}
			if (warn == nil) != (tc.warn == "") || warn != nil && !strings.Contains(warn.Error(), tc.warn) {
				t.Fatalf("warning %v, want %q", warn, tc.warn)
			}
		})
	}
}

// Live: with interval 1h and unhealthyInterval 50ms, a server found DOWN
// by the first probe is probed again every 50 ms, and serves again as soon
// as it answers: only unhealthyInterval can bring it back this fast.
func TestHealthCheckUnhealthyIntervalLive(t *testing.T) {
	a := startHCBackend(t, "A")
	a.healthy.Store(false)
	s := newTestServer(t, "tcp")
	t.Cleanup(s.State().Close)
	unhealthy := config.Duration(50 * time.Millisecond)
	hc := &config.TCPHealthCheck{Interval: config.Duration(time.Hour), UnhealthyInterval: &unhealthy,
		Timeout: config.Duration(500 * time.Millisecond), Send: "PING\n", Expect: "PONG"}
	rt := apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}},
		Services: map[string]*config.TCPService{"s": hcService(hc, a.addr())},
	})
	if st := rt.Services["s@file"].Status; st != StatusEnabled {
		t.Fatalf("service %s: %q", st, rt.Services["s@file"].Err)
	}
	waitStatus(t, s, "s@file", a.addr(), "DOWN", time.Second)
	if got := dataGreeting(t, s.addr("tcp")); got != "closed" {
		t.Fatalf("server DOWN: a connection reached %q, want it closed", got)
	}
	probes := a.probes.Load()
	waitFor(t, "DOWN server probed every unhealthyInterval", func() bool { return a.probes.Load() >= probes+3 })
	a.healthy.Store(true)
	el := waitStatus(t, s, "s@file", a.addr(), "UP", time.Second)
	t.Logf("UP %v after the server answered (unhealthyInterval 50ms, interval 1h)", el)
	if got := dataGreeting(t, s.addr("tcp")); got != "A" {
		t.Fatalf("server UP: a connection reached %q, want A", got)
	}
}

// weighted.healthCheck: {} is accepted when every member is health-checked
// itself, as Traefik requires (else the weighted service is disabled,
// naming the member); a member whose servers are all DOWN is skipped.
func TestWeightedHealthCheck(t *testing.T) {
	a := startHCBackend(t, "A")
	b := startHCBackend(t, "B")
	s := newTestServer(t, "tcp")
	t.Cleanup(s.State().Close)
	hc := &config.TCPHealthCheck{Interval: config.Duration(50 * time.Millisecond), Timeout: config.Duration(500 * time.Millisecond), Send: "PING\n", Expect: "PONG"}
	wrr := func(hc *config.TCPWeightedHealthCheck, members ...string) *config.TCPService {
		w := &config.TCPWeightedRoundRobin{HealthCheck: hc}
		for _, m := range members {
			w.Services = append(w.Services, config.TCPWRRService{Name: m})
		}
		return &config.TCPService{Weighted: w}
	}
	rt := apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"r":      {Rule: "HostSNI(`*`)", Service: "top"},
			"strict": {Rule: "ClientIP(`192.0.2.1`)", Service: "unchecked"},
		},
		Services: map[string]*config.TCPService{
			"top":       wrr(&config.TCPWeightedHealthCheck{}, "inner", "b"),
			"inner":     wrr(&config.TCPWeightedHealthCheck{}, "a"),
			"a":         hcService(hc, a.addr()),
			"b":         hcService(hc, b.addr()),
			"plain":     lbConfig(b.addr()),
			"unchecked": wrr(&config.TCPWeightedHealthCheck{}, "a", "plain"),
		},
	})
	for _, n := range []string{"top@file", "inner@file", "a@file", "b@file"} {
		if si := rt.Services[n]; si.Status != StatusEnabled {
			t.Fatalf("%s: %s %q, want enabled", n, si.Status, si.Err)
		}
	}
	un := rt.Services["unchecked@file"]
	if un.Status != StatusDisabled || !strings.Contains(errsOf(un.ResourceStatus), `member "plain@file" has no health check`) || un.ErrorField(0) != "weighted.healthCheck" {
		t.Fatalf("unchecked: %s %q (field %q), want disabled naming plain@file on weighted.healthCheck", un.Status, un.Err, un.ErrorField(0))
	}
	if got := spread(t, s.addr("tcp"), 8); got["A"] != 4 || got["B"] != 4 {
		t.Fatalf("both up: 8 connections went %v, want 4 each", got)
	}
	a.healthy.Store(false)
	waitStatus(t, s, "a@file", a.addr(), "DOWN", time.Second)
	if got := spread(t, s.addr("tcp"), 6); got["B"] != 6 {
		t.Fatalf("inner's only server DOWN: 6 connections went %v, want all to B (inner skipped)", got)
	}
}

// A servers transport tollgate cannot apply (tls.spiffe) is disabled with
// an error naming the key, and so are the services that use it and their
// routers; the rest serves.
func TestSpiffeTransportDisablesItsServices(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	rt := apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"good":   {Rule: "HostSNI(`*`)", Service: "plain"},
			"mtls":   {Rule: "ClientIP(`192.0.2.1`)", Service: "spiffed"},
			"mtls-2": {Rule: "ClientIP(`192.0.2.2`)", Service: "spiffed"},
		},
		Services: map[string]*config.TCPService{
			"plain":   lbConfig(be.addr()),
			"spiffed": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: be.addr(), TLS: true}}, ServersTransport: "workload"}},
		},
		ServersTransports: map[string]*config.TCPServersTransport{
			"workload": {TLS: &config.TLSClientConfig{Spiffe: &config.SpiffeTransport{TrustDomain: "example.org"}}},
		},
	})
	tr := rt.ServersTransports["workload@file"]
	if tr == nil || tr.Status != StatusDisabled || tr.ErrorField(0) != "tls.spiffe" || !strings.Contains(errsOf(tr.ResourceStatus), "tls.spiffe is not supported") {
		t.Fatalf("transport: %+v, want disabled on tls.spiffe", tr)
	}
	si := rt.Services["spiffed@file"]
	if si.Status != StatusDisabled || !strings.Contains(errsOf(si.ResourceStatus), `servers transport "workload@file": tls.spiffe is not supported`) {
		t.Fatalf("service: %s %q, want disabled saying why", si.Status, si.Err)
	}
	for _, r := range []string{"mtls@file", "mtls-2@file"} {
		if st := rt.Routers[r].Status; st != StatusDisabled {
			t.Fatalf("%s: %s, want disabled", r, st)
		}
	}
	if st := rt.Routers["good@file"].Status; st != StatusEnabled {
		t.Fatalf("good@file: %s %q, want enabled", st, rt.Routers["good@file"].Err)
	}
	if c, ok := dialFrom(t, "127.0.0.1", s.addr("tcp")); !ok {
		t.Fatal("the router without the transport does not serve")
	} else {
		c.Close()
	}
}
