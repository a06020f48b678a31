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

	"github.com/tollgate-proxy/tollgate/proxy/internal/netpoll"
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
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
	held     netip.Addr // the unrouted slot counted for this connection's client key
	counted  bool       // counted among the entry point's unrouted connections
	buf      []byte     // what the client sent before routing
	pre      preroute   // the decision, from buf
	exempt   bool       // trusted sender: bound per claimed client, after the header
	eof      bool       // the client closed before it was routed
	deadline int64
	silentBy int64
	wait     int64 // server-first wait, 0 when a silent client has no route

	// the service
	p        plan      // the load balancer's pick, slot and retry
	up, dn   direction // client -> backend, backend -> client
	delay    int64     // termination delay; negative waits without limit
	halfDone bool
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
	pipe     *netpoll.Pipe
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
			_ = netpoll.Shutdown(rc.cfd, unix.SHUT_WR)
		} else {
			_ = netpoll.ResetOnClose(rc.cfd)
		}
		_ = netpoll.Close(rc.cfd)
		rc.cfd = -1
	}
	rc.closeBackend()
	rc.p.release()
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
	return netpoll.LocalAddr(rc.cfd)
}

// Later runs run on the loop if the connection still waits in its router's
// chain, else dropped (tcp.Socket). It is called from any goroutine, so it
// writes nothing of rc: the connection was pinned when its chain returned
// without finishing with it (EntryPoint.route).
func (rc *rconn) Later(run, dropped func()) {
	rc.l.post(func(*loop) {
		if rc.state == stateRouting {
			run()
		} else if dropped != nil {
			dropped()
		}
	})
}

// releaseHeld ends the connection's count among the entry point's unrouted
// connections, when it has one.
func (rc *rconn) releaseHeld() {
	if rc.counted {
		rc.ep.releaseUnrouted(rc.held)
		rc.held, rc.counted = netip.Addr{}, false
	}
}

func (rc *rconn) closeBackend() {
	if rc.bfd >= 0 {
		_ = netpoll.Close(rc.bfd)
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
			rc.dialFailed(netpoll.SocketError(rc.bfd))
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
		if ev&(unix.EPOLLHUP|unix.EPOLLERR) != 0 || ev&unix.EPOLLRDHUP != 0 && rc.clientGone() {
			rc.leaveQueue() // the client is gone: it waits no more
		}
	}
}

// clientGone reports, for a connection that waits for a capped server's
// slot, that its client went away: it reset the connection, or it ended it
// (FIN) without having sent a byte, which has nothing to be served. A
// client that sent bytes and then shut its write side (a request, then a
// half-close) waits for the answer: TCP cannot tell that half-close from a
// full close, so it stays (as in HAProxy without abortonclose), bounded by
// the queue timeout. It takes no byte: it peeks.
func (rc *rconn) clientGone() bool {
	var b [1]byte
	n, err := netpoll.Peek(rc.cfd, b[:])
	switch {
	case err == unix.EAGAIN:
		return false // open, and nothing sent yet
	case err != nil:
		return true // reset
	}
	return n == 0 && len(rc.c.Peeked) == 0 // its end, after no byte
}

// leaveQueue ends a queued connection whose client is gone: its place and
// every count its client holds are released at once, and no server is
// dialled for it (a slot on its way is given back by dequeued).
func (rc *rconn) leaveQueue() {
	rc.p.leave()
	rc.c.Refuse(true)
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
		rc.leaveQueue()
	case statePreroute, stateParked, stateRouting:
		rc.c.Reject()
	}
}

// Before routing. See EntryPoint.startPreroute for the deadlines.

// maxPreroute bounds what is read before routing: a PROXY header and a
// ClientHello.
const maxPreroute = sniff.MaxV2Header + sniff.MaxHelloBytes

func (rc *rconn) readBeforeRouting() {
	for !rc.eof && len(rc.buf) < maxPreroute {
		if cap(rc.buf)-len(rc.buf) < 512 {
			grown := make([]byte, len(rc.buf), min(max(2*cap(rc.buf), 2048), maxPreroute))
			copy(grown, rc.buf)
			rc.buf = grown
		}
		space := cap(rc.buf) - len(rc.buf)
		n, err := netpoll.Read(rc.cfd, rc.buf[len(rc.buf):cap(rc.buf)])
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
		} else if n, err := netpoll.Write(rc.cfd, []byte{rc.pre.answer}); n != 1 {
			rc.prerouteFailed(fmt.Errorf("answering a PostgreSQL SSLRequest: %v", err))
			return
		}
		rc.pre.answered++
		rc.decide()
		return
	}
	if rc.pre.headerNow && rc.table.peek && rc.exempt {
		// A trusted sender is not bound as one client: from here on the
		// client its header names is.
		k, ok, gently := e.holdUnrouted(c)
		if !ok {
			c.Refuse(c.Gently(gently))
			return
		}
		rc.held = k
	}
	if out == preRoute {
		rc.endPreroute(rc.buf[rc.pre.hdrEnd+rc.pre.pgSkip:])
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
		end, err := sniff.HeaderEnd(buf)
		switch {
		case err != nil:
			return preFailed, err
		case end < 0:
			p.ppDone = true // no header: every byte is the client's
		case end == 0:
			if !eof && len(buf) < sniff.MaxV2Header {
				return preWait, nil // a header prefix: wait for the rest
			}
			if sniff.Signed(buf) {
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
		switch sniff.PGStart(payload) {
		case sniff.PGMore:
			if eof {
				return preFailed, errors.New("client closed in the middle of a PostgreSQL SSLRequest")
			}
			return preWait, nil
		case sniff.PGSSL:
			p.pgSkip += len(sniff.SSLRequest)
			p.pgDone, p.pgTLS, p.answer = true, true, 'S'
			return preAnswer, nil
		case sniff.PGGSSENC:
			if p.pgSkip > 0 {
				return preFailed, errors.New("a second PostgreSQL GSSENCRequest")
			}
			p.pgSkip += len(sniff.GSSENCRequest)
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
	if !sniff.IsTLS(payload) {
		return preRoute, nil
	}
	// A hello longer than sniff.MaxHelloBytes is refused however much of it is
	// here: the parser sees at most that much.
	h, err := sniff.ReadHello(needMore{}, payload[:min(len(payload), sniff.MaxHelloBytes)], sniff.MaxHelloBytes)
	if errors.Is(err, errNeedMore) {
		if eof {
			return preFailed, errors.New("client closed in the middle of its ClientHello")
		}
		return preWait, nil
	}
	if err != nil {
		return preFailed, err
	}
	c.SNI, c.ALPN = h.SNI, h.ALPN
	return preRoute, nil
}

// applyHeader parses one complete PROXY header (sniff.HeaderEnd framed it)
// and, from a trusted sender, makes its source and destination the
// connection's client and local addresses.
func applyHeader(hdr []byte, c *tcp.Conn, trusted bool) error {
	h, err := sniff.ParseHeader(hdr)
	if err != nil {
		return err
	}
	if trusted && h.Source.IsValid() { // TCP over IPv4 or IPv6; LOCAL, UDP and UNIX keep the peer
		c.Client, c.Local = h.Source, h.Destination
	}
	return nil
}

// errNeedMore is what sniff.ReadHello gets when the bytes read so far end before
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
		rc.endPreroute(nil)
		return
	}
	if rc.deadline != 0 && now >= rc.deadline {
		if rc.pre.pp && !rc.pre.ppDone && !sniff.Signed(rc.buf) && !rc.pre.peek {
			rc.pre.ppDone = true // part of a signature and no more: not a header
			rc.endPreroute(rc.buf)
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

// endPreroute leaves the pre-routing phase: payload (what the client sent
// past any header) goes to the backend first.
func (rc *rconn) endPreroute(payload []byte) {
	rc.releaseHeld()
	if rc.timerAt != 0 {
		rc.l.arm(rc, 0)
	}
	if len(payload) > 0 {
		rc.c.Peeked = payload
	}
	rc.ep.route(rc, rc.table)
}

// The service.

// carry takes the connection from the service's pick to its end (plane):
// on the loop, or on goroutines when lb dials a server with TLS (the
// connection leaves the loop first). With capped servers it takes a slot
// first, or waits in the service's queue for one.
func (rc *rconn) carry(lb *loadBalancer) {
	if lb.goroutines {
		if g := rc.leaveLoop(); g != nil {
			g.p.lb = lb // for carryOn: a function, not a closure to allocate
			g.ep.spawn(g, carryOn)
		}
		return
	}
	rc.delay = int64(lb.delay)
	switch rc.p.begin(lb, &rc.c, rc, rc.ep.clientKey(rc.c.Client.Addr())) {
	case pickDial:
		rc.dial()
	case pickQueued:
		rc.state = stateQueued
		rc.pinned = true // the queue holds it, and a slot may be posted to it
		if !rc.registerClient() {
			if rc.p.leave() {
				rc.c.Reject()
			}
			return
		}
		// Its client may have gone before it was watched for it (while
		// a middleware decided), and told so by an edge already spent.
		if rc.clientGone() {
			rc.leaveQueue()
			return
		}
		rc.l.arm(rc, rc.l.mono()+int64(rc.p.waitLimit()))
	default:
		rc.c.Refuse(true)
	}
}

// handSlot gives the queued connection a slot, or its eviction (s nil), on
// its loop (waiter).
func (rc *rconn) handSlot(cp *capacity, s *capServer) {
	rc.l.post(func(*loop) { rc.dequeued(cp, s) })
}

// dequeued hands a queued connection the slot s, or refuses it when s is
// nil: it lost its place to a client holding fewer. A connection whose
// client went away meanwhile gives the slot back (the event that says so
// may not have been read yet): no server is dialled for a client that is
// gone.
func (rc *rconn) dequeued(cp *capacity, s *capServer) {
	if rc.state != stateQueued { // it left the queue meanwhile (timed out, closed)
		if s != nil {
			cp.release(s)
		}
		return
	}
	if !rc.p.handed(&rc.c, s) {
		rc.c.Refuse(true)
		return
	}
	if rc.clientGone() {
		rc.p.release()
		rc.c.Refuse(true)
		return
	}
	rc.l.arm(rc, 0)
	rc.dial()
}

// queueTimeout ends a connection that waited too long for a slot: gently
// (the backend's capacity, not the client, is the reason).
func (rc *rconn) queueTimeout() {
	if rc.p.timedOut(&rc.c) {
		rc.c.Refuse(true)
	}
}

// dial connects to the plan's server: its address, or a host name looked
// up off the loop first.
func (rc *rconn) dial() {
	if !rc.registerClient() {
		rc.c.Reject()
		return
	}
	if srv := rc.p.srv; !srv.ap.IsValid() {
		rc.resolve(srv)
		return
	}
	rc.connect(rc.p.srv.ap)
}

func (rc *rconn) connect(ap netip.AddrPort) {
	fd, err := netpoll.Socket(netpoll.Family(ap))
	if err != nil {
		rc.dialFailed(err)
		return
	}
	_ = netpoll.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if ka := rc.p.lb.keepAlive; ka > 0 {
		secs := max(int(ka/time.Second), 1)
		_ = netpoll.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
		_ = netpoll.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs)
		_ = netpoll.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, secs)
	}
	if err := netpoll.Connect(fd, ap); err != nil && err != unix.EINPROGRESS {
		_ = netpoll.Close(fd)
		rc.dialFailed(err)
		return
	}
	rc.bfd = fd
	if err := rc.l.ctl(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET, eventData(tagBackend, rc.slot, rc.gen)); err != nil {
		rc.dialFailed(err)
		return
	}
	rc.state = stateDialing
	rc.l.arm(rc, rc.l.mono()+int64(rc.p.lb.dialTimeout))
}

// resolve looks a server's host name up off the loop, then connects.
func (rc *rconn) resolve(srv *server) {
	rc.state = stateResolving
	rc.pinned = true // the lookup's goroutine posts back to it
	rc.l.arm(rc, rc.l.mono()+int64(rc.p.lb.dialTimeout))
	host, port := srv.host, srv.port
	timeout := rc.p.lb.dialTimeout
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

// dialFailed closes the backend socket and tries the other server once
// (plan.dialFailed); then the client is closed, gently: the backend failed,
// not the client.
func (rc *rconn) dialFailed(err error) {
	rc.closeBackend()
	if rc.p.dialFailed(&rc.c, err) {
		rc.dial()
		return
	}
	rc.c.Refuse(true)
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
	if rc.p.lb.ppVer != 0 {
		h, err := proxyproto.HeaderProxyFromAddrs(rc.p.lb.ppVer, tcpAddr(c.Client), tcpAddr(c.LocalAddr())).Format()
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
		rc.up.pend = append(rc.up.pend, sniff.SSLRequest...)
		rc.pgHello, c.Peeked, rc.buf = c.Peeked, nil, nil
		rc.state = statePgBackend
		rc.l.arm(rc, rc.l.mono()+int64(rc.p.lb.dialTimeout))
		rc.pgAsk()
		return
	}
	rc.up.pend = append(rc.up.pend, c.Peeked...)
	c.Peeked, rc.buf = nil, nil
	rc.pump()
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

// passEnd passes d's end on to dst, once d's source ended and what it sent
// is written (once: nothing when d is shut). For the second direction to
// end, the close that follows says it: no shutdown call.
func (rc *rconn) passEnd(d *direction, dst int) {
	if d.shut {
		return
	}
	other := &rc.up
	if d == &rc.up {
		other = &rc.dn
	}
	if !other.shut && rc.delay == 0 {
		// A termination delay of 0 gives the other direction no time at
		// all: the connection ends with this one, and the two closes pass
		// the end on to both peers (as nginx does by default; no shutdown,
		// no wait for the other side's end).
		d.shut, other.shut = true, true
		return
	}
	if !other.shut {
		_ = netpoll.Shutdown(dst, unix.SHUT_WR)
	}
	d.shut = true
	rc.directionDone(d)
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
			n, err := netpoll.Splice(d.pipe.R, dst, d.inPipe)
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
			n, err := netpoll.Write(dst, d.pend)
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
			rc.passEnd(d, dst)
			return true
		}
		if !d.readable {
			return true
		}
		if d.splice {
			if p := l.getPipe(); p != nil {
				n, err := netpoll.Splice(src, p.W, min(p.Size, spliceChunk))
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
			rc.p.lb.counters.SpliceFallbacks.Add(1) // no pipe: through the buffer this time
		}
		n, err := netpoll.Read(src, l.scratch)
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
			w, err = netpoll.Write(dst, l.scratch[:n])
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

// end closes both sockets and ends the connection as every proxied one
// ends (plan.finish).
func (rc *rconn) end(failed bool) {
	if rc.state == stateDone {
		return
	}
	rc.state = stateDone
	rc.l.arm(rc, 0)
	rc.releaseHeld()
	if rc.cfd >= 0 {
		_ = netpoll.Close(rc.cfd)
		rc.cfd = -1
	}
	rc.closeBackend()
	for _, d := range []*direction{&rc.up, &rc.dn} {
		if d.pipe != nil {
			d.pipe.Close() // it may hold bytes: not back to the pool
			d.pipe = nil
		}
	}
	rc.p.finish(&rc.c, rc.up.n, rc.dn.n, failed)
	rc.l.release(rc)
	rc.l.recycle(rc)
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
