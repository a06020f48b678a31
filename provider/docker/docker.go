// Package docker is the Docker provider: it reads the labels of the
// containers of one Docker engine and emits tollgate's dynamic configuration.
//
// The provider is split as ARCHITECTURE.md asks: fetch (this file) talks to
// the engine through the narrow dockerAPI interface and turns inspect answers
// into Containers; Build (build.go) is a pure function from containers to
// configuration, table-tested without an engine and shared with `tollgate
// check`.
//
// Run is level-triggered. Container events (start, die, stop, kill, destroy,
// pause, unpause, rename, health_status, create) are only wake-ups: after one,
// the events already queued are drained, then every container is listed
// again and one complete snapshot is sent. Listing is one request; only the
// containers that are new, named by an event since the last listing, or
// whose state, name or networks the list shows changed are inspected again
// (the others' inspect answers are kept: a container's labels and ports do
// not change), so that a change costs the engine a few requests however
// many containers it runs. A periodic resync (refreshInterval) inspects
// every container again: the safety net for what neither events nor the
// list say. Each connection is one attempt of the provider runtime
// (provider.Loop): when the engine cannot be reached, the watcher is told
// (Message.Err) and keeps the last good configuration serving, and the
// provider reconnects with the runtime's backoff; on reconnection it
// resyncs at once, inspecting everything.
package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/constraints"
	"github.com/tollgate-proxy/tollgate/provider/internal/engine"
)

// Name is the provider name used in qualified resource names (`db@docker`).
const Name = "docker"

// DefaultEndpoint is used when neither --providers.docker.endpoint nor
// DOCKER_HOST is set.
const DefaultEndpoint = engine.DefaultEndpoint

// Timing of each request to the engine (the reconnections' is the
// runtime's, provider.Backoff).
const (
	requestTimeout = 10 * time.Second
	// inspectWorkers bounds concurrent ContainerInspect calls in one fetch.
	inspectWorkers = 8
)

// wakeActions are the container event actions that trigger a resync.
// health_status is matched as a prefix by the engine ("health_status: healthy").
var wakeActions = []string{"start", "die", "stop", "kill", "destroy", "pause", "unpause", "rename", "health_status", "create"}

// dockerAPI is the part of the Docker client the provider uses.
type dockerAPI interface {
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
	Ping(ctx context.Context) (types.Ping, error)
}

var _ dockerAPI = (*client.Client)(nil)

// Provider watches one Docker engine. Create it with New; the zero value is
// not usable. Run may be called once.
type Provider struct {
	cfg      config.DockerProvider
	endpoint string
	timeout  time.Duration // httpClientTimeout (reqTimeout)
	api      dockerAPI
	closer   func() error
	opts     Options
	log      zerolog.Logger
	backoff  provider.Backoff
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider for cfg (nil means the defaults). The endpoint is
// cfg.Endpoint, else DOCKER_HOST, else unix:///var/run/docker.sock; the API
// version is negotiated with the engine. New does not contact the engine: an
// engine that is down is reported by Run. It fails on a malformed endpoint or
// constraints expression.
func New(cfg *config.DockerProvider, po provider.Options) (*Provider, error) {
	var c config.DockerProvider
	if cfg != nil {
		c = *cfg
	} else {
		c.SetDefaults()
	}
	match, err := parseConstraints(c.Constraints)
	if err != nil {
		return nil, fmt.Errorf("providers.docker.constraints=%q: %w", c.Constraints, err)
	}
	tc, err := provider.TLSConfig(c.TLS, "providers.docker.tls")
	if err != nil {
		return nil, err
	}
	cl, endpoint, err := engine.New(c.Endpoint, engine.Auth{TLS: tc, Username: c.Username, Password: c.Password})
	if err != nil {
		return nil, fmt.Errorf("providers.docker.endpoint=%q: %w", endpoint, err)
	}
	if c.RefreshInterval < 0 {
		return nil, fmt.Errorf("providers.docker.refreshInterval=%s: must not be negative", c.RefreshInterval)
	}
	if c.HTTPClientTimeout < 0 {
		return nil, fmt.Errorf("providers.docker.httpClientTimeout=%s: must not be negative", c.HTTPClientTimeout)
	}
	return &Provider{
		cfg:      c,
		timeout:  time.Duration(c.HTTPClientTimeout),
		endpoint: endpoint,
		api:      cl,
		closer:   cl.Close,
		opts:     optionsFrom(&c, match),
		log:      po.Log.With().Str("provider", Name).Logger(),
		backoff:  po.Backoff,
	}, nil
}

// reqTimeout bounds each request to the engine: httpClientTimeout, else
// requestTimeout.
func (p *Provider) reqTimeout() time.Duration {
	if p.timeout > 0 {
		return p.timeout
	}
	return requestTimeout
}

// parseConstraints parses a Label/LabelRegex expression; nil keeps every
// container.
var parseConstraints = constraints.LabelMatcher

// Name returns "docker".
func (p *Provider) Name() string { return Name }

// Run watches the engine until ctx is done, sending complete snapshots to out.
// It returns nil when ctx is done.
func (p *Provider) Run(ctx context.Context, out chan<- provider.Message) error {
	s := &session{p: p}
	provider.Loop{Name: Name, What: "Docker engine", Log: p.log.With().Str("endpoint", p.endpoint).Logger(),
		Backoff: p.backoff, Close: p.closer, Attempt: s.run}.Run(ctx, out)
	return nil
}

// session is one Run: the provider and what the current connection has
// inspected.
type session struct {
	p *Provider
	// known are the containers the last resync read, by ID; stale are the
	// IDs events named since (their next resync inspects them again). Both
	// are used by the goroutine that follows the engine only, and start
	// empty with each connection: events may have been missed.
	known map[string]known
	stale map[string]bool
}

// known is one container as a resync read it: its inspect answer, and what
// the list said of it then.
type known struct {
	c    Container
	list string // listed(summary) when c was inspected
}

// run connects, sends a snapshot through sink, and follows events until the
// connection fails (returning why) or ctx is done.
func (s *session) run(ctx context.Context, sink *provider.Sink) error {
	p := s.p
	s.known, s.stale = nil, map[string]bool{}
	f := engine.Follow{
		API: p.api, Endpoint: p.endpoint, Timeout: p.reqTimeout(),
		Wakes: func(ev events.Message) bool {
			p.log.Debug().Str("action", string(ev.Action)).Str("container", ev.Actor.Attributes["name"]).Msg("Docker event")
			if ev.Actor.ID != "" {
				s.stale[ev.Actor.ID] = true
			}
			return true
		},
		Refresh: config.Std(p.cfg.RefreshInterval),
		Resync:  func(ctx context.Context, woken bool) (time.Duration, error) { return 0, s.resync(ctx, sink, woken) },
		Connected: func() {
			p.log.Info().Str("endpoint", p.endpoint).Msg("Connected to the Docker engine")
		},
	}
	if p.cfg.Watch {
		ev := filters.NewArgs(filters.Arg("type", string(events.ContainerEventType)))
		for _, a := range wakeActions {
			ev.Add("event", a)
		}
		f.Events = &ev
	}
	return f.Run(ctx)
}

// resync fetches every container, builds and sends the snapshot. Woken by
// an event (or the connection's first), it inspects only what may have
// changed; on the refresh period (woken false), everything.
func (s *session) resync(ctx context.Context, sink *provider.Sink, woken bool) error {
	p := s.p
	keep := s.known
	if !woken {
		keep = nil
	}
	stale := s.stale
	s.stale = map[string]bool{} // events read from now on are after this listing
	containers, known, err := fetch(ctx, p.api, p.reqTimeout(), keep, stale)
	if err != nil {
		s.known = nil // the next resync inspects everything
		return err
	}
	s.known = known
	if !sink.Result(ctx, Build(containers, p.opts)) {
		return ctx.Err()
	}
	return nil
}

// fetch lists the containers (all states) and inspects those that carry a
// `traefik.` label: the others can contribute nothing. A container in
// prev, not in stale, whose list entry reads as it did when it was
// inspected, is not inspected again: its labels and ports are fixed at
// creation, and what changes (its state, health, name, networks) comes
// with an event or shows in the list. One that shares another's network
// stack is always inspected (the other's networks may have changed). It
// returns the containers and what to keep for the next fetch.
func fetch(ctx context.Context, api dockerAPI, timeout time.Duration, prev map[string]known, stale map[string]bool) ([]Container, map[string]known, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	list, err := api.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, nil, fmt.Errorf("listing containers: %w", err)
	}
	var items []container.Summary
	for _, c := range list {
		if hasTraefikLabel(c.Labels) {
			items = append(items, c)
		}
	}
	out := make([]Container, len(items))
	lists := make([]string, len(items))
	keep := make([]bool, len(items))
	errs := make([]error, len(items))
	sem := make(chan struct{}, inspectWorkers)
	var wg sync.WaitGroup
	for i, item := range items {
		lists[i] = listed(item)
		if k, ok := prev[item.ID]; ok && !stale[item.ID] && k.list == lists[i] && !strings.HasPrefix(k.c.NetworkMode, "container:") {
			out[i], keep[i] = k.c, true
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ins, err := api.ContainerInspect(ctx, item.ID)
			if cerrdefs.IsNotFound(err) {
				return // removed since the list
			}
			if err != nil {
				errs[i] = fmt.Errorf("inspecting container %s: %w", item.ID, err)
				return
			}
			d, err := parseInspect(ctx, api, ins)
			if err != nil {
				errs[i] = err
				return
			}
			out[i], keep[i] = d, true
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	res := out[:0]
	next := make(map[string]known, len(items))
	for i := range out {
		if keep[i] {
			res = append(res, out[i])
			next[items[i].ID] = known{c: out[i], list: lists[i]}
		}
	}
	return res, next, nil
}

// listed is what the list says of a container that an inspect would read
// differently when it changes: its state, its names and its networks'
// addresses. (The list's Status, "Up 3 minutes", changes with time alone;
// health changes come with a health_status event.)
func listed(c container.Summary) string {
	var b strings.Builder
	b.WriteString(c.State)
	for _, n := range c.Names {
		b.WriteString("\x00" + n)
	}
	b.WriteString("\x00" + c.HostConfig.NetworkMode)
	if ns := c.NetworkSettings; ns != nil {
		for _, name := range slices.Sorted(maps.Keys(ns.Networks)) {
			b.WriteString("\x00" + name)
			if ep := ns.Networks[name]; ep != nil {
				b.WriteString("=" + ep.IPAddress + "," + ep.GlobalIPv6Address)
			}
		}
	}
	return b.String()
}

func hasTraefikLabel(m map[string]string) bool {
	for k := range m {
		if len(k) >= 8 && strings.EqualFold(k[:8], "traefik.") {
			return true
		}
	}
	return false
}

// parseInspect turns an inspect answer into Container. A container that
// shares another's network stack ("container:<id>") takes that one's networks.
func parseInspect(ctx context.Context, api dockerAPI, ins container.InspectResponse) (Container, error) {
	var d Container
	if ins.ContainerJSONBase == nil {
		return d, nil
	}
	d.ID = ins.ID
	d.Name = strings.TrimPrefix(ins.Name, "/")
	if st := ins.State; st != nil {
		d.State = st.Status
		if st.Health != nil {
			d.Health = st.Health.Status
		}
	}
	if ins.Config != nil {
		d.Labels = ins.Config.Labels
	}
	if ins.HostConfig != nil {
		d.NetworkMode = string(ins.HostConfig.NetworkMode)
	}
	ns := ins.NetworkSettings
	if ns != nil {
		d.Networks = networksOf(ns)
		for port, bindings := range ns.Ports {
			pd := Port{Port: port.Int(), Proto: port.Proto()}
			for _, b := range bindings {
				pd.Bindings = append(pd.Bindings, Binding{HostIP: b.HostIP, HostPort: b.HostPort})
			}
			d.Ports = append(d.Ports, pd)
		}
	}
	if len(d.Ports) == 0 && ins.Config != nil {
		// A stopped container has no NetworkSettings.Ports; keep what it exposes.
		for port := range ins.Config.ExposedPorts {
			d.Ports = append(d.Ports, Port{Port: port.Int(), Proto: port.Proto()})
		}
	}
	if other, ok := strings.CutPrefix(d.NetworkMode, "container:"); ok && d.State == "running" {
		peer, err := api.ContainerInspect(ctx, other)
		if err == nil && peer.NetworkSettings != nil {
			d.Networks = networksOf(peer.NetworkSettings)
		} else if err != nil && !cerrdefs.IsNotFound(err) {
			return d, fmt.Errorf("inspecting container %s (network peer of %s): %w", other, d.Name, err)
		}
	}
	return d, nil
}

func networksOf(ns *container.NetworkSettings) map[string]string {
	nets := make(map[string]string, len(ns.Networks))
	for name, ep := range ns.Networks {
		if ep == nil {
			continue
		}
		ip := ep.IPAddress
		if ip == "" {
			ip = ep.GlobalIPv6Address
		}
		nets[name] = ip
	}
	return nets
}
