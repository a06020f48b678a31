package inflightconn

import (
	"net/netip"

	"github.com/tollgate-proxy/tollgate/middleware/internal/clientkey"
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
// leases there, so its shares expire. A limiter that joins s has its
// counts (made while the middleware named no store, or another) asserted
// there, under a new epoch, before s's next admission.
func (l *Limiter) setStore(s *Store, mw, mode string) {
	old := l.link.Load()
	if old != nil && (s == nil || old.s != s) {
		old.s.leave(old.mw, l)
	}
	if s == nil {
		l.link.Store(nil)
		return
	}
	joined := s.join(mw, l)
	l.link.Store(&storeLink{s: s, mw: mw, mode: mode})
	if joined {
		s.markDirty()
	}
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

// admitShared counts a connection of client address a that the store
// admitted (over: the cluster total is over the amount, in dry run).
func (l *Limiter) admitShared(a netip.Addr, over bool) {
	l.add(a, 1, false)
	l.admits.Add(1)
	if over {
		l.rejects.Add(1)
	}
}

// acquireFallback is Acquire for a connection of client address a the store
// could not be asked about, unless its shard's counts may already be on
// their way to the store (asserted in an epoch newer than settled): then it
// counts nothing and reports retry, and the connection must ask the store
// again.
func (l *Limiter) acquireFallback(a netip.Addr, settled uint64) (ok, retry bool) {
	s, k := l.lock(a)
	if s.epoch > settled {
		s.mu.Unlock()
		return false, true
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
	l.count(s, a, k, 1)
	s.mu.Unlock()
	l.total.Add(1)
	l.admits.Add(1)
	return true, false
}

// localOf returns, for the shard s (locked), the connections counted here
// alone per key, or nil when there are none.
func (l *Limiter) localOf(s *shard) map[netip.Addr]int64 {
	if len(s.loc) == 0 {
		return nil
	}
	bits := int(l.v6Bits.Load()) // stable: the shard is locked
	by := make(map[netip.Addr]int64, len(s.loc))
	for a, n := range s.loc {
		by[clientkey.Key(a, bits)] += n
	}
	return by
}

// share returns this replica's share of key k in the store: the
// connections counted for k less those counted here alone.
func (l *Limiter) share(k netip.Addr) int64 {
	s := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k] - l.localOf(s)[k]
}

// eachShare calls f for every key with a share in the store (the counts
// less those counted here alone), shard by shard under its lock, with the
// epoch the shard's counts are asserted in.
func (l *Limiter) eachShare(f func(k netip.Addr, n int64, epoch uint64)) {
	for i := range shardCount {
		s := &l.table()[i]
		s.mu.Lock()
		loc := l.localOf(s)
		for k, n := range s.m {
			if n -= loc[k]; n > 0 {
				f(k, n, s.epoch)
			}
		}
		s.mu.Unlock()
	}
}

// eachShardEpoch calls f for every key counted in the store (the counts
// less those counted here alone) and moves each shard to epoch, under the
// shard's lock: a release after the copy of its shard goes to the new
// epoch's share, one before it is not in the copy.
func (l *Limiter) eachShardEpoch(epoch uint64, f func(k netip.Addr, n int64)) {
	for i := range shardCount {
		s := &l.table()[i]
		s.mu.Lock()
		loc := l.localOf(s)
		for k, n := range s.m {
			if n -= loc[k]; n > 0 {
				f(k, n)
			}
		}
		s.epoch = epoch
		s.mu.Unlock()
	}
}

// serveShared admits c (client address a) through the store: the round
// trip runs on the store's pipeline, and the answer comes back to c's loop
// (tcp.Conn.Later). The event loop never waits for the store.
func (h *handler) serveShared(c *tcp.Conn, a netip.Addr, ln *storeLink) {
	if !ln.s.up.Load() {
		h.unreachable(c, a, ln)
		return
	}
	h.ask(c, a, ln)
}

// ask queues c for the store's pipeline.
func (h *handler) ask(c *tcp.Conn, a netip.Addr, ln *storeLink) {
	r := &admitReq{l: h.l, mw: ln.mw, a: a}
	r.done = func(o outcome) {
		switch o {
		case outAdmitted:
			c.Later(func() {
				c.DeferClient(h.l)
				h.next.ServeTCP(c)
			}, func() { h.l.Release(a) })
		case outRejected:
			c.Later(func() {
				c.NoteRefusal(tcp.ReasonLimit, h.name, h.whyLimit())
				c.Refuse(c.Gently(h.l.logs.reject(h.logger(), h.l.Key(a), false)))
			}, nil)
		default:
			c.Later(func() { h.unreachable(c, a, ln) }, nil)
		}
	}
	if !ln.s.enqueue(r) {
		h.l.queueFull.Add(1)
		h.l.rejects.Add(1)
		c.NoteRefusal(tcp.ReasonStoreQueueFull, h.name, h.whyQueue)
		c.Refuse(c.Gently(h.l.logs.rejectFor(h.logger(), h.l.Key(a), false, h.whyQueue)))
	}
}

// unreachable applies the failure mode to c, the store being unreachable:
// open admits it by the amount counted in this replica alone, closed
// rejects it. Both are metered; the store logs the outage.
func (h *handler) unreachable(c *tcp.Conn, a netip.Addr, ln *storeLink) {
	if ln.mode != FailOpen {
		h.l.unreachable.Add(1)
		h.l.rejects.Add(1)
		c.NoteRefusal(tcp.ReasonStoreUnreachable, h.name, h.whyDown)
		c.Refuse(c.Gently(h.l.logs.rejectFor(h.logger(), h.l.Key(a), false, h.whyDown)))
		return
	}
	ok, retry := h.l.acquireFallback(a, ln.s.settled.Load())
	if retry { // an assertion is under way: the pipeline answers after it
		h.ask(c, a, ln)
		return
	}
	if !ok {
		c.NoteRefusal(tcp.ReasonLimit, h.name, h.whyLimit())
		c.Refuse(c.Gently(h.l.logs.reject(h.logger(), h.l.Key(a), false)))
		return
	}
	h.l.fallbacks.Add(1)
	c.DeferClient(h.l)
	h.next.ServeTCP(c)
}
