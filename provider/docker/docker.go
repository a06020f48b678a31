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
// again and one complete snapshot is sent. A periodic resync
// (refreshInterval) is the safety net for what events do not say (a network
// connected to a running container). When the engine cannot be reached, Run
// sends a Message with Err set, so the watcher keeps the last good
// configuration serving, and reconnects with capped exponential backoff
// (provider.Feed.Reconnect); on reconnection it resyncs at once.
package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
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

// Timing of each request to the engine (the reconnect loop's is
// provider.Reconnect's).
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
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider for cfg (nil means the defaults). The endpoint is
// cfg.Endpoint, else DOCKER_HOST, else unix:///var/run/docker.sock; the API
// version is negotiated with the engine. New does not contact the engine: an
// engine that is down is reported by Run. It fails on a malformed endpoint or
// constraints expression.
func New(cfg *config.DockerProvider, log zerolog.Logger) (*Provider, error) {
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
		log:      log.With().Str("provider", Name).Logger(),
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
	defer func() {
		if p.closer != nil {
			_ = p.closer()
		}
	}()
	s := &session{p: p, feed: &provider.Feed{Out: out, Name: Name}}
	s.feed.Reconnect(ctx, p.log.With().Str("endpoint", p.endpoint).Logger(),
		"Docker engine unreachable, keeping the last configuration", s.run)
	return nil
}

// session is one Run: the provider and its side of the message channel.
type session struct {
	p    *Provider
	feed *provider.Feed
}

// run connects, sends a snapshot, and follows events until the connection
// fails (returning why) or ctx is done.
func (s *session) run(ctx context.Context) error {
	p := s.p
	f := engine.Follow{
		API: p.api, Endpoint: p.endpoint, Timeout: p.reqTimeout(),
		Wakes: func(ev events.Message) bool {
			p.log.Debug().Str("action", string(ev.Action)).Str("container", ev.Actor.Attributes["name"]).Msg("Docker event")
			return true
		},
		Refresh: config.Std(p.cfg.RefreshInterval),
		Resync:  func(ctx context.Context, _ bool) (time.Duration, error) { return 0, s.resync(ctx) },
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

// resync fetches every container, builds and sends the snapshot.
func (s *session) resync(ctx context.Context) error {
	p := s.p
	containers, err := fetch(ctx, p.api, p.reqTimeout())
	if err != nil {
		return err
	}
	conf, problems := build(containers, p.opts)
	msg := provider.Message{ProviderName: Name, Configuration: conf, Problems: problems}
	if !s.feed.Snapshot(ctx, msg, func(provider.Message) {
		for _, pr := range problems {
			p.log.Error().Str("problem", pr).Msg("Docker container skipped")
		}
	}) {
		return ctx.Err()
	}
	return nil
}

// fetch lists the containers (all states) and inspects those that carry a
// `traefik.` label: the others can contribute nothing.
func fetch(ctx context.Context, api dockerAPI, timeout time.Duration) ([]Container, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	list, err := api.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	var ids []string
	for _, c := range list {
		if hasTraefikLabel(c.Labels) {
			ids = append(ids, c.ID)
		}
	}
	out := make([]Container, len(ids))
	keep := make([]bool, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, inspectWorkers)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ins, err := api.ContainerInspect(ctx, id)
			if errdefs.IsNotFound(err) {
				return // removed since the list
			}
			if err != nil {
				errs[i] = fmt.Errorf("inspecting container %s: %w", id, err)
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
		return nil, err
	}
	res := out[:0]
	for i := range out {
		if keep[i] {
			res = append(res, out[i])
		}
	}
	return res, nil
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
		} else if err != nil && !errdefs.IsNotFound(err) {
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
