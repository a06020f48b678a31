package proxy

import (
	"crypto/tls"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ipallowlist"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
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
	UsedBy       []string          `json:"usedBy,omitempty"`
	ServerStatus map[string]string `json:"serverStatus,omitempty"`
	// Capacity is a capped service's live slots and queue (filled by the API).
	Capacity *CapacityState `json:"capacity,omitempty"`
}

// MiddlewareInfo is a middleware's configuration with what compiling it found
// and, for inFlightConn and rateLimit, its live limiter state.
type MiddlewareInfo struct {
	*config.TCPMiddleware
	ResourceStatus
	UsedBy  []string            `json:"usedBy,omitempty"`
	Type    string              `json:"type,omitempty"`
	Limiter *inflightconn.State `json:"inFlight,omitempty"`
	// Store is the shared store an inFlightConn middleware keeps its budget
	// in (inFlightConn.store), as this replica sees it (filled by the API).
	Store *inflightconn.StoreState `json:"store,omitempty"`
	// RateLimiter is a rateLimit middleware's live state ("rateLimit" is its
	// configuration, from the embedded TCPMiddleware).
	RateLimiter *ratelimit.State `json:"rateLimitState,omitempty"`

	limiter     *inflightconn.Limiter
	rateLimiter *ratelimit.Limiter
}

// LiveLimiter returns the limiter behind an inFlightConn middleware, or nil.
func (m *MiddlewareInfo) LiveLimiter() *inflightconn.Limiter { return m.limiter }

// LiveRateLimiter returns the limiter behind a rateLimit middleware, or nil.
func (m *MiddlewareInfo) LiveRateLimiter() *ratelimit.Limiter { return m.rateLimiter }

// Runtime is what one Compile produced: every resource with its status, keyed
// by qualified name. It is immutable once published.
type Runtime struct {
	Routers     map[string]*RouterInfo     `json:"tcpRouters"`
	Services    map[string]*ServiceInfo    `json:"tcpServices"`
	Middlewares map[string]*MiddlewareInfo `json:"tcpMiddlewares"`
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

// State is what outlives configuration generations: limiters, allow-list and
// service counters, router gauges. Compile looks them up by qualified name.
// The zero value is not usable: use NewState.
type State struct {
	Limiters     inflightconn.Registry
	RateLimiters ratelimit.Registry

	health healthRegistry // load balancers' health checkers, by service (health.go)

	mu       sync.Mutex
	allow    map[string]*ipallowlist.Counters
	services map[string]*ServiceCounters
	routers  map[string]*atomic.Int64
	log      zerolog.Logger

	capacities       map[string]*capacity // capped services' slots and queues (capacity.go)
	tls              map[string]*TLSCounters
	defaultCert      defaultCert                 // generated once, when no default certificate is configured
	resolvers        map[string]bool             // certificatesResolvers of the static configuration
	acme             map[string]CertResolver     // their ACME, nil without; a nil map: not known (tollgate check)
	defaultTransport *config.TCPServersTransport // the static tcpServersTransport, or nil
	defaultEPs       []string                    // the entry points marked asDefault
	observers        ConnObservers               // what closed connections report (accesslog.go)
	routerStats      routerStats                 // per-router bytes and durations (metrics_conn.go)
}

// NewState returns empty state logging through log.
func NewState(log zerolog.Logger) *State {
	return &State{
		allow:    make(map[string]*ipallowlist.Counters),
		services: make(map[string]*ServiceCounters),
		routers:  make(map[string]*atomic.Int64),
		log:      log,
	}
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

// AllowCounters returns the counters of the named allow list.
func (s *State) AllowCounters(name string) *ipallowlist.Counters {
	return getOrNew(&s.mu, s.allow, name)
}

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

// SetCertResolvers names the certificatesResolvers of the static
// configuration: a router naming another is disabled. Call it before the
// first Apply.
func (s *State) SetCertResolvers(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resolvers = map[string]bool{}
	for _, n := range names {
		s.resolvers[n] = true
	}
}

// SetDefaultTransport sets the static configuration's tcpServersTransport:
// the transport of the services that name none, and default@internal. Nil
// (no static tcpServersTransport) leaves those services on DialTimeout and
// no keepalive probes. Call it before the first Apply.
func (s *State) SetDefaultTransport(tr *config.TCPServersTransport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defaultTransport = tr
}

// SetDefaultEntryPoints names the entry points marked asDefault: the
// routers that name no entry point listen on those (on every entry point
// when there are none). Call it before the first Apply.
func (s *State) SetDefaultEntryPoints(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defaultEPs = append([]string(nil), names...)
}

func (s *State) defaultEntryPoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.defaultEPs
}

// DefaultTransport is what SetDefaultTransport set, or nil.
func (s *State) DefaultTransport() *config.TCPServersTransport { return s.getDefaultTransport() }

func (s *State) getDefaultTransport() *config.TCPServersTransport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.defaultTransport
}

// SetCertResolver adds a certificatesResolvers entry of the static
// configuration with what obtains its certificates (nil: it has no ACME
// tlsChallenge or httpChallenge, and the routers naming it are served from the TLS store,
// with a warning). Call it before the first Apply.
func (s *State) SetCertResolver(name string, r CertResolver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resolvers == nil {
		s.resolvers = map[string]bool{}
	}
	if s.acme == nil {
		s.acme = map[string]CertResolver{}
	}
	s.resolvers[name] = true
	s.acme[name] = r
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

// Each calls f for every named counter set, for metrics collection.
func (s *State) Each(allow func(string, *ipallowlist.Counters), svc func(string, *ServiceCounters), router func(string, int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, c := range s.allow {
		allow(n, c)
	}
	for n, c := range s.services {
		svc(n, c)
	}
	for n, c := range s.routers {
		router(n, c.Load())
	}
}
