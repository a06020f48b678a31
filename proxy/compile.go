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
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ipallowlist"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
	"github.com/tollgate-proxy/tollgate/proxy/rule"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Compile turns a merged, qualified configuration into one routing table per
// entry point, plus the runtime view of every resource. It never modifies
// cfg. A broken router, service or middleware is recorded with an error that
// names it and is left out; everything else is compiled. State that must
// outlive the generation (limiters, counters) comes from st.
func Compile(cfg *config.TCPConfiguration, entryPoints []string, st *State, log zerolog.Logger) (map[string]*Table, *Runtime) {
	rt := &Runtime{
		Routers:     map[string]*RouterInfo{},
		Services:    map[string]*ServiceInfo{},
		Middlewares: map[string]*MiddlewareInfo{},
	}
	if cfg == nil {
		cfg = &config.TCPConfiguration{}
	}
	c := compiler{cfg: cfg, st: st, rt: rt, log: log,
		mws: map[string]tcp.Middleware{}, svcs: map[string]tcp.Handler{}, building: map[string]bool{},
		serverTLS: map[string]tlsOrErr{}, transports: map[string]transportOrErr{}}

	for _, name := range sortedKeys(cfg.Middlewares) {
		c.middleware(name)
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
	routes := map[string][]*route{}
	for _, name := range sortedKeys(cfg.Routers) {
		r := cfg.Routers[name]
		info := &RouterInfo{TCPRouter: r, ResourceStatus: ResourceStatus{Status: StatusEnabled}}
		rt.Routers[name] = info
		if r == nil {
			info.TCPRouter = &config.TCPRouter{}
			info.addError("", "empty router")
			continue
		}
		built := c.router(name, r, info)
		if built == nil {
			continue
		}
		if built.closing {
			// A terminating router whose TLS settings are broken keeps its
			// place, closing what it matches: its clients must not fall
			// through to a catch-all route (Traefik does the same).
			eps := r.EntryPoints
			if len(eps) == 0 {
				eps = defaults
			}
			for _, ep := range eps {
				if slices.Contains(entryPoints, ep) {
					routes[ep] = append(routes[ep], built)
				}
			}
			continue
		}
		eps := r.EntryPoints
		if len(eps) == 0 {
			eps = defaults
		}
		for _, ep := range eps {
			if !slices.Contains(entryPoints, ep) {
				info.addWarning("entryPoints", fmt.Sprintf("entry point %q does not exist", ep))
				continue
			}
			info.Using = append(info.Using, ep)
			routes[ep] = append(routes[ep], built)
		}
		if len(info.Using) == 0 {
			info.Status = StatusDisabled
		}
	}

	var acmeResolvers []CertResolver
	byName := st.certResolvers()
	for _, n := range sortedKeys(byName) {
		acmeResolvers = append(acmeResolvers, byName[n])
	}
	tables := make(map[string]*Table, len(entryPoints))
	for _, ep := range entryPoints {
		rs := routes[ep]
		slices.SortStableFunc(rs, func(a, b *route) int {
			if a.priority != b.priority {
				return cmp.Compare(b.priority, a.priority)
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
		rt.Certificates = c.store.infos
	}
	// Health checkers of services this configuration no longer has stop.
	st.health.sweep()
	for _, info := range rt.Middlewares {
		sort.Strings(info.UsedBy)
	}
	for _, info := range rt.Services {
		sort.Strings(info.UsedBy)
	}
	return tables, rt
}

type compiler struct {
	cfg      *config.TCPConfiguration
	st       *State
	rt       *Runtime
	log      zerolog.Logger
	mws      map[string]tcp.Middleware // built, enabled middlewares
	svcs     map[string]tcp.Handler    // built, enabled services
	building map[string]bool           // services being built (weighted cycles)
	capped   []*capacity               // capped services of this configuration

	store      *certStore // the default TLS store, read once a router terminates
	serverTLS  map[string]tlsOrErr
	transports map[string]transportOrErr
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
func (c *compiler) certs() *certStore {
	if c.store == nil {
		c.store = buildCertStore(c.cfg.TLS, c.st.defaultCert.get)
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
func (c *compiler) generatedDefault(store *certStore) {
	if c.cfg.TLS == nil {
		return
	}
	st, ok := c.cfg.TLS.Stores["default"]
	if !ok || st.DefaultCertificate != nil || st.DefaultGeneratedCert == nil {
		return
	}
	g := st.DefaultGeneratedCert
	fail := func(msg string) {
		store.infos = append(store.infos, CertificateInfo{Source: "tls.stores.default.defaultGeneratedCert", Error: msg, Stores: []string{"default"}, Default: true})
	}
	if g.Resolver == "" || g.Domain == nil || strings.TrimSpace(g.Domain.Main) == "" {
		fail("set resolver and domain.main: the generated self-signed certificate stays the default")
		return
	}
	exists, cr, known := c.st.certResolver(g.Resolver)
	switch {
	case !exists:
		fail(fmt.Sprintf("certificate resolver %q does not exist (certificatesResolvers.%s): the generated self-signed certificate stays the default", g.Resolver, g.Resolver))
		return
	case cr == nil:
		if known {
			fail(fmt.Sprintf("certificate resolver %q obtains nothing (no acme with tlsChallenge or httpChallenge): the generated self-signed certificate stays the default", g.Resolver))
		}
		return
	}
	main := strings.ToLower(strings.TrimSpace(g.Domain.Main))
	if strings.HasPrefix(main, "*") {
		fail(fmt.Sprintf("domain.main %s: a wildcard certificate needs the DNS-01 challenge, which tollgate does not answer: the generated self-signed certificate stays the default", main))
		return
	}
	if c.rt.Wanted == nil {
		c.rt.Wanted = map[string][]string{}
	}
	for _, n := range append([]string{main}, g.Domain.SANs...) {
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" && !strings.HasPrefix(n, "*") {
			c.rt.Wanted[g.Resolver] = appendUnique(c.rt.Wanted[g.Resolver], n)
		}
	}
	store.defGen = &generatedDefault{cr: cr, name: main}
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
		v.err = fmt.Errorf("TLS options %q do not exist (tls.options)", name)
	} else {
		v.conf, v.err = newServerTLS(name, o, c.certs())
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
		v.tls, v.err = newClientTLS(field, v.tr.TLS)
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
	kind, err := m.Kind()
	if err != nil {
		info.addFieldError(err)
		return
	}
	info.Type = strings.ToUpper(kind[:1]) + kind[1:]
	switch kind {
	case "inFlightConn":
		mw, l, warn, err := inflightconn.New(name, m.InFlightConn, &c.st.Limiters, c.log)
		if err != nil {
			info.addFieldError(err)
			return
		}
		if warn != "" {
			info.addWarning("inFlightConn.amount", warn)
		}
		info.limiter = l
		c.mws[name] = mw
	case "rateLimit":
		mw, l, warn, err := ratelimit.New(name, m.RateLimit, &c.st.RateLimiters, c.log)
		if err != nil {
			info.addFieldError(err)
			return
		}
		if warn != nil {
			info.addWarning(config.FieldOf(warn), warn.Error())
		}
		info.rateLimiter = l
		c.mws[name] = mw
	case "ipAllowList":
		mw, notes, err := ipallowlist.New(m.IPAllowList, c.st.AllowCounters(name))
		if err != nil {
			info.addFieldError(err)
			return
		}
		for _, n := range notes {
			info.addWarning(fmt.Sprintf("ipAllowList.sourceRange[%d]", n.Index), n.Msg)
		}
		c.mws[name] = mw
	}
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

func (c *compiler) loadBalancer(name string, lb *config.TCPServersLoadBalancer, info *ServiceInfo) tcp.Handler {
	h := &loadBalancer{
		name:        name,
		delay:       time.Duration(config.DefaultTerminationDelayMillis) * time.Millisecond,
		dialTimeout: DialTimeout,
		counters:    c.st.ServiceCounters(name),
		log:         c.log, // the service name is added at the (rare) log sites: no logger per service
	}
	// A service that names no transport takes the static tcpServersTransport
	// when there is one (Traefik's default@internal).
	trName := lb.ServersTransport
	if trName == "" && c.st.getDefaultTransport() != nil {
		trName = config.DefaultTransportName
	}
	if trName != "" {
		v, ok := c.transport(trName)
		switch {
		case !ok:
			info.addError("loadBalancer.serversTransport", fmt.Sprintf("servers transport %q does not exist (tcp.serversTransports)", trName))
			return nil
		case v.err != nil:
			info.addError("loadBalancer.serversTransport", fmt.Sprintf("servers transport %q: %s", trName, v.err))
			return nil
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
	}
	// The deprecated fields of the load balancer keep working for a service
	// that names no transport; a named transport's values apply instead, as
	// in Traefik (README, "Servers transports").
	if lb.TerminationDelay != nil {
		if lb.ServersTransport == "" {
			h.delay = time.Duration(*lb.TerminationDelay) * time.Millisecond
			info.addWarning("loadBalancer.terminationDelay", "loadBalancer.terminationDelay is deprecated: set terminationDelay in a servers transport (tcp.serversTransports) and name it in loadBalancer.serversTransport")
		} else {
			info.addWarning("loadBalancer.terminationDelay", fmt.Sprintf("loadBalancer.terminationDelay is deprecated and ignored: the service names servers transport %q, whose terminationDelay applies", lb.ServersTransport))
		}
	}
	if lb.ProxyProtocol != nil {
		if lb.ServersTransport == "" {
			h.ppVer = byte(lb.ProxyProtocol.Version)
			info.addWarning("loadBalancer.proxyProtocol", "loadBalancer.proxyProtocol is deprecated: set proxyProtocol in a servers transport (tcp.serversTransports) and name it in loadBalancer.serversTransport")
		} else {
			info.addWarning("loadBalancer.proxyProtocol", fmt.Sprintf("loadBalancer.proxyProtocol is deprecated and ignored: the service names servers transport %q, whose proxyProtocol applies (none if it sets none)", lb.ServersTransport))
		}
	}
	if o := c.st.connObservers(); o.any() {
		h.obs = &connObserver{st: c.st, log: o.AccessLog, fields: o.AccessFields, min: o.AccessMinDuration, metrics: o.Metrics}
	}
	var ups []*atomic.Bool // health of each server; nil without a health check
	if lb.HealthCheck != nil {
		spec, err := newHealthSpec(lb.HealthCheck)
		addrs := make([]string, len(lb.Servers))
		for i, s := range lb.Servers {
			addrs[i] = s.Address
			if _, terr := spec.target(s.Address); err == nil && terr != nil {
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
		ups = c.st.health.acquire(name, spec, addrs, h.log, onUp)
	}
	info.ServerStatus = map[string]string{}
	for i, s := range lb.Servers {
		srv := newServer(s.Address)
		srv.tls = s.TLS
		h.goroutines = h.goroutines || s.TLS
		if ups != nil {
			srv.up = ups[i]
		}
		h.servers = append(h.servers, srv)
		info.ServerStatus[s.Address] = upDown(srv.up) // as of this reload; State.ServerStatus is live
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

func (c *compiler) weighted(name string, w *config.TCPWeightedRoundRobin, info *ServiceInfo) tcp.Handler {
	h := &weighted{}
	for _, m := range w.Services {
		weight := 1
		if m.Weight != nil {
			weight = *m.Weight
		}
		child := c.service(m.Name)
		if child == nil {
			info.addError("weighted.services", fmt.Sprintf("weighted member %q is missing or disabled", m.Name))
			return nil
		}
		c.rt.Services[m.Name].UsedBy = appendUnique(c.rt.Services[m.Name].UsedBy, name)
		h.children = append(h.children, weightedChild{h: child, weight: weight})
		h.total += weight
	}
	if h.total == 0 {
		info.addWarning("weighted.services", "every member has weight 0: connections are closed")
	}
	return h
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
		info.addError("ruleSyntax", fmt.Sprintf("ruleSyntax %q: use v3 (or v2)", r.RuleSyntax))
		return nil
	}
	ru, err := rule.Parse(r.Rule)
	if err != nil {
		info.addError("rule", err.Error())
		return nil
	}
	if ru.NeedsTLS() && r.TLS == nil {
		info.addError("rule", fmt.Sprintf("rule %q reads the TLS ClientHello (SNI/ALPN) but the router has no TLS: add tls.passthrough=true, or use HostSNI(`*`) for plain TCP", r.Rule))
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
		sinfo.UsedBy = appendUnique(sinfo.UsedBy, name)
	}
	if svc == nil {
		if _, ok := c.cfg.Services[r.Service]; !ok {
			info.addError("service", fmt.Sprintf("service %q does not exist", r.Service))
		} else {
			info.addError("service", fmt.Sprintf("service %q is disabled", r.Service))
		}
	}
	var chain []tcp.Middleware
	for _, mn := range r.Middlewares {
		minfo, ok := c.rt.Middlewares[mn]
		if !ok {
			info.addError("middlewares", fmt.Sprintf("middleware %q does not exist", mn))
			continue
		}
		minfo.UsedBy = appendUnique(minfo.UsedBy, name)
		mw, ok := c.mws[mn]
		if !ok {
			info.addError("middlewares", fmt.Sprintf("middleware %q is disabled: %s", mn, strings.Join(minfo.Err, "; ")))
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
	c.st.RouterCounters(name) // so that /metrics lists the router before its first connection ends
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
		names = exact
		for _, w := range wild {
			names = append(names, "*"+w)
		}
	}
	if res := r.TLS.CertResolver; res != "" {
		exists, cr, known := c.st.certResolver(res)
		switch {
		case !exists:
			info.addError("tls.certResolver", fmt.Sprintf("certificate resolver %q does not exist: certificatesResolvers.%s is not in the static configuration", res, res))
			conf = nil
		case cr != nil && conf != nil:
			conf = c.resolverTLS(res, cr, conf, names, r.TLS.Domains, info)
		case cr == nil && known:
			info.addWarning("tls.certResolver", fmt.Sprintf("certificate resolver %q obtains nothing (it has no acme with tlsChallenge or httpChallenge): the router is served from the TLS store's certificates", res))
		}
	}
	store := c.certs()
	if err := store.need(names); err != nil {
		info.addError("tls", err.Error())
		conf = nil
	}
	if conf != nil {
		store.markUse(name, names)
	}
	return conf
}

// resolverTLS returns conf serving, for the names a certificate resolver
// holds a certificate for, that certificate (else the TLS store's, as
// before), and adds the router's names to what the resolver is to obtain:
// its HostSNI names and tls.domains. A wildcard cannot be validated with
// TLS-ALPN-01 (it needs DNS-01): it is left to the store, with a warning.
func (c *compiler) resolverTLS(res string, cr CertResolver, conf *tls.Config, sniNames []string, domains []config.Domain, info *RouterInfo) *tls.Config {
	var want []string
	add := func(n string) {
		n = strings.ToLower(strings.TrimSpace(n))
		switch {
		case n == "":
		case strings.HasPrefix(n, "*"):
			info.addWarning("tls.certResolver", fmt.Sprintf("%s: a wildcard certificate needs the DNS-01 challenge, which tollgate does not answer: served from the TLS store's certificates", n))
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
		info.addWarning("tls.certResolver", fmt.Sprintf("certificate resolver %q: the rule names no HostSNI host and tls.domains is empty: there is no name to obtain a certificate for", res))
	}
	if c.rt.Wanted == nil {
		c.rt.Wanted = map[string][]string{}
	}
	for _, n := range want {
		c.rt.Wanted[res] = appendUnique(c.rt.Wanted[res], n)
	}
	conf = conf.Clone()
	base := conf.GetCertificate
	conf.GetCertificate = func(chi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if kp := cr.Certificate(lowerASCII(chi.ServerName)); kp != nil {
			return kp, nil
		}
		return base(chi)
	}
	return conf
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
