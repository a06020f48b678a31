package inflightconn

import (
	"net/netip"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// storeLink ties a limiter to the shared store its middleware names, with
// the middleware's failure mode.
type storeLink struct {
	s    *Store
	mw   string
	mode string // FailOpen | FailClosed
}

// setStore makes s (nil: none) the store the limiter's budget is kept in,
// under the middleware name mw; a store it leaves stops refreshing its
// leases there, so its shares expire.
func (l *Limiter) setStore(s *Store, mw, mode string) {
	old := l.link.Load()
	if old != nil && (s == nil || old.s != s) {
		old.s.leave(old.mw, l)
	}
	if s == nil {
		l.link.Store(nil)
		return
	}
	s.join(mw, l)
	l.link.Store(&storeLink{s: s, mw: mw, mode: mode})
}

// Store returns the shared store the limiter's budget is kept in, or nil.
func (l *Limiter) Store() *Store {
	if ln := l.link.Load(); ln != nil {
		return ln.s
	}
	return nil
}

func (l *Limiter) failMode() string {
	if ln := l.link.Load(); ln != nil {
		return ln.mode
	}
	return ""
}

// StoreCounts returns the connections admitted by the per-replica amount
// while the store was unreachable, and those rejected because it was
// (failure mode closed) or because its queue was full.
func (l *Limiter) StoreCounts() (fallbacks, unreachable, queueFull uint64) {
	return l.fallbacks.Load(), l.unreachable.Load(), l.queueFull.Load()
}

// admitShared counts a connection the store admitted (over: the cluster
// total is over the amount, in dry run).
func (l *Limiter) admitShared(k netip.Addr, over bool) {
	l.add(k, 1, false)
	l.admits.Add(1)
	if over {
		l.rejects.Add(1)
	}
}

// acquireFallback is Acquire for a connection the store could not be asked
// about, unless its shard's counts may already be on their way to the store
// (asserted in an epoch newer than settled): then it counts nothing and
// reports retry, and the connection must ask the store again.
func (l *Limiter) acquireFallback(k netip.Addr, settled uint64) (ok, retry bool) {
	s := l.shard(k)
	s.mu.Lock()
	if s.epoch > settled {
		s.mu.Unlock()
		return false, true
	}
	if s.m == nil {
		s.m = make(map[netip.Addr]int64)
	}
	n := s.m[k]
	if n >= l.amount.Load() && !l.dryRun.Load() {
		s.mu.Unlock()
		l.rejects.Add(1)
		return false, false
	}
	if n >= l.amount.Load() {
		l.rejects.Add(1)
	}
	s.m[k] = n + 1
	s.mu.Unlock()
	if n == 0 {
		l.keys.Add(1)
	}
	l.total.Add(1)
	l.admits.Add(1)
	return true, false
}

// eachKey calls f for every key counted, shard by shard under its lock.
func (l *Limiter) eachKey(f func(k netip.Addr, n int64)) {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for k, n := range s.m {
			f(k, n)
		}
		s.mu.Unlock()
	}
}

// eachShardEpoch calls f for every key counted in the store (the counts
// less those counted here alone) and moves each shard to epoch, under the
// shard's lock: a release after the copy of its shard goes to the new
// epoch's share, one before it is not in the copy.
func (l *Limiter) eachShardEpoch(epoch uint64, f func(k netip.Addr, n int64)) {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for k, n := range s.m {
			if n -= s.loc[k]; n > 0 {
				f(k, n)
			}
		}
		s.epoch = epoch
		s.mu.Unlock()
	}
}

// serveShared admits c through the store: the round trip runs on the
// store's pipeline, and the answer comes back to c's loop (tcp.Conn.Later).
// The event loop never waits for the store.
func (h *handler) serveShared(c *tcp.Conn, k netip.Addr, ln *storeLink) {
	if !ln.s.up.Load() {
		h.unreachable(c, k, ln)
		return
	}
	h.ask(c, k, ln)
}

// ask queues c for the store's pipeline.
func (h *handler) ask(c *tcp.Conn, k netip.Addr, ln *storeLink) {
	r := &admitReq{l: h.l, mw: ln.mw, k: k}
	r.done = func(o outcome) {
		switch o {
		case outAdmitted:
			c.Later(func() {
				c.DeferClient(h.l)
				h.next.ServeTCP(c)
			}, func() { h.l.Release(k) })
		case outRejected:
			c.Later(func() { c.Refuse(tcp.Gently(h.l.logs.reject(&h.log, k, false))) }, nil)
		default:
			c.Later(func() { h.unreachable(c, k, ln) }, nil)
		}
	}
	if !ln.s.enqueue(r) {
		h.l.queueFull.Add(1)
		h.l.rejects.Add(1)
		c.Refuse(tcp.Gently(h.l.logs.rejectFor(&h.log, k, false, "shared store "+ln.s.name+": too many connections waiting for it")))
	}
}

// unreachable applies the failure mode to c, the store being unreachable:
// open admits it by the amount counted in this replica alone, closed
// rejects it. Both are metered; the store logs the outage.
func (h *handler) unreachable(c *tcp.Conn, k netip.Addr, ln *storeLink) {
	if ln.mode != FailOpen {
		h.l.unreachable.Add(1)
		h.l.rejects.Add(1)
		c.Refuse(tcp.Gently(h.l.logs.rejectFor(&h.log, k, false, "shared store "+ln.s.name+" unreachable (failureMode closed)")))
		return
	}
	ok, retry := h.l.acquireFallback(k, ln.s.settled.Load())
	if retry { // an assertion is under way: the pipeline answers after it
		h.ask(c, k, ln)
		return
	}
	if !ok {
		c.Refuse(tcp.Gently(h.l.logs.reject(&h.log, k, false)))
		return
	}
	h.l.fallbacks.Add(1)
	c.DeferClient(h.l)
	h.next.ServeTCP(c)
}
