package proxy

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// DialTimeout bounds a backend dial.
const DialTimeout = 10 * time.Second

// server is one backend address of a load balancer.
type server struct {
	address string
	up      *atomic.Bool // health; nil means always up
}

// ServiceCounters counts a service's outcomes; shared across generations.
type ServiceCounters struct {
	DialErrors atomic.Uint64
	// SpliceFallbacks counts copies done through a buffer because no splice
	// pipe could be created (out of file descriptors).
	SpliceFallbacks atomic.Uint64

	dialLog ratelog.Limiter // "backend dial failed" lines, one per server a second
}

// loadBalancer is a loadBalancer service: round-robin over its servers. A
// failed dial tries the next healthy server once before giving up.
type loadBalancer struct {
	name     string
	servers  []server
	next     atomic.Uint32
	delay    time.Duration
	ppVer    byte // PROXY protocol version to send; 0 for none
	counters *ServiceCounters
	dialer   net.Dialer
	log      zerolog.Logger
	obs      *connObserver // nil unless an access log or metrics observe connection ends
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

// ServeTCP dials a backend and starts copying; it returns once the copiers run.
func (lb *loadBalancer) ServeTCP(c *tcp.Conn) {
	var began time.Time
	if lb.obs != nil {
		began = time.Now()
	}
	backend := lb.dial(c)
	if backend == nil {
		c.Reject()
		return
	}
	if !lb.preamble(c, backend) {
		_ = backend.Close()
		c.Reject()
		return
	}
	if lb.obs != nil {
		op := &observedPair{pair: pair{c: c, backend: backend, delay: lb.delay, counters: lb.counters}, began: began, obs: lb.obs, svc: lb.name}
		op.startObserved()
		return
	}
	p := &pair{c: c, backend: backend, delay: lb.delay, counters: lb.counters}
	p.start()
}

func (lb *loadBalancer) dial(c *tcp.Conn) *net.TCPConn {
	first := lb.pick()
	if first < 0 {
		lb.log.Debug().Str("service", lb.name).Str("router", c.Router).Msg("no healthy server")
		return nil
	}
	tried := first
	for attempt := 0; attempt < 2 && attempt < len(lb.servers); attempt++ {
		idx := tried
		if attempt == 1 {
			idx = lb.pick()
			if idx < 0 || idx == first {
				break
			}
		}
		addr := lb.servers[idx].address
		conn, err := lb.dialer.Dial("tcp", addr) // dialer.Timeout bounds it
		if err == nil {
			return conn.(*net.TCPConn)
		}
		lb.counters.DialErrors.Add(1)
		if ok, suppressed := lb.counters.dialLog.Allow(ratelog.String(addr)); ok {
			ev := lb.log.Warn().Err(err).Str("service", lb.name).Str("server", addr).Str("router", c.Router)
			if suppressed > 0 {
				ev = ev.Uint64("suppressed", suppressed)
			}
			ev.Msg("backend dial failed")
		}
		tried = idx
	}
	return nil
}

// preamble writes what must precede the client's bytes: a PROXY header and
// any bytes already peeked from the client.
func (lb *loadBalancer) preamble(c *tcp.Conn, backend *net.TCPConn) bool {
	if lb.ppVer != 0 {
		h := proxyproto.HeaderProxyFromAddrs(lb.ppVer, tcpAddr(c.Client), tcpAddr(c.Local))
		if _, err := h.WriteTo(backend); err != nil {
			return false
		}
	}
	if len(c.Peeked) > 0 {
		if _, err := backend.Write(c.Peeked); err != nil {
			return false
		}
		c.Peeked = nil
	}
	return true
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

// available reports whether some member with a weight is available.
func (w *weighted) available() bool {
	for _, ch := range w.children {
		if ch.weight > 0 && isAvailable(ch.h) {
			return true
		}
	}
	return false
}
