package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/tollgate-proxy/tollgate/api"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/provider"
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
//     --metrics.prometheus unless metrics have an address of their own;
//   - --metrics.prometheus without --api: /metrics and /ping only, on the
//     admin address (127.0.0.1:8080) or metrics.prometheus.address;
//   - metrics.prometheus.address: /metrics (and /ping) there, apart from the API;
//   - --ping alone: /ping only, on the admin address.
func planAdmin(st *config.Static) []adminPlan {
	metrics := st.Metrics != nil && st.Metrics.Prometheus != nil
	metricsAddr := ""
	if metrics {
		metricsAddr = st.Metrics.Prometheus.Address
		if metricsAddr == "" && st.API == nil {
			metricsAddr = config.DefaultAPIAddress
		}
	}
	pingAddr := ""
	if st.Ping != nil && st.Ping.Address() != metricsAddr {
		pingAddr = st.Ping.Address() // ping.entryPoint's (the metrics listener answers /ping too)
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
		ps = append(ps, adminPlan{key: "ping.entryPoint", addr: pingAddr, what: "ping (only /ping)", serve: servePing})
	}
	if st.Ping != nil && len(ps) == 0 {
		// Traefik's --ping alone: /ping, on the admin address (keyed so that
		// no entry point name can collide with it at an upgrade).
		ps = append(ps, adminPlan{key: "ping.address", addr: config.DefaultAPIAddress, what: "ping (only /ping)", serve: servePing})
	}
	return ps
}

// adminListeners binds what planAdmin plans, or takes over the socket an
// upgrade matched with it (inherited, by key). Each listener has the admin
// server's timeouts and connection bound; serveAdmin serves them.
func adminListeners(st *config.Static, srv *proxy.Server, w *provider.Watcher, up *upgrader, inherited map[string]upgrade.Listener, log zerolog.Logger) (admins, error) {
	var metrics http.Handler
	if st.Metrics != nil && st.Metrics.Prometheus != nil {
		metrics = api.MetricsHandler(srv, w, up.stats)
	}
	var ls admins
	for _, p := range planAdmin(st) {
		var h http.Handler
		switch p.serve {
		case serveAPI:
			src := api.Sources{Server: srv, Watcher: w, Upgrade: up.Upgrade,
				Process: func() upgrade.View { return up.stats.View(os.Getpid(), up.state()) }}
			if p.apiMetrics {
				src.Metrics = metrics
			}
			h = api.Handler(src)
			if len(p.open) > 0 {
				h = api.LocalOnly(h, p.open...)
			}
		case serveMetrics:
			h = api.MetricsOnly(metrics)
		default:
			h = api.PingOnly()
		}
		ls = append(ls, &adminListener{key: p.key, addr: p.addr, what: p.what, hs: api.NewServer(h)})
	}
	for i, l := range ls {
		var ln *net.TCPListener
		in, ok := inherited[l.key]
		if ok && proxy.ListenKey(in.Address) == proxy.ListenKey(l.addr) {
			f := os.NewFile(uintptr(in.FD), l.key)
			fl, err := net.FileListener(f)
			f.Close()
			if err == nil {
				ln, ok = fl.(*net.TCPListener)
			}
			if ln == nil {
				err = fmt.Errorf("%s=%q: the inherited socket is not a TCP listener: %v", l.key, l.addr, err)
				closeAdmins(ls[:i])
				return nil, err
			}
			l.inherited = true
		} else {
			nl, err := net.Listen("tcp", l.addr)
			if err != nil {
				closeAdmins(ls[:i])
				return nil, fmt.Errorf("%s=%q: cannot listen: %w", l.key, l.addr, err)
			}
			ln = nl.(*net.TCPListener)
		}
		l.gate = upgrade.NewGate(ln)
	}
	return ls, nil
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
func serveAdmin(as admins, up *upgrader, log zerolog.Logger) {
	for _, l := range as {
		go func() {
			if err := l.hs.Serve(api.Limit(l.gate)); err != nil && !errors.Is(err, http.ErrServerClosed) && !l.closing.Load() {
				log.Error().Err(err).Str("address", l.gate.Addr().String()).Msg(l.what + " stopped")
			}
		}()
		log.Info().Str("address", l.gate.Addr().String()).Msg(l.what + " listening")
	}
}

// labelProviders builds the Docker, Consul Catalog, Kubernetes CRD, Docker
// Swarm and KV store providers that the static configuration enables. A new provider (Swarm,
// KV) is one more case here (ARCHITECTURE.md).
