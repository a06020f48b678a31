package proxy

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/quote"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy/accesslog"
	"github.com/tollgate-proxy/tollgate/proxy/health"
	"github.com/tollgate-proxy/tollgate/proxy/rule"
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
	"github.com/tollgate-proxy/tollgate/proxy/tlsconf"
)

// Compile turns a merged, qualified configuration into one routing table per
// entry point, plus the runtime view of every resource. It never modifies
// cfg. A broken router, service or middleware is recorded with an error that
// names it and is left out; everything else is compiled. State that must
// outlive the generation (limiters, counters) comes from st.
func Compile(cfg *config.TCPConfiguration, entryPoints []string, st *State, log zerolog.Logger) (map[string]*Table, *Runtime) {
	if cfg == nil {
		cfg = &config.TCPConfiguration{}
	}
	rt := &Runtime{ // sized: growing maps of 100,000 entries costs as much as filling them
		Routers:           make(map[string]*RouterInfo, len(cfg.Routers)),
		Services:          make(map[string]*ServiceInfo, len(cfg.Services)),
		Middlewares:       make(map[string]*MiddlewareInfo, len(cfg.Middlewares)),
		ServersTransports: make(map[string]*TransportInfo, len(cfg.ServersTransports)),
	}
	c := compiler{cfg: cfg, st: st, rt: rt, log: log,
		mws: make(map[string]tcp.Middleware, len(cfg.Middlewares)), svcs: make(map[string]tcp.Handler, len(cfg.Services)), building: map[string]bool{},
		serverTLS: map[string]tlsOrErr{}, transports: map[string]transportOrErr{}}

	for _, name := range sortedKeys(cfg.Middlewares) {
		c.middleware(name)
	}
	for _, name := range sortedKeys(cfg.ServersTransports) {
		info := &TransportInfo{ResourceStatus{Status: StatusEnabled}}
		if v, _ := c.transport(name); v.err != nil {
			info.addFieldError(v.err)
		}
		rt.ServersTransports[name] = info
	}
	for _, name := range sortedKeys(cfg.Services) {
		c.service(name)
	}

	// A router that names no entry point listens on the asDefault ones, or
	// on every one when none is (Traefik's rule).
	defaults := entryPoints
	if d := st.defaultEntryPoints(); len(d) > 0 {
		defaults = d
	}
	routes := c.placeRouters(entryPoints, defaults)

	var acmeResolvers []CertResolver
	byName := st.certResolvers()
	for _, n := range sortedKeys(byName) {
		acmeResolvers = append(acmeResolvers, byName[n])
	}
	tables := make(map[string]*Table, len(entryPoints))
	rank := st.providerRank()
	for _, ep := range entryPoints {
		rs := routes[ep]
		slices.SortStableFunc(rs, func(a, b *route) int {
			if a.priority != b.priority {
				return cmp.Compare(b.priority, a.priority)
			}
			if ra, rb := rank(a.name), rank(b.name); ra != rb {
				return cmp.Compare(ra, rb) // providers.precedence
			}
			return strings.Compare(a.name, b.name)
		})
		t := newTable(rs, func(r *route) bool {
			// c.router refused a rule that reads the hello without a TLS
			// section: a TLS section means passthrough or termination, both
			// routed by the ClientHello.
			return cfg.Routers[r.name].TLS != nil
		})
		for _, r := range rs {
			if rt := cfg.Routers[r.name]; r.terminates || rt != nil && rt.TLS != nil {
				// Terminated or passed through, TLS follows a PostgreSQL
				// SSLRequest: it is answered (postgres.go).
				t.starttls = true
			}
		}
		if t.peek {
			t.acme = acmeResolvers
		}
		for _, r := range acmeResolvers {
			if on, _ := r.HTTPChallenge(); on == ep {
				t.http01 = append(t.http01, r)
			}
		}
		tables[ep] = t
	}
	if c.store != nil {
		rt.Certificates = c.store.Infos
	}
	// Health checkers of services this configuration no longer has stop.
	st.health.Sweep()
	// UsedBy is appended to as references are met, duplicates and all: one
	// sort and compaction here instead of a scan per reference, which was
	// quadratic in the routers sharing a service or middleware.
	for _, info := range rt.Middlewares {
		info.UsedBy = sortedSet(info.UsedBy)
	}
	for _, info := range rt.Services {
		info.UsedBy = sortedSet(info.UsedBy)
	}
	return tables, rt
}

// placeRouters compiles every router and files each on the entry points it
// listens on (defaults when it names none), recording what it uses.
func (c *compiler) placeRouters(entryPoints, defaults []string) map[string][]*route {
	routes := map[string][]*route{}
	for _, name := range sortedKeys(c.cfg.Routers) {
		r := c.cfg.Routers[name]
		info := &RouterInfo{TCPRouter: r, ResourceStatus: ResourceStatus{Status: StatusEnabled}}
		c.rt.Routers[name] = info
		if r == nil {
			info.TCPRouter = &config.TCPRouter{}
			info.addError("", "empty router")
			continue
		}
		built := c.router(name, r, info)
		if built == nil {
			continue
		}
		eps := r.EntryPoints
		if len(eps) == 0 {
			eps = defaults
		}
		if built.closing {
			// A terminating router whose TLS settings are broken keeps its
			// place, closing what it matches: its clients must not fall
			// through to a catch-all route (Traefik does the same).
			for _, ep := range eps {
				if slices.Contains(entryPoints, ep) {
					routes[ep] = append(routes[ep], built)
				}
			}
			continue
		}
		for _, ep := range eps {
			if !slices.Contains(entryPoints, ep) {
				info.addWarning("entryPoints", fmt.Sprintf("entry point %s does not exist", quote.Q(ep)))
				continue
			}
			info.Using = append(info.Using, ep)
			routes[ep] = append(routes[ep], built)
		}
		if len(info.Using) == 0 {
			info.Status = StatusDisabled
		}
	}
	return routes
}

type compiler struct {
	cfg      *config.TCPConfiguration
	st       *State
	rt       *Runtime
	log      zerolog.Logger
	logp     *zerolog.Logger           // log, shared by the services' load balancers
	mws      map[string]tcp.Middleware // built, enabled middlewares
	svcs     map[string]tcp.Handler    // built, enabled services
	building map[string]bool           // services being built (weighted cycles)
	capped   []*capacity               // capped services of this configuration

	store      *tlsconf.Store // the default TLS store, read once a router terminates
	serverTLS  map[string]tlsOrErr
	transports map[string]transportOrErr
	// wanted holds the names in rt.Wanted, per resolver, so that adding
	// one is not a scan of those already there.
	wanted map[string]map[string]bool
	// rules are the rules parsed, by text: routers with the same rule
	// share it (a rule is read-only once parsed).
	rules map[string]ruleOrErr
}

type ruleOrErr struct {
	r   *rule.Rule
	err error
}

// parseRule returns the parsed rule of text, parsed once per Compile.
func (c *compiler) parseRule(text string) (*rule.Rule, error) {
	if v, ok := c.rules[text]; ok {
		return v.r, v.err
	}
	r, err := rule.Parse(text)
	if c.rules == nil {
		c.rules = map[string]ruleOrErr{}
	}
	c.rules[text] = ruleOrErr{r, err}
	return r, err
}

type tlsOrErr struct {
	conf *tls.Config
	err  error
}

type transportOrErr struct {
	tr  *config.TCPServersTransport
	tls *tls.Config
	err error
}

// certs returns the configuration's default TLS store, read on first use.
func (c *compiler) certs() *tlsconf.Store {
	if c.store == nil {
		c.store = tlsconf.NewStore(c.cfg.TLS, c.st.defaultCert.Get)
		c.generatedDefault(c.store)
	}
	return c.store
}

// generatedDefault reads the default store's defaultGeneratedCert (without
// a defaultCertificate, which wins): its resolver is to obtain domain.main
// and its sans, and the store's default certificate is main's once the
// resolver holds it. A resolver that does not exist or obtains nothing
// leaves the generated self-signed default, said in the certificate list
// (/api/tls/certificates).
func (c *compiler) generatedDefault(store *tlsconf.Store) {
	if c.cfg.TLS == nil {
		return
	}
	st, ok := c.cfg.TLS.Stores["default"]
	if !ok || st.DefaultCertificate != nil || st.DefaultGeneratedCert == nil {
		return
	}
	g := st.DefaultGeneratedCert
	fail := func(msg string) {
		store.Infos = append(store.Infos, CertificateInfo{Source: "tls.stores.default.defaultGeneratedCert", Error: msg, Stores: []string{"default"}, Default: true})
	}
	if g.Resolver == "" || g.Domain == nil || strings.TrimSpace(g.Domain.Main) == "" {
		fail("set resolver and domain.main: the generated self-signed certificate stays the default")
		return
	}
	exists, cr, known := c.st.certResolver(g.Resolver)
	switch {
	case !exists:
		fail(fmt.Sprintf("certificate resolver %s does not exist (certificatesResolvers.%s): the generated self-signed certificate stays the default", quote.Q(g.Resolver), quote.Text(g.Resolver)))
		return
	case cr == nil:
		if known {
			fail(fmt.Sprintf("certificate resolver %s obtains nothing (no acme with tlsChallenge, httpChallenge or dnsChallenge): the generated self-signed certificate stays the default", quote.Q(g.Resolver)))
		}
		return
	}
	main := strings.ToLower(strings.TrimSpace(g.Domain.Main))
	if strings.HasPrefix(main, "*") {
		fail(fmt.Sprintf("domain.main %s: a wildcard certificate needs the DNS-01 challenge, which tollgate does not answer: the generated self-signed certificate stays the default", main))
		return
	}
	for _, n := range append([]string{main}, g.Domain.SANs...) {
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" && !strings.HasPrefix(n, "*") {
			c.want(g.Resolver, n)
		}
	}
	store.DefaultFrom(cr, main)
}

// options returns the handshake settings of the named TLS options, built
// once per Compile. `default` exists even when not configured (crypto/tls's
// defaults, TLS 1.2 at least); any other unknown name is an error naming it.
func (c *compiler) options(name string) (*tls.Config, error) {
	if v, ok := c.serverTLS[name]; ok {
		return v.conf, v.err
	}
	var o config.TLSOptions
	var found bool
	if c.cfg.TLS != nil {
		o, found = c.cfg.TLS.Options[name]
	}
	var v tlsOrErr
	if !found && name != "default" {
		v.err = fmt.Errorf("TLS options %s do not exist (tls.options)", quote.Q(name))
	} else {
		v.conf, v.err = tlsconf.ServerConfig(name, o, c.certs(), fullHandshake)
	}
	c.serverTLS[name] = v
	return v.conf, v.err
}

// transport returns the named servers transport, with its TLS client
// settings built, once per Compile.
func (c *compiler) transport(name string) (transportOrErr, bool) {
	if v, ok := c.transports[name]; ok {
		return v, true
	}
	field := "tcp.serversTransports." + name
	tr, ok := c.cfg.ServersTransports[name]
	if !ok && name == config.DefaultTransportName {
		// The static tcpServersTransport; without one, Traefik's defaults.
		tr, ok, field = c.st.getDefaultTransport(), true, "tcpServersTransport"
	}
	if !ok {
		return transportOrErr{}, false
	}
	v := transportOrErr{tr: tr}
	if tr == nil {
		v.tr = &config.TCPServersTransport{}
	}
	v.err = validTransport(v.tr)
	if v.err == nil && v.tr.TLS != nil {
		v.tls, v.err = tlsconf.ClientConfig(field, v.tr.TLS)
	}
	c.transports[name] = v
	return v, true
}

func (c *compiler) middleware(name string) {
	m := c.cfg.Middlewares[name]
	info := &MiddlewareInfo{TCPMiddleware: m, ResourceStatus: ResourceStatus{Status: StatusEnabled}}
	c.rt.Middlewares[name] = info
	if m == nil {
		info.TCPMiddleware = &config.TCPMiddleware{}
		info.addError("", "empty middleware")
		return
	}
	b, err := middleware.New(middleware.Spec{Name: name, Log: c.log, Offline: c.st.offline, Keepers: c.st.mws}, m)
	if b.Kind != "" {
		info.Type = strings.ToUpper(b.Kind[:1]) + b.Kind[1:]
	}
	for _, w := range b.Warnings {
		info.addWarning(w.Field, w.Message)
	}
	if err != nil {
		info.addFieldError(err)
		return
	}
	info.kind, info.live = b.Kind, b.Live
	c.mws[name] = b.Middleware
}

// service builds (once) the named service and returns its handler, or nil
// when it is missing or broken.
func (c *compiler) service(name string) tcp.Handler {
	if h, ok := c.svcs[name]; ok {
		return h
	}
	if info, ok := c.rt.Services[name]; ok && info.Status == StatusDisabled {
		return nil
	}
	s, ok := c.cfg.Services[name]
	if !ok {
		return nil
	}
	info := &ServiceInfo{TCPService: s, ResourceStatus: ResourceStatus{Status: StatusEnabled}}
	c.rt.Services[name] = info
	if s == nil {
		info.TCPService = &config.TCPService{}
		info.addError("", "empty service")
		return nil
	}
	if err := s.Validate(); err != nil {
		info.addFieldError(err)
		return nil
	}
	var h tcp.Handler
	switch {
	case s.LoadBalancer != nil:
		h = c.loadBalancer(name, s.LoadBalancer, info)
	case s.Weighted != nil:
		if c.building[name] {
			info.addError("weighted.services", "weighted service refers to itself through its members")
			return nil
		}
		c.building[name] = true
		h = c.weighted(name, s.Weighted, info)
		delete(c.building, name)
	}
	if h != nil {
		c.svcs[name] = h
	}
	return h
}

// sharedLog returns the logger every load balancer of this Compile points to.
func (c *compiler) sharedLog() *zerolog.Logger {
	if c.logp == nil {
		l := c.log // a copy: a pointer into c would keep the compiler's maps alive
		c.logp = &l
	}
	return c.logp
}

func (c *compiler) loadBalancer(name string, lb *config.TCPServersLoadBalancer, info *ServiceInfo) tcp.Handler {
	h := &loadBalancer{
		name:  name,
		delay: time.Duration(config.DefaultTerminationDelayMillis) * time.Millisecond,
		// Traefik's defaults, for a service without a transport too
		// (its default@internal has them).
		dialTimeout: TransportDialTimeout,
		keepAlive:   TransportKeepAlive,
		counters:    c.st.ServiceCounters(name),
		log:         c.sharedLog(), // the service name is added at the (rare) log sites: no logger per service
	}
	// A service that names no transport takes the static tcpServersTransport
	// when there is one (Traefik's default@internal).
	trName := lb.ServersTransport
	if trName == "" && c.st.getDefaultTransport() != nil {
		trName = config.DefaultTransportName
	}
	if trName != "" && !c.applyTransport(h, trName, info) {
		return nil
	}
	// The deprecated fields of the load balancer keep working for a service
	// that names no transport; a named transport's values apply instead, as
	// in Traefik (docs/reference/servers-transports.md).
	if lb.TerminationDelay != nil {
		if lb.ServersTransport == "" {
			h.delay = time.Duration(*lb.TerminationDelay) * time.Millisecond
			info.addWarning("loadBalancer.terminationDelay", "loadBalancer.terminationDelay is deprecated: set terminationDelay in a servers transport (tcp.serversTransports) and name it in loadBalancer.serversTransport")
		} else {
			info.addWarning("loadBalancer.terminationDelay", fmt.Sprintf("loadBalancer.terminationDelay is deprecated and ignored: the service names servers transport %s, whose terminationDelay applies", quote.Q(lb.ServersTransport)))
		}
	}
	if lb.ProxyProtocol != nil {
		if lb.ServersTransport == "" {
			h.ppVer = byte(lb.ProxyProtocol.Version)
			info.addWarning("loadBalancer.proxyProtocol", "loadBalancer.proxyProtocol is deprecated: set proxyProtocol in a servers transport (tcp.serversTransports) and name it in loadBalancer.serversTransport")
		} else {
			info.addWarning("loadBalancer.proxyProtocol", fmt.Sprintf("loadBalancer.proxyProtocol is deprecated and ignored: the service names servers transport %s, whose proxyProtocol applies (none if it sets none)", quote.Q(lb.ServersTransport)))
		}
	}
	if o := c.st.connObservers(); o.Any() {
		h.obs = accesslog.New(o, &c.st.routerStats)
	}
	var ups []*atomic.Bool // health of each server; nil without a health check
	if lb.HealthCheck != nil {
		spec, warn, err := health.NewSpec(lb.HealthCheck)
		if warn != nil {
			info.addWarning(config.FieldOf(warn), warn.Error())
		}
		addrs := make([]string, len(lb.Servers))
		for i, s := range lb.Servers {
			addrs[i] = s.Address
			if _, terr := spec.Target(s.Address); err == nil && terr != nil {
				err = terr
			}
		}
		if err != nil {
			info.addFieldError(err)
			return nil
		}
		var onUp func()
		if capped(lb) {
			onUp = c.st.capacity(name).kick // a server back UP takes waiting connections
		}
		ups = c.st.health.Acquire(name, spec, addrs, *h.log, onUp)
	}
	if ups != nil { // without a health check every server is UP: ServiceInfo.AllUp
		info.ServerStatus = make(map[string]string, len(lb.Servers))
	}
	h.servers = make([]server, 0, len(lb.Servers))
	for i, s := range lb.Servers {
		srv := newServer(s.Address)
		srv.tls = s.TLS
		h.goroutines = h.goroutines || s.TLS
		if ups != nil {
			srv.up = ups[i]
			info.ServerStatus[s.Address] = health.UpDown(srv.up) // as of this reload; State.ServerStatus is live
		}
		h.servers = append(h.servers, srv)
	}
	if len(h.servers) == 0 {
		info.addWarning("loadBalancer.servers", "service has no servers: its connections are closed")
	}
	if capped(lb) {
		h.cap = c.st.capacity(name)
		h.cap.update(h.servers, lb)
		c.capped = append(c.capped, h.cap)
	}
	return h
}

// applyTransport sets h's dialing from the servers transport trName, or
// records on info why it cannot and returns false.
func (c *compiler) applyTransport(h *loadBalancer, trName string, info *ServiceInfo) bool {
	v, ok := c.transport(trName)
	switch {
	case !ok:
		info.addError("loadBalancer.serversTransport", fmt.Sprintf("servers transport %s does not exist (tcp.serversTransports)", quote.Q(trName)))
		return false
	case v.err != nil:
		info.addError("loadBalancer.serversTransport", fmt.Sprintf("servers transport %s: %s", quote.Q(trName), v.err))
		return false
	}
	tr := v.tr
	h.dialTimeout = TransportDialTimeout
	if tr.DialTimeout > 0 {
		h.dialTimeout = time.Duration(tr.DialTimeout)
	}
	h.keepAlive = TransportKeepAlive
	if tr.DialKeepAlive != 0 {
		h.keepAlive = time.Duration(tr.DialKeepAlive)
	}
	if tr.TerminationDelay != nil {
		h.delay = time.Duration(*tr.TerminationDelay)
	}
	if tr.ProxyProtocol != nil {
		h.ppVer = byte(tr.ProxyProtocol.Version)
	}
	h.tlsConf = v.tls
	return true
}

func (c *compiler) weighted(name string, w *config.TCPWeightedRoundRobin, info *ServiceInfo) tcp.Handler {
	h := &weighted{}
	if w.HealthCheck != nil {
		// Traefik's rule: a weighted service with healthCheck needs every
		// member to report its health, so each has a health check of its own
		// (and a weighted member requires the same of its members).
		for _, m := range w.Services {
			if s := c.cfg.Services[m.Name]; s != nil && !healthChecked(s) {
				info.addError("weighted.healthCheck", fmt.Sprintf("weighted.healthCheck: member %s has no health check: with healthCheck on a weighted service, each of its services needs one (loadBalancer.healthCheck, or weighted.healthCheck), as in Traefik", quote.Q(m.Name)))
				return nil
			}
		}
	}
	for _, m := range w.Services {
		weight := 1
		if m.Weight != nil {
			weight = *m.Weight
		}
		child := c.service(m.Name)
		if child == nil {
			info.addError("weighted.services", fmt.Sprintf("weighted member %s is missing or disabled", quote.Q(m.Name)))
			return nil
		}
		c.rt.Services[m.Name].UsedBy = append(c.rt.Services[m.Name].UsedBy, name)
		h.children = append(h.children, weightedChild{h: child, weight: weight})
		h.total += weight
	}
	if h.total == 0 {
		info.addWarning("weighted.services", "every member has weight 0: connections are closed")
	}
	return h
}

// healthChecked reports whether a service reports its health: a load
// balancer with a healthCheck, or a weighted service with one.
func healthChecked(s *config.TCPService) bool {
	return s.LoadBalancer != nil && s.LoadBalancer.HealthCheck != nil ||
		s.LoadBalancer == nil && s.Weighted != nil && s.Weighted.HealthCheck != nil
}

// router builds the route for a router, or records why it cannot.
func (c *compiler) router(name string, r *config.TCPRouter, info *RouterInfo) *route {
	if strings.TrimSpace(r.Rule) == "" {
		info.addError("rule", "router has no rule: it is dropped (use HostSNI(`*`) to match every connection)")
		return nil
	}
	switch strings.ToLower(r.RuleSyntax) {
	case "", "v3":
	case "v2":
		info.addWarning("ruleSyntax", "ruleSyntax v2 is deprecated (as in Traefik v3): the rule is read in v3 syntax, which reads single-value HostSNI and ClientIP the same; several values in one matcher (v2 only) do not parse and disable the router, and a v2 {name:regexp} HostSNIRegexp pattern is read as a Go regexp")
	default:
		info.addError("ruleSyntax", fmt.Sprintf("ruleSyntax %s: use v3 (or v2)", quote.Q(r.RuleSyntax)))
		return nil
	}
	ru, err := c.parseRule(r.Rule)
	if err != nil {
		info.addError("rule", err.Error())
		return nil
	}
	if ru.NeedsTLS() && r.TLS == nil {
		info.addError("rule", fmt.Sprintf("rule %s reads the TLS ClientHello (SNI/ALPN) but the router has no TLS: add tls.passthrough=true, or use HostSNI(`*`) for plain TCP", quote.Q(r.Rule)))
		return nil
	}
	terminates := r.TLS != nil && !r.TLS.Passthrough
	var serverConf *tls.Config
	if terminates {
		serverConf = c.routerTLS(name, r, ru, info)
	}
	if r.Service == "" {
		info.addError("service", "router has no service")
		return nil
	}
	svc := c.service(r.Service)
	if sinfo, ok := c.rt.Services[r.Service]; ok {
		sinfo.UsedBy = append(sinfo.UsedBy, name)
	}
	if svc == nil {
		if _, ok := c.cfg.Services[r.Service]; !ok {
			info.addError("service", fmt.Sprintf("service %s does not exist", quote.Q(r.Service)))
		} else {
			info.addError("service", fmt.Sprintf("service %s is disabled", quote.Q(r.Service)))
		}
	}
	var chain []tcp.Middleware
	for _, mn := range r.Middlewares {
		minfo, ok := c.rt.Middlewares[mn]
		if !ok {
			info.addError("middlewares", fmt.Sprintf("middleware %s does not exist", quote.Q(mn)))
			continue
		}
		minfo.UsedBy = append(minfo.UsedBy, name)
		mw, ok := c.mws[mn]
		if !ok {
			info.addError("middlewares", fmt.Sprintf("middleware %s is disabled: %s", quote.Q(mn), strings.Join(minfo.Err, "; ")))
			continue
		}
		chain = append(chain, mw)
	}
	if info.Status == StatusDisabled {
		if terminates && serverConf == nil {
			return &route{name: name, rule: ru, priority: routePriority(r), closing: true,
				handler: closeRoute{}, open: c.st.RouterOpen(name)}
		}
		return nil
	}
	var h tcp.Handler = svc
	if terminates {
		h = &terminator{router: name, conf: serverConf, next: svc, counters: c.st.TLSCounters(name)}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		h = chain[i](h)
	}
	var open *atomic.Int64 = c.st.RouterOpen(name)
	if c.st.connObservers().Metrics {
		// So that /metrics lists the router before its first connection
		// ends. Without metrics nothing reads them: 25 MB at 100,000
		// routers not made.
		c.st.RouterCounters(name)
	}
	return &route{name: name, rule: ru, priority: routePriority(r), handler: h, open: open, terminates: terminates}
}

func routePriority(r *config.TCPRouter) int {
	if r.Priority != 0 {
		return r.Priority
	}
	return len(r.Rule)
}

// closeRoute closes what a disabled terminating router matches.
type closeRoute struct{}

func (closeRoute) ServeTCP(c *tcp.Conn) { c.Refuse(true) }

// routerTLS checks a terminating router's TLS section and returns its
// handshake settings, or nil after recording why there are none (then the
// router is disabled and closes what it matches).
func (c *compiler) routerTLS(name string, r *config.TCPRouter, ru *rule.Rule, info *RouterInfo) *tls.Config {
	optName := r.TLS.Options
	if optName == "" {
		optName = "default"
	}
	conf, err := c.options(optName)
	if err != nil {
		info.addError("tls.options", err.Error())
	}
	var names []string
	if exact, wild, ok := ru.SNIs(); ok {
		names = slices.Clone(exact) // the rule's own, shared (parseRule)
		for _, w := range wild {
			names = append(names, "*"+w)
		}
	}
	if res := r.TLS.CertResolver; res != "" {
		exists, cr, known := c.st.certResolver(res)
		switch {
		case !exists:
			info.addError("tls.certResolver", fmt.Sprintf("certificate resolver %s does not exist: certificatesResolvers.%s is not in the static configuration", quote.Q(res), quote.Text(res)))
			conf = nil
		case cr != nil && conf != nil:
			conf = c.resolverTLS(res, cr, conf, names, r.TLS.Domains, info)
		case cr == nil && known:
			info.addWarning("tls.certResolver", fmt.Sprintf("certificate resolver %s obtains nothing (it has no acme with tlsChallenge, httpChallenge or dnsChallenge): the router is served from the TLS store's certificates", quote.Q(res)))
		}
	}
	store := c.certs()
	if err := store.Need(names); err != nil {
		info.addError("tls", err.Error())
		conf = nil
	}
	if conf != nil {
		store.MarkUse(name, names)
	}
	return conf
}

// resolverTLS returns conf serving, for the names a certificate resolver
// holds a certificate for, that certificate (else the TLS store's, as
// before), and adds the router's names to what the resolver is to obtain:
// its HostSNI names and tls.domains. A wildcard is validated with DNS-01
// alone: for a resolver without it (no Wildcards() true), it is left to the
// store, with a warning.
func (c *compiler) resolverTLS(res string, cr CertResolver, conf *tls.Config, sniNames []string, domains []config.Domain, info *RouterInfo) *tls.Config {
	var want []string
	wild, _ := cr.(interface{ Wildcards() bool })
	add := func(n string) {
		n = strings.ToLower(strings.TrimSpace(n))
		switch {
		case n == "":
		case strings.HasPrefix(n, "*") && wild != nil && wild.Wildcards():
			want = appendUnique(want, n)
		case strings.HasPrefix(n, "*"):
			info.addWarning("tls.certResolver", fmt.Sprintf("%s: a wildcard certificate needs the DNS-01 challenge, which certificate resolver %q does not have (acme.dnsChallenge): served from the TLS store's certificates", n, res))
		default:
			want = appendUnique(want, n)
		}
	}
	for _, d := range domains {
		add(d.Main)
		for _, san := range d.SANs {
			add(san)
		}
	}
	if len(domains) == 0 {
		for _, n := range sniNames {
			add(n)
		}
	}
	if len(want) == 0 && len(domains) == 0 && len(sniNames) == 0 {
		info.addWarning("tls.certResolver", fmt.Sprintf("certificate resolver %s: the rule names no HostSNI host and tls.domains is empty: there is no name to obtain a certificate for", quote.Q(res)))
	}
	for _, n := range want {
		c.want(res, n)
	}
	conf = conf.Clone()
	base := conf.GetCertificate
	conf.GetCertificate = func(chi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if kp := cr.Certificate(sniff.LowerASCII(chi.ServerName)); kp != nil {
			return kp, nil
		}
		return base(chi)
	}
	return conf
}

// want adds name to what resolver res is to obtain (rt.Wanted), once, in
// the order first asked.
func (c *compiler) want(res, name string) {
	if c.wanted[res][name] {
		return
	}
	if c.wanted == nil {
		c.wanted = map[string]map[string]bool{}
	}
	if c.wanted[res] == nil {
		c.wanted[res] = map[string]bool{}
	}
	c.wanted[res][name] = true
	if c.rt.Wanted == nil {
		c.rt.Wanted = map[string][]string{}
	}
	c.rt.Wanted[res] = append(c.rt.Wanted[res], name)
}

// sortedSet sorts s and removes its duplicates, in place.
func sortedSet(s []string) []string {
	sort.Strings(s)
	return slices.Compact(s)
}

func appendUnique(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
