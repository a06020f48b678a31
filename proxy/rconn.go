package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// rconn is one client connection on an event loop, from accept to close:
// read before routing when the entry point needs it, routed through the
// table and the router's middlewares, then proxied to a backend socket the
// loop dials without blocking. Every field is the loop's.
type rconn struct {
	c         tcp.Conn // embedded: one allocation per connection
	l         *loop
	ep        *EntryPoint
	slot, gen uint32
	timerIdx  int // position in the loop's timer heap; -1 when none
	timerAt   int64
	cfd, bfd  int // client and backend sockets; -1 when closed or none
	state     connState
	cReg      bool // cfd is in the loop's epoll set

	// before routing
	table    *Table
	held     netip.Addr // the unrouted slot counted for this connection
	buf      []byte     // what the client sent before routing
	pre      preroute   // the decision, from buf
	exempt   bool       // trusted sender: bound per claimed client, after the header
	eof      bool       // the client closed before it was routed
	deadline int64
	silentBy int64
	wait     int64 // server-first wait, 0 when a silent client has no route

	// the service
	lb       *loadBalancer
	first    *server    // the server tried first
	srv      *server    // the server dialled
	capSlot  *capServer // the capped server slot held, when lb.cap is set
	attempt  int
	began    time.Time
	up, dn   direction // client -> backend, backend -> client
	delay    int64     // termination delay; negative waits without limit
	halfDone bool
	failed   bool
	pgHello  []byte // the client's bytes held until the backend agrees to TLS

	// pinned: something off the loop's call stack may still hold the
	// connection (a closure posted back to the loop, a capped server's
	// queue, a shared store's pipeline, goroutines it left the loop for),
	// so its rconn is left to the collector when it ends; else the loop
	// reuses it (loop.recycle).
	pinned   bool
	recycled bool // in the loop's spare list
}

type connState uint8

const (
	stateRouting   connState = iota // accepted; in the router's chain
	statePreroute                   // reading the PROXY header / ClientHello
	stateParked                     // ... not now: being handed to a new process (handoff.go)
	stateQueued                     // waiting for a capped server's slot
	stateResolving                  // looking up a backend host name
	stateDialing                    // connecting to the backend
	statePgBackend                  // asking the backend for TLS, as the client asked (postgres.go)
	stateProxying                   // copying both ways
	stateDone
)

// direction is one way of a proxied connection.
type direction struct {
	readable bool   // the source may have data (an edge was seen and not drained)
	rdhup    bool   // the source's peer has closed its side: a short read is the end
	writable bool   // the destination takes data (until EAGAIN)
	eof      bool   // the source ended
	shut     bool   // the destination's write side is shut (the end passed on)
	pend     []byte // read, not yet written (buffered copies)
	pipe     *splicePipe
	inPipe   int  // bytes in pipe, not yet written
	splice   bool // bulk: moved through pipes from now on
	n        int64
}

var _ tcp.Socket = (*rconn)(nil)

// Refuse ends a connection that is not served (tcp.Socket): the client
// socket is reset or closed gently, the backend socket (if a dial started)
// closed. The caller has finished the tcp.Conn.
func (rc *rconn) Refuse(gently bool) {
	rc.releaseHeld()
	if rc.cfd >= 0 {
		if gently {
			_ = sysShutdown(rc.cfd, unix.SHUT_WR)
		} else {
			_ = sysResetOnClose(rc.cfd)
		}
		_ = sysClose(rc.cfd)
		rc.cfd = -1
	}
	rc.closeBackend()
	rc.releaseSlot()
	rc.state = stateDone
	rc.l.arm(rc, 0)
	rc.l.release(rc)
	rc.l.recycle(rc)
}

// LocalAddr asks the kernel where the client connected to (tcp.Socket).
func (rc *rconn) LocalAddr() netip.AddrPort {
	if rc.cfd < 0 {
		return netip.AddrPort{}
	}
	return localAddrOf(rc.cfd)
}

// Later runs run on the loop if the connection still waits in its router's
// chain, else dropped (tcp.Socket). It is called from any goroutine, so it
// writes nothing of rc: the connection was pinned when its chain returned
// without finishing with it (enterChain).
func (rc *rconn) Later(run, dropped func()) {
	rc.l.post(func(*loop) {
		if rc.state == stateRouting {
			run()
		} else if dropped != nil {
			dropped()
		}
	})
}

func (rc *rconn) releaseHeld() {
	if rc.held.IsValid() {
		rc.ep.unrouted.Release(rc.held)
		rc.held = netip.Addr{}
	}
}

func (rc *rconn) closeBackend() {
	if rc.bfd >= 0 {
		_ = sysClose(rc.bfd)
		rc.bfd = -1
	}
}

// registerClient puts the client socket in the loop's epoll set, once, edge
// triggered for reads, writes and the peer's close.
func (rc *rconn) registerClient() bool {
	if rc.cReg {
		return true
	}
	if err := rc.l.ctl(unix.EPOLL_CTL_ADD, rc.cfd, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET, eventData(tagClient, rc.slot, rc.gen)); err != nil {
		rc.ep.log.Error().Err(err).Msg("cannot watch a client socket")
		return false
	}
	rc.cReg = true
	return true
}

// event handles one epoll event of the connection's client or backend socket.
func (rc *rconn) event(tag int, ev uint32) {
	switch rc.state {
	case statePreroute:
		if tag == tagClient {
			if ev&unix.EPOLLRDHUP != 0 {
				rc.up.rdhup = true
			}
			rc.readBeforeRouting()
		}
	case stateDialing:
		if tag == tagClient {
			rc.noteClient(ev)
			return
		}
		if ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			rc.dialFailed(socketError(rc.bfd))
			return
		}
		rc.noteBackend(ev)
		if ev&unix.EPOLLOUT != 0 {
			rc.connected()
		}
	case statePgBackend:
		if tag == tagClient {
			rc.noteClient(ev)
			return
		}
		rc.noteBackend(ev)
		rc.pgAsk()
	case stateProxying:
		if tag == tagClient {
			rc.noteClient(ev)
		} else {
			rc.noteBackend(ev)
		}
		rc.pump()
	case stateResolving:
		if tag == tagClient {
			rc.noteClient(ev)
		}
	case stateQueued:
		rc.noteClient(ev)
		if ev&(unix.EPOLLHUP|unix.EPOLLERR) != 0 { // the client is gone: it waits no more
			rc.lb.cap.leave(rc) // if a slot is on its way, dequeued gives it back
			rc.end(true)
		}
	}
}

const readable = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR

func (rc *rconn) noteClient(ev uint32) {
	if ev&readable != 0 {
		rc.up.readable = true
	}
	if ev&unix.EPOLLRDHUP != 0 {
		rc.up.rdhup = true
	}
	if ev&unix.EPOLLOUT != 0 {
		rc.dn.writable = true
	}
}

func (rc *rconn) noteBackend(ev uint32) {
	if ev&readable != 0 {
		rc.dn.readable = true
	}
	if ev&unix.EPOLLRDHUP != 0 {
		rc.dn.rdhup = true
	}
	if ev&unix.EPOLLOUT != 0 {
		rc.up.writable = true
	}
}

// timeout handles the connection's deadline.
func (rc *rconn) timeout() {
	switch rc.state {
	case statePreroute:
		rc.prerouteTimeout()
	case stateQueued:
		rc.queueTimeout()
	case stateDialing, stateResolving:
		rc.dialFailed(unix.ETIMEDOUT)
	case statePgBackend:
		rc.pgRefused("no answer within the dial timeout")
	case stateProxying:
		// The termination delay after one side ended: the other side had its
		// time. Ending at a deadline counts as an error, as a read deadline did.
		rc.end(true)
	}
}

// abort ends the connection at once (the end of a shutdown drain).
func (rc *rconn) abort() {
	switch rc.state {
	case stateProxying, stateDialing, stateResolving, statePgBackend:
		rc.end(true)
	case stateQueued:
		rc.lb.cap.leave(rc)
		rc.end(true)
	case statePreroute, stateParked, stateRouting:
		rc.c.Reject()
	}
}

// Before routing. See EntryPoint.startPreroute for the deadlines.

// maxPreroute bounds what is read before routing: a PROXY header and a
// ClientHello.
const maxPreroute = maxV2Header + maxHelloBytes

func (rc *rconn) readBeforeRouting() {
	for !rc.eof && len(rc.buf) < maxPreroute {
		if cap(rc.buf)-len(rc.buf) < 512 {
			grown := make([]byte, len(rc.buf), min(max(2*cap(rc.buf), 2048), maxPreroute))
			copy(grown, rc.buf)
			rc.buf = grown
		}
		space := cap(rc.buf) - len(rc.buf)
		n, err := sysRead(rc.cfd, rc.buf[len(rc.buf):cap(rc.buf)])
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			rc.prerouteFailed(err)
			return
		}
		if n == 0 {
			rc.eof = true
			break
		}
		rc.buf = rc.buf[:len(rc.buf)+n]
		rc.silentBy = 0 // it speaks (a header, or its own bytes): only the deadline from now on
		if n < space {
			// Drained for now: the next bytes bring a new event; after the
			// client's close (EPOLLRDHUP) there are none.
			rc.eof = rc.up.rdhup
			break
		}
	}
	rc.decide()
}

// decide routes the connection as soon as what was read says how, or waits.
func (rc *rconn) decide() {
	c, e := &rc.c, rc.ep
	out, err := rc.pre.step(rc.buf, rc.eof, c)
	switch out {
	case preFailed:
		rc.prerouteFailed(err)
		return
	case preClosed:
		c.Refuse(true) // closed before saying anything
		return
	case preAnswer:
		// PostgreSQL's SSLRequest (postgres.go): one byte on a socket that
		// has sent nothing yet; a socket that cannot take it is refused. A
		// connection handed over from another process was answered there.
		if rc.pre.replay > 0 {
			rc.pre.replay--
		} else if n, err := sysWrite(rc.cfd, []byte{rc.pre.answer}); n != 1 {
			rc.prerouteFailed(fmt.Errorf("answering a PostgreSQL SSLRequest: %v", err))
			return
		}
		rc.pre.answered++
		rc.decide()
		return
	}
	if rc.pre.headerNow && rc.table.peek && rc.exempt && e.unrouted != nil {
		// A trusted sender is not bound as one client: from here on the
		// client its header names is.
		k := c.Client.Addr()
		if !e.unrouted.Acquire(k) {
			c.Refuse(tcp.Gently(e.rejectUnrouted(k)))
			return
		}
		rc.held = k
	}
	if out == preRoute {
		rc.route(rc.buf[rc.pre.hdrEnd+rc.pre.pgSkip:])
		return
	}
	if rc.wait > 0 && rc.pre.hdrEnd > 0 && len(rc.buf) == rc.pre.hdrEnd && rc.silentBy == 0 && !rc.eof {
		// Behind a header, the client has not spoken yet: its own
		// server-first wait starts now.
		rc.silentBy = min(rc.l.mono()+rc.wait, rc.deadlineOr())
	}
	rc.rearm()
}

// preroute is the decision, from the bytes a client has sent so far, of
// whether and how its connection can be routed: the PROXY header (when the
// entry point takes one), then, when the table has TLS routes, whether the
// client speaks TLS and, if so, its whole ClientHello. It is the loop's, and
// pure: step is called again with more bytes until it stops waiting.
type preroute struct {
	pp        bool // the entry point takes PROXY headers
	trusted   bool // ... from this sender
	peek      bool // the table needs the ClientHello
	starttls  bool // ... and answers PostgreSQL's SSLRequest first (postgres.go)
	pgDone    bool
	pgTLS     bool // the client's SSLRequest was answered 'S'
	pgSkip    int  // buf[hdrEnd:hdrEnd+pgSkip] are the requests answered
	answer    byte // the byte to answer with, on preAnswer
	ppDone    bool
	hdrEnd    int   // buf[:hdrEnd] is the PROXY header
	headerNow bool  // the last step applied the header
	answered  uint8 // answers written to the client (preAnswer)
	replay    uint8 // ... of which this many by the process that handed it over (handoff.go)
}

type preOutcome int

const (
	preWait   preOutcome = iota // more bytes needed
	preRoute                    // route now; buf[hdrEnd:] goes to the backend first
	preFailed                   // a malformed or unfinished header or hello: close it
	preClosed                   // the client closed before sending anything to route on
	preAnswer                   // write p.answer to the client, then step again
)

// step decides with buf, everything the client sent so far (eof: and then
// closed). A trusted header's addresses go to c, and the ClientHello's SNI
// and ALPN.
func (p *preroute) step(buf []byte, eof bool, c *tcp.Conn) (preOutcome, error) {
	p.headerNow = false
	if p.pp && !p.ppDone {
		end, err := headerEnd(buf)
		switch {
		case err != nil:
			return preFailed, err
		case end < 0:
			p.ppDone = true // no header: every byte is the client's
		case end == 0:
			if !eof && len(buf) < maxV2Header {
				return preWait, nil // a header prefix: wait for the rest
			}
			if signed(buf) {
				return preFailed, errors.New("unfinished PROXY protocol header")
			}
			p.ppDone = true // part of a signature, then the end: not a header
		default:
			if err := applyHeader(buf[:end], c, p.trusted); err != nil {
				return preFailed, err
			}
			p.hdrEnd, p.ppDone, p.headerNow = end, true, true
		}
	}
	payload := buf[p.hdrEnd+p.pgSkip:]
	if !p.peek {
		return preRoute, nil
	}
	if p.starttls && !p.pgDone && len(payload) > 0 {
		switch pgPreamble(payload) {
		case pgMore:
			if eof {
				return preFailed, errors.New("client closed in the middle of a PostgreSQL SSLRequest")
			}
			return preWait, nil
		case pgSSL:
			p.pgSkip += len(pgSSLRequest)
			p.pgDone, p.pgTLS, p.answer = true, true, 'S'
			return preAnswer, nil
		case pgGSSENC:
			if p.pgSkip > 0 {
				return preFailed, errors.New("a second PostgreSQL GSSENCRequest")
			}
			p.pgSkip += len(pgGSSENCRequest)
			p.answer = 'N'
			return preAnswer, nil
		default:
			p.pgDone = true
		}
		payload = buf[p.hdrEnd+p.pgSkip:]
	}
	if len(payload) == 0 {
		if eof {
			return preClosed, nil
		}
		return preWait, nil
	}
	if !isTLS(payload) {
		return preRoute, nil
	}
	// A hello longer than maxHelloBytes is refused however much of it is
	// here: the parser sees at most that much.
	h, err := readHello(needMore{}, payload[:min(len(payload), maxHelloBytes)], maxHelloBytes)
	if errors.Is(err, errNeedMore) {
		if eof {
			return preFailed, errors.New("client closed in the middle of its ClientHello")
		}
		return preWait, nil
	}
	if err != nil {
		return preFailed, err
	}
	c.SNI, c.ALPN = h.sni, h.alpn
	return preRoute, nil
}

// signed reports whether buf holds a whole v1 or v2 signature.
func signed(buf []byte) bool {
	return len(buf) >= len(sigV1) && buf[0] == sigV1[0] || len(buf) >= len(sigV2)
}

// errNeedMore is what readHello gets when the bytes read so far end before
// the ClientHello does.
var errNeedMore = errors.New("ClientHello incomplete")

type needMore struct{}

func (needMore) Read([]byte) (int, error) { return 0, errNeedMore }

func (rc *rconn) prerouteTimeout() {
	now := rc.l.mono()
	if rc.silentBy != 0 && now >= rc.silentBy && len(rc.buf) == rc.pre.hdrEnd {
		// Silent: a client of a server-first protocol. Routed as plain TCP
		// (and, before any header, as a client without one).
		rc.pre.ppDone = true
		rc.route(nil)
		return
	}
	if rc.deadline != 0 && now >= rc.deadline {
		if rc.pre.pp && !rc.pre.ppDone && !signed(rc.buf) && !rc.pre.peek {
			rc.pre.ppDone = true // part of a signature and no more: not a header
			rc.route(rc.buf)
			return
		}
		rc.prerouteFailed(errors.New("nothing to route on before the read timeout"))
		return
	}
	rc.rearm()
}

// deadlineOr is the pre-routing deadline, or the far future without one.
func (rc *rconn) deadlineOr() int64 {
	if rc.deadline == 0 {
		return 1<<63 - 1
	}
	return rc.deadline
}

// rearm sets the connection's timer to its next pre-routing deadline.
func (rc *rconn) rearm() {
	at := rc.deadline
	if rc.silentBy != 0 && (at == 0 || rc.silentBy < at) {
		at = rc.silentBy
	}
	if at != rc.timerAt {
		rc.l.arm(rc, at)
	}
}

func (rc *rconn) prerouteFailed(err error) {
	rc.ep.log.Debug().Err(err).Str("client_ip", rc.c.Client.Addr().String()).Int("bytes", len(rc.buf)).Msg("connection not routed")
	rc.c.Reject()
}

// route leaves the pre-routing phase: payload (what the client sent past any
// header) goes to the backend first.
func (rc *rconn) route(payload []byte) {
	rc.releaseHeld()
	if rc.timerAt != 0 {
		rc.l.arm(rc, 0)
	}
	if len(payload) > 0 {
		rc.c.Peeked = payload
	}
	rc.enterChain(rc.table)
}

// enterChain routes the connection through t and its router's chain. A
// chain that has not finished with it when it returns (a middleware waiting
// for a shared store's answer, tcp.Conn.Later) holds it: it is pinned, never
// recycled (loop.recycle).
func (rc *rconn) enterChain(t *Table) {
	rc.state = stateRouting
	rc.ep.route(&rc.c, t)
	if rc.state == stateRouting {
		rc.pinned = true
	}
}

// The service.

// startService dials one of lb's servers for the connection (the load
// balancer's ServeTCP, on the loop). With capped servers it takes a slot
// first, or waits in the service's queue for one.
func (rc *rconn) startService(lb *loadBalancer) {
	rc.lb = lb
	rc.delay = int64(lb.delay)
	if lb.obs != nil {
		rc.began = time.Now()
	}
	if cp := lb.cap; cp != nil {
		s, queued := cp.admit(rc)
		switch {
		case s != nil:
			rc.capSlot = s
			rc.first = &s.srv
			rc.dial(&s.srv)
		case queued:
			rc.state = stateQueued
			rc.pinned = true // the queue holds it, and a slot may be posted to it
			if !rc.registerClient() {
				if cp.leave(rc) {
					rc.c.Reject()
				}
				return
			}
			cp.mu.Lock()
			timeout := cp.timeout
			cp.mu.Unlock()
			rc.l.arm(rc, rc.l.mono()+int64(timeout))
		default:
			cp.full.Add(1)
			rc.refuseQueue(cp, "its queue is full")
		}
		return
	}
	idx := lb.pick()
	if idx < 0 {
		lb.log.Debug().Str("service", lb.name).Str("router", rc.c.Router).Msg("no healthy server")
		rc.c.Refuse(true)
		return
	}
	rc.first = &lb.servers[idx]
	rc.dial(rc.first)
}

// handSlot gives the queued connection a slot, on its loop (waiter).
func (rc *rconn) handSlot(cp *capacity, s *capServer) {
	rc.l.post(func(*loop) { rc.dequeued(cp, s) })
}

// dequeued hands a queued connection the slot s (on its loop).
func (rc *rconn) dequeued(cp *capacity, s *capServer) {
	if rc.state != stateQueued { // it left the queue meanwhile (timed out, closed)
		cp.release(s)
		return
	}
	rc.capSlot = s
	rc.first = &s.srv
	rc.l.arm(rc, 0)
	rc.dial(&s.srv)
}

// queueTimeout ends a connection that waited too long for a slot.
func (rc *rconn) queueTimeout() {
	cp := rc.lb.cap
	if !cp.leave(rc) {
		return // a slot is on its way
	}
	cp.expired.Add(1)
	rc.refuseQueue(cp, "it waited the queue timeout")
}

// refuseQueue closes a connection a capped service could not take: gently
// (the backend's capacity, not the client, is the reason), logged at a
// bounded rate.
func (rc *rconn) refuseQueue(cp *capacity, why string) {
	cp.logRefusal(rc.lb, &rc.c, why)
	rc.c.Refuse(true)
}

func (rc *rconn) releaseSlot() {
	if rc.capSlot != nil {
		rc.lb.cap.release(rc.capSlot)
		rc.capSlot = nil
	}
}

func (rc *rconn) dial(srv *server) {
	rc.srv = srv
	if !rc.registerClient() {
		rc.c.Reject()
		return
	}
	if !srv.ap.IsValid() {
		rc.resolve(srv)
		return
	}
	rc.connect(srv.ap)
}

func (rc *rconn) connect(ap netip.AddrPort) {
	fd, err := sysSocket(familyOf(ap))
	if err != nil {
		rc.dialFailed(err)
		return
	}
	_ = sysSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if ka := rc.lb.keepAlive; ka > 0 {
		secs := max(int(ka/time.Second), 1)
		_ = sysSetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
		_ = sysSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs)
		_ = sysSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, secs)
	}
	if err := connectRaw(fd, ap); err != nil && err != unix.EINPROGRESS {
		_ = sysClose(fd)
		rc.dialFailed(err)
		return
	}
	rc.bfd = fd
	if err := rc.l.ctl(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET, eventData(tagBackend, rc.slot, rc.gen)); err != nil {
		rc.dialFailed(err)
		return
	}
	rc.state = stateDialing
	rc.l.arm(rc, rc.l.mono()+int64(rc.lb.dialTimeout))
}

// resolve looks a server's host name up off the loop, then connects.
func (rc *rconn) resolve(srv *server) {
	rc.state = stateResolving
	rc.pinned = true // the lookup's goroutine posts back to it
	rc.l.arm(rc, rc.l.mono()+int64(rc.lb.dialTimeout))
	host, port := srv.host, srv.port
	timeout := rc.lb.dialTimeout
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		cancel()
		rc.l.post(func(*loop) {
			if rc.state != stateResolving {
				return // timed out or aborted meanwhile
			}
			if err == nil && len(ips) == 0 {
				err = errors.New("no address for " + host)
			}
			if err != nil {
				rc.dialFailed(err)
				return
			}
			ip := ips[0]
			for _, a := range ips {
				if a.Unmap().Is4() {
					ip = a
					break
				}
			}
			rc.connect(netip.AddrPortFrom(ip.Unmap(), port))
		})
	}()
}

// dialFailed counts and logs a failed dial and tries the next healthy
// server once; then the client is closed.
func (rc *rconn) dialFailed(err error) {
	lb := rc.lb
	rc.closeBackend()
	rc.releaseSlot()
	addr := rc.srv.address
	lb.counters.DialErrors.Add(1)
	if ok, suppressed := lb.counters.dialLog.Allow(ratelog.String(addr)); ok {
		ev := lb.log.Warn().Err(err).Str("service", lb.name).Str("server", addr).Str("router", rc.c.Router)
		if suppressed > 0 {
			ev = ev.Uint64("suppressed", suppressed)
		}
		ev.Msg("backend dial failed")
	}
	if rc.attempt == 0 && len(lb.servers) > 1 {
		rc.attempt = 1
		if cp := lb.cap; cp != nil {
			cp.mu.Lock()
			s := cp.take()
			cp.mu.Unlock()
			if s != nil && &s.srv != rc.first {
				rc.capSlot = s
				rc.dial(&s.srv)
				return
			}
			if s != nil {
				cp.release(s)
			}
		} else if idx := lb.pick(); idx >= 0 && &lb.servers[idx] != rc.first {
			rc.dial(&lb.servers[idx])
			return
		}
	}
	rc.c.Refuse(true) // the backend failed, not the client: an orderly close
}

// connected starts the copy: first what must precede the client's bytes (a
// PROXY header, the bytes read before routing).
func (rc *rconn) connected() {
	rc.state = stateProxying
	rc.l.arm(rc, 0)
	rc.up.writable, rc.dn.writable = true, true
	if rc.table.peek || rc.ep.ppEnabled {
		// Read before routing: the client's end may have been seen then, and
		// bytes past what was read may wait without a new edge.
		rc.up.eof = rc.eof
		rc.up.readable = !rc.eof
	}
	c := &rc.c
	if rc.lb.ppVer != 0 {
		h, err := proxyproto.HeaderProxyFromAddrs(rc.lb.ppVer, tcpAddr(c.Client), tcpAddr(c.LocalAddr())).Format()
		if err != nil {
			rc.end(true)
			return
		}
		rc.up.pend = h
	}
	if rc.pre.pgTLS {
		// PostgreSQL STARTTLS on a passthrough route: the client was told
		// 'S' and sent its ClientHello, which the backend may only see once
		// it too has agreed to TLS (postgres.go).
		rc.up.pend = append(rc.up.pend, pgSSLRequest...)
		rc.pgHello, c.Peeked, rc.buf = c.Peeked, nil, nil
		rc.state = statePgBackend
		rc.l.arm(rc, rc.l.mono()+int64(rc.lb.dialTimeout))
		rc.pgAsk()
		return
	}
	rc.up.pend = append(rc.up.pend, c.Peeked...)
	c.Peeked, rc.buf = nil, nil
	rc.pump()
}

// pgAsk sends the backend the SSLRequest the client sent tollgate and reads
// its one-byte answer: 'S' starts the copy with the client's ClientHello,
// anything else ends the connection (the client, told 'S', waits for a
// ServerHello only the backend can send).
func (rc *rconn) pgAsk() {
	for len(rc.up.pend) > 0 {
		if !rc.up.writable {
			return
		}
		n, err := sysWrite(rc.bfd, rc.up.pend)
		if err == unix.EAGAIN {
			rc.up.writable = false
			return
		}
		if err != nil {
			rc.pgRefused("writing the SSLRequest: " + err.Error())
			return
		}
		rc.up.pend = rc.up.pend[n:]
	}
	if !rc.dn.readable {
		return
	}
	var b [1]byte
	n, err := sysRead(rc.bfd, b[:])
	switch {
	case err == unix.EAGAIN:
		rc.dn.readable = false
		return
	case err != nil:
		rc.pgRefused("reading its answer: " + err.Error())
		return
	case n == 0:
		rc.pgRefused("it closed without answering")
		return
	case b[0] != 'S':
		rc.pgRefused(fmt.Sprintf("it answered %q, not 'S' (is ssl on?)", b[0]))
		return
	}
	rc.state = stateProxying
	rc.l.arm(rc, 0)
	// One byte was read of what may be more: read on, the edge is spent.
	rc.up.pend, rc.pgHello, rc.dn.readable = rc.pgHello, nil, true
	rc.pump()
}

// pgRefused logs, at a bounded rate, why a backend did not take PostgreSQL
// TLS, and ends the connection.
func (rc *rconn) pgRefused(why string) {
	lb := rc.lb
	if ok, suppressed := lb.counters.dialLog.Allow(ratelog.String(rc.srv.address)); ok {
		ev := lb.log.Warn().Str("service", lb.name).Str("server", rc.srv.address).Str("router", rc.c.Router).Str("reason", why)
		if suppressed > 0 {
			ev = ev.Uint64("suppressed", suppressed)
		}
		ev.Msg("backend did not agree to PostgreSQL TLS after the client's SSLRequest: connection closed")
	}
	rc.end(true)
}

// pump moves what can be moved both ways, and ends the connection when both
// ways are done or one failed.
func (rc *rconn) pump() {
	if !rc.move(&rc.up, rc.cfd, rc.bfd) || !rc.dn.shut && !rc.move(&rc.dn, rc.bfd, rc.cfd) {
		rc.end(true)
		return
	}
	if rc.up.shut && rc.dn.shut {
		rc.end(false)
	}
}

// move copies d's source to its destination until the source has nothing
// more for now or the destination is full; false on an error.
//
// Small transfers are read into the loop's buffer and written at once: two
// calls, no pipe. A read that fills the buffer marks the direction as bulk,
// and from then on it splices through a pipe the loop lends while bytes sit
// in it, at most spliceChunk per read. A read shorter than asked means the
// source is drained for now (edge triggered: the next bytes bring a new
// event), so no call is spent on EAGAIN; after the peer's close
// (EPOLLRDHUP), a short read is the end. A splice can return short with
// bytes still queued (the pipe's slots run out before its bytes do), so bulk
// directions read on until EAGAIN.
func (rc *rconn) move(d *direction, src, dst int) bool {
	l := rc.l
	for {
		switch {
		case d.inPipe > 0:
			if !d.writable {
				return true
			}
			n, err := sysSplice(d.pipe.r, dst, d.inPipe)
			if err == unix.EAGAIN {
				d.writable = false
				return true
			}
			if err != nil {
				return false
			}
			d.inPipe -= n
			if d.inPipe > 0 {
				continue
			}
			l.putPipe(d.pipe)
			d.pipe = nil
		case len(d.pend) > 0:
			if !d.writable {
				return true
			}
			n, err := sysWrite(dst, d.pend)
			if err == unix.EAGAIN {
				d.writable = false
				return true
			}
			if err != nil {
				return false
			}
			d.pend = d.pend[n:]
			if len(d.pend) > 0 {
				continue
			}
			d.pend = nil
		}
		if d.eof {
			if !d.shut {
				// Pass the end on. For the second direction to end, the
				// close that follows says it: no shutdown call.
				other := &rc.up
				if d == &rc.up {
					other = &rc.dn
				}
				if !other.shut && rc.delay == 0 {
					// A termination delay of 0 gives the other direction
					// no time at all: the connection ends with this one,
					// and the two closes pass the end on to both peers (as
					// nginx does by default; no shutdown, no wait for the
					// other side's end).
					d.shut, other.shut = true, true
					return true
				}
				if !other.shut {
					_ = sysShutdown(dst, unix.SHUT_WR)
				}
				d.shut = true
				rc.directionDone(d)
			}
			return true
		}
		if !d.readable {
			return true
		}
		if d.splice {
			if p := l.getPipe(); p != nil {
				n, err := sysSplice(src, p.w, min(p.size, spliceChunk))
				switch {
				case err == unix.EAGAIN:
					l.putPipe(p)
					d.readable = false
					return true
				case err != nil:
					l.putPipe(p)
					return false
				case n == 0:
					l.putPipe(p)
					d.eof = true
					continue
				}
				// A short splice does not mean the socket is drained (the pipe
				// may have run out of slots first): read on until EAGAIN.
				d.pipe, d.inPipe = p, n
				d.n += int64(n)
				continue
			}
			rc.lb.counters.SpliceFallbacks.Add(1) // no pipe: through the buffer this time
		}
		n, err := sysRead(src, l.scratch)
		if err == unix.EAGAIN {
			d.readable = false
			return true
		}
		if err != nil {
			return false
		}
		if n == 0 {
			d.eof = true
			continue
		}
		d.n += int64(n)
		if n == len(l.scratch) {
			d.splice = true
		} else {
			d.readable = false
			d.eof = d.rdhup
		}
		w := 0
		if d.writable {
			w, err = sysWrite(dst, l.scratch[:n])
			if err == unix.EAGAIN {
				w, d.writable = 0, false
			} else if err != nil {
				return false
			}
		}
		if w < n {
			d.pend = append([]byte(nil), l.scratch[w:n]...)
		}
	}
}

// directionDone is called when d has passed its source's end on. The first
// direction to end bounds the other by the termination delay; the client's
// end releases what counts the client's connections.
func (rc *rconn) directionDone(d *direction) {
	if d == &rc.up && rc.delay >= 0 {
		rc.c.ClientDone()
	}
	if rc.halfDone || rc.up.shut && rc.dn.shut {
		return
	}
	rc.halfDone = true
	if rc.delay >= 0 {
		rc.l.arm(rc, rc.l.mono()+rc.delay)
	}
}

// end closes both sockets, reports the connection to the observers and
// finishes it.
func (rc *rconn) end(failed bool) {
	if rc.state == stateDone {
		return
	}
	rc.failed = failed
	rc.state = stateDone
	rc.l.arm(rc, 0)
	rc.releaseHeld()
	if rc.cfd >= 0 {
		_ = sysClose(rc.cfd)
		rc.cfd = -1
	}
	rc.closeBackend()
	rc.releaseSlot()
	for _, d := range []*direction{&rc.up, &rc.dn} {
		if d.pipe != nil {
			d.pipe.close() // it may hold bytes: not back to the pool
			d.pipe = nil
		}
	}
	if rc.lb != nil && rc.lb.obs != nil {
		rc.observe()
	}
	rc.c.Finish()
	rc.l.release(rc)
	rc.l.recycle(rc)
}

// socketError returns the error a failed non-blocking connect left.
func socketError(fd int) error {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if v == 0 {
		return errors.New("connection failed")
	}
	return unix.Errno(v)
}

func hostPort(address string) (string, uint16, bool) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return "", 0, false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, false
	}
	return host, uint16(p), true
}
