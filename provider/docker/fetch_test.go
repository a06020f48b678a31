package docker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/errdefs"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// fleetAPI is an engine of labelled containers c0, c1, … that counts the
// inspects of each; the test changes a container's state or IP, and feeds
// events.
type fleetAPI struct {
	mu       sync.Mutex
	state    map[string]string // ID -> state
	ip       map[string]string // ID -> bridge IP
	inspects map[string]int
	events   chan events.Message
}

func newFleet(n int) *fleetAPI {
	f := &fleetAPI{state: map[string]string{}, ip: map[string]string{}, inspects: map[string]int{}, events: make(chan events.Message, 10)}
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		f.state[id], f.ip[id] = "running", fmt.Sprintf("172.17.0.%d", 10+i)
	}
	return f
}

func (f *fleetAPI) labels(id string) map[string]string {
	return map[string]string{"traefik.tcp.routers." + id + ".rule": "HostSNI(`*`)", "traefik.tcp.services." + id + ".loadbalancer.server.port": "7000"}
}

func (f *fleetAPI) ContainerList(context.Context, container.ListOptions) ([]container.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []container.Summary
	for _, id := range slices.Sorted(maps.Keys(f.state)) {
		s := container.Summary{ID: id, Names: []string{"/" + id}, Labels: f.labels(id), State: f.state[id],
			NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{"bridge": {IPAddress: f.ip[id]}}}}
		s.HostConfig.NetworkMode = "bridge"
		out = append(out, s)
	}
	return out, nil
}

func (f *fleetAPI) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.state[id]
	if !ok {
		return container.InspectResponse{}, errdefs.NotFound(fmt.Errorf("no such container: %s", id))
	}
	f.inspects[id]++
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: id, Name: "/" + id, State: &container.State{Status: st},
			HostConfig: &container.HostConfig{NetworkMode: "bridge"}},
		Config:          &container.Config{Labels: f.labels(id)},
		NetworkSettings: &container.NetworkSettings{Networks: map[string]*network.EndpointSettings{"bridge": {IPAddress: f.ip[id]}}},
	}, nil
}

func (f *fleetAPI) Events(context.Context, events.ListOptions) (<-chan events.Message, <-chan error) {
	return f.events, nil
}

func (f *fleetAPI) Ping(context.Context) (types.Ping, error) { return types.Ping{}, nil }

// counts returns the inspects so far, by container, and resets them.
func (f *fleetAPI) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.inspects
	f.inspects = map[string]int{}
	return c
}

func (f *fleetAPI) set(id, state, ip string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state[id], f.ip[id] = state, ip
}

// TestResyncInspectsOnlyWhatChanged: a resync woken by an event inspects the
// container the event names, and those whose list entry changed (state,
// networks, a new one), not the whole fleet; the refresh period's resync
// inspects everything; each snapshot is still complete and current.
func TestResyncInspectsOnlyWhatChanged(t *testing.T) {
	f := newFleet(50)
	cfg := &config.DockerProvider{}
	cfg.SetDefaults()
	cfg.RefreshInterval = config.Duration(time.Hour)
	p := &Provider{cfg: *cfg, endpoint: "fake", api: f, opts: optionsFrom(cfg, nil), log: zerolog.Nop()}
	rec := itest.Record(t, p.Run)
	rec.Describe = summary
	rec.WaitLatest(t, 2*time.Second, "first snapshot", func(m provider.Message) bool { return routerOf(m, "c49") != nil })
	if got := f.counts(); len(got) != 50 {
		t.Fatalf("first resync inspected %d containers, want all 50", len(got))
	}

	// An event names c3 (nothing the list shows changed).
	f.events <- events.Message{Type: events.ContainerEventType, Action: "health_status: healthy", Actor: events.Actor{ID: "c3"}}
	itest.Eventually(t, 2*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.inspects["c3"] == 1
	}, "c3 not inspected after its event")
	time.Sleep(50 * time.Millisecond) // a resync inspecting more would have done so by now
	if got := f.counts(); len(got) != 1 {
		t.Fatalf("an event about c3 inspected %v, want c3 alone", got)
	}

	// c7 stops (the list shows it) and c8 moves to another IP; c50 is new;
	// the event that wakes the provider names another container.
	f.set("c7", "exited", "")
	f.set("c8", "running", "172.17.1.8")
	f.set("c50", "running", "172.17.1.50")
	f.events <- events.Message{Type: events.ContainerEventType, Action: "start", Actor: events.Actor{ID: "c50"}}
	m := rec.WaitLatest(t, 2*time.Second, "c7 gone, c8 moved, c50 routed", func(m provider.Message) bool {
		s := serversOf(m, "c8")
		return routerOf(m, "c7") == nil && len(s) == 1 && s[0] == "172.17.1.8:7000" && routerOf(m, "c50") != nil
	})
	if got := f.counts(); len(got) != 3 || got["c7"] != 1 || got["c8"] != 1 || got["c50"] != 1 {
		t.Fatalf("inspected %v, want c7, c8 and c50 once each", got)
	}
	if n := len(m.Configuration.TCP.Routers); n != 50 {
		t.Fatalf("snapshot has %d routers, want 50 (c0..c50 but c7)", n)
	}
}

// TestRefreshInspectsEverything: the refresh period's resync (no event)
// reads every container again, whatever the list says.
func TestRefreshInspectsEverything(t *testing.T) {
	f := newFleet(10)
	cfg := &config.DockerProvider{}
	cfg.SetDefaults()
	cfg.RefreshInterval = config.Duration(100 * time.Millisecond)
	p := &Provider{cfg: *cfg, endpoint: "fake", api: f, opts: optionsFrom(cfg, nil), log: zerolog.Nop()}
	rec := itest.Record(t, p.Run)
	rec.WaitLatest(t, 2*time.Second, "first snapshot", func(m provider.Message) bool { return routerOf(m, "c9") != nil })
	itest.Eventually(t, 3*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for id := range f.state {
			if f.inspects[id] < 2 {
				return false
			}
		}
		return true
	}, "a refresh did not inspect every container again")
}

// listCounter is a fleetAPI whose list calls are counted and whose events
// come as the Docker client hands them over: one at a time, through a
// channel without a buffer.
type listCounter struct {
	*fleetAPI
	lists  atomic.Int32
	stream chan events.Message
}

func (l *listCounter) ContainerList(ctx context.Context, o container.ListOptions) ([]container.Summary, error) {
	l.lists.Add(1)
	time.Sleep(5 * time.Millisecond) // a listing takes time: events queue meanwhile
	return l.fleetAPI.ContainerList(ctx, o)
}

func (l *listCounter) Events(context.Context, events.ListOptions) (<-chan events.Message, <-chan error) {
	return l.stream, nil
}

// TestRunCoalescesAStreamedBurst: a burst of events handed over one at a
// time (as the client does) costs a few listings, not one per event.
func TestRunCoalescesAStreamedBurst(t *testing.T) {
	l := &listCounter{fleetAPI: newFleet(5), stream: make(chan events.Message)}
	cfg := &config.DockerProvider{}
	cfg.SetDefaults()
	p := &Provider{cfg: *cfg, endpoint: "fake", api: l, opts: optionsFrom(cfg, nil), log: zerolog.Nop()}
	rec := itest.Record(t, p.Run)
	rec.WaitLatest(t, 2*time.Second, "first snapshot", func(m provider.Message) bool { return routerOf(m, "c4") != nil })
	before := l.lists.Load()
	for i := range 100 {
		f := l.fleetAPI
		id := fmt.Sprintf("c%d", 5+i)
		f.set(id, "running", fmt.Sprintf("172.17.2.%d", i))
		l.stream <- events.Message{Type: events.ContainerEventType, Action: "start", Actor: events.Actor{ID: id}}
	}
	rec.WaitLatest(t, 2*time.Second, "the burst", func(m provider.Message) bool { return routerOf(m, "c104") != nil })
	if n := l.lists.Load() - before; n > 10 {
		t.Errorf("%d listings for a burst of 100 events handed over one at a time, want a few", n)
	}
}
