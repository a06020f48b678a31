package upgrade

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Gate is a net.Listener for a Go server (the admin API) that a handover
// can pause without closing the socket: while paused, Accept takes nothing
// (connections wait in the kernel's queue for the new process, which has
// the same socket) and does not return, so the server neither stops nor
// logs accept errors. Resume undoes a pause (a handover that did not
// complete); Close ends it.
type Gate struct {
	ln *net.TCPListener

	mu       sync.Mutex
	cond     *sync.Cond
	paused   bool
	closed   bool
	inAccept bool
}

// NewGate returns ln behind a gate, open.
func NewGate(ln *net.TCPListener) *Gate {
	g := &Gate{ln: ln}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Accept waits while the gate is paused, then accepts.
func (g *Gate) Accept() (net.Conn, error) {
	g.mu.Lock()
	for {
		for g.paused && !g.closed {
			g.cond.Wait()
		}
		if g.closed {
			g.mu.Unlock()
			return nil, net.ErrClosed
		}
		g.inAccept = true
		g.mu.Unlock()
		c, err := g.ln.Accept()
		g.mu.Lock()
		g.inAccept = false
		g.cond.Broadcast()
		if err != nil && g.paused && !g.closed && errors.Is(err, os.ErrDeadlineExceeded) {
			continue // woken by Pause: wait for Resume or Close
		}
		g.mu.Unlock()
		return c, err
	}
}

// Pause stops accepting and returns once no Accept is under way.
func (g *Gate) Pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused = true
	_ = g.ln.SetDeadline(time.Now()) // wakes an Accept under way
	for g.inAccept {
		g.cond.Wait()
	}
}

// Resume accepts again after Pause.
func (g *Gate) Resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	_ = g.ln.SetDeadline(time.Time{})
	g.paused = false
	g.cond.Broadcast()
}

// Close closes the socket (this process's descriptor of it).
func (g *Gate) Close() error {
	g.mu.Lock()
	g.closed = true
	g.cond.Broadcast()
	g.mu.Unlock()
	return g.ln.Close()
}

// Addr is the socket's address.
func (g *Gate) Addr() net.Addr { return g.ln.Addr() }

// File returns a duplicate of the socket's descriptor, for the new
// process. Not net.TCPListener.File: that one leaves the socket (shared by
// the duplicate) in blocking mode, and this process's Accept would then
// block in the kernel where Pause cannot wake it.
func (g *Gate) File() (*os.File, error) {
	rc, err := g.ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	var f *os.File
	cerr := rc.Control(func(fd uintptr) {
		var dup int
		if dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 3); err == nil {
			f = os.NewFile(uintptr(dup), "listener")
		}
	})
	if cerr != nil {
		return nil, cerr
	}
	return f, err
}
