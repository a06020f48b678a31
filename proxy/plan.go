package proxy

import (
	"net/netip"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// The two data planes (ARCHITECTURE.md, "The connection core"): a
// connection is carried by its event loop (rconn: non-blocking dial and
// splice) or, when TLS is terminated or a server is dialled with TLS, by
// goroutines (gconn). What a load balancer decides for a connection is the
// same for both and written once, here: the plan. The plane carries it out:
// it dials plan.srv its own way and calls back when the dial failed
// (plan.dialFailed) and when the connection ended (plan.finish).

// plane is a connection's carrier as a load balancer sees it: given the
// service, it takes the connection from its pick to its end. *rconn and
// *gconn implement it; the load balancer knows no other.
type plane interface {
	carry(lb *loadBalancer)
}

var (
	_ plane = (*rconn)(nil)
	_ plane = (*gconn)(nil)
)

// plan is a load balancer's part of one connection: the server picked, the
// capped server's slot held or the place in its queue, the one retry after
// a failed dial, and when the service took it (for the observers). It is a
// value inside the plane's connection: no allocation.
type plan struct {
	lb    *loadBalancer
	first *server    // the server picked first
	srv   *server    // the server to dial (or dialled)
	slot  *capServer // the capped server's slot held, when lb.cap is set
	place *qnode     // its place in lb.cap's queue while it waits
	tried bool       // the retry after a failed dial was taken
	began time.Time  // set only when lb.obs is
}

// pickOutcome is what begin decided.
type pickOutcome uint8

const (
	pickDial    pickOutcome = iota // dial p.srv
	pickQueued                     // wait at p.place: the slot comes through w.handSlot
	pickRefused                    // nothing to dial (logged and counted): refuse the connection
)

// begin picks the server for a connection the service lb takes: a capped
// service's free slot, else a place in its queue for w (key is the client's
// key there); an uncapped one's next healthy server.
func (p *plan) begin(lb *loadBalancer, c *tcp.Conn, w waiter, key netip.Addr) pickOutcome {
	*p = plan{lb: lb}
	if lb.obs != nil {
		p.began = time.Now()
	}
	if cp := lb.cap; cp != nil {
		s, q := cp.admit(w, key)
		switch {
		case s != nil:
			p.slot, p.first, p.srv = s, &s.srv, &s.srv
			return pickDial
		case q != nil:
			p.place = q
			return pickQueued
		}
		cp.full.Add(1)
		cp.logRefusal(lb, c, tcp.ReasonQueueFull)
		return pickRefused
	}
	idx := lb.pick()
	if idx < 0 {
		lb.log.Debug().Str("service", lb.name).Str("router", c.Router).Msg("no healthy server")
		return pickRefused
	}
	p.first = &lb.servers[idx]
	p.srv = p.first
	return pickDial
}

// waitLimit is how long a connection may wait in the queue, as configured now.
func (p *plan) waitLimit() time.Duration {
	cp := p.lb.cap
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.timeout
}

// handed takes the slot s a queued connection was handed: false when s is
// nil, its eviction (a client holding fewer places took it; logged), and
// the connection is to be refused.
func (p *plan) handed(c *tcp.Conn, s *capServer) bool {
	p.place = nil
	if s == nil {
		p.lb.cap.logRefusal(p.lb, c, tcp.ReasonQueueEvicted)
		return false
	}
	p.slot, p.first, p.srv = s, &s.srv, &s.srv
	return true
}

// evictedWhy is what a connection that lost its place in the queue is
// logged with.
const evictedWhy = "its queue is full and its client held the most places"

// timedOut takes a queued connection out of the queue at its timeout,
// counted and logged: false when a slot (or its eviction) is already on its
// way, and the connection keeps waiting for it.
func (p *plan) timedOut(c *tcp.Conn) bool {
	cp := p.lb.cap
	if !cp.leave(p.place) {
		return false
	}
	p.place = nil
	cp.expired.Add(1)
	cp.logRefusal(p.lb, c, tcp.ReasonQueueTimeout)
	return true
}

// leave takes a queued connection whose client is gone out of the queue:
// false when a slot (or its eviction) is already on its way, to be given
// back when it comes (cp.release).
func (p *plan) leave() bool {
	ok := p.lb.cap.leave(p.place)
	p.place = nil
	return ok
}

// dialFailed counts and logs a failed dial of p.srv, gives its slot back,
// and picks the other server to try, once: false when there is none (the
// connection is then refused; the backend failed, not the client).
func (p *plan) dialFailed(c *tcp.Conn, err error) bool {
	lb := p.lb
	p.release()
	addr := p.srv.address
	lb.counters.DialErrors.Add(1)
	if ok, suppressed := lb.counters.dialLog.Allow(ratelog.String(addr)); ok {
		ev := lb.log.Warn().Err(err).Str("service", lb.name).Str("server", addr).Str("router", c.Router)
		if suppressed > 0 {
			ev = ev.Uint64("suppressed", suppressed)
		}
		ev.Msg("backend dial failed")
	}
	if p.tried || len(lb.servers) < 2 {
		return false
	}
	p.tried = true
	if cp := lb.cap; cp != nil {
		cp.mu.Lock()
		s := cp.take()
		cp.mu.Unlock()
		if s == nil {
			return false
		}
		if &s.srv == p.first {
			cp.release(s)
			return false
		}
		p.slot, p.srv = s, &s.srv
		return true
	}
	if idx := lb.pick(); idx >= 0 && &lb.servers[idx] != p.first {
		p.srv = &lb.servers[idx]
		return true
	}
	return false
}

// release gives the capped server's slot back, once.
func (p *plan) release() {
	if p.slot != nil {
		p.lb.cap.release(p.slot)
		p.slot = nil
	}
}

// finish is a proxied connection's end, the same on both planes, once its
// sockets are closed: the server's slot first (the server's connection has
// ended: the next connection in its queue may dial at once), then the
// observers (access log, per-router metrics; up and dn are the bytes each
// way), then c.Finish, which ends its counts (the router's open
// connections, what its middlewares hold: the limiters' slots were freed at
// the client's end already, tcp.Conn.DeferClient). A connection that ended
// before its service took it has only its counts to end.
func (p *plan) finish(c *tcp.Conn, up, dn int64, failed bool) {
	if lb := p.lb; lb != nil {
		p.release()
		if lb.obs != nil && p.srv != nil {
			lb.obs.Report(c, lb.name, p.srv.address, time.Since(p.began), up, dn, failed)
		}
	}
	c.Finish()
}
