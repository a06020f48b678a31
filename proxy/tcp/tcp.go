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
// ServeTCP takes ownership of c: it must eventually end the connection's
// socket (Reject, Refuse, or the service's copy) and call c.Finish exactly
// once, either before returning (a rejection) or later (a proxied
// connection). It must not block: handlers run on the entry point's event
// loop.
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

// Socket is a connection's client socket as the handlers see it: something
// to refuse. The proxy implements it for the sockets its event loops own;
// a connection served through a *net.TCPConn (TCP set) has none.
type Socket interface {
	// Refuse ends the socket without serving it: gently (an orderly close,
	// which a client reads as "the server closed the connection") or with a
	// reset (cheapest under a flood).
	Refuse(gently bool)
	// LocalAddr is the address the client connected to, asked of the
	// kernel when the listener's own address does not tell it.
	LocalAddr() netip.AddrPort
	// Later runs run on the goroutine that serves the connection (its event
	// loop), soon, if the connection still waits for it; else dropped, there,
	// so that the caller can undo what it did for it. See Conn.Later.
	Later(run, dropped func())
}

// Conn is one client connection being routed and served.
//
// The zero value is not usable: the entry point fills Client and TCP or
// Sock. Fields set by the entry point are read-only for handlers.
type Conn struct {
	// TCP is the client socket of a connection served by goroutines (TLS
	// termination); nil for one on an event loop (Sock).
	TCP *net.TCPConn
	// Sock is the client socket of a connection on an event loop.
	Sock Socket
	// Peeked holds bytes already read from the client (a TLS ClientHello,
	// data behind a PROXY header) that must reach the backend before anything else.
	Peeked []byte
	// Client is the client's address: the socket peer, or the PROXY-protocol
	// source when the sender is trusted. Its Addr is unmapped (IPv4 as IPv4).
	Client netip.AddrPort
	// Local is the address the client connected to (PROXY destination when
	// trusted); read it with LocalAddr, which fills it when the entry point
	// left it to be asked (LocalUnknown).
	Local        netip.AddrPort
	LocalUnknown bool
	// SNI and ALPN come from a peeked TLS ClientHello; empty for plain TCP.
	SNI  string
	ALPN []string
	// EntryPoint and Router name where the connection was accepted and routed.
	EntryPoint string
	Router     string
	// Refusals is where a refusal of the connection is recorded
	// (NoteRefusal): the process's record of recent refusals, set by the
	// entry point; nil records nothing.
	Refusals *Refusals
	// RefusePolicy is how the connection is closed when a limit refuses
	// it (Gently), set by the entry point from the server's options.
	RefusePolicy RefusePolicy

	fin     [4]Finisher
	more    []Finisher
	nfin    uint8
	client  [2]Finisher // released when the client side is done (DeferClient)
	nclient uint8
	done    bool
}

// LocalAddr returns the address the client connected to.
func (c *Conn) LocalAddr() netip.AddrPort {
	if c.LocalUnknown && c.Sock != nil {
		c.Local, c.LocalUnknown = c.Sock.LocalAddr(), false
	}
	return c.Local
}

// Later lets a handler decide asynchronously: a middleware that needs a
// round trip (to a store shared by several proxies) starts it on a goroutine
// of its own and returns from ServeTCP; when the answer is in, that goroutine
// calls Later with what comes next (next.ServeTCP(c), or c.Refuse). The
// connection waits meanwhile; run happens on the connection's own goroutine
// (its event loop), unless the connection ended first (a shutdown): then
// dropped runs instead, to release what was taken for it. Either runs once.
func (c *Conn) Later(run, dropped func()) {
	if c.Sock != nil {
		c.Sock.Later(run, dropped)
		return
	}
	run() // a goroutine-served connection waits on its own goroutine
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

// DeferClient registers f to run as soon as the client side of the
// connection is done (the client has closed its half, and what is left is
// bounded by the termination delay), or when the connection finishes,
// whichever comes first. Limiters counting a client's connections use it,
// so that a client that has closed can connect again at once, as with nginx.
// At most two client finishers; more run at Finish.
func (c *Conn) DeferClient(f Finisher) {
	if int(c.nclient) < len(c.client) {
		c.client[c.nclient] = f
		c.nclient++
		return
	}
	c.Defer(f)
}

// ClientDone runs the client finishers now; later calls, and Finish, do not
// run them again.
func (c *Conn) ClientDone() {
	for i := int(c.nclient) - 1; i >= 0; i-- {
		f := c.client[i]
		c.client[i] = nil
		f.Finish(c)
	}
	c.nclient = 0
}

// Finish runs the registered finishers once; later calls do nothing. It does
// not close the socket.
func (c *Conn) Finish() {
	if c.done {
		return
	}
	c.done = true
	c.ClientDone()
	for i := len(c.more) - 1; i >= 0; i-- {
		c.more[i].Finish(c)
	}
	for i := int(c.nfin) - 1; i >= 0; i-- {
		c.fin[i].Finish(c)
	}
}

// NoteRefusal records in c.Refusals that c is refused for why, by by (the
// middleware, or the service for a queue's reasons; "" for the entry
// point's own) with msg, a message that does not name the client (built
// once, not per connection). It allocates nothing; the caller then
// refuses c.
func (c *Conn) NoteRefusal(why Reason, by, msg string) { c.Refusals.Add(c, why, by, msg) }

// Reject ends the connection without serving it, with a reset: see Refuse.
func (c *Conn) Reject() { c.Refuse(false) }

// Gently turns a rejecting middleware's own judgement into Refuse's: a
// rejection it logs (the first of a client in a second) is closed gently, so
// that a client that hits a limit now and then reads "the server closed the
// connection" (curl: "Empty reply from server"), while one of a flood (its
// log line suppressed) gets a reset, the cheapest ending for the proxy.
// c.RefusePolicy may fix the choice instead.
func (c *Conn) Gently(logged bool) bool {
	switch c.RefusePolicy {
	case RefuseReset:
		return false
	case RefuseGently:
		return true
	}
	return logged
}

// RefusePolicy is how a connection that a limit refuses is closed (Conn.Gently).
// The zero value, RefuseAsLogged, is tollgate's: gently when the refusal
// is logged, with a reset when its line is suppressed. The other two fix
// the choice, for measuring each (bench/: TOLLGATE_REFUSE, which main reads).
type RefusePolicy uint8

// The refuse policies.
const (
	RefuseAsLogged RefusePolicy = iota
	RefuseReset
	RefuseGently
)

// ParseRefusePolicy reads a policy's name: "reset", "gentle", or anything
// else (the empty string) for RefuseAsLogged.
func ParseRefusePolicy(s string) RefusePolicy {
	switch s {
	case "reset":
		return RefuseReset
	case "gentle":
		return RefuseGently
	}
	return RefuseAsLogged
}

// Refuse ends the connection without serving it: it finishes it, then closes
// the socket, gently (orderly close) or with a reset. Finishing first means
// that once the client sees the end, every count (limiter, gauges) already
// reflects it.
func (c *Conn) Refuse(gently bool) {
	c.Finish()
	switch {
	case c.Sock != nil:
		c.Sock.Refuse(gently)
	case c.TCP != nil:
		if !gently {
			_ = c.TCP.SetLinger(0)
		} else {
			_ = c.TCP.CloseWrite()
		}
		_ = c.TCP.Close()
	}
}
