package proxy

import (
	"crypto/tls"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy/accesslog"
	"github.com/tollgate-proxy/tollgate/proxy/health"
	"github.com/tollgate-proxy/tollgate/proxy/tlsconf"
)

// Resource statuses, as in Traefik's API.
const (
	StatusEnabled  = "enabled"
	StatusWarning  = "warning"
	StatusDisabled = "disabled"
)

// ResourceStatus is what compiling a router, service or middleware found:
// its status and its errors (and warnings), each with the field it is about.
type ResourceStatus struct {
	Err    []string `json:"error,omitempty"`
	Status string   `json:"status"`
	fields []string // fields[i] is the field Err[i] is about
}

// ErrorField returns the field the i-th error is about: a dotted path below
// the resource as written in files ("inFlightConn.amount", "rule",
// "loadBalancer.servers[0]"), or "" when it is about the whole resource.
func (r *ResourceStatus) ErrorField(i int) string {
	if i < len(r.fields) {
		return r.fields[i]
	}
	return ""
}

// addError records an error that disables the resource.
func (r *ResourceStatus) addError(field, msg string) {
	r.Err = append(r.Err, msg)
	r.fields = append(r.fields, field)
	r.Status = StatusDisabled
}

// addFieldError records err, about the field it names (config.FieldError)
// or about the whole resource, and disables the resource.
func (r *ResourceStatus) addFieldError(err error) { r.addError(config.FieldOf(err), err.Error()) }

// addWarning records a problem that leaves the resource serving, with
// status warning unless it is already disabled.
func (r *ResourceStatus) addWarning(field, msg string) {
	r.Err = append(r.Err, msg)
	r.fields = append(r.fields, field)
	if r.Status == StatusEnabled {
		r.Status = StatusWarning
	}
}

// RouterInfo is a router's configuration with what compiling it found.
type RouterInfo struct {
	*config.TCPRouter
	ResourceStatus
	Using []string `json:"using,omitempty"` // entry points it serves on
}

// ServiceInfo is a service's configuration with what compiling it found.
type ServiceInfo struct {
	*config.TCPService
	ResourceStatus
	UsedBy []string `json:"usedBy,omitempty"`
	// ServerStatus is each server's UP or DOWN as of this reload, for a
	// load balancer with a health check (State.ServerStatus is the status
	// now). Without one, every server is UP, and ServerStatus is nil: AllUp
	// makes what the API shows (a map kept for each service was a fifth of
	// what a compiled configuration holds per service).
	ServerStatus map[string]string `json:"serverStatus,omitempty"`
	// Capacity is a capped service's live slots and queue (filled by the API).
	Capacity *CapacityState `json:"capacity,omitempty"`
}

// AllUp returns, for a load balancer without a health check that compiled
// (not disabled), each of its servers UP, made on each call; nil for any
// other service.
func (si *ServiceInfo) AllUp() map[string]string {
	if si.Status == StatusDisabled || si.TCPService == nil || si.LoadBalancer == nil ||
		si.LoadBalancer.HealthCheck != nil || len(si.LoadBalancer.Servers) == 0 {
		return nil
	}
	m := make(map[string]string, len(si.LoadBalancer.Servers))
	for _, s := range si.LoadBalancer.Servers {
		m[s.Address] = health.UpDown(nil)
	}
	return m
}

// MiddlewareInfo is a middleware's configuration with what compiling it
// found: its kind's type name, and its Live state when it was built.
type MiddlewareInfo struct {
	*config.TCPMiddleware
	ResourceStatus
	UsedBy []string `json:"usedBy,omitempty"`
	Type   string   `json:"type,omitempty"`

	kind string // the kind's name when it was built (middleware.Built.Kind)
	live any    // middleware.Built.Live
}

// Live returns the middleware's live state (middleware.Built.Live): what
// the API shows of it (a middleware.Viewer, a middleware.ClientLister) and
// an upgrade hands over; nil for one not built or with none.
func (mi *MiddlewareInfo) Live() any { return mi.live }

// TransportInfo is what compiling a servers transport found: disabled, with
// its error, when no service can dial with it.
type TransportInfo struct {
	ResourceStatus
}

// Runtime is what one Compile produced: every resource with its status, keyed
// by qualified name. It is immutable once published.
type Runtime struct {
	Routers     map[string]*RouterInfo     `json:"tcpRouters"`
	Services    map[string]*ServiceInfo    `json:"tcpServices"`
	Middlewares map[string]*MiddlewareInfo `json:"tcpMiddlewares"`
	// ServersTransports are the configuration's tcp.serversTransports (not
	// in Traefik's rawdata, which has no TCP transports): the services that
	// use a disabled one are disabled too, with its error.
	ServersTransports map[string]*TransportInfo `json:"-"`
	// Certificates are the default TLS store's certificates as loaded (or
	// not) by this Compile, for GET /api/tls/certificates; empty when no
	// router terminates TLS.
	Certificates []CertificateInfo `json:"-"`
	// Wanted are the names each certificate resolver is to obtain
	// certificates for: the routers' HostSNI names and tls.domains.
	Wanted map[string][]string `json:"-"`
}

// A CertResolver obtains and renews the certificates of the routers that
// name it in tls.certResolver (internal/acme: ACME with TLS-ALPN-01 or
// HTTP-01).
type CertResolver interface {
	// Want is given, after every configuration, the names its routers
	// serve.
	Want(names []string)
	// Wants reports whether name is one of them.
	Wants(name string) bool
	// Certificate returns the valid certificate it holds for name, or nil.
	Certificate(name string) *tls.Certificate
	// Challenge returns the certificate answering a TLS-ALPN-01
	// validation hello.
	Challenge(hello *tls.ClientHelloInfo) (*tls.Certificate, error)
	// HTTPChallenge returns the entry point where it answers HTTP-01
	// validations, and the handler that answers them; "" and nil when it
	// answers none.
	HTTPChallenge() (entryPoint string, h http.Handler)
	// Held returns the certificates it holds, by name, and for each name
	// it wants and holds none of, why (being obtained, or the last error).
	Held() (certs map[string]*tls.Certificate, missing map[string]string)
}

// State is what outlives configuration generations: the middleware kinds'
// state (Keepers: limiters, allow-list counters, databases, bouncers),
// service counters, router gauges. Compile looks them up by qualified name.
// The zero value is not usable: use NewState.
type State struct {
	mws     *middleware.Keepers // each middleware kind's state, by qualified name
	offline bool                // tollgate check: middlewares read no file and reach nothing

	health health.Registry // load balancers' health checkers, by service (health.go)

	mu       sync.Mutex
	services map[string]*ServiceCounters
	routers  map[string]*atomic.Int64
	log      zerolog.Logger

	capacities       map[string]*capacity // capped services' slots and queues (capacity.go)
	tls              map[string]*TLSCounters
	defaultCert      tlsconf.DefaultCert         // generated once, when no default certificate is configured
	resolvers        map[string]bool             // certificatesResolvers of the static configuration
	acme             map[string]CertResolver     // their ACME, nil without; a nil map: not known (tollgate check)
	defaultTransport *config.TCPServersTransport // the static tcpServersTransport, or nil
	defaultEPs       []string                    // the entry points marked asDefault
	precedence       []string                    // providers.precedence
	observers        ConnObservers               // what closed connections report (package accesslog)
	routerStats      accesslog.Routers           // per-router bytes and durations
}

// NewState returns the state of a first generation, logging through log
// and built with o.
func NewState(log zerolog.Logger, o StateOptions) *State {
	s := &State{
		services:         make(map[string]*ServiceCounters),
		routers:          make(map[string]*atomic.Int64),
		log:              log,
		defaultTransport: o.DefaultTransport,
		defaultEPs:       append([]string(nil), o.DefaultEntryPoints...),
		precedence:       append([]string(nil), o.ProviderPrecedence...),
		observers:        o.Observers,
		offline:          o.Offline,
	}
	s.mws = middleware.NewKeepers(middleware.Options{Log: log, Stores: o.Stores})
	if o.CertResolvers != nil || o.CertResolverNames != nil {
		s.resolvers = map[string]bool{}
	}
	for _, n := range o.CertResolverNames {
		s.resolvers[n] = true
	}
	if o.CertResolvers != nil {
		s.acme = map[string]CertResolver{}
		for n, r := range o.CertResolvers {
			s.resolvers[n], s.acme[n] = true, r
		}
	}
	if len(o.Health) > 0 {
		s.health.Seed(o.Health)
	}
	return s
}

func getOrNew[T any](mu *sync.Mutex, m map[string]*T, name string) *T {
	mu.Lock()
	defer mu.Unlock()
	v, ok := m[name]
	if !ok {
		v = new(T)
		m[name] = v
	}
	return v
}

// Keepers are the middleware kinds' state that outlives reloads (limiter
// registries, databases, bouncers, counts), each reached through its
// kind's accessor (inflightconn.Limiters).
func (s *State) Keepers() *middleware.Keepers { return s.mws }

// ServiceCounters returns the counters of the named service.
func (s *State) ServiceCounters(name string) *ServiceCounters {
	return getOrNew(&s.mu, s.services, name)
}

// TLSCounters returns the handshake counters of the named router.
func (s *State) TLSCounters(name string) *TLSCounters {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tls == nil {
		s.tls = map[string]*TLSCounters{}
	}
	v, ok := s.tls[name]
	if !ok {
		v = new(TLSCounters)
		s.tls[name] = v
	}
	return v
}

// EachTLSCounters calls f for every router that terminated TLS.
func (s *State) EachTLSCounters(f func(router string, c *TLSCounters)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, c := range s.tls {
		f(n, c)
	}
}

// providerRank is the place of a qualified name's provider in
// providers.precedence: 0 for the first, len for one not named.
func (s *State) providerRank() func(name string) int {
	s.mu.Lock()
	prec := s.precedence
	s.mu.Unlock()
	return func(name string) int {
		_, prov, _ := strings.Cut(name, "@")
		for i, p := range prec {
			if strings.EqualFold(p, prov) {
				return i
			}
		}
		return len(prec)
	}
}

func (s *State) defaultEntryPoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.defaultEPs
}

// DefaultTransport is StateOptions.DefaultTransport, or nil.
func (s *State) DefaultTransport() *config.TCPServersTransport { return s.getDefaultTransport() }

func (s *State) getDefaultTransport() *config.TCPServersTransport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.defaultTransport
}

// certResolver says whether the named resolver exists, what obtains its
// certificates, and whether that is known (it is not for tollgate check).
func (s *State) certResolver(name string) (exists bool, r CertResolver, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resolvers[name], s.acme[name], s.acme != nil
}

// certResolvers returns the resolvers that obtain certificates, by name.
func (s *State) certResolvers() map[string]CertResolver {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]CertResolver{}
	for n, r := range s.acme {
		if r != nil {
			out[n] = r
		}
	}
	return out
}

// RouterOpen returns the open-connection gauge of the named router.
func (s *State) RouterOpen(name string) *atomic.Int64 {
	return getOrNew(&s.mu, s.routers, name)
}

// Each calls f for every named counter set, for metrics collection (the
// middlewares': Keepers().Counts).
func (s *State) Each(svc func(string, *ServiceCounters), router func(string, int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, c := range s.services {
		svc(n, c)
	}
	for n, c := range s.routers {
		router(n, c.Load())
	}
}
