package docker

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/labels"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Compose labels that name a container's service and project.
const (
	LabelComposeProject = "com.docker.compose.project"
	LabelComposeService = "com.docker.compose.service"
)

// Container is what Build needs to know about one container: the provider
// fills it from the engine's inspect answer, `tollgate check` from a compose
// service or a file of labels, tests by hand.
type Container struct {
	// ID identifies the container (Problem.SourceID).
	ID   string
	Name string // without the leading "/"
	// Labels are the container's labels, compose's own included.
	Labels map[string]string
	// State is the engine's State.Status: "running", "exited", "paused",
	// "created", "restarting", "removing", "dead".
	State string
	// Health is State.Health.Status: "" (no health check), "starting",
	// "healthy" or "unhealthy".
	Health string
	// NetworkMode is HostConfig.NetworkMode ("bridge", "host", "none", a
	// network name, or "container:<id>"; for the last, the provider copies
	// the networks of the container whose stack is shared).
	NetworkMode string
	// Networks maps each attached network's name to the container's IP on it
	// (IPv4, else the global IPv6 address; empty when it has none).
	Networks map[string]string
	// Ports are the container's exposed ports with their host bindings.
	Ports []Port
	// ImagePortsUnknown says Ports may lack ports the image exposes
	// (`tollgate check` reads a compose file, not the image): a service
	// without a port label then gets the port "<lowest port the image
	// exposes>" instead of a problem.
	ImagePortsUnknown bool
}

// Port is one exposed container port.
type Port struct {
	Port     int
	Proto    string // "tcp", "udp", "sctp"
	Bindings []Binding
}

// Binding is one host binding of a published port.
type Binding struct {
	HostIP   string
	HostPort string
}

// unknownImagePort is the port shown for a container whose image's ports
// are unknown (Container.ImagePortsUnknown).
const unknownImagePort = "<lowest port the image exposes>"

// Options are the provider settings that shape the mapping.
type Options struct {
	ExposedByDefault   bool
	Network            string
	UseBindPortIP      bool
	AllowEmptyServices bool
	// Match is the constraints expression; nil keeps every container.
	Match func(map[string]string) bool
}

func optionsFrom(cfg *config.DockerProvider, match func(map[string]string) bool) Options {
	return Options{
		ExposedByDefault:   cfg.ExposedByDefault,
		Network:            cfg.Network,
		UseBindPortIP:      cfg.UseBindPortIP,
		AllowEmptyServices: cfg.AllowEmptyServices,
		Match:              match,
	}
}

// Build maps containers to one configuration with bare names, as
// docs/reference/providers/docker.md says and Traefik v3's Docker provider does for TCP, and
// lists what it left out; each problem names the container and, for label
// errors, the label. It does no I/O and does not modify containers. The
// configuration is nil when no container contributes anything, and a section
// (routers, services, middlewares) is nil when empty.
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
//   - the router defaults (provider.BuildTCPRouterConfiguration): a router
//     without a rule is dropped; a router without a service is linked to the
//     container's only service, and dropped alone when there are several.
//
// Across containers, provider.MergeSources: services of the same name merge
// their servers when the rest of their load balancer is identical; routers
// and middlewares of the same name must be identical. Anything else is
// dropped with a problem naming every container that defined it.
func Build(containers []Container, opts Options) provider.Result {
	return provider.BuildInputs(containers, func(a, b Container) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	}, func(c Container) (provider.Source, []provider.Problem) { return buildContainer(c, opts) })
}

// describe names a container in problems.
func describe(c Container) string { return fmt.Sprintf("container %q", c.Name) }

// buildContainer returns the container's own configuration (src.TCP nil when
// it contributes nothing) and its problems.
func buildContainer(c Container, opts Options) (provider.Source, []provider.Problem) {
	src := provider.Source{ID: c.ID, Name: describe(c)}
	skip := func(p provider.Problem) (provider.Source, []provider.Problem) {
		p.Source, p.SourceID, p.Severity, p.Skipped = src.Name, src.ID, provider.SeverityError, true
		p.DisablesRouter = labels.DeclaresRouter(c.Labels)
		return provider.Source{}, []provider.Problem{p}
	}

	knobs, err := labels.DecodeKnobs(c.Labels)
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
	if opts.Match != nil && !opts.Match(c.Labels) {
		return provider.Source{}, nil
	}

	running := c.State == "running"
	healthy := c.Health == "" || c.Health == "healthy"
	switch {
	case !running && !knobs.AllowNonRunning && !opts.AllowEmptyServices:
		return provider.Source{}, nil
	case running && !healthy && !opts.AllowEmptyServices:
		return provider.Source{}, nil
	}
	withServer := running && healthy

	// A label that does not decode drops its own resource; one that no
	// resource owns skips the container.
	conf, dropped, err := labels.DecodeResources(c.Labels)
	if err != nil {
		return skip(provider.LabelProblem(err))
	}
	src.TLS, src.TCP = conf.TLS, conf.TCP
	problems := provider.DropResourceProblems(src, dropped, provider.LabelProblem, "container", labels.Root)
	tcp := conf.TCP
	if tcp == nil || (len(tcp.Routers) == 0 && len(tcp.Services) == 0 && len(tcp.Middlewares) == 0) {
		if src.TLS != nil {
			src.TCP = nil
			return src, problems // TLS stores only
		}
		return provider.Source{}, problems
	}
	if len(tcp.Routers) == 0 && len(tcp.Services) == 0 {
		return src, problems
	}

	servers := func(name, labelPort string) ([]config.TCPServer, error) {
		if !withServer {
			return nil, nil
		}
		addr, err := serverAddress(c, knobs.Network, labelPort, opts)
		if err != nil {
			return nil, err
		}
		return []config.TCPServer{{Address: addr}}, nil
	}
	if p := provider.BuildTCPServiceConfiguration(src, serviceName(c), servers); p != nil {
		src, skipped := skip(*p)
		return src, append(problems, skipped...)
	}
	return src, append(problems, provider.BuildTCPRouterConfiguration(src, "container", labels.Root)...)
}

// serverAddress picks the container's address for one service.
func serverAddress(c Container, labelNetwork, labelPort string, opts Options) (string, error) {
	port := labelPort
	if port == "" {
		port = lowestTCPPort(c)
	}
	if port == "" && c.ImagePortsUnknown {
		port = unknownImagePort
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
		return "", fmt.Errorf("no IP address (network mode %q, networks %v)", c.NetworkMode, slices.Sorted(maps.Keys(c.Networks)))
	}
	return net.JoinHostPort(ip, port), nil
}

// lowestTCPPort returns the lowest exposed TCP port, or "".
func lowestTCPPort(c Container) string {
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
func hostBinding(c Container, port string) (ip, hostPort string, ok bool) {
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
func containerIP(c Container, network string) string {
	if network != "" {
		if ip := c.Networks[network]; ip != "" {
			return ip
		}
	}
	if c.NetworkMode == "host" {
		return "127.0.0.1"
	}
	for _, name := range slices.Sorted(maps.Keys(c.Networks)) {
		if ip := c.Networks[name]; ip != "" {
			return ip
		}
	}
	return ""
}

// serviceName is the automatic service name: "<service>-<project>" for a
// compose container, else the container name, normalised.
func serviceName(c Container) string {
	name := c.Name
	svc, proj := c.Labels[LabelComposeService], c.Labels[LabelComposeProject]
	if svc != "" && proj != "" {
		name = svc + "-" + proj
	}
	return provider.Normalize(name)
}
