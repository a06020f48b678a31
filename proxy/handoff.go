package proxy

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/proxy/internal/netpoll"
)

// Handing unrouted connections over at an upgrade (docs/operations/upgrading.md).
// A connection still being read before routing when the old process stops
// accepting (its PROXY header or ClientHello not complete) has been decided
// nothing: no limit counted it, no router matched it. Rather than decide it
// late, with budgets that have moved to the new process, the old process
// stops reading it (Park) and, once the new process accepts, gives it the
// socket and what was read from it (HandOff); the new process goes on
// reading and routes it as one of its own (Adopt). If the new process never
// accepts, the old one reads on (Unpark).

// Handed is a connection accepted but not yet routed, as one process gives
// it to another.
type Handed struct {
	EntryPoint string
	// FD is the client socket; whoever holds the Handed owns it. Its peer
	// is asked of the kernel, not carried.
	FD int
	// Read is what the client sent so far, PROXY header included.
	Read []byte
	// Answered counts the answers already written to the client (to its
	// PostgreSQL SSLRequest or GSSENCRequest): the receiver does not write
	// them again when it reads past those requests.
	Answered int
	// Deadline is the time left to its read deadline, Silent to its
	// server-first wait; 0 when it has none. The receiver keeps them.
	Deadline, Silent time.Duration
}

// Park takes every connection of the named entry points that is being read
// before routing out of the event loops, unread, and returns how many: call
// it after StopAccepting. They wait for HandOff or Unpark; a shutdown
// meanwhile closes them.
func (s *Server) Park(entryPoints []string) int {
	eps := map[*EntryPoint]bool{}
	for _, name := range entryPoints {
		if ep := s.eps[name]; ep != nil {
			eps[ep] = true
		}
	}
	var n atomic.Int64 // the loops run this at once
	s.engine.each(func(l *loop) {
		for _, rc := range l.conns {
			if rc != nil && rc.state == statePreroute && eps[rc.ep] {
				rc.park()
				n.Add(1)
			}
		}
	})
	return int(n.Load())
}

// Unpark puts the parked connections back in their loops: they are read and
// routed here, as before Park (a handover that did not complete).
func (s *Server) Unpark() {
	s.engine.each(func(l *loop) {
		for _, rc := range l.conns {
			if rc != nil && rc.state == stateParked {
				rc.unpark()
			}
		}
	})
}

// HandOff takes the parked connections out of this process: each ends here
// (counted nowhere, logged nowhere) and is passed to give, which owns its
// socket from then on. give runs on the caller's goroutine, after the loops
// have let go of them.
func (s *Server) HandOff(give func(Handed)) int {
	var mu sync.Mutex // the loops run this at once
	var hs []Handed
	s.engine.each(func(l *loop) {
		for _, rc := range l.conns {
			if rc != nil && rc.state == stateParked {
				h := rc.handOff()
				mu.Lock()
				hs = append(hs, h)
				mu.Unlock()
			}
		}
	})
	for _, h := range hs {
		give(h)
	}
	return len(hs)
}

// Adopt serves a connection another process handed over, on the entry point
// of the same name, as one accepted here: the unrouted bound counts it, it
// is read on to its end of routing with the deadlines it had, and routed by
// this process's tables and limits. A connection whose entry point is not
// here, or that is not a connected TCP socket, is reset; the error says so.
func (s *Server) Adopt(h Handed) error {
	ep := s.eps[h.EntryPoint]
	var peer netip.AddrPort
	if sa, err := unix.Getpeername(h.FD); err == nil {
		peer = netpoll.SockaddrAP(sa)
	}
	if ep == nil || ep.engine == nil || !peer.IsValid() {
		_ = unix.SetsockoptLinger(h.FD, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		_ = unix.Close(h.FD)
		if !peer.IsValid() {
			return fmt.Errorf("handed connection for entry point %q: not a connected TCP socket: closed", h.EntryPoint)
		}
		return fmt.Errorf("handed connection from %s: no entry point %q here: reset", peer, h.EntryPoint)
	}
	if err := unix.SetNonblock(h.FD, true); err != nil {
		_ = unix.Close(h.FD)
		return fmt.Errorf("handed connection from %s: %w", peer, err)
	}
	l := ep.engine.loops[0]
	for _, p := range ep.engine.loops[1:] {
		if p.load.Load() < l.load.Load() {
			l = p
		}
	}
	l.post(func(l *loop) { ep.serveHanded(l, h, peer) })
	return nil
}

func (rc *rconn) park() {
	if rc.cReg {
		_ = rc.l.ctl(unix.EPOLL_CTL_DEL, rc.cfd, 0, 0)
		rc.cReg = false
	}
	rc.l.arm(rc, 0)
	rc.state = stateParked
}

func (rc *rconn) unpark() {
	rc.state = statePreroute
	if !rc.registerClient() { // reports what arrived while parked
		rc.c.Reject()
		return
	}
	rc.rearm()
}

// handOff ends a parked connection here without closing its socket, and
// returns it as Handed.
func (rc *rconn) handOff() Handed {
	now := rc.l.mono()
	h := Handed{EntryPoint: rc.ep.name, FD: rc.cfd, Read: rc.buf, Answered: int(rc.pre.answered)}
	if rc.deadline != 0 {
		h.Deadline = time.Duration(max(rc.deadline-now, 1))
	}
	if rc.silentBy != 0 {
		h.Silent = time.Duration(max(rc.silentBy-now, 1))
	}
	rc.cfd, rc.buf = -1, nil
	rc.releaseHeld()
	rc.state = stateDone
	rc.c.Finish()
	rc.l.release(rc)
	return h
}

// serveHanded is the accept path (loop.accept) for a connection another
// process accepted.
func (e *EntryPoint) serveHanded(l *loop, h Handed, peer netip.AddrPort) {
	rc := e.newConn(l, h.FD, peer)
	if h.Answered > 0 && !rc.table.starttls {
		// Told 'S' for a TLS route this configuration no longer has on the
		// entry point: nothing here can give it the handshake it expects.
		e.log.Debug().Str("client_ip", peer.Addr().String()).Msg("handed connection answered for PostgreSQL TLS, which this entry point no longer routes: reset")
		rc.c.Refuse(false)
		return
	}
	if !e.serve(rc, h.Read) {
		return
	}
	now := l.mono()
	rc.deadline, rc.silentBy = 0, 0
	if h.Deadline > 0 {
		rc.deadline = now + int64(h.Deadline)
	}
	if h.Silent > 0 {
		rc.silentBy = now + int64(h.Silent)
	}
	rc.buf = h.Read
	rc.pre.replay = uint8(min(h.Answered, 255))
	rc.decide()
}
