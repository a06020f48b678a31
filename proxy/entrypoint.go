package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
	"github.com/tollgate-proxy/tollgate/proxy/internal/netpoll"
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// EntryPoint accepts connections on one address and routes each through the
// table current at its accept. Tables are swapped atomically; a connection
// keeps the generation it was routed with.
type EntryPoint struct {
	name        string
	address     string         // as configured (an upgrade reuses the socket for the same address)
	inherited   bool           // the socket came from the process this one upgrades
	lfd         int            // the listening socket, raw (see netpoll.Listen)
	bound       netip.AddrPort // its address (port 0 resolved)
	wildcard    bool           // bound to every address: a client's local address must be asked
	engine      *engine        // the loops that accept and serve its connections
	closeOnce   sync.Once
	table       atomic.Pointer[Table]
	readTimeout time.Duration
	serverFirst time.Duration // silent this long: routed as a server-first client
	grace       time.Duration
	acceptGrace time.Duration  // requestAcceptGraceTimeout: accepting on after a stop signal (Drain)
	trusted     []netip.Prefix // PROXY protocol senders to believe
	ppInsecure  bool
	ppEnabled   bool
	live        atomic.Int64 // connections being served
	noRoute     atomic.Uint64
	accepted    atomic.Uint64
	log         zerolog.Logger

	// unrouted counts, per client key, connections accepted and not yet
	// routed (reading a PROXY header or a ClientHello) while maxUnrouted (per
	// IP) is above 0; its Key is how the entry point keys a client (IPv6 by
	// its v6Bits prefix) for every per-client bound of its own.
	unrouted    *inflightconn.Limiter
	maxUnrouted int
	v6Bits      int
	unroutedLog ratelog.Limiter
	// unroutedOpen counts every client's connections accepted and not yet
	// routed (rconn.counted), against maxUnroutedTotal (0: no bound);
	// unroutedFull those refused at that bound.
	unroutedOpen     atomic.Int64
	maxUnroutedTotal int64
	unroutedFull     atomic.Uint64
	unroutedFullLog  ratelog.Limiter
	// handshakes is the full TLS handshakes its terminating routers may
	// start per client key (tlsHandshakeRate); nil when unbounded.
	handshakes *ratelimit.Limiter

	// Connections served by goroutines (goserve.go), for the drain.
	gmu    sync.Mutex
	gconns map[*gconn]struct{}
	gwg    sync.WaitGroup
	tlsLog ratelog.Limiter // "TLS handshake failed" lines

	acceptErrors  atomic.Uint64
	acceptLog     ratelog.Limiter
	noRouteGently ratelog.Limiter // which no-route closes are gentle (tcp.Conn.Refuse)
	// refusals is the process's record of recent refusals (set by the
	// Server; nil records nothing), and the others what it says of the
	// entry point's own refusals, built once.
	refusals                      *tcp.Refusals
	whyUnrouted, whyUnroutedTotal string
	// refuse is how its connections close when a limit refuses them
	// (Options.Refuse, set by the Server).
	refuse tcp.RefusePolicy
	// redirect: plain HTTP requests no route takes are redirected
	// (http.redirections.entryPoint, plainhttp.go).
	redirect *config.Redirect

	// listenerClosed: lfd is closed (its number may be another file's
	// now), so Resume leaves it out.
	listenerClosed atomic.Bool
}

// NewEntryPoint binds the entry point's address. An address in use is an
// error naming the entry point and the address. Its connections are served
// once Server.Start puts its listener in the loops.
func NewEntryPoint(name string, cfg *config.EntryPoint, log zerolog.Logger) (*EntryPoint, error) {
	fd, bound, wildcard, err := netpoll.Listen(cfg.Address, cfg.ReusePort)
	if err != nil {
		return nil, fmt.Errorf("entry point %q cannot listen on %s: %w", name, cfg.Address, err)
	}
	return newEntryPoint(name, cfg, fd, bound, wildcard, log)
}

// NewEntryPointFrom is NewEntryPoint on a listening socket this process
// inherited from the one it upgrades (docs/operations/upgrading.md): fd is
// not bound again, so no connection waiting in its queue is lost. fd must be
// a listening TCP socket; it is made non-blocking and close-on-exec, and the
// entry point owns it from then on (on error it is left to the caller).
func NewEntryPointFrom(name string, cfg *config.EntryPoint, fd int, log zerolog.Logger) (*EntryPoint, error) {
	bound, wildcard, err := netpoll.Inherited(fd)
	if err != nil {
		return nil, fmt.Errorf("entry point %q: inherited socket %d for %s: %w", name, fd, cfg.Address, err)
	}
	return newEntryPoint(name, cfg, fd, bound, wildcard, log)
}

func newEntryPoint(name string, cfg *config.EntryPoint, fd int, bound netip.AddrPort, wildcard bool, log zerolog.Logger) (*EntryPoint, error) {
	e := &EntryPoint{
		name:        name,
		address:     cfg.Address,
		lfd:         fd,
		bound:       bound,
		wildcard:    wildcard,
		log:         log.With().Str("entrypoint", name).Logger(),
		serverFirst: config.DefaultServerFirstTimeout,
		maxUnrouted: config.DefaultMaxUnroutedPerIP,
		v6Bits:      config.DefaultIPv6Subnet,
	}
	e.unroutedFullLog.PerSecond = 1
	e.table.Store(emptyTable)
	total := -1 // the default, from the descriptor limit
	hs := &config.TLSHandshakeRate{}
	hs.SetDefaults()
	e.redirect = cfg.Redirect()
	if t := cfg.Transport; t != nil {
		if t.RespondingTimeouts != nil {
			e.readTimeout = time.Duration(t.RespondingTimeouts.ReadTimeout)
			e.serverFirst = time.Duration(t.RespondingTimeouts.ServerFirstTimeout)
		}
		if t.LifeCycle != nil {
			e.grace = time.Duration(t.LifeCycle.GraceTimeOut)
			e.acceptGrace = time.Duration(t.LifeCycle.RequestAcceptGraceTimeout)
		}
		e.maxUnrouted = t.MaxUnroutedPerIP
		e.v6Bits = t.IPv6Subnet
		if t.MaxUnrouted != nil {
			total = *t.MaxUnrouted
		}
		hs = t.TLSHandshakeRate
	}
	e.unrouted = inflightconn.NewLimiter(int64(e.maxUnrouted), false, e.v6Bits)
	if total < 0 {
		total = defaultMaxUnrouted()
	}
	e.maxUnroutedTotal = int64(total)
	e.whyUnrouted = fmt.Sprintf("too many unrouted connections from this client (entryPoints.%s.transport.maxUnroutedPerIP=%d)", name, e.maxUnrouted)
	e.whyUnroutedTotal = fmt.Sprintf("too many unrouted connections on the entry point (entryPoints.%s.transport.maxUnrouted=%d)", name, e.maxUnroutedTotal)
	if hs != nil && hs.Average > 0 {
		e.handshakes = ratelimit.NewLimiter(ratelimit.Rule{Average: hs.Average, Period: time.Duration(hs.Period), Burst: hs.Burst}, e.v6Bits, nil)
	}
	if pp := cfg.ProxyProtocol; pp != nil {
		e.ppEnabled = true
		e.ppInsecure = pp.Insecure
		for _, r := range pp.TrustedIPs {
			p, note, err := config.ParsePrefixNote(r)
			if err != nil {
				e.closeListener()
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

// CloseListener closes the listening socket (this process's descriptor of
// it) once it is out of the loops: after Server.StopAccepting, when the
// process it was handed to does not serve it.
func (e *EntryPoint) CloseListener() { e.closeListener() }

func (e *EntryPoint) closeListener() {
	e.closeOnce.Do(func() {
		e.listenerClosed.Store(true)
		_ = unix.Close(e.lfd)
	})
}

// Listener returns the configured address and the listening socket, for a
// handover to a new process: the descriptor stays the entry point's.
func (e *EntryPoint) Listener() (address string, fd int) { return e.address, e.lfd }

// Name returns the entry point's name.
func (e *EntryPoint) Name() string { return e.name }

// Addr returns the bound address (useful with port 0).
func (e *EntryPoint) Addr() net.Addr { return net.TCPAddrFromAddrPort(e.bound) }

// Open returns the number of connections being served now.
func (e *EntryPoint) Open() int64 { return e.live.Load() }

// Finish counts the end of one of the entry point's connections.
func (e *EntryPoint) Finish(*tcp.Conn) { e.live.Add(-1) }

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
	// MaxPerIP is the bound per client IP (IPv6: per IPv6Subnet prefix); 0
	// when unbounded.
	MaxPerIP   int `json:"maxPerIP"`
	IPv6Subnet int `json:"ipv6Subnet,omitempty"`
	// Connections and Clients are the connections the per-IP bound counts
	// now and their distinct client keys; Rejected counts those refused at
	// that bound.
	Connections int64                      `json:"connections"`
	Clients     int64                      `json:"clients"`
	Rejected    uint64                     `json:"rejectedTotal"`
	Top         []inflightconn.ClientCount `json:"topClients,omitempty"`
	// Max is the bound on every client's unrouted connections together (0:
	// none), Open those connections now (a trusted PROXY sender's too, and
	// with no per-IP bound), RejectedMax those refused at Max.
	Max         int64  `json:"max"`
	Open        int64  `json:"open"`
	RejectedMax uint64 `json:"maxRejectedTotal"`
}

// Unrouted returns the connections waiting to be routed, with up to top
// client keys by count.
func (e *EntryPoint) Unrouted(top int) UnroutedState {
	st := UnroutedState{MaxPerIP: e.maxUnrouted, Max: e.maxUnroutedTotal, Open: e.unroutedOpen.Load(), RejectedMax: e.unroutedFull.Load()}
	if e.v6Bits > 0 && e.v6Bits < 128 {
		st.IPv6Subnet = e.v6Bits
	}
	if e.maxUnrouted == 0 {
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

// serve routes a new connection at once when the entry point needs no byte
// to route it (read, what was read from it already, goes to the backend
// first), or starts reading it; it reports whether it is being read.
func (e *EntryPoint) serve(rc *rconn, read []byte) bool {
	c, t := &rc.c, rc.table
	if !e.ppEnabled && !t.peek {
		if len(read) > 0 {
			c.Peeked = read
		}
		e.route(rc, t) // routing and middlewares never block; the dial does not either
		return false
	}
	held, ok, gently := e.admitUnrouted(c)
	if !ok {
		c.Refuse(c.Gently(gently))
		return false
	}
	rc.held, rc.counted = held, true
	e.startPreroute(rc, t)
	return rc.state == statePreroute
}

// newConn files a connection on client socket fd on loop l, with the
// entry point's current table.
func (e *EntryPoint) newConn(l *loop, fd int, peer netip.AddrPort) *rconn {
	rc := l.newRconn()
	*rc = rconn{l: l, ep: e, cfd: fd, bfd: -1, timerIdx: -1}
	c := &rc.c
	c.Sock, c.Client, c.EntryPoint, c.Refusals, c.RefusePolicy = rc, peer, e.name, e.refusals, e.refuse
	if e.wildcard {
		c.LocalUnknown = true
	} else {
		c.Local = e.bound
	}
	l.slotFor(rc)
	e.live.Add(1)
	c.Defer(e)
	rc.table = e.table.Load()
	return rc
}

// startPreroute starts reading what the client sends before routing: the
// PROXY header, then enough to tell a TLS ClientHello from plain TCP. It
// all must arrive within readTimeout of the accept. A client that sends
// nothing for serverFirstTimeout (readTimeout when 0) is a client of a
// server-first protocol: it is routed as plain TCP when a route can take it.
func (e *EntryPoint) startPreroute(rc *rconn, t *Table) {
	rc.state = statePreroute
	now := rc.l.mono()
	if e.readTimeout > 0 {
		rc.deadline = now + int64(e.readTimeout)
	}
	wait := e.serverFirst
	if wait == 0 || e.readTimeout > 0 && wait > e.readTimeout {
		wait = e.readTimeout
	}
	if wait > 0 && (!t.peek || len(t.plain) > 0) { // a silent client has a route
		rc.wait = int64(wait)
		rc.silentBy = min(now+rc.wait, rc.deadlineOr())
	}
	rc.pre = preroute{pp: e.ppEnabled, peek: t.peek, starttls: t.starttls}
	if e.ppEnabled {
		peer := rc.c.Client.Addr()
		rc.pre.trusted = e.ppInsecure || prefixesContain(e.trusted, peer)
		rc.exempt = prefixesContain(e.trusted, peer)
	}
	if !rc.registerClient() {
		rc.c.Reject()
		return
	}
	rc.rearm()
	// The client may have written already: epoll reports it at once (an
	// edge-triggered watch added to a readable socket), so nothing is read here.
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
// against the entry point's bound on every client's unrouted connections,
// then against its client key's bound, and returns the key it holds
// (invalid when none); once admitted it is counted (rconn.counted) until
// releaseUnrouted. A sender trusted for PROXY protocol speaks for many
// clients: it is not counted as one client, and rconn.decide counts its
// connection under the client its header names once it is read. Refused,
// ok is false and gently says how to close it.
func (e *EntryPoint) admitUnrouted(c *tcp.Conn) (held netip.Addr, ok, gently bool) {
	a := c.Client.Addr()
	if n := e.unroutedOpen.Add(1); e.maxUnroutedTotal > 0 && n > e.maxUnroutedTotal {
		e.unroutedOpen.Add(-1)
		e.unroutedFull.Add(1)
		c.NoteRefusal(tcp.ReasonUnroutedTotal, "", e.whyUnroutedTotal)
		return netip.Addr{}, false, e.rejectUnroutedTotal(a)
	}
	if e.ppEnabled && prefixesContain(e.trusted, a) {
		return netip.Addr{}, true, false
	}
	k, ok, gently := e.holdUnrouted(c)
	if !ok {
		e.unroutedOpen.Add(-1)
	}
	return k, ok, gently
}

// holdUnrouted counts an unrouted connection of c's client address
// against its key's bound (maxUnroutedPerIP; IPv6 by the ipv6Subnet
// prefix) and returns the key it holds, invalid when there is no bound.
func (e *EntryPoint) holdUnrouted(c *tcp.Conn) (held netip.Addr, ok, gently bool) {
	if e.maxUnrouted == 0 {
		return netip.Addr{}, true, false
	}
	k := e.unrouted.Key(c.Client.Addr())
	if !e.unrouted.Acquire(k) {
		c.NoteRefusal(tcp.ReasonUnrouted, "", e.whyUnrouted)
		return netip.Addr{}, false, e.rejectUnrouted(k)
	}
	return k, true, false
}

// releaseUnrouted ends what admitUnrouted counted: the connection and the
// key k it held (invalid when none).
func (e *EntryPoint) releaseUnrouted(k netip.Addr) {
	e.unroutedOpen.Add(-1)
	if k.IsValid() {
		e.unrouted.Release(k)
	}
}

// clientKey is the key the entry point's own per-client bounds count a
// client address under: the address (unmapped), an IPv6 one by its
// ipv6Subnet prefix.
func (e *EntryPoint) clientKey(a netip.Addr) netip.Addr { return e.unrouted.Key(a) }

// defaultMaxUnrouted is the default bound on an entry point's unrouted
// connections: a quarter of the process's descriptor limit (Go raises the
// soft limit to the hard one at start), so that connections nobody has
// routed yet cannot take the descriptors the routed ones and their backends
// need.
func defaultMaxUnrouted() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur > 1<<30 {
		return 1 << 18
	}
	return max(int(rl.Cur/4), 1)
}

// rejectUnrouted logs, at a bounded rate, a connection refused at the bound
// on unrouted connections per client (the limiter counted it).
func (e *EntryPoint) rejectUnrouted(k netip.Addr) (logged bool) {
	ok, suppressed := e.unroutedLog.Allow(ratelog.Addr(k))
	if !ok {
		return false
	}
	ev := e.log.Info().Str("client_ip", k.String())
	if suppressed > 0 {
		ev = ev.Uint64("suppressed", suppressed)
	}
	what := k.String()
	if k.Is6() && e.v6Bits > 0 && e.v6Bits < 128 {
		what = fmt.Sprintf("%s/%d", k, e.v6Bits)
	}
	ev.Str("error", fmt.Sprintf("too many unrouted connections from %s (entryPoints.%s.transport.maxUnroutedPerIP=%d)", what, e.name, e.maxUnrouted)).
		Msg("Connection rejected")
	return true
}

// rejectUnroutedTotal logs, at most once a second, a connection from a
// refused at the bound on every client's unrouted connections (counted in
// unroutedFull).
func (e *EntryPoint) rejectUnroutedTotal(a netip.Addr) (logged bool) {
	ok, suppressed := e.unroutedFullLog.Allow(0)
	if !ok {
		return false
	}
	ev := e.log.Warn().Str("client_ip", a.String())
	if suppressed > 0 {
		ev = ev.Uint64("suppressed", suppressed)
	}
	ev.Str("error", fmt.Sprintf("too many unrouted connections on the entry point (entryPoints.%s.transport.maxUnrouted=%d)", e.name, e.maxUnroutedTotal)).
		Msg("Connection rejected")
	return true
}

// whyNoRoute is what the record of recent refusals says of a connection
// no router takes.
const whyNoRoute = "no router matches the connection"

// route matches rc's connection against t and hands it to its router's
// chain, which takes it to the service's plane (loadBalancer.ServeTCP); it
// returns once the connection is refused or handed on. A chain that has not
// finished with it when it returns (a middleware waiting for a shared
// store's answer, tcp.Conn.Later) holds it: it is pinned, never recycled
// (loop.recycle).
func (e *EntryPoint) route(rc *rconn, t *Table) {
	rc.state = stateRouting
	if h := e.handlerFor(&rc.c, t); h != nil {
		h.ServeTCP(&rc.c)
	}
	if rc.state == stateRouting {
		rc.pinned = true
	}
}

// handlerFor returns the chain of the router t matches for c, counted as
// the router's; nil when c was answered (a TLS-ALPN-01 validation, a plain
// HTTP request no route takes) or refused (no route) instead.
func (e *EntryPoint) handlerFor(c *tcp.Conn, t *Table) tcp.Handler {
	if len(t.acme) > 0 && c.SNI != "" && len(c.ALPN) == 1 && c.ALPN[0] == acmeTLS1 {
		if kp := validation(t.acme, c); kp != nil {
			e.answerChallenge(c, kp)
			return nil
		}
	}
	r := t.match(c)
	if r == nil {
		if (len(t.http01) > 0 || e.redirect != nil) && !sniff.IsTLS(c.Peeked) {
			e.answerHTTP(c, t.http01)
			return nil
		}
		e.noRoute.Add(1)
		c.NoteRefusal(tcp.ReasonNoRoute, "", whyNoRoute)
		gently, _ := e.noRouteGently.Allow(ratelog.Addr(c.Client.Addr()))
		c.Refuse(c.Gently(gently))
		return nil
	}
	c.Router = r.name
	r.open.Add(1)
	c.Defer(r)
	return r.handler
}

// Shutdown stops accepting, lets live connections drain for the grace
// timeout (or until ctx ends), then closes what is left.
func (e *EntryPoint) Shutdown(ctx context.Context) { e.shutdown(ctx, false) }

// shutdown is Shutdown, after accepting on for the requestAcceptGraceTimeout
// (or until ctx ends) when keepAccepting.
func (e *EntryPoint) shutdown(ctx context.Context, keepAccepting bool) {
	if keepAccepting && e.acceptGrace > 0 {
		t := time.NewTimer(e.acceptGrace)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if e.engine != nil {
		e.engine.each(func(l *loop) { l.removeListener(e) })
	}
	e.closeListener()
	if e.grace > 0 {
		timer := time.NewTimer(e.grace)
		defer timer.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
	wait:
		for e.live.Load() > 0 {
			select {
			case <-ctx.Done():
				break wait
			case <-timer.C:
				break wait
			case <-tick.C:
			}
		}
	}
	if e.engine != nil {
		e.engine.each(func(l *loop) { l.closeAll(e) })
	}
	e.abortGoroutines()
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
