package api

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Admin listener limits. The admin port answers operators, health checks and
// Prometheus: short requests with no bodies, sent at once. A client that
// trickles its request, or sits on an idle keep-alive connection, is cut
// off, and the number of connections is bounded, in all and per client
// address, so the admin listener cannot be used to exhaust descriptors or
// memory, and one address holding its share leaves the rest to others (a
// health checker, Prometheus).
const (
	readHeaderTimeout = 2 * time.Second  // a request line and headers are sent at once
	readTimeout       = 10 * time.Second // the whole request, body included
	writeTimeout      = 30 * time.Second // rawdata of thousands of routes is written in well under that
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
	// MaxConns is how many connections the admin listener serves at once;
	// more wait in the kernel's accept queue.
	MaxConns = 64
	// MaxConnsPerClient is how many of them one client address (an IPv6
	// client's /64) holds at most; one more from it is closed at once.
	MaxConnsPerClient = 8
)

// limits are an admin server's timeouts and connection bounds.
type limits struct {
	readHeader, read, write, idle time.Duration
	conns, perClient              int
}

var adminLimits = limits{readHeaderTimeout, readTimeout, writeTimeout, idleTimeout, MaxConns, MaxConnsPerClient}

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

// Listen binds an admin listener on addr with Limit's bounds.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Limit(ln), nil
}

// Limit bounds ln to MaxConns connections at once, and MaxConnsPerClient
// of them per client address (for a listener made elsewhere: one inherited
// at an upgrade, behind its upgrade.Gate).
func Limit(ln net.Listener) net.Listener { return limit(ln, adminLimits) }

func limit(ln net.Listener, l limits) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, l.conns), perClient: l.perClient,
		clients: map[netip.Addr]int{}, done: make(chan struct{})}
}

// limitListener is netutil.LimitListener's bound (a connection past it
// waits in the kernel's queue) with a bound per client address under it
// (a connection past that one is closed at once, so it takes no slot).
type limitListener struct {
	net.Listener
	slots     chan struct{}
	perClient int

	mu      sync.Mutex
	clients map[netip.Addr]int

	closeOnce sync.Once
	done      chan struct{}
}

// clientOf is the address a connection is counted under: the IPv4 address,
// an IPv6 address's /64 (what one host has).
func clientOf(a net.Addr) netip.Addr {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip := ta.AddrPort().Addr().Unmap()
	if ip.Is6() {
		ip = netip.PrefixFrom(ip, 64).Masked().Addr()
	}
	return ip
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		key := clientOf(c.RemoteAddr())
		l.mu.Lock()
		n := l.clients[key]
		if n >= l.perClient {
			l.mu.Unlock()
			_ = c.Close()
			<-l.slots
			continue
		}
		l.clients[key] = n + 1
		l.mu.Unlock()
		return &limitConn{Conn: c, l: l, key: key}, nil
	}
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

func (l *limitListener) release(key netip.Addr) {
	l.mu.Lock()
	if n := l.clients[key]; n <= 1 {
		delete(l.clients, key)
	} else {
		l.clients[key] = n - 1
	}
	l.mu.Unlock()
	<-l.slots
}

// limitConn gives its slots back once, at its first Close.
type limitConn struct {
	net.Conn
	l    *limitListener
	key  netip.Addr
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.key) })
	return err
}

// GuardHost serves h to requests that name an acceptable Host, and refuses
// (403) a request that reached the listener over loopback and names any
// other: a web page on a name rebound to 127.0.0.1 (DNS rebinding) would
// otherwise read the API (the configuration, every client IP) through a
// browser on this host, its requests being same-origin for the browser.
// Acceptable are an IP literal (no name to rebind), no Host (HTTP/1.0),
// localhost and names under .localhost (RFC 6761: they resolve to loopback
// only, browsers do not ask DNS for them) and names (exact, or "*.suffix")
// the operator allows (api.allowedHosts). A request from another host over
// a non-loopback address is not concerned: that listener was opened to the
// network on purpose (api.insecure, an explicit address).
func GuardHost(h http.Handler, names []string) http.Handler {
	exact, suffixes := map[string]bool{}, []string(nil)
	for _, n := range names {
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		if rest, ok := strings.CutPrefix(n, "*."); ok {
			suffixes = append(suffixes, "."+rest)
		} else {
			exact[strings.Trim(n, "[]")] = true
		}
	}
	allowed := func(host string) bool {
		if host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") || exact[host] {
			return true
		}
		if _, err := netip.ParseAddr(host); err == nil {
			return true
		}
		for _, s := range suffixes {
			if strings.HasSuffix(host, s) {
				return true
			}
		}
		return false
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if overLoopback(r) {
			if host := hostOf(r.Host); !allowed(host) {
				writeError(w, http.StatusForbidden, fmt.Sprintf("Host %q is refused on this admin listener: over loopback, a request names an IP address, localhost, or a name of api.allowedHosts (a page on a name rebound to 127.0.0.1 must not read the API: DNS rebinding)", r.Host))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// overLoopback reports whether r came in on a loopback address (a listener
// bound to loopback, or a loopback connection to a wildcard one); when the
// server does not say, it is taken as loopback.
func overLoopback(r *http.Request) bool {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return true
	}
	ta, ok := la.(*net.TCPAddr)
	return !ok || ta.AddrPort().Addr().Unmap().IsLoopback()
}

// hostOf is a Host header's host, lower-case, without its port, brackets
// or a trailing dot.
func hostOf(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.Trim(h, "[]")
	return strings.ToLower(strings.TrimSuffix(h, "."))
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
