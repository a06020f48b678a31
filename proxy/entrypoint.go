package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// EntryPoint accepts connections on one address and routes each through the
// table current at its accept. Tables are swapped atomically; a connection
// keeps the generation it was routed with.
type EntryPoint struct {
	name        string
	ln          *net.TCPListener
	table       atomic.Pointer[Table]
	readTimeout time.Duration
	serverFirst time.Duration // silent this long: routed as a server-first client
	grace       time.Duration
	trusted     []netip.Prefix // PROXY protocol senders to believe
	ppInsecure  bool
	ppEnabled   bool
	live        tracker
	noRoute     atomic.Uint64
	accepted    atomic.Uint64
	log         zerolog.Logger
	started     atomic.Bool
	done        chan struct{}

	// unrouted counts, per client IP, connections accepted and not yet routed
	// (reading a PROXY header or a ClientHello); nil when unbounded.
	unrouted    *inflightconn.Limiter
	maxUnrouted int
	unroutedLog ratelog.Limiter

	acceptErrors atomic.Uint64
	acceptLog    ratelog.Limiter
}

// NewEntryPoint binds the entry point's address. An address in use is an
// error naming the entry point and the address.
func NewEntryPoint(name string, cfg *config.EntryPoint, log zerolog.Logger) (*EntryPoint, error) {
	l, err := listenConfig.Listen(context.Background(), "tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("entry point %q cannot listen on %s: %w", name, cfg.Address, err)
	}
	ln := l.(*net.TCPListener)
	e := &EntryPoint{
		name:        name,
		ln:          ln,
		log:         log.With().Str("entrypoint", name).Logger(),
		done:        make(chan struct{}),
		serverFirst: config.DefaultServerFirstTimeout,
		maxUnrouted: config.DefaultMaxUnroutedPerIP,
	}
	e.table.Store(emptyTable)
	if t := cfg.Transport; t != nil {
		if t.RespondingTimeouts != nil {
			e.readTimeout = time.Duration(t.RespondingTimeouts.ReadTimeout)
			e.serverFirst = time.Duration(t.RespondingTimeouts.ServerFirstTimeout)
		}
		if t.LifeCycle != nil {
			e.grace = time.Duration(t.LifeCycle.GraceTimeOut)
		}
		e.maxUnrouted = t.MaxUnroutedPerIP
	}
	if e.maxUnrouted > 0 {
		e.unrouted = inflightconn.NewLimiter(int64(e.maxUnrouted), false, 0)
	}
	if pp := cfg.ProxyProtocol; pp != nil {
		e.ppEnabled = true
		e.ppInsecure = pp.Insecure
		for _, r := range pp.TrustedIPs {
			p, note, err := config.ParsePrefixNote(r)
			if err != nil {
				_ = ln.Close()
				return nil, fmt.Errorf("entryPoints.%s.proxyProtocol.trustedIPs: %w", name, err)
			}
			if note != "" {
				e.log.Warn().Msg("entryPoints." + name + ".proxyProtocol.trustedIPs: " + note)
			}
			e.trusted = append(e.trusted, p)
		}
	}
	return e, nil
}

// Name returns the entry point's name.
func (e *EntryPoint) Name() string { return e.name }

// Addr returns the bound address (useful with port 0).
func (e *EntryPoint) Addr() net.Addr { return e.ln.Addr() }

// Open returns the number of connections being served now.
func (e *EntryPoint) Open() int64 { return e.live.n.Load() }

// NoRoute returns how many connections matched no router.
func (e *EntryPoint) NoRoute() uint64 { return e.noRoute.Load() }

// Accepted returns how many connections were accepted.
func (e *EntryPoint) Accepted() uint64 { return e.accepted.Load() }

// AcceptErrors returns how many accepts failed (out of file descriptors,
// aborted handshakes).
func (e *EntryPoint) AcceptErrors() uint64 { return e.acceptErrors.Load() }

// UnroutedState is the live view of an entry point's connections accepted
// but not yet routed.
type UnroutedState struct {
	// MaxPerIP is the bound per client IP; 0 when unbounded.
	MaxPerIP int `json:"maxPerIP"`
	// Connections and Clients are the connections waiting now and their
	// distinct client IPs; Rejected counts those refused at the bound.
	Connections int64                      `json:"connections"`
	Clients     int64                      `json:"clients"`
	Rejected    uint64                     `json:"rejectedTotal"`
	Top         []inflightconn.ClientCount `json:"topClients,omitempty"`
}

// Unrouted returns the connections waiting to be routed, with up to top
// client IPs by count.
func (e *EntryPoint) Unrouted(top int) UnroutedState {
	st := UnroutedState{MaxPerIP: e.maxUnrouted}
	if e.unrouted == nil {
		return st
	}
	ls := e.unrouted.Snapshot(top)
	st.Connections, st.Clients, st.Rejected, st.Top = ls.InFlight, ls.DistinctIPs, ls.Rejected, ls.Top
	return st
}

// SetTable makes t serve new connections. Live connections are untouched.
func (e *EntryPoint) SetTable(t *Table) {
	if t == nil {
		t = emptyTable
	}
	e.table.Store(t)
}

// Serve accepts until the listener is closed by Shutdown. A failed accept
// (out of file descriptors, an aborted handshake) pauses the loop (see
// acceptBackoff) and is logged at a bounded rate; the loop never ends
// silently.
func (e *EntryPoint) Serve() error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("entry point " + e.name + " is already serving")
	}
	defer close(e.done)
	var backoff acceptBackoff
	for {
		conn, err := e.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			e.acceptErrors.Add(1)
			pause := backoff.failed(err, time.Now())
			if ok, suppressed := e.acceptLog.Allow(ratelog.String(err.Error())); ok {
				ev := e.log.Error().Err(err).Dur("retry_in", pause)
				if suppressed > 0 {
					ev = ev.Uint64("suppressed", suppressed)
				}
				ev.Msg("accept failed")
			}
			time.Sleep(pause)
			continue
		}
		e.accepted.Add(1)
		t := e.table.Load()
		c := &tcp.Conn{TCP: conn, EntryPoint: e.name}
		c.Client = addrPort(conn.RemoteAddr())
		c.Local = addrPort(conn.LocalAddr())
		e.live.add(c)
		if !e.ppEnabled && !t.peek {
			e.route(c, t) // routing and middlewares never block; the service runs async
			continue
		}
		// This connection is read before it is routed: never on the accept
		// loop, and counted against its IP's bound on unrouted connections
		// first, before a byte is read.
		held, ok := e.admitUnrouted(c)
		if !ok {
			c.Reject()
			continue
		}
		go e.serveReading(c, t, held)
	}
}

// acceptBackoff is the pause after a failed accept: 5 ms, doubling up to 1 s
// while accepts keep failing with the same error. An accept that succeeds
// between two failures does not reset it: out of file descriptors, each one
// freed lets one accept through and the next fails again, and a pause that
// started over at every success would spin and flood the log. A second
// without failures, or a different error, starts again from 5 ms.
type acceptBackoff struct {
	pause    time.Duration
	last     string
	lastFail time.Time
}

func (b *acceptBackoff) failed(err error, now time.Time) time.Duration {
	msg := err.Error()
	if b.pause == 0 || msg != b.last || now.Sub(b.lastFail) > b.pause+time.Second {
		b.pause = 5 * time.Millisecond
	} else if b.pause *= 2; b.pause > time.Second {
		b.pause = time.Second
	}
	b.last, b.lastFail = msg, now
	return b.pause
}

// admitUnrouted counts a connection that must be read before it is routed
// against its client IP's bound, and returns the key it holds (invalid when
// none). A sender trusted for PROXY protocol speaks for many clients: it is
// not counted as one, and serveReading counts its connection under the client
// its header names once it is read.
func (e *EntryPoint) admitUnrouted(c *tcp.Conn) (netip.Addr, bool) {
	if e.unrouted == nil {
		return netip.Addr{}, true
	}
	k := c.Client.Addr()
	if e.ppEnabled && prefixesContain(e.trusted, k) {
		return netip.Addr{}, true
	}
	if !e.unrouted.Acquire(k) {
		e.rejectUnrouted(k)
		return netip.Addr{}, false
	}
	return k, true
}

// rejectUnrouted logs, at a bounded rate, a connection refused at the bound
// on unrouted connections (the limiter counted it).
func (e *EntryPoint) rejectUnrouted(k netip.Addr) {
	ok, suppressed := e.unroutedLog.Allow(ratelog.Addr(k))
	if !ok {
		return
	}
	ev := e.log.Info().Str("client_ip", k.String())
	if suppressed > 0 {
		ev = ev.Uint64("suppressed", suppressed)
	}
	ev.Str("error", fmt.Sprintf("too many unrouted connections from %s (entryPoints.%s.transport.maxUnroutedPerIP=%d)", k, e.name, e.maxUnrouted)).
		Msg("Connection rejected")
}

// serveReading reads what the client sends before routing, releases the
// connection's unrouted slot, and routes it.
func (e *EntryPoint) serveReading(c *tcp.Conn, t *Table, held netip.Addr) {
	ok := e.preroute(c, t, &held)
	if held.IsValid() {
		e.unrouted.Release(held)
	}
	if !ok {
		c.Reject()
		return
	}
	e.route(c, t)
}

// preroute reads the PROXY header and the ClientHello the table needs, under
// one deadline from accept. A client silent for serverFirstTimeout is routed
// as plain TCP when a route can take it (server-first protocols). It returns
// false when the connection must be closed: a malformed or unfinished header
// or hello, or nothing by the deadline where only TLS routes exist.
func (e *EntryPoint) preroute(c *tcp.Conn, t *Table, held *netip.Addr) bool {
	now := time.Now()
	pr := prereader{conn: c.TCP}
	defer pr.done()
	if e.readTimeout > 0 {
		pr.deadline = now.Add(e.readTimeout)
	}
	wait := e.serverFirst
	if wait == 0 || e.readTimeout > 0 && wait > e.readTimeout {
		wait = e.readTimeout
	}
	serverFirst := wait > 0 && (!t.peek || len(t.plain) > 0) // a silent client has a route
	if serverFirst {
		pr.expectFirstByte(now.Add(wait))
	}
	if e.ppEnabled {
		peer := c.Client.Addr()
		trusted := e.ppInsecure || prefixesContain(e.trusted, peer)
		if err := parseProxyHeader(&pr, c, trusted); err != nil {
			e.log.Debug().Err(err).Str("client_ip", peer.String()).Bool("trusted", trusted).Msg("bad PROXY protocol header")
			return false
		}
		if !t.peek || pr.silent {
			return true
		}
		if e.unrouted != nil && !held.IsValid() {
			// A trusted sender is not bound as one client: from here on the
			// client its header names is.
			k := c.Client.Addr()
			if !e.unrouted.Acquire(k) {
				e.rejectUnrouted(k)
				return false
			}
			*held = k
		}
		if serverFirst && len(c.Peeked) == 0 {
			pr.expectFirstByte(time.Now().Add(wait))
		}
	}
	if !t.peek {
		return true
	}
	return e.peekHello(c, &pr)
}

// route matches c against t and hands it to the router's chain. It returns
// once the connection is rejected or handed to its service.
func (e *EntryPoint) route(c *tcp.Conn, t *Table) {
	r := t.match(c)
	if r == nil {
		e.noRoute.Add(1)
		c.Reject()
		return
	}
	c.Router = r.name
	r.open.Add(1)
	c.Defer(r)
	r.handler.ServeTCP(c)
}

// Shutdown stops accepting, lets live connections drain for the grace
// timeout (or until ctx ends), then closes what is left.
func (e *EntryPoint) Shutdown(ctx context.Context) {
	_ = e.ln.Close()
	if e.started.Load() {
		<-e.done
	}
	if e.grace > 0 {
		timer := time.NewTimer(e.grace)
		defer timer.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
	wait:
		for e.live.n.Load() > 0 {
			select {
			case <-ctx.Done():
				break wait
			case <-timer.C:
				break wait
			case <-tick.C:
			}
		}
	}
	e.live.closeAll()
}

// Client keepalive: a client that vanishes without a FIN or RST (a NAT that
// forgot it, a host that lost power) would hold its inFlightConn slot for
// ever. Probes after 30 s idle, every 15 s, 4 unanswered: freed within ~90 s.
const (
	keepAliveIdle     = 30
	keepAliveInterval = 15
	keepAliveCount    = 4
)

// listenConfig sets keepalive once on the listening socket: Linux copies it
// to every accepted socket, which saves Go's four setsockopt calls per
// accepted connection (KeepAlive -1 turns those off).
var listenConfig = net.ListenConfig{
	KeepAlive: -1,
	Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			for _, o := range [][3]int{
				{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
				{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle},
				{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval},
				{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount},
			} {
				if serr == nil {
					serr = syscall.SetsockoptInt(int(fd), o[0], o[1], o[2])
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	},
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return unmapAP(ta.AddrPort())
	}
	return netip.AddrPort{}
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

func prefixesContain(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// tracker knows an entry point's live connections, so shutdown can close the
// ones that outlive the drain. It is sharded so accepts rarely contend; each
// shard is the tcp.Finisher that forgets the connection when it ends.
type tracker struct {
	n      atomic.Int64
	rr     atomic.Uint32
	shards [16]trackShard
}

type trackShard struct {
	mu sync.Mutex
	m  map[*tcp.Conn]struct{}
	t  *tracker
}

func (t *tracker) add(c *tcp.Conn) {
	s := &t.shards[t.rr.Add(1)%uint32(len(t.shards))]
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[*tcp.Conn]struct{})
		s.t = t
	}
	s.m[c] = struct{}{}
	s.mu.Unlock()
	t.n.Add(1)
	c.Defer(s)
}

// Finish forgets c.
func (s *trackShard) Finish(c *tcp.Conn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
	s.t.n.Add(-1)
}

func (t *tracker) closeAll() {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for c := range s.m {
			_ = c.TCP.Close()
		}
		s.mu.Unlock()
	}
}
