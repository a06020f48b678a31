package itest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Backend is a loopback server for tests: one accept loop, shared by every
// test backend, that counts the connections it accepts and serves each with
// its handler on a goroutine of its own, closing the connection when the
// handler returns. At cleanup it closes the listener and waits for the loop
// and every handler: a test leaves no goroutine of its backends behind (a
// handler must end once its client has closed, or by a deadline).
type Backend struct {
	ln       net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
}

// StartBackend serves ln with handle until cleanup; a nil ln is a new
// listener on a free loopback port.
func StartBackend(t testing.TB, ln net.Listener, handle func(net.Conn)) *Backend {
	t.Helper()
	if ln == nil {
		ln = Loopback(t)
	}
	b := &Backend{ln: ln}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		acceptLoop(ln, &b.accepted, &b.wg, handle)
	}()
	t.Cleanup(func() { _ = ln.Close(); b.wg.Wait() })
	return b
}

// Addr is the address the backend listens on.
func (b *Backend) Addr() string { return b.ln.Addr().String() }

// Accepted is the number of connections accepted so far (counted before
// their handler runs).
func (b *Backend) Accepted() int { return int(b.accepted.Load()) }

// Loopback listens on a free port of 127.0.0.1; the listener is closed at
// cleanup.
func Loopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// acceptLoop accepts on ln until it is closed, counting each connection in
// n (when set) and running handle on a goroutine of its own, tracked by wg
// (when set), closing the connection when handle returns.
func acceptLoop(ln net.Listener, n *atomic.Int64, wg *sync.WaitGroup, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if n != nil {
			n.Add(1)
		}
		if wg != nil {
			wg.Add(1)
		}
		go func() {
			if wg != nil {
				defer wg.Done()
			}
			defer c.Close()
			handle(c)
		}()
	}
}

// Close closes the listener: the backend accepts no more connections (a
// server going away); those it serves keep their handlers.
func (b *Backend) Close() { _ = b.ln.Close() }
