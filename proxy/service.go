package proxy

import (
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/accesslog"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// server is one backend address of a load balancer, parsed once at compile
// time: an IP literal becomes the connect(2) address; a host name is looked
// up at each dial, off the loop.
type server struct {
	address string
	up      *atomic.Bool   // health; nil means always up
	ap      netip.AddrPort // an IP literal's address; invalid for a host name
	host    string         // when ap is invalid
	port    uint16
	tls     bool // dialled with TLS (servers[].tls): served by goroutines
}

// newServer parses a server address ("ip:port" or "host:port").
func newServer(address string) server {
	s := server{address: address}
	host, port, ok := hostPort(address)
	if !ok {
		s.host, s.port = address, 0 // dialling fails and names it
		return s
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		s.ap = netip.AddrPortFrom(ip.Unmap(), port)
		return s
	}
	s.host, s.port = host, port
	return s
}

// ServiceCounters counts a service's outcomes; shared across generations.
type ServiceCounters struct {
	DialErrors atomic.Uint64
	// SpliceFallbacks counts copies done through a buffer because no splice
	// pipe could be created (out of file descriptors).
	SpliceFallbacks atomic.Uint64
	// TLSErrors counts TLS handshakes with servers that failed (a
	// certificate that does not verify, among others); each is also a dial error.
	TLSErrors atomic.Uint64

	dialLog ratelog.Limiter // "backend dial failed" lines, one per server a second
}

// loadBalancer is a loadBalancer service: round-robin over its servers. A
// failed dial tries the next healthy server once before giving up.
type loadBalancer struct {
	name    string
	servers []server
	next    atomic.Uint32
	delay   time.Duration
	ppVer   byte // PROXY protocol version to send; 0 for none
	// From the servers transport (docs/reference/servers-transports.md).
	dialTimeout time.Duration
	keepAlive   time.Duration // negative: no keepalive probes
	tlsConf     *tls.Config   // for servers with tls; nil: verify against the system roots
	goroutines  bool          // some server is dialled with TLS: every connection is served by goroutines
	counters    *ServiceCounters
	cap         *capacity // nil unless a server has a maxConn
	// log is the Compile's logger, one for every service: the service name
	// is added at the (rare) log sites, and a logger value here would be a
	// hundred bytes for each of 100,000 services.
	log *zerolog.Logger
	obs *accesslog.Observer // nil unless an access log or metrics observe connection ends
}

var _ tcp.Handler = (*loadBalancer)(nil)

// pick returns the index of the next healthy server from the round-robin
// position, or -1.
func (lb *loadBalancer) pick() int {
	n := len(lb.servers)
	if n == 0 {
		return -1
	}
	start := int(lb.next.Add(1)-1) % n
	for i := 0; i < n; i++ {
		j := (start + i) % n
		if s := lb.servers[j]; s.up == nil || s.up.Load() {
			return j
		}
	}
	return -1
}

// ServeTCP hands c to the plane that carries it (its event loop, or
// goroutines for TLS), which takes it from the load balancer's pick to its
// end (plan.go); it returns at once, or once a goroutine-served
// connection's copy has started on goroutines of its own.
func (lb *loadBalancer) ServeTCP(c *tcp.Conn) {
	pl, ok := c.Sock.(plane)
	if !ok {
		lb.log.Error().Str("service", lb.name).Str("router", c.Router).Msg("connection of no known kind: closed")
		c.Reject()
		return
	}
	pl.carry(lb)
}

func tcpAddr(ap netip.AddrPort) *net.TCPAddr { return net.TCPAddrFromAddrPort(ap) }

// weighted spreads connections over child handlers by smooth weighted
// round-robin (nginx's algorithm): deterministic, and a 3:1 split interleaves.
type weighted struct {
	children []weightedChild
	total    int
	mu       sync.Mutex
}

type weightedChild struct {
	h       tcp.Handler
	weight  int
	current int
}

var _ tcp.Handler = (*weighted)(nil)

func (w *weighted) ServeTCP(c *tcp.Conn) {
	w.mu.Lock()
	// Smooth weighted round-robin over the members that can take a
	// connection now: a member whose servers are all down is skipped, so its
	// share goes to the others instead of to closed connections.
	best, total := -1, 0
	for i := range w.children {
		ch := &w.children[i]
		if ch.weight == 0 || !isAvailable(ch.h) {
			continue
		}
		ch.current += ch.weight
		total += ch.weight
		if best < 0 || ch.current > w.children[best].current {
			best = i
		}
	}
	if best < 0 {
		w.mu.Unlock()
		c.Reject()
		return
	}
	w.children[best].current -= total
	h := w.children[best].h
	w.mu.Unlock()
	h.ServeTCP(c)
}

// availability is implemented by services that know whether any of their
// servers can take a connection now.
type availability interface{ available() bool }

func isAvailable(h tcp.Handler) bool {
	a, ok := h.(availability)
	return !ok || a.available()
}

// available reports whether some server is up.
func (lb *loadBalancer) available() bool {
	for _, s := range lb.servers {
		if s.up == nil || s.up.Load() {
			return true
		}
	}
	return false
}

// available reports whether some member with a weight is available. It
// reads only what compiling set (a parent asks without w.mu, while w's
// ServeTCP moves its members' current weights under it).
func (w *weighted) available() bool {
	for i := range w.children {
		if ch := &w.children[i]; ch.weight > 0 && isAvailable(ch.h) {
			return true
		}
	}
	return false
}
