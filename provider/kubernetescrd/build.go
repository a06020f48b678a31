package kubernetescrd

import (
	"crypto/sha256"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tollgate-proxy/tollgate/config"
)

// cluster is what build reads about Kubernetes Services. The provider backs it
// with informer caches; tests with maps.
type cluster interface {
	// Service returns the Service namespace/name, or false when there is none
	// (or the namespace is not watched).
	Service(namespace, name string) (*corev1.Service, bool)
	// EndpointSlices returns the EndpointSlices of Service namespace/name
	// (label kubernetes.io/service-name), in any order.
	EndpointSlices(namespace, service string) []*discoveryv1.EndpointSlice
}

// build turns MiddlewareTCPs and IngressRouteTCPs into the provider's
// configuration (bare names, qualified @kubernetescrd by the watcher) and the
// list of problems, each naming the resource as Kind "namespace/name". It is
// pure: it modifies none of its inputs, and the same inputs in any order give
// the same result.
//
// Names follow Traefik's kubernetescrd provider: a MiddlewareTCP is
// `<namespace>-<name>`; each route of an IngressRouteTCP gives a router and a
// service both named `<namespace>-<name>-<first 10 bytes of
// sha256(match) in hex>`; a route with several Services gets a weighted service over
// `<that name>-<service>-<port>`.
//
// A route's middleware reference without "@" must name a MiddlewareTCP in the
// snapshot (in the reference's namespace, else the route's); cross-namespace
// references are allowed. A reference with "@" crosses providers and is kept
// as it is. A missing middleware, a missing Service, an unknown port or a
// Service with no ready endpoint is a problem; the router is still emitted,
// so the API shows it disabled with the reason while every other route
// applies. Servers are the ready addresses (a nil ready condition counts as
// ready, as the EndpointSlice API says) of the Service's EndpointSlices on the
// port whose name matches the Service port's.
func build(mws []MiddlewareTCP, routes []IngressRouteTCP, k cluster) (*config.Dynamic, []string) {
	return buildAll(mws, routes, tlsInputs{}, k, options{})
}

// options are the provider's settings that change what a build makes.
type options struct {
	// allowCrossNamespace is providers.kubernetesCRD.allowCrossNamespace:
	// unless set, a route may name middlewares, Services, TLS options and
	// servers transports of its own namespace only, as in Traefik. A
	// reference to another namespace is a problem and fails closed: the
	// route (or that Service) is not served.
	allowCrossNamespace bool
	// allowEmptyServices keeps a Service with no ready endpoint as a load
	// balancer with no server (its connections are closed) instead of a
	// problem; allowExternalNameServices routes to an ExternalName
	// Service's name; nativeLBByDefault is nativeLB for a route service that
	// does not say. All as in Traefik, off by default.
	allowEmptyServices, allowExternalNameServices, nativeLBByDefault bool
}

// crossNamespace is the problem with a reference of a resource in
// namespace from to kind ns/name, or nil when it is allowed.
func (o options) crossNamespace(from, kind, ns, name string) error {
	if o.allowCrossNamespace || ns == from {
		return nil
	}
	return fmt.Errorf("%s %q is not in the IngressRouteTCP's namespace %q (set providers.kubernetesCRD.allowCrossNamespace to allow it)", kind, ns+"/"+name, from)
}

// buildAll is build with the TLS resources too (tls.go): the servers
// transports, TLS options and stores, and the certificates of the routes'
// secretName.
func buildAll(mws []MiddlewareTCP, routes []IngressRouteTCP, tin tlsInputs, k cluster, opt options) (*config.Dynamic, []string) {
	tcp := &config.TCPConfiguration{
		Routers:     map[string]*config.TCPRouter{},
		Services:    map[string]*config.TCPService{},
		Middlewares: map[string]*config.TCPMiddleware{},
	}
	tls := &config.TLSConfiguration{}
	problems := buildTLS(tin, k, tcp, tls)

	mws = sortedMiddlewares(mws)
	for _, m := range mws {
		id := makeID(m.Namespace, m.Name)
		spec := m.Spec
		// Ranges (a negative amount) are the middleware's own rule: the proxy
		// disables the middleware, and its routers, with the error.
		tcp.Middlewares[id] = copyMiddleware(&spec)
	}

	routes = sortedRoutes(routes)
	for _, ir := range routes {
		desc := fmt.Sprintf("IngressRouteTCP %q", ir.Namespace+"/"+ir.Name)
		if len(ir.Spec.Routes) == 0 {
			problems = append(problems, desc+": no routes")
		}
		for i, route := range ir.Spec.Routes {
			rdesc := fmt.Sprintf("%s routes[%d]", desc, i)
			if route.Match == "" {
				problems = append(problems, rdesc+": empty match rule")
				continue
			}
			key := makeID(ir.Namespace, makeServiceKey(route.Match, ir.Name))

			mwNames, missing, refused := routeMiddlewares(ir, route, tcp, opt)
			for _, m := range missing {
				problems = append(problems, fmt.Sprintf("%s: MiddlewareTCP %q not found", rdesc, m))
			}
			if refused != nil {
				// Served without that middleware, the route would admit what
				// it is meant to limit: it is left out (fail closed).
				problems = append(problems, fmt.Sprintf("%s: %v: the route is not served", rdesc, refused))
				continue
			}

			if len(route.Services) == 0 {
				problems = append(problems, rdesc+": no services")
			}
			var rtls *config.RouterTCPTLSConfig
			if ir.Spec.TLS != nil {
				var cert *config.CertAndStores
				var err error
				if rtls, cert, err = routeTLS(k, ir, opt); err != nil {
					// Without its certificate the route would serve another
					// one: it is left out (fail closed).
					problems = append(problems, fmt.Sprintf("%s: %v: the route is not served", rdesc, err))
					continue
				}
				if cert != nil {
					tls.Certificates = append(tls.Certificates, cert)
				}
			}
			for _, err := range addRouteServices(tcp, key, k, ir.Namespace, route.Services, opt) {
				problems = append(problems, fmt.Sprintf("%s: %v", rdesc, err))
			}

			r := &config.TCPRouter{
				EntryPoints: append([]string(nil), ir.Spec.EntryPoints...),
				Middlewares: mwNames,
				Rule:        route.Match,
				RuleSyntax:  route.Syntax,
				Priority:    route.Priority,
				Service:     key,
			}
			r.TLS = rtls
			if _, dup := tcp.Routers[key]; dup {
				problems = append(problems, fmt.Sprintf("%s: another route of the same IngressRouteTCP has match %q; the last one wins", rdesc, route.Match))
			}
			tcp.Routers[key] = r
		}
	}
	out := &config.Dynamic{TCP: tcp}
	if len(tls.Certificates) > 0 || len(tls.Options) > 0 || len(tls.Stores) > 0 {
		out.TLS = tls
	}
	return out, problems
}

// routeMiddlewares resolves the middleware references of a route of ir to
// the IDs its router lists, and the references (ns/name) not among the
// middlewares tcp has. A reference to another namespace that opt does not
// allow stops the resolution: refused is why.
func routeMiddlewares(ir IngressRouteTCP, route RouteTCP, tcp *config.TCPConfiguration, opt options) (ids, missing []string, refused error) {
	for _, ref := range route.Middlewares {
		if strings.Contains(ref.Name, "@") {
			ids = append(ids, ref.Name)
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = ir.Namespace
		}
		if err := opt.crossNamespace(ir.Namespace, "MiddlewareTCP", ns, ref.Name); err != nil {
			return ids, missing, err
		}
		id := makeID(ns, ref.Name)
		if _, ok := tcp.Middlewares[id]; !ok {
			missing = append(missing, ns+"/"+ref.Name)
		}
		ids = append(ids, id)
	}
	return ids, missing, nil
}

// addRouteServices adds to tcp the service key of a route in namespace ns:
// the load balancer of its one Service, or a weighted round robin over one
// load balancer per Service (key-<name>-<port>). A Service that does not
// resolve is left out, with its error.
func addRouteServices(tcp *config.TCPConfiguration, key string, k cluster, ns string, services []ServiceTCP, opt options) []error {
	var errs []error
	for _, s := range services {
		svc, err := loadBalancer(k, ns, s, opt)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(services) == 1 {
			tcp.Services[key] = svc
			break
		}
		sub := fmt.Sprintf("%s-%s-%s", key, s.Name, s.Port.String())
		tcp.Services[sub] = svc
		w := config.TCPWRRService{Name: sub}
		if s.Weight != nil {
			v := *s.Weight
			w.Weight = &v
		}
		if tcp.Services[key] == nil {
			tcp.Services[key] = &config.TCPService{Weighted: &config.TCPWeightedRoundRobin{}}
		}
		tcp.Services[key].Weighted.Services = append(tcp.Services[key].Weighted.Services, w)
	}
	return errs
}

// loadBalancer resolves one route Service to a load balancer over its ready
// endpoints (or its cluster IP with nativeLB).
func loadBalancer(k cluster, parentNS string, s ServiceTCP, opt options) (*config.TCPService, error) {
	ns := s.Namespace
	if ns == "" {
		ns = parentNS
	}
	if err := opt.crossNamespace(parentNS, "Service", ns, s.Name); err != nil {
		return nil, err
	}
	tr, err := transportRef(parentNS, s.ServersTransport, opt)
	if err != nil {
		return nil, err
	}
	ref := fmt.Sprintf("Service %q port %s", ns+"/"+s.Name, s.Port.String())
	svc, ok := k.Service(ns, s.Name)
	if !ok {
		return nil, fmt.Errorf("%s: service not found", ref)
	}
	external := svc.Spec.Type == corev1.ServiceTypeExternalName
	if external && !opt.allowExternalNameServices {
		return nil, fmt.Errorf("%s: ExternalName services are not allowed (providers.kubernetesCRD.allowExternalNameServices)", ref)
	}
	port, ok := servicePort(svc, s.Port)
	if !ok {
		return nil, fmt.Errorf("%s: the service has no such port (ports: %s)", ref, describePorts(svc))
	}

	var servers []config.TCPServer
	nativeLB := opt.nativeLBByDefault
	if s.NativeLB != nil {
		nativeLB = *s.NativeLB
	}
	switch {
	case external:
		servers = append(servers, config.TCPServer{Address: net.JoinHostPort(svc.Spec.ExternalName, strconv.Itoa(int(port.Port)))})
	case nativeLB:
		ip := svc.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone {
			return nil, fmt.Errorf("%s: nativeLB needs a cluster IP, the service has %q", ref, ip)
		}
		servers = append(servers, config.TCPServer{Address: net.JoinHostPort(ip, strconv.Itoa(int(port.Port)))})
	default:
		servers = endpointServers(k.EndpointSlices(ns, s.Name), port.Name)
		if len(servers) == 0 && !opt.allowEmptyServices {
			return nil, fmt.Errorf("%s: no ready endpoints", ref)
		}
	}

	if s.TLS {
		for i := range servers {
			servers[i].TLS = true
		}
	}
	lb := &config.TCPServersLoadBalancer{Servers: servers, ServersTransport: tr}
	if s.ProxyProtocol != nil {
		pp := config.ProxyProtocol{}
		pp.SetDefaults()
		if s.ProxyProtocol.Version != 0 {
			pp.Version = s.ProxyProtocol.Version
		}
		lb.ProxyProtocol = &pp
	}
	if s.TerminationDelay != nil {
		d := *s.TerminationDelay
		lb.TerminationDelay = &d
	}
	return &config.TCPService{LoadBalancer: lb}, nil
}

// servicePort finds the Service port a route names: by number, or by name.
func servicePort(svc *corev1.Service, want intstr.IntOrString) (corev1.ServicePort, bool) {
	for _, p := range svc.Spec.Ports {
		if want.Type == intstr.Int && p.Port == want.IntVal {
			return p, true
		}
		if want.Type == intstr.String && p.Name == want.StrVal {
			return p, true
		}
	}
	return corev1.ServicePort{}, false
}

func describePorts(svc *corev1.Service) string {
	if len(svc.Spec.Ports) == 0 {
		return "none"
	}
	var s []string
	for _, p := range svc.Spec.Ports {
		if p.Name != "" {
			s = append(s, fmt.Sprintf("%s=%d", p.Name, p.Port))
		} else {
			s = append(s, strconv.Itoa(int(p.Port)))
		}
	}
	return strings.Join(s, ", ")
}

// endpointServers lists the ready addresses of slices on the port named
// portName, each address once, sorted so that the result does not depend on
// the order of slices or endpoints.
func endpointServers(slices []*discoveryv1.EndpointSlice, portName string) []config.TCPServer {
	seen := map[string]bool{}
	var addrs []string
	for _, sl := range slices {
		var port int32
		for _, p := range sl.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			if name == portName && p.Port != nil {
				port = *p.Port
				break
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				hp := net.JoinHostPort(a, strconv.Itoa(int(port)))
				if !seen[hp] {
					seen[hp] = true
					addrs = append(addrs, hp)
				}
			}
		}
	}
	sort.Strings(addrs)
	servers := make([]config.TCPServer, 0, len(addrs))
	for _, a := range addrs {
		servers = append(servers, config.TCPServer{Address: a})
	}
	return servers
}

// makeServiceKey is Traefik's router/service key: the resource name and the
// first 10 bytes of the rule's SHA-256 as 20 hex digits (%.10x on bytes).
func makeServiceKey(rule, name string) string {
	sum := sha256.Sum256([]byte(rule))
	return fmt.Sprintf("%s-%.10x", name, sum[:])
}

// makeID is Traefik's `<namespace>-<name>`.
func makeID(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "-" + name
}

func copyMiddleware(m *config.TCPMiddleware) *config.TCPMiddleware {
	out := &config.TCPMiddleware{}
	if m.InFlightConn != nil {
		ic := *m.InFlightConn
		if ic.IPv6Subnet != nil {
			v := *ic.IPv6Subnet
			ic.IPv6Subnet = &v
		}
		out.InFlightConn = &ic
	}
	if m.IPAllowList != nil {
		out.IPAllowList = &config.TCPIPAllowList{SourceRange: append([]string(nil), m.IPAllowList.SourceRange...)}
	}
	if m.IPWhiteList != nil { // Traefik v3's MiddlewareTCP has it, deprecated: compiled as ipAllowList, with a warning
		out.IPWhiteList = &config.TCPIPAllowList{SourceRange: append([]string(nil), m.IPWhiteList.SourceRange...)}
	}
	if m.RateLimit != nil {
		rl := *m.RateLimit
		if rl.Period != nil {
			v := *rl.Period
			rl.Period = &v
		}
		if rl.Burst != nil {
			v := *rl.Burst
			rl.Burst = &v
		}
		if rl.IPv6Subnet != nil {
			v := *rl.IPv6Subnet
			rl.IPv6Subnet = &v
		}
		out.RateLimit = &rl
	}
	if g := m.GeoIP; g != nil {
		out.GeoIP = &config.TCPGeoIP{
			Databases:      slices.Clone(g.Databases),
			AllowCountries: slices.Clone(g.AllowCountries), AllowContinents: slices.Clone(g.AllowContinents), AllowASNs: slices.Clone(g.AllowASNs),
			DenyCountries: slices.Clone(g.DenyCountries), DenyContinents: slices.Clone(g.DenyContinents), DenyASNs: slices.Clone(g.DenyASNs),
			Unknown: g.Unknown, Private: g.Private, Loopback: g.Loopback,
		}
	}
	if c := m.CrowdSec; c != nil {
		cs := *c
		if c.UpdateInterval != nil {
			v := *c.UpdateInterval
			cs.UpdateInterval = &v
		}
		if c.TLS != nil {
			v := *c.TLS
			cs.TLS = &v
		}
		out.CrowdSec = &cs
	}
	return out
}

func sortedMiddlewares(in []MiddlewareTCP) []MiddlewareTCP {
	out := append([]MiddlewareTCP(nil), in...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func sortedRoutes(in []IngressRouteTCP) []IngressRouteTCP {
	out := append([]IngressRouteTCP(nil), in...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}
