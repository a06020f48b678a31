package docker

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/labels"
)

// Compose labels that name a container's service and project.
const (
	labelComposeProject = "com.docker.compose.project"
	labelComposeService = "com.docker.compose.service"
)

// containerData is what build needs to know about one container: the I/O
// layer (fetch) fills it from the engine's inspect answer, tests write it by
// hand.
type containerData struct {
	ID     string
	Name   string // without the leading "/"
	Labels map[string]string
	// State is the engine's State.Status: "running", "exited", "paused",
	// "created", "restarting", "removing", "dead".
	State string
	// Health is State.Health.Status: "" (no health check), "starting",
	// "healthy" or "unhealthy".
	Health string
	// NetworkMode is HostConfig.NetworkMode ("bridge", "host", "none", a
	// network name, or "container:<id>"; for the last, fetch copies the
	// networks of the container whose stack is shared).
	NetworkMode string
	// Networks maps each attached network's name to the container's IP on it
	// (IPv4, else the global IPv6 address; empty when it has none).
	Networks map[string]string
	// Ports are the container's exposed ports with their host bindings.
	Ports []portData
}

// portData is one exposed container port.
type portData struct {
	Port     int
	Proto    string // "tcp", "udp", "sctp"
	Bindings []binding
}

// binding is one host binding of a published port.
type binding struct {
	HostIP   string
	HostPort string
}

// buildOptions are the provider settings that shape the mapping.
type buildOptions struct {
	ExposedByDefault   bool
	Network            string
	UseBindPortIP      bool
	AllowEmptyServices bool
	// Match is the constraints expression; nil keeps every container.
	Match func(map[string]string) bool
}

func optionsFrom(cfg *config.DockerProvider, match func(map[string]string) bool) buildOptions {
	return buildOptions{
		ExposedByDefault:   cfg.ExposedByDefault,
		Network:            cfg.Network,
		UseBindPortIP:      cfg.UseBindPortIP,
		AllowEmptyServices: cfg.AllowEmptyServices,
		Match:              match,
	}
}

// build maps containers to one configuration with bare names, as DESIGN.md §3
// and Traefik v3's Docker provider do for TCP, and lists what it skipped
// (each problem names the container and, for label errors, the label). It
// does no I/O and does not modify containers. The result is nil when no
// container contributes anything.
//
// Per container, in name order:
//   - traefik.enable (else ExposedByDefault) and the constraints select it;
//   - a container that is not running is kept only with
//     traefik.docker.allownonrunning=true or AllowEmptyServices, a starting or
//     unhealthy one only with AllowEmptyServices; either then contributes its
//     routers, services and middlewares but no server;
//   - labels decode (an error skips the whole container); a container with
//     no TCP router, service or middleware label is ignored;
//   - when it has routers or services but no service label, it gets a service
//     named after the container (compose: "<service>-<project>"), normalised;
//   - each service gets one server: the label port, else the lowest exposed
//     TCP port, on the IP of traefik.docker.network, else the provider
//     network, else the first network by name (host mode: 127.0.0.1); with
//     UseBindPortIP, the first host binding with a concrete IP instead;
//   - a router without a rule is dropped; a router without a service is linked
//     to the container's only service, and dropped when there are several.
//
// Across containers, services of the same name merge their servers when the
// rest of their load balancer is identical; routers and middlewares of the
// same name must be identical. Anything else is dropped with a problem naming
// every container that defined it.
func build(containers []containerData, opts buildOptions) (*config.Dynamic, []string) {
	sorted := make([]containerData, len(containers))
	copy(sorted, containers)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Name != sorted[j].Name {
			return sorted[i].Name < sorted[j].Name
		}
		return sorted[i].ID < sorted[j].ID
	})

	var problems []string
	m := newMerger()
	for _, c := range sorted {
		tcp, probs := buildContainer(c, opts)
		problems = append(problems, probs...)
		if tcp != nil {
			m.add(c.Name, tcp)
		}
	}
	problems = append(problems, m.conflicts()...)
	if m.empty() {
		return nil, problems
	}
	out := m.out
	if len(out.Routers) == 0 {
		out.Routers = nil
	}
	if len(out.Services) == 0 {
		out.Services = nil
	}
	if len(out.Middlewares) == 0 {
		out.Middlewares = nil
	}
	return &config.Dynamic{TCP: out}, problems
}

// buildContainer returns the container's own TCP configuration, or nil when it
// contributes nothing.
func buildContainer(c containerData, opts buildOptions) (*config.TCPConfiguration, []string) {
	var problems []string
	report := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("container %q: ", c.Name)+fmt.Sprintf(format, args...))
	}

	knobs, err := labels.DecodeKnobs(c.Labels)
	if err != nil {
		report("%v", err)
		return nil, problems
	}
	enabled := opts.ExposedByDefault
	if knobs.Enable != nil {
		enabled = *knobs.Enable
	}
	if !enabled {
		return nil, nil
	}
	if opts.Match != nil && !opts.Match(c.Labels) {
		return nil, nil
	}

	running := c.State == "running"
	healthy := c.Health == "" || c.Health == "healthy"
	switch {
	case !running && !knobs.AllowNonRunning && !opts.AllowEmptyServices:
		return nil, nil
	case running && !healthy && !opts.AllowEmptyServices:
		return nil, nil
	}
	withServer := running && healthy

	conf, err := labels.Decode(c.Labels)
	if err != nil {
		report("%v", err)
		return nil, problems
	}
	tcp := conf.TCP
	if tcp == nil || (len(tcp.Routers) == 0 && len(tcp.Services) == 0 && len(tcp.Middlewares) == 0) {
		return nil, nil
	}

	if len(tcp.Routers) > 0 || len(tcp.Services) > 0 {
		if len(tcp.Services) == 0 {
			tcp.Services = map[string]*config.TCPService{
				serviceName(c): {LoadBalancer: &config.TCPServersLoadBalancer{}},
			}
		}
		for _, name := range sortedKeys(tcp.Services) {
			lb := tcp.Services[name].LoadBalancer
			if lb == nil {
				report("service %q has no loadBalancer (weighted services cannot be declared in labels)", name)
				return nil, problems
			}
			var labelPort string
			if len(lb.Servers) > 0 {
				labelPort = lb.Servers[0].Port
			}
			lb.Servers = nil
			if !withServer {
				continue
			}
			addr, err := serverAddress(c, knobs.Network, labelPort, opts)
			if err != nil {
				report("service %q: %v", name, err)
				return nil, problems
			}
			lb.Servers = []config.TCPServer{{Address: addr}}
		}
		for _, name := range sortedKeys(tcp.Routers) {
			r := tcp.Routers[name]
			if strings.TrimSpace(r.Rule) == "" {
				report("router %q has no rule: dropped (set traefik.tcp.routers.%s.rule, e.g. HostSNI(`*`))", name, name)
				delete(tcp.Routers, name)
				continue
			}
			if r.Service == "" {
				if len(tcp.Services) > 1 {
					report("router %q has no service and the container defines %d services (%s): dropped (set traefik.tcp.routers.%s.service)",
						name, len(tcp.Services), strings.Join(sortedKeys(tcp.Services), ", "), name)
					delete(tcp.Routers, name)
					continue
				}
				for s := range tcp.Services {
					r.Service = s
				}
			}
		}
	}
	return tcp, problems
}

// serverAddress picks the container's address for one service.
func serverAddress(c containerData, labelNetwork, labelPort string, opts buildOptions) (string, error) {
	port := labelPort
	if port == "" {
		port = lowestTCPPort(c)
	}
	if port == "" {
		return "", errors.New("no port: set traefik.tcp.services.<name>.loadbalancer.server.port or expose a port")
	}
	if opts.UseBindPortIP {
		if ip, hostPort, ok := hostBinding(c, port); ok {
			return net.JoinHostPort(ip, hostPort), nil
		}
	}
	network := labelNetwork
	if network == "" {
		network = opts.Network
	}
	ip := containerIP(c, network)
	if ip == "" {
		return "", fmt.Errorf("no IP address (network mode %q, networks %v)", c.NetworkMode, sortedKeys(c.Networks))
	}
	return net.JoinHostPort(ip, port), nil
}

// lowestTCPPort returns the lowest exposed TCP port, or "".
func lowestTCPPort(c containerData) string {
	lowest := 0
	for _, p := range c.Ports {
		if (p.Proto == "" || strings.EqualFold(p.Proto, "tcp")) && p.Port > 0 && (lowest == 0 || p.Port < lowest) {
			lowest = p.Port
		}
	}
	if lowest == 0 {
		return ""
	}
	return strconv.Itoa(lowest)
}

// hostBinding returns the first host binding of port/tcp with a concrete IP.
// Bindings on all interfaces (0.0.0.0, ::, empty) say nothing about where to
// connect, so Traefik (and tollgate) then fall back on the container's IP.
func hostBinding(c containerData, port string) (ip, hostPort string, ok bool) {
	for _, p := range c.Ports {
		if strconv.Itoa(p.Port) != port || !(p.Proto == "" || strings.EqualFold(p.Proto, "tcp")) {
			continue
		}
		for _, b := range p.Bindings {
			switch b.HostIP {
			case "", "0.0.0.0", "::":
				continue
			}
			if b.HostPort != "" {
				return b.HostIP, b.HostPort, true
			}
		}
	}
	return "", "", false
}

// containerIP returns the container's IP on network, else on the first
// network by name that gives it one. Host networking means the host: tollgate
// reaches it on loopback.
func containerIP(c containerData, network string) string {
	if network != "" {
		if ip := c.Networks[network]; ip != "" {
			return ip
		}
	}
	if c.NetworkMode == "host" {
		return "127.0.0.1"
	}
	for _, name := range sortedKeys(c.Networks) {
		if ip := c.Networks[name]; ip != "" {
			return ip
		}
	}
	return ""
}

// serviceName is the automatic service name: "<service>-<project>" for a
// compose container, else the container name, normalised.
func serviceName(c containerData) string {
	name := c.Name
	svc, proj := c.Labels[labelComposeService], c.Labels[labelComposeProject]
	if svc != "" && proj != "" {
		name = svc + "-" + proj
	}
	return normalize(name)
}

// normalize replaces every run of characters other than letters and digits
// with a single "-" and trims them at both ends, as Traefik does.
func normalize(name string) string {
	return strings.Join(strings.FieldsFunc(name, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	}), "-")
}

// merger merges per-container configurations and remembers which containers
// defined each name, to report conflicts.
type merger struct {
	out                   *config.TCPConfiguration
	routerBy, serviceBy   map[string][]string
	middlewareBy          map[string][]string
	badRouter, badService map[string]bool
	badMiddleware         map[string]bool
}

func newMerger() *merger {
	return &merger{
		out: &config.TCPConfiguration{
			Routers:     map[string]*config.TCPRouter{},
			Services:    map[string]*config.TCPService{},
			Middlewares: map[string]*config.TCPMiddleware{},
		},
		routerBy: map[string][]string{}, serviceBy: map[string][]string{}, middlewareBy: map[string][]string{},
		badRouter: map[string]bool{}, badService: map[string]bool{}, badMiddleware: map[string]bool{},
	}
}

func (m *merger) add(container string, tcp *config.TCPConfiguration) {
	for _, name := range sortedKeys(tcp.Services) {
		svc := tcp.Services[name]
		m.serviceBy[name] = append(m.serviceBy[name], container)
		prev, ok := m.out.Services[name]
		if !ok {
			m.out.Services[name] = svc
			continue
		}
		if !mergeable(prev.LoadBalancer, svc.LoadBalancer) {
			m.badService[name] = true
			continue
		}
		seen := map[string]bool{}
		for _, s := range prev.LoadBalancer.Servers {
			seen[s.Address] = true
		}
		for _, s := range svc.LoadBalancer.Servers {
			if !seen[s.Address] {
				prev.LoadBalancer.Servers = append(prev.LoadBalancer.Servers, s)
				seen[s.Address] = true
			}
		}
	}
	for _, name := range sortedKeys(tcp.Routers) {
		r := tcp.Routers[name]
		m.routerBy[name] = append(m.routerBy[name], container)
		if prev, ok := m.out.Routers[name]; !ok {
			m.out.Routers[name] = r
		} else if !reflect.DeepEqual(prev, r) {
			m.badRouter[name] = true
		}
	}
	for _, name := range sortedKeys(tcp.Middlewares) {
		mw := tcp.Middlewares[name]
		m.middlewareBy[name] = append(m.middlewareBy[name], container)
		if prev, ok := m.out.Middlewares[name]; !ok {
			m.out.Middlewares[name] = mw
		} else if !reflect.DeepEqual(prev, mw) {
			m.badMiddleware[name] = true
		}
	}
}

// mergeable reports whether two load balancers differ only in their servers.
func mergeable(a, b *config.TCPServersLoadBalancer) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Servers, y.Servers = nil, nil
	return reflect.DeepEqual(x, y)
}

// conflicts drops every conflicting name and returns one problem for each.
func (m *merger) conflicts() []string {
	var problems []string
	report := func(kind, name string, by []string) {
		quoted := make([]string, len(by))
		for i, c := range by {
			quoted[i] = strconv.Quote(c)
		}
		problems = append(problems, fmt.Sprintf("%s %q is defined differently by containers %s: dropped (give them the same labels or different names)",
			kind, name, strings.Join(quoted, " and ")))
	}
	for _, name := range sortedKeys(m.badService) {
		report("service", name, m.serviceBy[name])
		delete(m.out.Services, name)
	}
	for _, name := range sortedKeys(m.badRouter) {
		report("router", name, m.routerBy[name])
		delete(m.out.Routers, name)
	}
	for _, name := range sortedKeys(m.badMiddleware) {
		report("middleware", name, m.middlewareBy[name])
		delete(m.out.Middlewares, name)
	}
	return problems
}

func (m *merger) empty() bool {
	return len(m.out.Routers) == 0 && len(m.out.Services) == 0 && len(m.out.Middlewares) == 0
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
