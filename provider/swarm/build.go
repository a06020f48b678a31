package swarm

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/labels"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Endpoint modes of a Swarm service.
const (
	ModeVIP   = "vip"
	ModeDNSRR = "dnsrr"
)

// TaskRunning is the state of a task that serves.
const TaskRunning = "running"

// Service is what Build needs to know about one Swarm service: the provider
// fills it from the manager's service and task lists, `tollgate check` from
// a stack file's service, tests by hand.
type Service struct {
	// ID identifies the service (Problem.SourceID).
	ID string
	// Name is the service's name: "<stack>_<service>" for a stack's.
	Name string
	// Labels are the service's own labels (a stack file's deploy.labels),
	// not its containers'.
	Labels map[string]string
	// Global is true for a global service (one task per node), false for a
	// replicated one.
	Global bool
	// EndpointMode is ModeVIP (the default: the service has a virtual IP on
	// each of its networks) or ModeDNSRR (none).
	EndpointMode string
	// VirtualIPs maps each network the service has a virtual IP on (by
	// name) to that IP, without its prefix length.
	VirtualIPs map[string]string
	// Ingress names the swarm's routing-mesh network ("ingress") when the
	// service is attached to it (it publishes ports). Only the routing mesh
	// reaches addresses there, so it is never chosen unless a label or the
	// provider's network option names it.
	Ingress string
	// Tasks are the service's tasks whose desired state is running.
	Tasks []Task
}

// Task is one task of a service.
type Task struct {
	ID string
	// Slot is the task's replica number (replicated services; 0 for global).
	Slot int
	// NodeID is the node the task is scheduled on.
	NodeID string
	// State is the task's current state: TaskRunning once its container has
	// started (and, with a health check, once it is healthy); "new",
	// "pending", "assigned", "preparing", "starting" before; "failed",
	// "shutdown", ... after.
	State string
	// Networks maps each network the task is attached to (by name) to its
	// IP there, without the prefix length.
	Networks map[string]string
}

// Options are the provider settings that shape the mapping.
type Options struct {
	ExposedByDefault bool
	// Network is the provider's network option: the network used to reach
	// a service without a traefik.swarm.network label.
	Network            string
	AllowEmptyServices bool
	// Match is the constraints expression; nil keeps every service.
	Match func(map[string]string) bool
}

func optionsFrom(cfg *config.SwarmProvider, match func(map[string]string) bool) Options {
	return Options{
		ExposedByDefault:   cfg.ExposedByDefault,
		Network:            cfg.Network,
		AllowEmptyServices: cfg.AllowEmptyServices,
		Match:              match,
	}
}

// Build maps Swarm services to one configuration with bare names, as
// Traefik v3's Swarm provider does for TCP, and lists what it left out and
// what it warns about; each problem names the service and, for label
// errors, the label. It does no I/O and does not modify services. The
// configuration is nil when no service contributes anything, and a section
// (routers, services, middlewares) is nil when empty.
//
// Per service, in name order:
//   - traefik.enable (else ExposedByDefault) and the constraints select it;
//   - its servers are its running tasks' addresses, or, with
//     traefik.swarm.lbswarm=true, its virtual IP (a dnsrr service has none:
//     the tasks are used, with a warning); a service without a running task
//     (lbswarm: without a virtual IP) contributes nothing, unless
//     AllowEmptyServices keeps its routers, services and middlewares without
//     servers;
//   - labels decode (an error skips the whole service); a service with no
//     TCP router, service or middleware label is ignored;
//   - when it has routers but no service label, it gets a service named
//     after it ("<stack>-<service>", normalised);
//   - each service needs traefik.tcp.services.<name>.loadbalancer.server.port
//     (a Swarm service exposes no port to read): without it the whole
//     service is skipped, as in Traefik ("port is missing");
//   - the address is taken on the network traefik.swarm.network names, else
//     the provider's network, else the service's only network; a service on
//     several networks gets the first by name, with a warning that says
//     which (Traefik takes any one); the routing mesh (ingress) is never
//     taken unless named; a named network the service is not on falls back
//     the same way, with a warning (Traefik does the same);
//   - traefik.docker.network and traefik.docker.lbswarm are read as their
//     traefik.swarm. names, with a warning (Traefik v3 deprecates them);
//   - the router defaults (provider.BuildTCPRouterConfiguration): a router
//     without a rule is dropped; a router without a service is linked to
//     the service's only one, and dropped alone when there are several.
//
// Across services, provider.MergeSources: services of the same name merge
// their servers when the rest of their load balancer is identical; routers
// and middlewares of the same name must be identical. Anything else is
// dropped with a problem naming every Swarm service that defined it.
func Build(services []Service, opts Options) provider.Result {
	return provider.BuildInputs(services, func(a, b Service) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	}, func(s Service) (provider.Source, []provider.Problem) { return buildService(s, opts) })
}

// describe names a service in problems.
func describe(s Service) string { return fmt.Sprintf("swarm service %q", s.Name) }

// noun is what one input is in the router defaults' messages.
const noun = "Swarm service"

// buildService returns the service's own configuration (src.TCP nil when
// it contributes nothing) and its problems.
func buildService(s Service, opts Options) (provider.Source, []provider.Problem) {
	src := provider.Source{ID: s.ID, Name: describe(s)}
	skip := func(p provider.Problem) (provider.Source, []provider.Problem) {
		p = serviceProblem(s, provider.SeverityError, p)
		p.Skipped, p.DisablesRouter = true, labels.DeclaresRouter(s.Labels)
		return provider.Source{}, []provider.Problem{p}
	}

	knobs, err := labels.DecodeSwarmKnobs(s.Labels)
	if err != nil {
		return skip(provider.LabelProblem(err))
	}
	enabled := opts.ExposedByDefault
	if knobs.Enable != nil {
		enabled = *knobs.Enable
	}
	if !enabled {
		return provider.Source{}, nil
	}
	if opts.Match != nil && !opts.Match(s.Labels) {
		return provider.Source{}, nil
	}

	lbSwarm, warnings := readKnobs(s, knobs)
	addrs := serverAddrs(s, lbSwarm)
	if len(addrs) == 0 && !opts.AllowEmptyServices {
		return provider.Source{}, nil
	}

	// A label that does not decode drops its own resource; one that no
	// resource owns skips the service.
	conf, dropped, err := labels.DecodeResources(s.Labels)
	if err != nil {
		return skip(provider.LabelProblem(err))
	}
	src.TLS, src.TCP = conf.TLS, conf.TCP
	drops := provider.DropResourceProblems(src, dropped, provider.LabelProblem, noun, labels.Root)
	warnings = slices.Concat(drops, warnings)
	tcp := conf.TCP
	if tcp == nil || (len(tcp.Routers) == 0 && len(tcp.Services) == 0 && len(tcp.Middlewares) == 0) {
		if src.TLS != nil {
			src.TCP = nil
			return src, warnings // TLS stores only
		}
		return provider.Source{}, drops
	}
	if len(tcp.Routers) == 0 && len(tcp.Services) == 0 {
		return src, warnings
	}

	var choice *networkChoice
	servers := func(name, port string) ([]config.TCPServer, error) {
		if port == "" {
			return nil, fmt.Errorf("port is missing: set %s.tcp.services.%s.loadbalancer.server.port (a Swarm service exposes no port to read)", labels.Root, name)
		}
		if len(addrs) == 0 {
			return nil, nil
		}
		if choice == nil {
			c, err := chooseNetwork(s, addrs, knobs, opts.Network)
			if err != nil {
				return nil, err
			}
			choice = &c
		}
		var out []config.TCPServer
		for _, a := range addrs {
			ip := a[choice.network]
			if ip == "" {
				continue
			}
			srv := config.TCPServer{Address: net.JoinHostPort(ip, port)}
			if !slices.Contains(out, srv) { // once per address, as when services merge
				out = append(out, srv)
			}
		}
		return out, nil
	}
	if p := provider.BuildTCPServiceConfiguration(src, provider.Normalize(s.Name), servers); p != nil {
		src, skipped := skip(*p)
		return src, append(drops, skipped...)
	}
	if choice != nil && choice.warning != nil {
		warnings = append(warnings, serviceProblem(s, provider.SeverityWarning, *choice.warning))
	}
	return src, append(warnings, provider.BuildTCPRouterConfiguration(src, noun, labels.Root)...)
}

// serviceProblem is p, of severity sev, about the service s.
func serviceProblem(s Service, sev provider.Severity, p provider.Problem) provider.Problem {
	p.Source, p.SourceID, p.Severity = describe(s), s.ID, sev
	return p
}

// readKnobs says whether the servers are the service's virtual IP
// (traefik.swarm.lbswarm, which a dnsrr service cannot honour), with the
// warnings the knobs' labels call for: deprecated spellings, lbswarm on
// dnsrr.
func readKnobs(s Service, knobs labels.Knobs) (lbSwarm bool, warnings []provider.Problem) {
	for _, k := range knobs.Deprecated {
		swarmKey := labels.Root + ".swarm." + k[len(labels.Root+".docker."):]
		warnings = append(warnings, serviceProblem(s, provider.SeverityWarning, provider.Problem{
			Key: k, Value: s.Labels[k], KeyKind: provider.KeyLabel,
			Message: fmt.Sprintf("traefik.docker. labels on a Swarm service are deprecated (Traefik v3 too): read as %s", swarmKey),
		}))
	}
	lbSwarm = knobs.LBSwarm
	if lbSwarm && s.EndpointMode == ModeDNSRR {
		lbSwarm = false
		warnings = append(warnings, serviceProblem(s, provider.SeverityWarning, provider.Problem{
			Message: "lbswarm is set but the service's endpoint mode is dnsrr, which has no virtual IP: its tasks' addresses are used",
		}))
	}
	return lbSwarm, warnings
}

// serverAddrs returns where the servers are, each as its address per
// network: the virtual IPs (lbSwarm), or the running tasks', by slot.
func serverAddrs(s Service, lbSwarm bool) []map[string]string {
	var addrs []map[string]string
	if lbSwarm {
		if len(s.VirtualIPs) > 0 {
			addrs = append(addrs, s.VirtualIPs)
		}
		return addrs
	}
	tasks := slices.Clone(s.Tasks)
	sort.SliceStable(tasks, func(i, j int) bool {
		if tasks[i].Slot != tasks[j].Slot {
			return tasks[i].Slot < tasks[j].Slot
		}
		return tasks[i].ID < tasks[j].ID
	})
	for _, t := range tasks {
		if t.State == TaskRunning && len(t.Networks) > 0 {
			addrs = append(addrs, t.Networks)
		}
	}
	return addrs
}

// networkChoice is the network a service's servers are reached on, and the
// warning that says why when it was not obvious.
type networkChoice struct {
	network string
	warning *provider.Problem
}

// chooseNetwork picks the network of a service's servers among the
// networks addrs have an address on.
func chooseNetwork(s Service, addrs []map[string]string, knobs labels.Knobs, defaultNetwork string) (networkChoice, error) {
	on := map[string]bool{}
	for _, a := range addrs {
		for n, ip := range a {
			if ip != "" {
				on[n] = true
			}
		}
	}
	all := slices.Sorted(maps.Keys(on))
	var reachable []string // all but the routing mesh
	for _, n := range all {
		if n != s.Ingress {
			reachable = append(reachable, n)
		}
	}

	want, from := knobs.Network, knobs.NetworkLabel
	if want == "" {
		want, from = defaultNetwork, ""
	}
	if want != "" && on[want] {
		return networkChoice{network: want}, nil
	}
	if len(reachable) == 0 {
		if len(all) == 0 {
			return networkChoice{}, fmt.Errorf("no address: the service is on no network (attach it to an overlay network tollgate is on)")
		}
		return networkChoice{}, fmt.Errorf("no address tollgate can reach: the service is only on the routing mesh (%s); attach it to an overlay network tollgate is on", s.Ingress)
	}
	c := networkChoice{network: reachable[0]}
	switch {
	case want != "":
		p := provider.Problem{Message: fmt.Sprintf("network %q is not one of the service's networks (%s): using %q", want, strings.Join(all, ", "), c.network)}
		if from != "" {
			p.Key, p.Value, p.KeyKind = from, s.Labels[from], provider.KeyLabel
		} else {
			p.Message = "--providers.swarm.network: " + p.Message
		}
		for _, n := range all {
			if strings.HasSuffix(n, "_"+want) {
				p.Message += fmt.Sprintf(" (a stack's networks are named <stack>_<network>: %q?)", n)
				break
			}
		}
		c.warning = &p
	case len(reachable) > 1:
		c.warning = &provider.Problem{Message: fmt.Sprintf("the service is on networks %s and no traefik.swarm.network label names one: servers use %q (set traefik.swarm.network or --providers.swarm.network)",
			strings.Join(reachable, ", "), c.network)}
	}
	return c, nil
}
