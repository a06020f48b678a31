package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/internal/netpoll"
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Connections served by goroutines (docs/reference/tls.md, "Termination"). The event
// loops cannot do TLS: a connection whose router terminates TLS, or whose
// server is dialled with TLS, is routed and admitted on its loop like any
// other (the ClientHello read there, inFlightConn, ipAllowList and
// rateLimit decided before any handshake work), then leaves the loop: its
// socket becomes a *net.TCPConn, one goroutine does the handshakes and the
// dial, and the copy runs on a goroutine per direction while bytes move,
// none once it is idle (startCopy, netpoll.IdleWaiter).
// The entry point owns these goroutines: Shutdown closes their sockets at
// the end of the drain and waits for them.

// gconn is one connection served by goroutines. It is the tcp.Conn's
// Socket from the moment it leaves the loop.
type gconn struct {
	c      *tcp.Conn
	ep     *EntryPoint
	raw    *net.TCPConn // the client socket
	stream net.Conn     // what the client's bytes are read from: raw, or the TLS connection
	p      plan         // the load balancer's pick, slot and retry
	pg     bool         // a PostgreSQL client that asked for TLS (postgres.go)
	// copying: the copy started (startCopy) and ends the connection; set
	// and read by the goroutine that runs serve.
	copying bool

	mu      sync.Mutex
	closed  bool          // abort ran: every socket is closed, new ones are closed at once
	backend net.Conn      // once dialled
	stop    chan struct{} // closed by abort: a wait for a slot ends
	wake    func()        // once the copy started: starts its directions waiting for bytes
}

var _ tcp.Socket = (*gconn)(nil)

// Refuse ends the client socket (tcp.Socket). The caller finished the Conn.
func (g *gconn) Refuse(gently bool) {
	if gently {
		_ = g.raw.CloseWrite()
	} else {
		_ = g.raw.SetLinger(0)
	}
	_ = g.raw.Close()
	g.setBackend(nil)
}

// LocalAddr is the address the client connected to (tcp.Socket).
func (g *gconn) LocalAddr() netip.AddrPort { return addrPort(g.raw.LocalAddr()) }

// Later runs run at once (tcp.Socket): the connection's own goroutine is
// the one asking.
func (g *gconn) Later(run, _ func()) { run() }

// setBackend records the backend socket, so that an abort closes it; nil
// closes the one recorded.
func (g *gconn) setBackend(b net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b == nil {
		if g.backend != nil {
			_ = g.backend.Close()
		}
		return true
	}
	if g.closed {
		_ = b.Close()
		return false
	}
	g.backend = b
	return true
}

// abort closes the connection's sockets (the end of a shutdown drain); its
// goroutines then end.
func (g *gconn) abort() {
	g.mu.Lock()
	if !g.closed {
		close(g.stop)
	}
	g.closed = true
	b, wake := g.backend, g.wake
	g.mu.Unlock()
	_ = g.raw.Close()
	if b != nil {
		_ = b.Close()
	}
	if wake != nil {
		wake() // a direction waiting for bytes reads the closed socket and ends
	}
}

// leaveLoop takes rc's connection off its loop and returns it as a gconn,
// or nil when that failed (then the connection is refused). It runs on the
// loop, in the router's chain.
func (rc *rconn) leaveLoop() *gconn {
	c := &rc.c
	rc.pinned = true // its tcp.Conn goes with it
	c.LocalAddr()    // while the raw socket is at hand
	if rc.cReg {
		rc.l.poll.Remove(rc.cfd)
		rc.cReg = false
	}
	if rc.timerAt != 0 {
		rc.l.arm(rc, 0)
	}
	rc.releaseHeld()
	f := os.NewFile(uintptr(rc.cfd), "client")
	nc, err := net.FileConn(f) // a duplicate in Go's poller
	_ = f.Close()
	rc.cfd = -1
	rc.state = stateDone
	rc.l.release(rc)
	if err != nil {
		rc.ep.log.Warn().Err(err).Str("client_ip", c.Client.Addr().String()).Msg("connection cannot leave its event loop: closed")
		c.Sock = nil
		c.Finish()
		return nil
	}
	raw := nc.(*net.TCPConn)
	// A PostgreSQL client asked for TLS with an SSLRequest, or directly
	// with ALPN "postgresql" (PostgreSQL 17's sslnegotiation=direct).
	pg := rc.pre.pgTLS || slices.Contains(c.ALPN, "postgresql")
	g := &gconn{c: c, ep: rc.ep, raw: raw, stream: raw, pg: pg, stop: make(chan struct{})}
	c.Sock, c.TCP = g, raw
	rc.buf = nil
	return g
}

// spawn runs serve on a goroutine the entry point owns; shutdown aborts g
// and waits for it. A connection that reaches its copy (startCopy) stays
// owned until the copy's end, when the goroutine that ran serve is long gone.
func (e *EntryPoint) spawn(g *gconn, serve func(*gconn)) {
	e.gmu.Lock()
	if e.gconns == nil {
		e.gconns = map[*gconn]struct{}{}
	}
	e.gconns[g] = struct{}{}
	e.gwg.Add(1)
	e.gmu.Unlock()
	e.goWorked()
	go func() {
		defer func() {
			if !g.copying {
				e.goDone(g)
			}
		}()
		serve(g)
	}()
}

// goDone ends the entry point's ownership of g, once: when serve returned
// without starting the copy, or at the copy's end.
func (e *EntryPoint) goDone(g *gconn) {
	e.gmu.Lock()
	delete(e.gconns, g)
	e.gmu.Unlock()
	e.gwg.Done()
}

// goWorked counts work done by goroutines for e's connections: while it
// moves, the loops leave their Ps to them (loop.wait).
func (e *EntryPoint) goWorked() {
	if e.engine != nil {
		e.engine.goWork.Add(1)
	}
}

// abortGoroutines ends every goroutine-served connection of e and waits
// (bounded) for their goroutines.
func (e *EntryPoint) abortGoroutines() {
	e.gmu.Lock()
	for g := range e.gconns {
		g.abort()
	}
	e.gmu.Unlock()
	done := make(chan struct{})
	go func() { e.gwg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		e.log.Warn().Msg("goroutine-served connections did not end within 5 s of being closed")
	}
}

// terminator is the last handler of a terminating router's chain, after its
// middlewares: it takes the connection off its loop, completes the TLS
// handshake with the router's settings and hands the connection to the
// router's service on the connection's goroutine.
type terminator struct {
	router   string
	conf     *tls.Config
	next     tcp.Handler
	counters *TLSCounters
}

var _ tcp.Handler = (*terminator)(nil)

func (t *terminator) ServeTCP(c *tcp.Conn) { offLoop(c, t.handshake) }

// offLoop takes c off its loop and serves it with serve on a goroutine of
// its entry point; a connection that is not on a loop is rejected.
func offLoop(c *tcp.Conn, serve func(*gconn)) {
	rc, ok := c.Sock.(*rconn)
	if !ok {
		c.Reject()
		return
	}
	if g := rc.leaveLoop(); g != nil {
		g.ep.spawn(g, serve)
	}
}

// handshakeDeadline bounds a server handshake with the client: the entry
// point's readTimeout, else handshakeDefaultTimeout.
func (g *gconn) handshakeDeadline() {
	timeout := g.ep.readTimeout
	if timeout <= 0 {
		timeout = handshakeDefaultTimeout
	}
	_ = g.raw.SetDeadline(time.Now().Add(timeout))
}

// replayConn reads the bytes peeked before routing, then the socket. g is
// the connection a terminating router's handshake is for (its entry point
// bounds full handshakes per client: fullHandshake); nil for the others.
type replayConn struct {
	*net.TCPConn
	pending []byte
	g       *gconn
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		if len(r.pending) == 0 {
			r.pending = nil // the bytes read before routing are not held while the connection lasts
		}
		return n, nil
	}
	return r.TCPConn.Read(p)
}

// handshake completes the TLS handshake with the client, then hands the
// connection to the router's chain after the terminator, on its goroutine.
func (t *terminator) handshake(g *gconn) {
	c := g.c
	g.handshakeDeadline()
	tc := tls.Server(&replayConn{TCPConn: g.raw, pending: c.Peeked, g: g}, t.conf)
	c.Peeked = nil
	if err := tc.Handshake(); err != nil {
		i := classifyHandshake(err)
		t.counters.Failures[i].Add(1)
		if ok, suppressed := g.ep.tlsLog.Allow(ratelog.Addr(c.Client.Addr())); ok {
			ev := g.ep.log.Info().Err(err).Str("router", t.router).Str("client_ip", c.Client.Addr().String()).Str("reason", HandshakeReasons[i])
			if suppressed > 0 {
				ev = ev.Uint64("suppressed", suppressed)
			}
			ev.Msg("TLS handshake failed")
		}
		c.Refuse(true)
		return
	}
	_ = g.raw.SetDeadline(time.Time{})
	t.counters.Handshakes.Add(1)
	g.stream = tc
	t.next.ServeTCP(c)
}

// carry takes a goroutine-served connection from the service's pick to
// its end (plane): a server with a free slot, the dial (TLS when the server
// says so), then the copy. A failed dial tries the other server once, as on
// the loop (plan.dialFailed). Over every server's maxConn it waits in the
// service's queue, in line with the loops' connections (waitSlot).
func (g *gconn) carry(lb *loadBalancer) {
	c := g.c
	var w goWait // made only for a capped service: an allocation the others do without
	if lb.cap != nil {
		w = make(goWait, 1)
	}
	switch g.p.begin(lb, c, w, g.ep.clientKey(c.Client.Addr())) {
	case pickQueued:
		if !g.waitSlot(w) {
			c.Refuse(true)
			return
		}
	case pickRefused:
		c.Refuse(true)
		return
	}
	for {
		b, err := g.dial()
		if err == nil {
			g.startCopy(b)
			return
		}
		if !g.p.dialFailed(c, err) {
			c.Refuse(true)
			return
		}
	}
}

// carryOn carries g, which left its loop for its service's TLS dial, with
// that service (g.p.lb, set before it left).
func carryOn(g *gconn) { g.carry(g.p.lb) }

// goWait is a goroutine-served connection in a capped service's queue: the
// slot arrives on the channel (buffered, so dispatch never blocks), or nil
// when it lost its place to a client holding fewer.
type goWait chan *capServer

func (w goWait) handSlot(_ *capacity, s *capServer) { w <- s }

// waitSlot waits at the plan's place in the queue for a slot until the
// queue timeout, its client's close or the connection's abort: false when
// none came (a refusal at the timeout or an eviction is counted and
// logged).
func (g *gconn) waitSlot(w goWait) bool {
	t := time.NewTimer(g.p.waitLimit())
	defer t.Stop()
	gone, unwatch := g.watchClose()
	defer unwatch()
	var got *capServer
	select {
	case got = <-w:
	case <-t.C:
		if g.p.timedOut(g.c) {
			return false
		}
		got = <-w // handed a slot (or evicted) as the wait ended: take it
	case <-gone:
		g.leaveQueue(w)
		return false
	case <-g.stop:
		g.leaveQueue(w)
		return false
	}
	return g.p.handed(g.c, got)
}

// leaveQueue ends a wait in the queue that its client's close or the entry
// point's shutdown cut short: a slot handed meanwhile is given back.
func (g *gconn) leaveQueue(w goWait) {
	if !g.p.leave() {
		if s := <-w; s != nil {
			g.p.lb.cap.release(s)
		}
	}
}

// watchClose reports, while a connection waits for a slot, its client's
// close (or reset): gone is closed then. It takes no byte: it peeks at the
// raw socket, and when bytes wait there (a TLS client's close_notify comes
// before its FIN) it asks the kernel whether the client's end followed them
// (CLOSE_WAIT). unwatch stops it and returns once it has stopped, the
// socket as it was.
func (g *gconn) watchClose() (gone <-chan struct{}, unwatch func()) {
	closed, done := make(chan struct{}), make(chan struct{})
	rc, err := g.raw.SyscallConn()
	if err != nil {
		close(done)
		return closed, func() {}
	}
	go func() {
		defer close(done)
		var b [1]byte
		_ = rc.Read(func(fd uintptr) bool {
			n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch {
			case err == unix.EAGAIN || err == unix.EINTR:
				return false // nothing yet: wait until the socket is readable
			case err != nil || n == 0:
				close(closed) // reset, or the client's end
				return true
			}
			if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil && info.State == unix.BPF_TCP_CLOSE_WAIT {
				close(closed) // bytes, then the client's end
				return true
			}
			return false // bytes only: wait for more, or the end (edge triggered: no spin)
		})
	}()
	return closed, func() {
		_ = g.raw.SetReadDeadline(time.Now()) // wakes the watch if it still waits
		<-done
		_ = g.raw.SetReadDeadline(time.Time{})
	}
}

// dial connects to the plan's server with the service's transport: the
// PROXY header first when configured, then TLS when the server is dialled
// with it (after a PostgreSQL SSLRequest when the client started with
// one). A backend certificate that does not verify is an error saying why.
func (g *gconn) dial() (net.Conn, error) {
	lb, srv := g.p.lb, g.p.srv
	d := net.Dialer{Timeout: lb.dialTimeout, KeepAlive: lb.keepAlive}
	b, err := d.Dial("tcp", srv.address)
	if err != nil {
		return nil, err
	}
	if !g.setBackend(b) {
		return nil, net.ErrClosed
	}
	c := g.c
	if lb.ppVer != 0 {
		h, err := proxyproto.HeaderProxyFromAddrs(lb.ppVer, tcpAddr(c.Client), tcpAddr(c.LocalAddr())).Format()
		if err == nil {
			_, err = b.Write(h)
		}
		if err != nil {
			_ = b.Close()
			return nil, err
		}
	}
	if !srv.tls {
		return b, nil
	}
	if g.pg {
		// A PostgreSQL server takes TLS only after an SSLRequest, as the
		// client asked tollgate (postgres.go).
		if err := sniff.PGStartTLS(b, lb.dialTimeout); err != nil {
			_ = b.Close()
			lb.counters.TLSErrors.Add(1)
			return nil, &backendTLSError{err}
		}
	}
	cfg := lb.tlsConf
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = srv.host
		if srv.ap.IsValid() {
			cfg.ServerName = srv.ap.Addr().String()
		}
	}
	tc := tls.Client(b, cfg)
	_ = b.SetDeadline(time.Now().Add(lb.dialTimeout))
	if err := tc.Handshake(); err != nil {
		_ = b.Close()
		lb.counters.TLSErrors.Add(1)
		return nil, &backendTLSError{err}
	}
	_ = b.SetDeadline(time.Time{})
	if !g.setBackend(tc) {
		return nil, net.ErrClosed
	}
	return tc, nil
}

// The copy goroutines' buffers. A copy from a TLS connection waits in Read
// with a small buffer, copySmall bytes, not copyBig; a copy from a plain
// socket waits with none (rawReader): it takes one once bytes are there; a
// direction filed with the idle waiter holds none. A read that fills the small
// buffer means more is queued, and the copy goes on through a copyBig
// buffer while reads bring more than copySmall (a TLS read brings at most a
// record, 16 KiB), as the loops switch small transfers to bulk (rconn.move).
// Both come from pools: io.Copy allocated 32 KiB per direction per
// connection, 64 KiB of garbage per terminated connection and more than half
// of what one allocated (BenchmarkTLSTermination, client and backend
// included: 184 KB per connection before, 119 after), and held it while the
// connection idled.
const (
	copySmall = 2 << 10
	copyBig   = 32 << 10
)

var (
	smallBufs = sync.Pool{New: func() any { return new([copySmall]byte) }}
	bigBufs   = sync.Pool{New: func() any { return new([copyBig]byte) }}
	// copyBufsHeld counts the pooled buffers copies hold (tests read it).
	copyBufsHeld atomic.Int64
)

// copyBufs is one copy's buffers: at most one of each, from the pools.
type copyBufs struct {
	small *[copySmall]byte
	big   *[copyBig]byte
}

// get is the buffer for the next read: the big one while reads fill the
// small one.
func (b *copyBufs) get() []byte {
	if b.big != nil {
		return b.big[:]
	}
	if b.small == nil {
		b.small = smallBufs.Get().(*[copySmall]byte)
		copyBufsHeld.Add(1)
	}
	return b.small[:]
}

// after switches buffers after a read of n bytes: to the big one when n
// filled the small one, back when n would have fitted it.
func (b *copyBufs) after(n int) {
	switch {
	case b.big == nil && n == copySmall:
		b.big = bigBufs.Get().(*[copyBig]byte)
		copyBufsHeld.Add(1)
	case b.big != nil && n <= copySmall:
		b.putBig()
	}
}

func (b *copyBufs) putSmall() {
	if b.small != nil {
		smallBufs.Put(b.small)
		b.small = nil
		copyBufsHeld.Add(-1)
	}
}

func (b *copyBufs) putBig() {
	if b.big != nil {
		bigBufs.Put(b.big)
		b.big = nil
		copyBufsHeld.Add(-1)
	}
}

// rawReader reads a plain socket without holding a buffer while it waits:
// the read is tried on the descriptor, and on EAGAIN the small buffer goes
// back to its pool before Go's poller waits for the socket (with its
// deadline). Made once per copy: its try is the callback, bound once.
type rawReader struct {
	rc   syscall.RawConn
	bufs *copyBufs
	try  func(fd uintptr) bool
	buf  []byte
	n    int
	err  error
}

func newRawReader(rc syscall.RawConn, bufs *copyBufs) *rawReader {
	r := &rawReader{rc: rc, bufs: bufs}
	r.try = func(fd uintptr) bool {
		r.buf = r.bufs.get()
		for {
			r.n, r.err = unix.Read(int(fd), r.buf)
			if r.err != unix.EINTR {
				break
			}
		}
		if r.err == unix.EAGAIN {
			r.bufs.putSmall()
			return false
		}
		return true
	}
	return r
}

// read returns the buffer read into and how much; io.EOF at the end of the
// stream.
func (r *rawReader) read() ([]byte, int, error) {
	if err := r.rc.Read(r.try); err != nil {
		return nil, 0, err
	}
	switch {
	case r.err != nil:
		return nil, 0, os.NewSyscallError("read", r.err)
	case r.n == 0:
		return nil, 0, io.EOF
	}
	return r.buf, r.n, nil
}

// copyBlocking copies src to dst until src ends, as io.Copy does (nil at the
// end of src, the first error otherwise), through the pooled buffers above,
// counting each read as work of ep's goroutines (goWorked). A connection
// is served by goroutines because one of its sides is TLS, so nothing
// splices here; two plain TCP sockets still go through io.Copy, which
// splices them.
func copyBlocking(dst io.Writer, src io.Reader, ep *EntryPoint) (written int64, err error) {
	_, rawDst := dst.(*net.TCPConn)
	tcpSrc, rawSrc := src.(*net.TCPConn)
	if rawDst && rawSrc {
		return io.Copy(dst, src)
	}
	var bufs copyBufs
	defer bufs.putBig()
	defer bufs.putSmall()
	var raw *rawReader
	if rawSrc {
		rc, err := tcpSrc.SyscallConn()
		if err != nil {
			return 0, err
		}
		raw = newRawReader(rc, &bufs)
	}
	for {
		var buf []byte
		var n int
		var rerr error
		if raw != nil {
			buf, n, rerr = raw.read()
		} else {
			buf = bufs.get()
			n, rerr = src.Read(buf)
		}
		ep.goWorked()
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			if w < 0 || w > n {
				w, werr = 0, errors.New("invalid write result")
			}
			written += int64(w)
			if werr == nil && w < n {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return written, werr
			}
		}
		bufs.after(n)
		if raw != nil {
			bufs.putSmall() // the wait for the next bytes holds none
		}
		if rerr == io.EOF {
			return written, nil
		}
		if rerr != nil {
			return written, rerr
		}
	}
}

// backendTLSError is a failed TLS handshake with a server (an expired or
// wrong-name certificate, an unknown authority).
type backendTLSError struct{ err error }

func (e *backendTLSError) Error() string { return "backend TLS handshake: " + e.err.Error() }
func (e *backendTLSError) Unwrap() error { return e.err }

type closeWriter interface{ CloseWrite() error }

// halfClose passes the end of one direction on: close_notify then FIN on a
// TLS connection, FIN on TCP.
func halfClose(conn net.Conn, raw *net.TCPConn) {
	if cw, ok := conn.(closeWriter); ok {
		_ = cw.CloseWrite()
	}
	if raw != nil && net.Conn(raw) != conn {
		_ = raw.CloseWrite()
	}
}

// startCopy copies both ways between the client and b until both ended,
// with the termination delay once one has, releasing the client's limiter
// slots when the client's side ends (as the loop does); the connection ends
// as every proxied one does (plan.finish).
//
// Each direction runs on goroutines of its own, and the caller's returns:
// it did the TLS handshakes, whose cryptography grew its stack to tens of
// KiB. A direction holds no goroutine while no bytes come (copyPair.pump);
// one whose socket cannot be watched waits in its source's Read
// (copyPair.run). Whichever direction ends last ends the connection
// (copyPair.done).
func (g *gconn) startCopy(b net.Conn) {
	c := g.c
	var braw *net.TCPConn
	switch bc := b.(type) {
	case *net.TCPConn:
		braw = bc
	case *tls.Conn:
		braw, _ = bc.NetConn().(*net.TCPConn)
	}
	if len(c.Peeked) > 0 {
		_, err := b.Write(c.Peeked)
		c.Peeked = nil
		if err != nil {
			g.end(b, 0, 0, true)
			return
		}
	}
	p := &copyPair{delay: g.p.lb.delay, g: g, b: b, pending: 2}
	p.dirs[0] = copyDir{up: true, src: g.stream, dst: b, rawDst: braw}
	p.dirs[1] = copyDir{up: false, src: b, dst: g.stream, rawDst: g.raw}
	if w, err := netpoll.Idle(); err == nil {
		p.waiter = w
		p.dirs[0].watched()
		p.dirs[1].watched()
	}
	g.copying = true
	g.mu.Lock()
	closed := g.closed
	g.wake = p.wakeAll
	g.mu.Unlock()
	if closed {
		p.wakeAll()
	}
	for i := range p.dirs {
		d := &p.dirs[i]
		if d.rc != nil {
			go p.pump(d)
		} else {
			go p.run(d)
		}
	}
}

// copyPair is a goroutine-served connection's copy, both directions.
type copyPair struct {
	delay  time.Duration // the termination delay; negative waits without limit
	g      *gconn
	b      net.Conn
	waiter *netpoll.IdleWaiter
	dirs   [2]copyDir // client to server, server to client

	mu      sync.Mutex
	pending int // directions not ended yet
	failed  bool
	closed  bool        // closeBoth ran: no direction waits for bytes any more
	timer   *time.Timer // the termination delay, once one direction ended
}

// copyDir is one direction of a copyPair.
type copyDir struct {
	up     bool // client to server
	src    io.Reader
	dst    net.Conn
	rawDst *net.TCPConn
	// rc is the socket whose bytes wake the direction once it holds no
	// goroutine (pump); nil: the direction waits in src's Read (run).
	rc syscall.RawConn
	// read reads src into a buffer of bufs, waiting for bytes until the
	// deadline set on the socket by until.
	read  func() ([]byte, int, error)
	until func(time.Time) error
	bufs  copyBufs
	n     int64  // bytes written to dst
	wait  uint64 // the idle waiter's id while the direction waits there (under copyPair.mu)
}

// idleAfter is how long a direction waits for bytes on its goroutine before
// it files with the idle waiter and lets the goroutine go: a connection
// in use keeps its goroutines (a filing costs an epoll_ctl and a wake-up
// through the waiter: filed at once, a short connection cost 1.1× the CPU
// per full handshake), one that went quiet gives them up. With 1 s, 2,000
// connections opened in a second and left idle held 24.8 KiB of RSS each
// two seconds later (freed stacks stay resident until the collector and
// the scavenger run); with 100 ms, 15.6 KiB, and handshakes cost the same.
const idleAfter = 100 * time.Millisecond

// watched makes d a direction that holds no goroutine once idle, when src
// allows it: a plain socket, or a TLS connection over one (the client's,
// terminated here, or a TLS server's).
func (d *copyDir) watched() {
	switch src := d.src.(type) {
	case *net.TCPConn:
		if _, ok := d.dst.(*net.TCPConn); ok {
			return // two plain sockets splice in io.Copy (copyBlocking)
		}
		if rc, err := src.SyscallConn(); err == nil {
			d.rc, d.until = rc, src.SetReadDeadline
			d.read = newRawReader(rc, &d.bufs).read
		}
	case *tls.Conn:
		var raw *net.TCPConn
		switch nc := src.NetConn().(type) {
		case *replayConn:
			raw = nc.TCPConn
		case *net.TCPConn:
			raw = nc
		default:
			return
		}
		if rc, err := raw.SyscallConn(); err == nil {
			d.rc, d.until = rc, raw.SetReadDeadline
			d.read = func() ([]byte, int, error) {
				buf := d.bufs.get()
				n, err := src.Read(buf) // a deadline's error leaves the connection usable
				return buf, n, err
			}
		}
	}
}

// run copies one direction that waits in its source's Read.
func (p *copyPair) run(d *copyDir) {
	n, err := copyBlocking(d.dst, d.src, p.g.ep)
	d.n = n
	if err == nil {
		halfClose(d.dst, d.rawDst)
	}
	p.done(d, err)
}

// pump copies d's bytes as they come, waiting for them on its goroutine
// for idleAfter, then files d with the idle waiter and returns; the waiter
// starts it again once bytes (or the end) arrive.
func (p *copyPair) pump(d *copyDir) {
	for {
		if err := d.until(time.Now().Add(idleAfter)); err != nil {
			p.done(d, err)
			return
		}
		buf, n, rerr := d.read()
		p.g.ep.goWorked()
		if n > 0 {
			w, werr := d.dst.Write(buf[:n])
			if w < 0 || w > n {
				w, werr = 0, errors.New("invalid write result")
			}
			d.n += int64(w)
			if werr == nil && w < n {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				d.bufs.putBig()
				d.bufs.putSmall()
				p.done(d, werr)
				return
			}
		}
		d.bufs.after(n)
		if rerr == nil {
			continue
		}
		d.bufs.putBig()
		d.bufs.putSmall()
		switch {
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			if err := p.idle(d); err != nil {
				p.done(d, err)
			}
			return
		case rerr == io.EOF:
			halfClose(d.dst, d.rawDst)
			rerr = nil
		}
		p.done(d, rerr)
		return
	}
}

// idle files d with the idle waiter until its socket has bytes. Once the
// connection is closed (closeBoth, or an abort) nothing waits: the pump
// runs again at once and reads the closed socket.
func (p *copyPair) idle(d *copyDir) error {
	id := p.waiter.Add(func() { p.pump(d) })
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.waiter.Fire(id)
		return nil
	}
	d.wait = id
	p.mu.Unlock()
	if err := p.waiter.Watch(d.rc, id); err != nil {
		p.mu.Lock()
		if d.wait == id {
			d.wait = 0
		}
		p.mu.Unlock()
		if p.waiter.Take(id) {
			return err
		}
		// closeBoth started it meanwhile: it reads the closed socket.
	}
	return nil
}

// wakeAll marks the connection closed and starts every direction waiting
// for bytes, to read its closed socket and end.
func (p *copyPair) wakeAll() {
	p.mu.Lock()
	p.closed = true
	var ids [2]uint64
	for i := range p.dirs {
		ids[i], p.dirs[i].wait = p.dirs[i].wait, 0
	}
	p.mu.Unlock()
	for _, id := range ids {
		if id != 0 && p.waiter != nil {
			p.waiter.Fire(id)
		}
	}
}

// done records one direction's end: a failed one closes both sockets, the
// client's frees its limiter slots (before the count below, so that the
// connection's end comes after), the first starts the termination delay,
// the last ends the connection.
func (p *copyPair) done(d *copyDir, err error) {
	if d.up && p.delay >= 0 {
		p.g.c.ClientDone()
	}
	if err != nil {
		p.closeBoth()
	}
	p.mu.Lock()
	p.failed = p.failed || err != nil
	p.pending--
	last := p.pending == 0
	if !last && p.delay >= 0 && p.timer == nil {
		p.timer = time.AfterFunc(p.delay, p.expire)
	}
	if last && p.timer != nil {
		p.timer.Stop()
	}
	failed := p.failed
	p.mu.Unlock()
	if last {
		p.g.end(p.b, p.dirs[0].n, p.dirs[1].n, failed)
		p.g.ep.goDone(p.g)
	}
}

// expire is the termination delay's end: the direction still open is cut.
func (p *copyPair) expire() {
	p.mu.Lock()
	cut := p.pending > 0
	p.failed = p.failed || cut
	p.mu.Unlock()
	if cut {
		p.closeBoth()
	}
}

func (p *copyPair) closeBoth() {
	_ = p.g.raw.Close()
	_ = p.b.Close()
	p.wakeAll()
}

// end closes both sockets and ends the connection as every proxied one
// ends (plan.finish).
func (g *gconn) end(b net.Conn, up, dn int64, failed bool) {
	_ = g.raw.Close()
	_ = b.Close()
	g.p.finish(g.c, up, dn, failed)
}
