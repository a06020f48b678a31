// Package tcp is the small leaf shared by the proxy and the middlewares: the
// accepted connection as it travels through a router's chain, the Handler that
// serves it, and the Middleware that wraps a Handler. It imports nothing of
// tollgate's, so middleware/ and proxy/ both build on it without cycles.
package tcp

import (
	"net"
	"net/netip"
)

// Handler serves one accepted connection.
//
// ServeTCP takes ownership of c: it must eventually close c.TCP and call
// c.Finish exactly once, either before returning (a rejection) or later from
// goroutines it started (a proxied connection). It must not block for the
// life of the connection, so that the accepting goroutine can end early.
type Handler interface {
	ServeTCP(c *Conn)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(c *Conn)

// ServeTCP calls f(c).
func (f HandlerFunc) ServeTCP(c *Conn) { f(c) }

// Middleware wraps next in a handler that may reject the connection (close it
// and Finish it) or pass it on.
type Middleware func(next Handler) Handler

// Finisher is called once when a connection that passed through a middleware
// ends (both directions done, or rejected further down the chain). Limiters use
// it to release what they acquired without allocating a closure per connection.
type Finisher interface {
	Finish(c *Conn)
}

// Conn is one client connection being routed and served.
//
// The zero value is not usable: the entry point fills TCP and Client. Fields
// set by the entry point are read-only for handlers.
type Conn struct {
	// TCP is the client socket. Copies go between raw *net.TCPConn values so
	// that Linux splices them.
	TCP *net.TCPConn
	// Peeked holds bytes already read from TCP (a TLS ClientHello, data behind a
	// PROXY header) that must reach the backend before anything else.
	Peeked []byte
	// Client is the client's address: the socket peer, or the PROXY-protocol
	// source when the sender is trusted. Its Addr is unmapped (IPv4 as IPv4).
	Client netip.AddrPort
	// Local is the address the client connected to (PROXY destination when trusted).
	Local netip.AddrPort
	// SNI and ALPN come from a peeked TLS ClientHello; empty for plain TCP.
	SNI  string
	ALPN []string
	// EntryPoint and Router name where the connection was accepted and routed.
	EntryPoint string
	Router     string

	fin  [4]Finisher
	more []Finisher
	nfin uint8
	done bool
}

// Defer registers f to run when the connection finishes. Finishers run in
// reverse order of registration, like defer.
func (c *Conn) Defer(f Finisher) {
	if int(c.nfin) < len(c.fin) {
		c.fin[c.nfin] = f
		c.nfin++
		return
	}
	c.more = append(c.more, f)
}

// Finish runs the registered finishers once; later calls do nothing. It does
// not close the socket.
func (c *Conn) Finish() {
	if c.done {
		return
	}
	c.done = true
	for i := len(c.more) - 1; i >= 0; i-- {
		c.more[i].Finish(c)
	}
	for i := int(c.nfin) - 1; i >= 0; i-- {
		c.fin[i].Finish(c)
	}
}

// Reject ends the connection without serving it: it finishes it, then resets
// the socket (a reset is cheaper than an orderly close for the proxy under a
// flood). Finishing first means that once the client sees the reset, every
// count (limiter, gauges) already reflects the end.
func (c *Conn) Reject() {
	c.Finish()
	if c.TCP != nil {
		_ = c.TCP.SetLinger(0)
		_ = c.TCP.Close()
	}
}
