package swarm

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/swarm"
	"github.com/rs/zerolog"
	"github.com/traefik/paerser/flag"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// fakeAPI is a manager with one service whose task states the test sets,
// and whose event stream the test feeds.
type fakeAPI struct {
	mu       sync.Mutex
	replicas uint64
	states   []swarm.TaskState // one task per entry
	lists    atomic.Int32
	nets     atomic.Int32
	events   chan events.Message
	errs     chan error
	pingErr  atomic.Pointer[error]
	pings    atomic.Int32
}

func newFake(replicas uint64, states ...swarm.TaskState) *fakeAPI {
	return &fakeAPI{replicas: replicas, states: states, events: make(chan events.Message, 200), errs: make(chan error, 1)}
}

func (f *fakeAPI) set(replicas uint64, states ...swarm.TaskState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replicas, f.states = replicas, states
}

var backend = swarm.Network{ID: "net1", Spec: swarm.NetworkSpec{Annotations: swarm.Annotations{Name: "shop_backend"}}}

func (f *fakeAPI) ServiceList(context.Context, swarm.ServiceListOptions) ([]swarm.Service, error) {
	f.lists.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.replicas
	return []swarm.Service{{
		ID: "svc1",
		Spec: swarm.ServiceSpec{
			Annotations: swarm.Annotations{Name: "shop_db", Labels: seed()},
			Mode:        swarm.ServiceMode{Replicated: &swarm.ReplicatedService{Replicas: &r}},
		},
		Endpoint: swarm.Endpoint{Spec: swarm.EndpointSpec{Mode: swarm.ResolutionModeVIP},
			VirtualIPs: []swarm.EndpointVirtualIP{{NetworkID: "net2", Addr: "10.0.8.2/24"}}},
	}}, nil
}

func (f *fakeAPI) TaskList(context.Context, swarm.TaskListOptions) ([]swarm.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []swarm.Task
	for i, st := range f.states {
		out = append(out, swarm.Task{
			ID: "task" + string(rune('a'+i)), ServiceID: "svc1", Slot: i + 1, DesiredState: swarm.TaskStateRunning,
			Status:              swarm.TaskStatus{State: st},
			NetworksAttachments: []swarm.NetworkAttachment{{Network: backend, Addresses: []string{"10.0.9." + string(rune('3'+i)) + "/24"}}},
		})
	}
	return out, nil
}

func (f *fakeAPI) NetworkList(context.Context, network.ListOptions) ([]network.Summary, error) {
	f.nets.Add(1)
	return []network.Summary{{ID: "net1", Name: "shop_backend"}, {ID: "net2", Name: "shop_frontend"}}, nil
}

func (f *fakeAPI) Events(context.Context, events.ListOptions) (<-chan events.Message, <-chan error) {
	return f.events, f.errs
}

func (f *fakeAPI) Ping(context.Context) (types.Ping, error) {
	f.pings.Add(1)
	if p := f.pingErr.Load(); p != nil {
		return types.Ping{}, *p
	}
	return types.Ping{}, nil
}

// recorder keeps what a running provider sends.
type recorder = itest.Recorder[provider.Message]

func record(t *testing.T, p *Provider) *recorder { return itest.Record(t, p.Run) }

func runFake(t *testing.T, f *fakeAPI, edit func(*config.SwarmProvider)) *recorder {
	t.Helper()
	cfg := &config.SwarmProvider{}
	cfg.SetDefaults()
	if edit != nil {
		edit(cfg)
	}
	p := &Provider{cfg: *cfg, endpoint: "fake", api: f, opts: optionsFrom(cfg, nil), timeout: time.Second, log: zerolog.Nop()}
	return record(t, p)
}

func servers(m provider.Message, service string) []string {
	if m.Err != nil || m.Configuration == nil || m.Configuration.TCP == nil {
		return nil
	}
	s := m.Configuration.TCP.Services[service]
	if s == nil || s.LoadBalancer == nil {
		return nil
	}
	var addrs []string
	for _, srv := range s.LoadBalancer.Servers {
		addrs = append(addrs, srv.Address)
	}
	return addrs
}

func serverCount(n int) func(provider.Message) bool {
	return func(m provider.Message) bool { return len(servers(m, "db")) == n }
}

// A scale-up takes Swarm a while (pending, assigned, starting, running),
// and no event says when a task on another node is running: the provider
// lists again until the swarm has converged, then stops.
func TestRunPollsWhileConverging(t *testing.T) {
	f := newFake(1, swarm.TaskStateRunning)
	rec := runFake(t, f, nil)
	rec.WaitLatest(t, 2*time.Second, "first snapshot", serverCount(1))
	settled := f.lists.Load()
	time.Sleep(200 * time.Millisecond)
	if n := f.lists.Load(); n != settled {
		t.Fatalf("lists went from %d to %d while nothing converges: want no poll", settled, n)
	}

	// docker service scale db=3: one update event; the new tasks then move
	// without events.
	f.set(3, swarm.TaskStateRunning, swarm.TaskStatePending, swarm.TaskStatePending)
	f.events <- events.Message{Type: events.ServiceEventType, Action: "update", Actor: events.Actor{Attributes: map[string]string{"name": "shop_db"}}}
	rec.WaitLatest(t, time.Second, "update seen", func(m provider.Message) bool { return f.lists.Load() > settled })
	time.Sleep(100 * time.Millisecond)
	f.set(3, swarm.TaskStateRunning, swarm.TaskStateStarting, swarm.TaskStateRunning)
	time.Sleep(100 * time.Millisecond)
	became := time.Now()
	f.set(3, swarm.TaskStateRunning, swarm.TaskStateRunning, swarm.TaskStateRunning)
	rec.WaitLatest(t, time.Second, "three servers without another event", serverCount(3))
	if d := time.Since(became); d > 300*time.Millisecond {
		t.Errorf("the last task's running state took %v to reach a snapshot, want <= 300ms (polls every 50 ms after a change)", d)
	}
	time.Sleep(150 * time.Millisecond)
	converged := f.lists.Load()
	time.Sleep(400 * time.Millisecond)
	if n := f.lists.Load(); n != converged {
		t.Fatalf("lists went from %d to %d after the swarm converged: want the polls to stop", converged, n)
	}

	// Fewer tasks than replicas (the orchestrator has not created them yet)
	// is converging too; while nothing moves, the polls back off to 500 ms.
	f.set(4, swarm.TaskStateRunning, swarm.TaskStateRunning, swarm.TaskStateRunning)
	f.events <- events.Message{Type: events.ServiceEventType, Action: "update"}
	time.Sleep(50 * time.Millisecond)
	from := f.lists.Load()
	time.Sleep(2 * time.Second)
	if n := f.lists.Load() - from; n < 3 || n > 10 {
		t.Fatalf("%d lists in 2 s while stuck converging, want 3 to 10 (backing off to one every 500 ms)", n)
	}
	// Network names for the virtual IP on a network no task is on come from
	// the network list.
	if f.nets.Load() == 0 {
		t.Fatalf("the network list was never read, but net2 is named by no task")
	}
}

// A burst of events costs one listing; container events that are not a
// task's do not wake the provider.
func TestRunCoalescesAndFiltersEvents(t *testing.T) {
	f := newFake(1, swarm.TaskStateRunning)
	rec := runFake(t, f, nil)
	rec.WaitLatest(t, 2*time.Second, "first snapshot", serverCount(1))
	base := f.lists.Load()
	for range 50 {
		f.events <- events.Message{Type: events.ContainerEventType, Action: "start", Actor: events.Actor{Attributes: map[string]string{"name": "not-a-task"}}}
	}
	f.events <- events.Message{Type: events.ContainerEventType, Action: "exec_start", Actor: events.Actor{Attributes: map[string]string{taskLabel: "t"}}}
	time.Sleep(200 * time.Millisecond)
	if n := f.lists.Load(); n != base {
		t.Fatalf("lists = %d after container events of no task, want %d", n, base)
	}
	for range 100 {
		f.events <- events.Message{Type: events.ContainerEventType, Action: "die", Actor: events.Actor{Attributes: map[string]string{taskLabel: "t"}}}
	}
	itest.Eventually(t, time.Second, func() bool { return f.lists.Load() > base && len(f.events) == 0 }, "lists = %d", f.lists.Load())
	time.Sleep(200 * time.Millisecond)
	if n := f.lists.Load(); n > base+10 {
		t.Fatalf("lists = %d after a burst of 100 task events, want at most %d", n, base+10)
	}
	if _, n := rec.Latest(); n != 1 {
		t.Fatalf("messages = %d, want 1 (the listings found nothing new)", n)
	}
}

// watch=false: no events, no converge polls; the refreshSeconds poll only.
func TestRunWithoutWatchPolls(t *testing.T) {
	f := newFake(1, swarm.TaskStatePending)
	rec := runFake(t, f, func(c *config.SwarmProvider) {
		c.Watch = false
		c.RefreshSeconds = config.Duration(300 * time.Millisecond)
	})
	itest.Eventually(t, 2*time.Second, func() bool { _, n := rec.Latest(); return n == 1 }, "no first snapshot")
	f.set(1, swarm.TaskStateRunning)
	start := time.Now()
	rec.WaitLatest(t, 2*time.Second, "polled", serverCount(1))
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("the change was seen after %v: sooner than the poll", d)
	}
}

func TestRunReportsOutageAndResyncs(t *testing.T) {
	f := newFake(1, swarm.TaskStateRunning)
	rec := runFake(t, f, nil)
	rec.WaitLatest(t, 2*time.Second, "first snapshot", serverCount(1))

	down := errors.New("connection refused")
	f.pingErr.Store(&down)
	f.errs <- errors.New("unexpected EOF")
	m := rec.WaitLatest(t, 2*time.Second, "outage", func(m provider.Message) bool { return m.Err != nil })
	if m.Configuration != nil || m.ProviderName != Name {
		t.Fatalf("error message = %+v, want one from %q without a configuration", m, Name)
	}
	pings := f.pings.Load()
	itest.Eventually(t, 3*time.Second, func() bool { return f.pings.Load() >= pings+3 }, "pings = %d", f.pings.Load())
	msgs := rec.All()
	if len(msgs) != 3 || msgs[1].Err == nil || msgs[2].Err == nil || msgs[2].Err.Error() != "ping fake: connection refused" {
		t.Fatalf("messages during the outage = %+v, want the snapshot and two distinct errors", msgs)
	}
	f.set(2, swarm.TaskStateRunning, swarm.TaskStateRunning)
	f.pingErr.Store(nil)
	rec.WaitLatest(t, 2*time.Second, "resynced with the change made during the outage", serverCount(2))
}

// --providers.swarm alone turns the provider on with Traefik's defaults;
// the options are Traefik v3's names (case-insensitive).
func TestFlags(t *testing.T) {
	cmd := config.NewCommand()
	if err := flag.Decode([]string{"--providers.swarm", "--providers.swarm.refreshSeconds=5", "--providers.swarm.httpclienttimeout=3s", "--providers.swarm.network=shop_backend"}, cmd); err != nil {
		t.Fatal(err)
	}
	c := cmd.Providers.Swarm
	if c == nil || !c.Watch || !c.ExposedByDefault || c.AllowEmptyServices || c.RefreshSeconds != config.Duration(5*time.Second) ||
		c.HTTPClientTimeout != config.Duration(3*time.Second) || c.Network != "shop_backend" || c.Endpoint != "" {
		t.Fatalf("providers.swarm = %+v", c)
	}
	if config.NewCommand().Providers.Swarm != nil {
		t.Fatal("the Swarm provider must be off unless asked for")
	}
}

func TestNew(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	p, err := New(nil, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.endpoint != "unix:///var/run/docker.sock" || p.Name() != "swarm" || p.timeout != defaultRequestTimeout || !p.cfg.Watch || p.cfg.RefreshSeconds != config.Duration(15*time.Second) {
		t.Fatalf("defaults: endpoint %q, timeout %v, cfg %+v", p.endpoint, p.timeout, p.cfg)
	}
	t.Setenv("DOCKER_HOST", "unix:///tmp/other.sock")
	if p, _ := New(&config.SwarmProvider{EngineClient: config.EngineClient{HTTPClientTimeout: config.Duration(3 * time.Second)}}, provider.Options{}); p.endpoint != "unix:///tmp/other.sock" || p.timeout != 3*time.Second {
		t.Fatalf("endpoint %q timeout %v, want DOCKER_HOST and 3s", p.endpoint, p.timeout)
	}
	for _, tc := range []struct {
		cfg  config.SwarmProvider
		want string
	}{
		{config.SwarmProvider{Endpoint: "no-scheme-here"}, "providers.swarm.endpoint"},
		{config.SwarmProvider{Constraints: "Nope(`x`)"}, "providers.swarm.constraints"},
		{config.SwarmProvider{RefreshSeconds: config.Duration(-time.Second)}, "providers.swarm.refreshSeconds"},
		{config.SwarmProvider{EngineClient: config.EngineClient{HTTPClientTimeout: config.Duration(-time.Second)}}, "providers.swarm.httpClientTimeout"},
		{config.SwarmProvider{EngineClient: config.EngineClient{TLS: &config.KVClientTLS{CA: "/nonexistent/ca.pem"}}}, "providers.swarm.tls.ca"},
	} {
		if _, err := New(&tc.cfg, provider.Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	match, err := New(&config.SwarmProvider{Constraints: "Label(`env`, `prod`)"}, provider.Options{})
	if err != nil || match.opts.Match == nil || match.opts.Match(map[string]string{"env": "dev"}) || !match.opts.Match(map[string]string{"env": "prod"}) {
		t.Fatalf("constraints not applied: %v", err)
	}
}
