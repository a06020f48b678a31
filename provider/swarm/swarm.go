// Package swarm is the Docker Swarm provider: it reads the labels of the
// services of a Swarm manager (a stack file's deploy.labels) and emits
// tollgate's dynamic configuration, with the services' running tasks (or
// their virtual IPs) as servers.
//
// The provider is split as ARCHITECTURE.md asks: fetch (this file) talks to
// the manager through the narrow swarmAPI interface and turns its service
// and task lists into Services; Build (build.go) is a pure function from
// services to configuration, table-tested without an engine and shared with
// `tollgate check`.
//
// Run is level-triggered and event-driven. Traefik polls Swarm every
// refreshSeconds (15 s): the engine has no task events. tollgate wakes
// instead on the engine's service events (create, update: a scale, a label
// change; remove), node events, and the container events of local tasks
// (start, die, health_status, destroy); after one, the events already
// queued are drained, then every service and task is listed again and one
// complete snapshot is sent. A change takes Swarm a while to carry out (a
// new task is pending, assigned, preparing, starting, then running, which
// no event reports from another node), so while a listing shows the swarm
// converging (a task on its way to running, fewer or more tasks than
// replicas, a rolling update) the provider lists again shortly after: every
// 50 ms after a wake-up or a task state change, backing off to 500 ms while
// nothing moves. The poll every refreshSeconds stays as the safety net.
// Each connection is one attempt of the provider runtime (provider.Loop):
// when the manager cannot be reached, the watcher is told (Message.Err) and
// keeps the last good configuration serving, and the provider reconnects
// with the runtime's backoff; on reconnection it resyncs at once.
package swarm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/swarm"
	"github.com/docker/docker/client"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/constraints"
	"github.com/tollgate-proxy/tollgate/provider/internal/engine"
)

// Name is the provider name used in qualified resource names (`db@swarm`).
const Name = "swarm"

// Timing of requests and of the polls while the swarm converges.
const (
	// defaultRequestTimeout bounds each request to the engine unless
	// httpClientTimeout is set.
	defaultRequestTimeout = 10 * time.Second
	// convergeMin is the wait before listing again after a wake-up or a
	// task state change while the swarm converges; it doubles up to
	// convergeMax while nothing moves.
	convergeMin = 50 * time.Millisecond
	convergeMax = 500 * time.Millisecond
)

// taskLabel is the label the engine puts on a task's container.
const taskLabel = "com.docker.swarm.task.id"

// wakeActions are the event actions that trigger a resync: services and
// nodes (create, update, remove) and task containers (start, die, destroy,
// health_status, which the engine matches as a prefix).
var wakeActions = []string{"create", "update", "remove", "start", "die", "destroy", "health_status"}

// swarmAPI is the part of the Docker client the provider uses.
type swarmAPI interface {
	Ping(ctx context.Context) (types.Ping, error)
	ServiceList(ctx context.Context, options swarm.ServiceListOptions) ([]swarm.Service, error)
	TaskList(ctx context.Context, options swarm.TaskListOptions) ([]swarm.Task, error)
	NetworkList(ctx context.Context, options network.ListOptions) ([]network.Summary, error)
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
}

var _ swarmAPI = (*client.Client)(nil)

// Provider watches one Swarm manager. Create it with New; the zero value is
// not usable. Run may be called once.
type Provider struct {
	cfg      config.SwarmProvider
	endpoint string
	api      swarmAPI
	closer   func() error
	opts     Options
	timeout  time.Duration
	log      zerolog.Logger
	backoff  provider.Backoff
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider for cfg (nil means the defaults). The endpoint is
// cfg.Endpoint, else DOCKER_HOST, else unix:///var/run/docker.sock; it must
// be a manager's (workers cannot list services). New does not contact the
// engine: an engine that is down, or not a manager, is reported by Run. It
// fails on a malformed endpoint or constraints expression, or a negative
// duration.
func New(cfg *config.SwarmProvider, po provider.Options) (*Provider, error) {
	var c config.SwarmProvider
	if cfg != nil {
		c = *cfg
	} else {
		c.SetDefaults()
	}
	match, err := constraints.LabelMatcher(c.Constraints)
	if err != nil {
		return nil, fmt.Errorf("providers.swarm.constraints=%q: %w", c.Constraints, err)
	}
	if c.RefreshSeconds < 0 {
		return nil, fmt.Errorf("providers.swarm.refreshSeconds=%s: must not be negative", c.RefreshSeconds)
	}
	if c.HTTPClientTimeout < 0 {
		return nil, fmt.Errorf("providers.swarm.httpClientTimeout=%s: must not be negative", c.HTTPClientTimeout)
	}
	tc, err := provider.TLSConfig(c.TLS, "providers.swarm.tls")
	if err != nil {
		return nil, err
	}
	cl, endpoint, err := engine.New(c.Endpoint, engine.Auth{TLS: tc, Username: c.Username, Password: c.Password})
	if err != nil {
		return nil, fmt.Errorf("providers.swarm.endpoint=%q: %w", endpoint, err)
	}
	timeout := config.Std(c.HTTPClientTimeout)
	if timeout == 0 {
		timeout = defaultRequestTimeout
	}
	return &Provider{
		cfg:      c,
		endpoint: endpoint,
		api:      cl,
		closer:   cl.Close,
		opts:     optionsFrom(&c, match),
		timeout:  timeout,
		log:      po.Log.With().Str("provider", Name).Logger(),
		backoff:  po.Backoff,
	}, nil
}

// Name returns "swarm".
func (p *Provider) Name() string { return Name }

// Run watches the manager until ctx is done, sending complete snapshots to
// out. It returns nil when ctx is done.
func (p *Provider) Run(ctx context.Context, out chan<- provider.Message) error {
	s := &session{p: p}
	provider.Loop{Name: Name, What: "Swarm manager", Log: p.log.With().Str("endpoint", p.endpoint).Logger(),
		Backoff: p.backoff, Close: p.closer, Attempt: s.run}.Run(ctx, out)
	return nil
}

// session is one Run: the provider, and the current connection's sink.
type session struct {
	p    *Provider
	sink *provider.Sink
	// moved sums up the task states of the last listing, to tell whether
	// the swarm moved since; interval is the wait before the next listing
	// while it converges.
	moved    string
	interval time.Duration
}

// run connects, sends a snapshot through sink, and follows events until the
// connection fails (returning why) or ctx is done.
func (s *session) run(ctx context.Context, sink *provider.Sink) error {
	p := s.p
	s.sink = sink
	f := engine.Follow{
		API: p.api, Endpoint: p.endpoint, Timeout: p.timeout,
		Wakes:   s.wakes,
		Refresh: config.Std(p.cfg.RefreshSeconds),
		Resync:  s.resync,
		Connected: func() {
			p.log.Info().Str("endpoint", p.endpoint).Msg("Connected to the Swarm manager")
		},
	}
	if p.cfg.Watch {
		ev := filters.NewArgs(
			filters.Arg("type", string(events.ServiceEventType)),
			filters.Arg("type", string(events.NodeEventType)),
			filters.Arg("type", string(events.ContainerEventType)),
		)
		for _, a := range wakeActions {
			ev.Add("event", a)
		}
		f.Events = &ev
	}
	return f.Run(ctx)
}

// wakes reports whether ev calls for a resync, and logs it: every service
// and node event, and the container events of tasks.
func (s *session) wakes(ev events.Message) bool {
	name := ev.Actor.Attributes["name"]
	if ev.Type == events.ContainerEventType {
		if ev.Actor.Attributes[taskLabel] == "" {
			return false
		}
		switch a := string(ev.Action); {
		case a == "start", a == "die", a == "destroy", strings.HasPrefix(a, "health_status"):
		default:
			return false
		}
	}
	s.p.log.Debug().Str("type", string(ev.Type)).Str("action", string(ev.Action)).Str("name", name).Msg("Swarm event")
	return true
}

// resync lists the services and tasks, builds and sends the snapshot, and
// returns when to list again: while the swarm converges (watch only), after
// convergeMin when an event woke the provider or the tasks moved since the
// last listing, else after twice the last wait, up to convergeMax.
func (s *session) resync(ctx context.Context, woken bool) (time.Duration, error) {
	snap, err := fetch(ctx, s.p.api, s.p.timeout)
	if err != nil {
		return 0, err
	}
	moved := snap.moved != s.moved
	s.moved = snap.moved
	if !s.sink.Result(ctx, Build(snap.services, s.p.opts)) {
		return 0, ctx.Err()
	}
	switch {
	case !s.p.cfg.Watch || !snap.converging:
		s.interval = 0
	case woken || moved || s.interval == 0:
		s.interval = convergeMin
	default:
		s.interval = min(s.interval*2, convergeMax)
	}
	return s.interval, nil
}

// snapshot is one listing of the manager.
type snapshot struct {
	services []Service
	// converging is true while some service has not reached its desired
	// state: a task on its way to running, a replica count not yet
	// matched, a rolling update in progress.
	converging bool
	// moved sums up the tasks' states: when it differs from the last
	// listing's, the swarm moved.
	moved string
}

// settled are the task states a task desired running does not leave by
// itself (the orchestrator replaces a failed one with a new task).
var settled = map[swarm.TaskState]bool{
	swarm.TaskStateRunning: true, swarm.TaskStateComplete: true, swarm.TaskStateShutdown: true,
	swarm.TaskStateFailed: true, swarm.TaskStateRejected: true, swarm.TaskStateRemove: true, swarm.TaskStateOrphaned: true,
}

// fetch lists the services and their tasks whose desired state is running,
// and turns them into Services; network names come from the tasks'
// attachments, and from the network list for a virtual IP on a network no
// task names.
func fetch(ctx context.Context, api swarmAPI, timeout time.Duration) (snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	list, err := api.ServiceList(ctx, swarm.ServiceListOptions{})
	if err != nil {
		return snapshot{}, fmt.Errorf("listing services: %w", err)
	}
	tasks, err := api.TaskList(ctx, swarm.TaskListOptions{Filters: filters.NewArgs(filters.Arg("desired-state", "running"))})
	if err != nil {
		return snapshot{}, fmt.Errorf("listing tasks: %w", err)
	}

	type netInfo struct {
		name    string
		ingress bool
	}
	nets := map[string]netInfo{}
	for _, t := range tasks {
		for _, a := range t.NetworksAttachments {
			nets[a.Network.ID] = netInfo{a.Network.Spec.Name, a.Network.Spec.Ingress}
		}
	}
	for _, svc := range list {
		if !slices.ContainsFunc(svc.Endpoint.VirtualIPs, func(v swarm.EndpointVirtualIP) bool { _, ok := nets[v.NetworkID]; return !ok }) {
			continue
		}
		nl, err := api.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("scope", "swarm"))})
		if err != nil {
			return snapshot{}, fmt.Errorf("listing networks: %w", err)
		}
		for _, n := range nl {
			nets[n.ID] = netInfo{n.Name, n.Ingress}
		}
		break
	}

	var snap snapshot
	byService := map[string][]swarm.Task{}
	var moved []string
	for _, t := range tasks {
		byService[t.ServiceID] = append(byService[t.ServiceID], t)
		moved = append(moved, t.ID+"="+string(t.Status.State))
		if !settled[t.Status.State] {
			snap.converging = true
		}
	}
	slices.Sort(moved)
	snap.moved = strings.Join(moved, ",")

	for _, svc := range list {
		s := Service{
			ID: svc.ID, Name: svc.Spec.Name, Labels: svc.Spec.Labels,
			Global: svc.Spec.Mode.Global != nil, EndpointMode: ModeVIP,
		}
		if m := svc.Endpoint.Spec.Mode; m != "" {
			s.EndpointMode = string(m)
		} else if es := svc.Spec.EndpointSpec; es != nil && es.Mode != "" {
			s.EndpointMode = string(es.Mode)
		}
		for _, v := range svc.Endpoint.VirtualIPs {
			n, ok := nets[v.NetworkID]
			ip := stripPrefix(v.Addr)
			if !ok || ip == "" {
				continue
			}
			if s.VirtualIPs == nil {
				s.VirtualIPs = map[string]string{}
			}
			s.VirtualIPs[n.name] = ip
			if n.ingress {
				s.Ingress = n.name
			}
		}
		for _, t := range byService[svc.ID] {
			task := Task{ID: t.ID, Slot: t.Slot, NodeID: t.NodeID, State: string(t.Status.State)}
			for _, a := range t.NetworksAttachments {
				if len(a.Addresses) == 0 {
					continue
				}
				if task.Networks == nil {
					task.Networks = map[string]string{}
				}
				task.Networks[a.Network.Spec.Name] = stripPrefix(a.Addresses[0])
				if a.Network.Spec.Ingress {
					s.Ingress = a.Network.Spec.Name
				}
			}
			s.Tasks = append(s.Tasks, task)
		}
		if r := svc.Spec.Mode.Replicated; r != nil && r.Replicas != nil && uint64(len(s.Tasks)) != *r.Replicas {
			snap.converging = true
		}
		if u := svc.UpdateStatus; u != nil && (u.State == swarm.UpdateStateUpdating || u.State == swarm.UpdateStateRollbackStarted) {
			snap.converging = true
		}
		snap.services = append(snap.services, s)
	}
	return snap, nil
}

// stripPrefix turns "10.0.1.5/24" into "10.0.1.5".
func stripPrefix(cidr string) string {
	ip, _, _ := strings.Cut(cidr, "/")
	return ip
}
