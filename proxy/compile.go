package proxy

import (
	"cmp"
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
		mws: map[string]tcp.Middleware{}, svcs: map[string]tcp.Handler{}, building: map[string]bool{}}

	for _, name := range sortedKeys(cfg.Middlewares) {
		c.middleware(name)
	}
	for _, name := range sortedKeys(cfg.Services) {
		c.service(name)
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
		eps := r.EntryPoints
		if len(eps) == 0 {
			eps = entryPoints
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

	tables := make(map[string]*Table, len(entryPoints))
	for _, ep := range entryPoints {
		rs := routes[ep]
		slices.SortStableFunc(rs, func(a, b *route) int {
			if a.priority != b.priority {
				return cmp.Compare(b.priority, a.priority)
			}
			return strings.Compare(a.name, b.name)
		})
		tables[ep] = newTable(rs, func(r *route) bool {
			// c.router refused a rule that reads the hello without TLS and a TLS
			// section without passthrough: a TLS section here means passthrough.
			return cfg.Routers[r.name].TLS != nil
		})
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
	delay := time.Duration(config.DefaultTerminationDelayMillis) * time.Millisecond
	if lb.TerminationDelay != nil {
		delay = time.Duration(*lb.TerminationDelay) * time.Millisecond
	}
	h := &loadBalancer{
		name:     name,
		delay:    delay,
		counters: c.st.ServiceCounters(name),
		log:      c.log, // the service name is added at the (rare) log sites: no logger per service
	}
	if o := c.st.connObservers(); o.any() {
		h.obs = &connObserver{st: c.st, log: o.AccessLog, metrics: o.Metrics}
	}
	if lb.ProxyProtocol != nil {
		h.ppVer = byte(lb.ProxyProtocol.Version)
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
	ru, err := rule.Parse(r.Rule)
	if err != nil {
		info.addError("rule", err.Error())
		return nil
	}
	if ru.NeedsTLS() && (r.TLS == nil || !r.TLS.Passthrough) {
		info.addError("rule", fmt.Sprintf("rule %q reads the TLS ClientHello (SNI/ALPN) but the router has no TLS: add tls.passthrough=true, or use HostSNI(`*`) for plain TCP", r.Rule))
		return nil
	}
	if r.TLS != nil && !r.TLS.Passthrough {
		info.addError("tls", "TLS termination is not supported (tollgate holds no keys): set tls.passthrough=true")
		return nil
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
		return nil
	}
	var h tcp.Handler = svc
	for i := len(chain) - 1; i >= 0; i-- {
		h = chain[i](h)
	}
	prio := r.Priority
	if prio == 0 {
		prio = len(r.Rule)
	}
	var open *atomic.Int64 = c.st.RouterOpen(name)
	c.st.RouterCounters(name) // so that /metrics lists the router before its first connection ends
	return &route{name: name, rule: ru, priority: prio, handler: h, open: open}
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
