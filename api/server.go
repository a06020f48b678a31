package api

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/net/netutil"
)

// Admin listener limits. The admin port answers operators, health checks and
// Prometheus: short requests with no bodies. A client that trickles its
// request, or sits on an idle keep-alive connection, is cut off, and the
// number of connections is bounded, so the admin listener cannot be used to
// exhaust descriptors or memory.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second // the whole request, body included
	writeTimeout      = 30 * time.Second // rawdata of thousands of routes is written in well under that
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
	// MaxConns is how many connections the admin listener serves at once;
	// more wait in the kernel's accept queue.
	MaxConns = 64
)

// limits are an admin server's timeouts and connection bound.
type limits struct {
	readHeader, read, write, idle time.Duration
	conns                         int
}

var adminLimits = limits{readHeaderTimeout, readTimeout, writeTimeout, idleTimeout, MaxConns}

// NewServer returns the admin HTTP server for h with the limits above.
func NewServer(h http.Handler) *http.Server { return newServer(h, adminLimits) }

func newServer(h http.Handler, l limits) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.readHeader,
		ReadTimeout:       l.read,
		WriteTimeout:      l.write,
		IdleTimeout:       l.idle,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// Listen binds an admin listener on addr that serves at most MaxConns
// connections at once.
func Listen(addr string) (net.Listener, error) { return listen(addr, adminLimits.conns) }

// Limit bounds ln to MaxConns connections at once (Listen's bound, for a
// listener made elsewhere: one inherited at an upgrade).
func Limit(ln net.Listener) net.Listener { return netutil.LimitListener(ln, adminLimits.conns) }

func listen(addr string, conns int) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, conns), nil
}

// PingOnly serves /ping alone: the admin listener of --ping without --api
// or --metrics.prometheus.
func PingOnly() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", ping)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path+" (this listener serves /ping only: the admin API needs --api)")
	})
	return mux
}

// LocalOnly serves h to loopback clients, and the paths open to anyone;
// anyone else gets 404, as from an address they cannot reach.
func LocalOnly(h http.Handler, open ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(open, r.URL.Path) {
			ap, err := netip.ParseAddrPort(r.RemoteAddr)
			if err != nil || !ap.Addr().Unmap().IsLoopback() {
				writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path+" (the admin API answers loopback clients only: see api.insecure)")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func ping(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("OK"))
}

// MetricsOnly returns a handler that serves only /metrics (and /ping, for
// health checks): what --metrics.prometheus exposes without --api. Nothing
// of the configuration or of client addresses is served.
func MetricsOnly(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", ping)
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path+" (this listener serves /metrics only: the admin API needs --api)")
	})
	return mux
}
