package provider

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
)

func TestMergeQualifiesAndResolves(t *testing.T) {
	fileCfg := &config.Dynamic{TCP: &config.TCPConfiguration{
		Routers:     map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s", Middlewares: []string{"m", "other@docker"}}},
		Services:    map[string]*config.TCPService{"s": {LoadBalancer: &config.TCPServersLoadBalancer{}}, "w": {Weighted: &config.TCPWeightedRoundRobin{Services: []config.TCPWRRService{{Name: "s"}, {Name: "x@docker"}}}}},
		Middlewares: map[string]*config.TCPMiddleware{"m": {InFlightConn: &config.TCPInFlightConn{Amount: 1}}},
	}}
	dockerCfg := &config.Dynamic{TCP: &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s", Middlewares: []string{"m@file"}}},
	}}
	snapshot := func(d *config.Dynamic) *config.Dynamic {
		cp := *d.TCP.Routers["r"]
		return &config.Dynamic{TCP: &config.TCPConfiguration{Routers: map[string]*config.TCPRouter{"r": &cp}}}
	}
	fileBefore := snapshot(fileCfg)
	out := Merge(map[string]*config.Dynamic{"file": fileCfg, "docker": dockerCfg})

	if r := out.Routers["r@file"]; r.Service != "s@file" || !reflect.DeepEqual(r.Middlewares, []string{"m@file", "other@docker"}) {
		t.Fatalf("file router %+v", r)
	}
	if r := out.Routers["r@docker"]; r.Service != "s@docker" || !reflect.DeepEqual(r.Middlewares, []string{"m@file"}) {
		t.Fatalf("docker router %+v", r)
	}
	if w := out.Services["w@file"].Weighted.Services; w[0].Name != "s@file" || w[1].Name != "x@docker" {
		t.Fatalf("weighted members %+v", w)
	}
	if _, ok := out.Middlewares["m@file"]; !ok {
		t.Fatal("middleware not qualified")
	}
	if !reflect.DeepEqual(snapshot(fileCfg), fileBefore) || fileCfg.TCP.Services["w"].Weighted.Services[0].Name != "s" {
		t.Fatal("Merge modified a provider's configuration")
	}
}

type applyRecorder struct {
	mu    sync.Mutex
	calls []*config.TCPConfiguration
	at    []time.Time
}

func (a *applyRecorder) apply(c *config.TCPConfiguration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, c)
	a.at = append(a.at, time.Now())
}

func (a *applyRecorder) n() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

func (a *applyRecorder) last() *config.TCPConfiguration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[len(a.calls)-1]
}

func waitN(t *testing.T, rec *applyRecorder, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for rec.n() < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited for %d applies, got %d", n, rec.n())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func amountCfg(n int64) *config.Dynamic {
	return &config.Dynamic{TCP: &config.TCPConfiguration{Middlewares: map[string]*config.TCPMiddleware{"m": {InFlightConn: &config.TCPInFlightConn{Amount: n}}}}}
}

func TestWatcherThrottleLatestWinsAndDedupe(t *testing.T) {
	rec := &applyRecorder{}
	w := &Watcher{Throttle: 200 * time.Millisecond, Apply: rec.apply, Log: zerolog.Nop()}
	in := make(chan Message)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, in)

	start := time.Now()
	in <- Message{ProviderName: "file", Configuration: amountCfg(1)}
	waitN(t, rec, 1) // the first change applies at once
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("first apply took %s: an isolated change must not wait for the throttle", d)
	}
	// A burst inside the throttle window: only the latest applies, once.
	for i := int64(2); i <= 5; i++ {
		in <- Message{ProviderName: "file", Configuration: amountCfg(i)}
	}
	waitN(t, rec, 2)
	if got := rec.last().Middlewares["m@file"].InFlightConn.Amount; got != 5 {
		t.Fatalf("applied amount %d, want the latest (5)", got)
	}
	if gap := rec.at[1].Sub(rec.at[0]); gap < 190*time.Millisecond {
		t.Fatalf("second apply %s after the first, want >= throttle", gap)
	}
	// An identical snapshot is not applied again; an error keeps the config.
	in <- Message{ProviderName: "file", Configuration: amountCfg(5)}
	in <- Message{ProviderName: "file", Err: errors.New("socket gone")}
	in <- Message{ProviderName: "docker", Configuration: amountCfg(7)}
	waitN(t, rec, 3)
	last := rec.last()
	if last.Middlewares["m@file"].InFlightConn.Amount != 5 || last.Middlewares["m@docker"].InFlightConn.Amount != 7 {
		t.Fatalf("merged %+v", last.Middlewares)
	}
	if rec.n() != 3 {
		t.Fatalf("%d applies, want 3 (duplicate skipped)", rec.n())
	}
	st := w.Statuses()
	if len(st) != 2 || st[1].Name != "file" || st[1].State != "error" || st[1].LastError != "socket gone" || st[1].Errors != 1 {
		t.Fatalf("statuses %+v", st)
	}
}

// Issue 10.6: an error from a provider that never delivered a configuration
// says that nothing from it is served, not that a last good one is kept.
func TestErrorLogSaysWhatIsServed(t *testing.T) {
	var buf bytes.Buffer
	w := &Watcher{Apply: func(*config.TCPConfiguration) {}, Log: zerolog.New(&buf)}
	w.record(Message{ProviderName: "file", Err: errors.New("broken")})
	if s := buf.String(); !strings.Contains(s, "nothing from it is served") || strings.Contains(s, "last good") {
		t.Fatalf("first error logged %q", s)
	}
	buf.Reset()
	w.record(Message{ProviderName: "file", Configuration: &config.Dynamic{}})
	w.record(Message{ProviderName: "file", Err: errors.New("broken again")})
	if s := buf.String(); !strings.Contains(s, "keeping its last good configuration") {
		t.Fatalf("error after a good configuration logged %q", s)
	}
}

// routersConfig is a configuration of n routers named r0..r<n-1>, the
// first with the given rule.
func routersConfig(n int, rule string) *config.Dynamic {
	rs := map[string]*config.TCPRouter{}
	for i := range n {
		rs["r"+strings.Repeat("x", i)] = &config.TCPRouter{Rule: rule, Service: "s"}
	}
	return &config.Dynamic{TCP: &config.TCPConfiguration{Routers: rs}}
}

// While an Apply runs (a large compile), providers' messages are received,
// not queued behind it, and the next Apply takes the latest of them, once:
// not each in turn. Before, the watcher applied on its receiving goroutine,
// so every provider's send waited for the compile and each message was
// then applied in turn.
func TestWatcherLatestWinsWhileApplying(t *testing.T) {
	in := make(chan Message)
	started := make(chan *config.TCPConfiguration, 10)
	release := make(chan struct{})
	w := &Watcher{Log: zerolog.Nop(), Apply: func(c *config.TCPConfiguration) {
		started <- c
		<-release
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx, in); close(done) }()
	defer func() { cancel(); close(release); <-done }()

	send := func(m Message) {
		t.Helper()
		select {
		case in <- m:
		case <-time.After(2 * time.Second):
			t.Fatalf("a provider's message waited for the apply in progress: %+v", m.Configuration)
		}
	}
	send(Message{ProviderName: "file", Configuration: routersConfig(1, "v1")})
	first := <-started
	if first.Routers["r@file"].Rule != "v1" {
		t.Fatalf("first apply %+v", first.Routers)
	}
	for _, v := range []string{"v2", "v3", "v4"} {
		send(Message{ProviderName: "file", Configuration: routersConfig(1, v)})
	}
	send(Message{ProviderName: "docker", Configuration: routersConfig(1, "d1")})
	release <- struct{}{}
	second := <-started
	if second.Routers["r@file"].Rule != "v4" || second.Routers["r@docker"].Rule != "d1" {
		t.Fatalf("second apply: file %q docker %v, want the latest (v4, d1)", second.Routers["r@file"].Rule, second.Routers["r@docker"])
	}
	release <- struct{}{}
	select {
	case c := <-started:
		t.Fatalf("a third apply (%q): the messages were applied in turn, not coalesced", c.Routers["r@file"].Rule)
	case <-time.After(200 * time.Millisecond):
	}
}

// A configuration over a limit is refused as a provider error naming the
// limit; the provider's last good configuration stays applied, and one
// within the limits applies again.
func TestWatcherRefusesOverLimits(t *testing.T) {
	in := make(chan Message)
	rec := &applyRecorder{}
	var logBuf bytes.Buffer
	w := &Watcher{Log: zerolog.New(&logBuf), Apply: rec.apply, Limits: &config.Limits{MaxRouters: 3, MaxRuleLength: 20, MaxSourceRanges: 2}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx, in); close(done) }()
	defer func() { cancel(); <-done }()
	waitRule := func(want string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if a := w.Applied(); a != nil && a.Routers["r@file"] != nil && a.Routers["r@file"].Rule == want {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("applied %+v, want rule %q", w.Applied(), want)
	}
	in <- Message{ProviderName: "file", Configuration: routersConfig(3, "good")}
	waitRule("good")
	allow := &config.Dynamic{TCP: &config.TCPConfiguration{Routers: routersConfig(1, "x").TCP.Routers,
		Middlewares: map[string]*config.TCPMiddleware{"m": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"a", "b", "c"}}}}}}
	for _, c := range []struct {
		cfg  *config.Dynamic
		want string
	}{
		{routersConfig(4, "four"), "4 TCP routers, over limits.maxRouters (3)"},
		{routersConfig(1, strings.Repeat("a", 21)), "rule of 21 bytes, over limits.maxRuleLength (20)"},
		{allow, `middleware "m": ipAllowList of 3 source ranges, over limits.maxSourceRanges (2)`},
	} {
		in <- Message{ProviderName: "file", Configuration: c.cfg}
		var st Status
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if st = w.Statuses()[0]; strings.Contains(st.LastError, c.want) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if st.State != "error" || !strings.Contains(st.LastError, c.want) {
			t.Fatalf("status %+v, want an error with %q", st, c.want)
		}
		if r := w.Applied().Routers["r@file"]; r.Rule != "good" {
			t.Fatalf("applied rule %q: the last good configuration was replaced", r.Rule)
		}
	}
	in <- Message{ProviderName: "file", Configuration: routersConfig(2, "again")}
	waitRule("again")
}
