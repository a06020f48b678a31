package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/api"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// adminListener is one admin listener: its socket behind a gate that a
// handover pauses (upgrade.Gate), and its server.
type adminListener struct {
	key, addr, what string
	gate            *upgrade.Gate
	hs              *http.Server
	inherited       bool
	closing         atomic.Bool // closed by a handover: Serve's return is no error
}

type admins []*adminListener

// uses reports whether the listener named key serves on an inherited socket.
func (as admins) uses(key string) bool {
	for _, a := range as {
		if a.key == key {
			return a.inherited
		}
	}
	return false
}

// adminPlan is one admin listener as the static configuration asks for it,
// before anything is bound: its key (what an upgrade names its socket by),
// address and what it serves.
type adminPlan struct {
	key, addr, what string
	serve           adminServe
	open            []string // api: what it serves to any client (the rest to loopback ones only)
	apiMetrics      bool     // api: /metrics too
}

type adminServe int

const (
	serveAPI adminServe = iota
	serveMetrics
	servePing
)

// planAdmin is what --api, --metrics.prometheus and --ping expose, one
// listener each, decided once: adminListeners binds them, and an upgrade
// matches them with the old process's sockets (upgrade.Match).
//
//   - --api: the admin API (/ping, /api/...), plus /metrics with
//     --metrics.prometheus when the API has an address of its own and
//     metrics have none;
//   - --metrics.prometheus otherwise: /metrics and /ping only, on the
//     traefik entry point (ResolveInternal), else where Traefik creates it,
//     :8080 on every interface (with the API on its default address, one
//     listener serves both there, the API to loopback clients only), or on
//     metrics.prometheus.address;
//   - --ping alone: /ping only, on the traefik entry point, else :8080;
//   - manualRouting (Traefik leaves the route to an HTTP router): metrics or
//     ping on no listener of their own.
func planAdmin(st *config.Static) []adminPlan {
	// Without a traefik entry point, Traefik creates one at :8080 for ping
	// and metrics (unless they are routed by hand, or named another entry
	// point): so does tollgate, but where --api gives the admin API an
	// address of its own, which serves them.
	apiOwn := st.API != nil && (st.API.Insecure || st.API.Address != config.DefaultAPIAddress)
	traefikEP := func(name string) bool { return name == "" || name == config.InsecureAPIEntryPoint }
	metrics := st.Metrics != nil && st.Metrics.Prometheus != nil
	metricsAddr := ""
	if m := st.Metrics; metrics {
		metricsAddr = m.Prometheus.Address
		if metricsAddr == "" && !apiOwn && !m.Prometheus.ManualRouting {
			metricsAddr = config.DefaultAPIAddress
			if traefikEP(m.Prometheus.EntryPoint) {
				metricsAddr = config.DefaultInternalAddress
			}
		}
	}
	pingAddr, pingKey := "", "ping.entryPoint"
	if p := st.Ping; p != nil && !p.ManualRouting {
		pingAddr = p.Address() // ping.entryPoint's
		if pingAddr == "" && !apiOwn && traefikEP(p.EntryPoint) {
			pingAddr, pingKey = config.DefaultInternalAddress, "ping.address"
		}
		if pingAddr == metricsAddr {
			pingAddr = "" // the metrics listener answers /ping too
		}
	}
	var ps []adminPlan
	if st.API != nil {
		p := adminPlan{key: "api.address", addr: st.API.Address, what: "admin API", serve: serveAPI}
		if !st.API.Insecure && st.API.Address == config.DefaultAPIAddress {
			// Traefik's internal entry point on the default admin port
			// (its Helm chart's traefik, :8080) would collide with the
			// API: one listener serves both, its API to loopback clients
			// only, as the default address does.
			if samePort(metricsAddr, p.addr) {
				p.addr, metricsAddr, p.open = metricsAddr, "", []string{"/metrics", "/ping"}
			} else if samePort(pingAddr, p.addr) {
				p.addr, pingAddr, p.open = pingAddr, "", []string{"/ping"}
			}
		}
		p.apiMetrics = metrics && metricsAddr == ""
		if len(p.open) > 0 {
			p.what = "admin API (loopback clients only, but " + strings.Join(p.open, " and ") + ")"
		}
		ps = append(ps, p)
	}
	if metrics && metricsAddr != "" {
		ps = append(ps, adminPlan{key: "metrics.prometheus.address", addr: metricsAddr, what: "metrics (only /metrics and /ping)", serve: serveMetrics})
	}
	if pingAddr != "" {
		ps = append(ps, adminPlan{key: pingKey, addr: pingAddr, what: "ping (only /ping)", serve: servePing})
	}
	if st.Ping != nil && !st.Ping.ManualRouting && len(ps) == 0 {
		// Traefik's --ping alone: /ping, on the admin address (keyed so that
		// no entry point name can collide with it at an upgrade).
		ps = append(ps, adminPlan{key: "ping.address", addr: config.DefaultAPIAddress, what: "ping (only /ping)", serve: servePing})
	}
	return ps
}

// adminListeners binds what planAdmin plans, or takes over the socket an
// upgrade matched with it (p.inherited, by key). Each listener has the
// admin server's timeouts and connection bound; serveAdmin serves them.
func (p *proc) adminListeners() (admins, error) {
	st := p.st
	var metrics http.Handler
	if st.Metrics != nil && st.Metrics.Prometheus != nil {
		metrics = api.MetricsHandler(p.srv, p.watcher, p.stats, st.Metrics.Prometheus)
	}
	var allowedHosts []string
	var token string
	if st.API != nil {
		allowedHosts = st.API.AllowedHosts
		var err error
		if token, err = st.API.UpgradeToken(); err != nil {
			return nil, err
		}
	}
	var ls admins
	for _, pl := range planAdmin(st) {
		var h http.Handler
		switch pl.serve {
		case serveAPI:
			h = p.apiHandler(pl, metrics, token)
		case serveMetrics:
			h = api.MetricsOnly(metrics)
		default:
			h = api.PingOnly()
		}
		// Every admin listener: ping and metrics are asked by tools that
		// name an IP or localhost, so the rule costs them nothing.
		h = api.GuardHost(h, allowedHosts)
		ls = append(ls, &adminListener{key: pl.key, addr: pl.addr, what: pl.what, hs: api.NewServer(h)})
	}
	for i, l := range ls {
		ln, err := listenAdmin(l, p.inherited)
		if err != nil {
			closeAdmins(ls[:i])
			return nil, err
		}
		l.gate = upgrade.NewGate(ln)
	}
	return ls, nil
}

// apiHandler is the admin API as pl plans it (with /metrics when it
// serves them, loopback clients only but for pl.open), under
// api.basePath; token is api.upgradeTokenFile's.
func (p *proc) apiHandler(pl adminPlan, metrics http.Handler, token string) http.Handler {
	st, up := p.st, p.up
	src := api.Sources{Server: p.srv, Watcher: p.watcher, Upgrade: up.Upgrade, UpgradeToken: token, Log: p.log,
		Process: func() upgrade.View { return up.stats.View(os.Getpid(), up.state()) },
		Static:  st, Version: p.o.Version, Started: p.o.Started,
		Dashboard: st.API.Dashboard, History: p.hist, Debug: st.API.Debug}
	if pl.apiMetrics {
		src.Metrics = metrics
	}
	h := withBasePath(api.Handler(src), st.API.BasePath)
	if len(pl.open) > 0 {
		h = api.LocalOnly(h, pl.open...)
	} else if !st.API.Insecure {
		warnExposed(pl, token != "", p.log)
	}
	return h
}

// listenAdmin is l's socket: the one an upgrade handed over under its key
// when that binds its address, else a new one.
func listenAdmin(l *adminListener, inherited map[string]upgrade.Listener) (*net.TCPListener, error) {
	in, ok := inherited[l.key]
	if !ok || proxy.ListenKey(in.Address) != proxy.ListenKey(l.addr) {
		nl, err := net.Listen("tcp", l.addr)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: cannot listen: %w", l.key, l.addr, err)
		}
		return nl.(*net.TCPListener), nil
	}
	f := os.NewFile(uintptr(in.FD), l.key)
	fl, err := net.FileListener(f)
	f.Close()
	var ln *net.TCPListener
	if err == nil {
		ln, _ = fl.(*net.TCPListener)
	}
	if ln == nil {
		return nil, fmt.Errorf("%s=%q: the inherited socket is not a TCP listener: %v", l.key, l.addr, err)
	}
	l.inherited = true
	return ln, nil
}

// warnExposed warns, at start, that the admin API listens where other
// hosts reach it though api.insecure does not say so (api.insecure warns
// for itself: internal/preflight), naming what it serves them.
func warnExposed(p adminPlan, upgrades bool, log zerolog.Logger) {
	if loopbackAddr(p.addr) {
		return
	}
	what := "the whole configuration, every client IP the limiters count, the providers' state"
	if p.apiMetrics {
		what += ", /metrics"
	}
	if upgrades {
		what += ", and POST /api/upgrade (to requests carrying the token of api.upgradeTokenFile)"
	}
	log.Warn().Str("address", p.addr).Msg("api.address=" + p.addr + " is not a loopback address: the admin API serves other hosts, without authentication, " + what + "; bind it to 127.0.0.1, or firewall it (api.insecure=true says this is meant)")
}

// loopbackAddr reports whether a listen address binds loopback only
// (localhost, 127.0.0.0/8, ::1); an empty host binds every address.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}

// withBasePath serves h under api.basePath, as Traefik serves its API:
// <basePath>/api/... is h's /api/...; /ping and /metrics stay at the root,
// and the rest is not found. An empty basePath or "/" is h itself.
func withBasePath(h http.Handler, base string) http.Handler {
	base = strings.TrimSuffix(base, "/")
	if base == "" {
		return h
	}
	under := http.StripPrefix(base, h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/ping" || p == "/metrics":
			h.ServeHTTP(w, r)
		case strings.HasPrefix(p, base+"/"):
			under.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// samePort reports whether two listen addresses take the same port ("" takes
// none).
func samePort(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	_, pa, errA := net.SplitHostPort(a)
	_, pb, errB := net.SplitHostPort(b)
	return errA == nil && errB == nil && pa == pb
}

func closeAdmins(as admins) {
	for _, a := range as {
		_ = a.gate.Close()
	}
}

// stop ends the listeners' accepting (each socket closes in this process; at
// a handover the new process holds it and accepts) and has their servers
// answer what is under way: a request on a connection already accepted,
// even one whose bytes arrive after this, is answered, and its connection
// closed after the answer. It is not http.Server.Shutdown, which drops a
// request it reads after it began: a poll of /api/process that the old
// process accepted just before a handover would get no answer
// (TestAdminStopAnswersAcceptedConnections). shutdown ends the servers.
func (as admins) stop() {
	for _, a := range as {
		a.closing.Store(true)
		_ = a.gate.Close()
		a.hs.SetKeepAlivesEnabled(false)
	}
}

// pause stops the listeners' accepting at a handover without closing
// their sockets (the new process accepts on them; resume takes them back
// if it ends while this process drains), and has their servers close each
// connection after its answer.
func (as admins) pause() {
	for _, a := range as {
		a.gate.Pause()
		a.hs.SetKeepAlivesEnabled(false)
	}
}

// resume undoes pause.
func (as admins) resume() {
	for _, a := range as {
		a.gate.Resume()
		a.hs.SetKeepAlivesEnabled(true)
	}
}

// shutdown ends the servers after stop, waiting up to wait for the answers
// under way.
func (as admins) shutdown(wait time.Duration) {
	for _, a := range as {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_ = a.hs.Shutdown(ctx)
		cancel()
	}
}

// serveAdmin serves the admin listeners.
func serveAdmin(as admins, log zerolog.Logger) {
	for _, l := range as {
		go func() {
			if err := l.hs.Serve(api.Limit(l.gate)); err != nil && !errors.Is(err, http.ErrServerClosed) && !l.closing.Load() {
				log.Error().Err(err).Str("address", l.gate.Addr().String()).Msg(l.what + " stopped")
			}
		}()
		log.Info().Str("address", l.gate.Addr().String()).Msg(l.what + " listening")
	}
}
