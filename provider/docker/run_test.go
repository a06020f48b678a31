package docker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/network"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// fakeAPI is an engine with one labelled container whose list calls can be
// held, and whose event stream the test feeds.
type fakeAPI struct {
	lists   atomic.Int32
	hold    chan struct{} // when non-nil, ContainerList waits on it
	holdMu  sync.Mutex
	entered chan struct{}
	events  chan events.Message
	errs    chan error
	pingErr atomic.Pointer[error]
	pings   atomic.Int32
}

func newFake() *fakeAPI {
	return &fakeAPI{events: make(chan events.Message, 200), errs: make(chan error, 1), entered: make(chan struct{}, 10)}
}

func (f *fakeAPI) ContainerList(ctx context.Context, _ container.ListOptions) ([]container.Summary, error) {
	f.lists.Add(1)
	f.holdMu.Lock()
	hold := f.hold
	f.holdMu.Unlock()
	if hold != nil {
		f.entered <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return []container.Summary{{ID: "c1", Labels: map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)"}}}, nil
}

func (f *fakeAPI) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: id, Name: "/web",
			State:      &container.State{Status: "running", Running: true},
			HostConfig: &container.HostConfig{NetworkMode: "bridge"},
		},
		Config: &container.Config{Labels: map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)", "traefik.tcp.services.s.loadbalancer.server.port": "7000"}},
		NetworkSettings: &container.NetworkSettings{
			Networks: map[string]*network.EndpointSettings{"bridge": {IPAddress: "172.17.0.9"}},
		},
	}, nil
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

func runFake(t *testing.T, f *fakeAPI) *recorder {
	t.Helper()
	cfg := &config.DockerProvider{}
	cfg.SetDefaults()
	p := &Provider{cfg: *cfg, endpoint: "fake", api: f, opts: optionsFrom(cfg, nil), log: zerolog.Nop()}
	rec := itest.Record(t, p.Run)
	rec.Describe = summary
	return rec
}

func TestRunCoalescesEventBursts(t *testing.T) {
	f := newFake()
	rec := runFake(t, f)
	rec.WaitLatest(t, 2*time.Second, "first snapshot", func(m provider.Message) bool { return routerOf(m, "r") != nil })
	if n := f.lists.Load(); n != 1 {
		t.Fatalf("lists after start = %d, want 1", n)
	}

	hold := make(chan struct{})
	f.holdMu.Lock()
	f.hold = hold
	f.holdMu.Unlock()
	f.events <- events.Message{Action: "start"}
	<-f.entered // the provider is now re-listing, held
	for range 100 {
		f.events <- events.Message{Action: "die"}
	}
	f.holdMu.Lock()
	f.hold = nil
	f.holdMu.Unlock()
	close(hold)
	// The 100 queued events must cost exactly one more list.
	itest.Eventually(t, 2*time.Second, func() bool { return f.lists.Load() >= 3 && len(f.events) == 0 }, "lists = %d, queued events = %d", f.lists.Load(), len(f.events))
	// Give a wrongly uncoalesced loop the chance to list again, then check.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := f.lists.Load(); n != 3 {
			t.Fatalf("lists = %d after a burst of 101 events, want 3 (start, held wake-up, one for the drained burst)", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Identical snapshots are not re-sent.
	if _, n := rec.Latest(); n != 1 {
		t.Fatalf("messages = %d, want 1 (the re-lists found nothing new)", n)
	}
}

func TestRunReportsOutageAndResyncs(t *testing.T) {
	f := newFake()
	rec := runFake(t, f)
	rec.WaitLatest(t, 2*time.Second, "first snapshot", func(m provider.Message) bool { return routerOf(m, "r") != nil })

	down := errors.New("connection refused")
	f.pingErr.Store(&down)
	f.errs <- errors.New("unexpected EOF")
	m := rec.WaitLatest(t, 2*time.Second, "outage", func(m provider.Message) bool { return m.Err != nil })
	if m.Configuration != nil {
		t.Fatalf("error message carries a configuration: %+v", m)
	}
	// Repeated failures with the same error are reported once: the stream
	// error, then the first failed ping, then nothing for later pings.
	pings := f.pings.Load()
	itest.Eventually(t, 3*time.Second, func() bool { return f.pings.Load() >= pings+3 }, "pings = %d", f.pings.Load())
	msgs := rec.All()
	if len(msgs) != 3 || msgs[1].Err == nil || msgs[2].Err == nil || msgs[2].Err.Error() != "ping fake: connection refused" {
		t.Fatalf("messages during the outage = %+v, want the snapshot and two distinct errors", msgs)
	}

	f.pingErr.Store(nil)
	// The same snapshot as before the outage is sent again: the watcher must
	// learn that the provider is back.
	rec.WaitLatest(t, 2*time.Second, "resynced", func(m provider.Message) bool { return m.Err == nil && routerOf(m, "r") != nil })
}

func TestNewEndpoint(t *testing.T) {
	tests := []struct {
		name, cfg, env, want string
	}{
		{"default socket", "", "", DefaultEndpoint},
		{"DOCKER_HOST when no endpoint is configured", "", "unix:///tmp/other.sock", "unix:///tmp/other.sock"},
		{"configured endpoint wins over DOCKER_HOST", "tcp://127.0.0.1:2375", "unix:///tmp/other.sock", "tcp://127.0.0.1:2375"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", tt.env)
			p, err := New(&config.DockerProvider{Endpoint: tt.cfg}, provider.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if p.endpoint != tt.want {
				t.Fatalf("endpoint = %q, want %q", p.endpoint, tt.want)
			}
			if p.Name() != "docker" {
				t.Fatalf("Name() = %q", p.Name())
			}
		})
	}
	if _, err := New(&config.DockerProvider{Endpoint: "no-scheme-here"}, provider.Options{}); err == nil || !strings.Contains(err.Error(), "providers.docker.endpoint") {
		t.Fatalf("New with a malformed endpoint: %v, want an error naming providers.docker.endpoint", err)
	}
}
