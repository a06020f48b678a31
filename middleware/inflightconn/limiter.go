// Package inflightconn limits simultaneous connections per client IP.
//
// A Limiter is the state behind one qualified middleware name. It lives in a
// Registry, outside any compiled table, so counts survive reloads: every router
// and entry point that names the middleware shares the one Limiter, and a new
// configuration generation finds the counts its predecessor left. Per-IP entries
// are deleted when their count reaches zero, so memory follows the clients
// connected now, not every client ever seen.
package inflightconn

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tollgate-proxy/tollgate/middleware/internal/clientkey"
)

// shardCount spreads client IPs over independently locked maps so that
// connections from different clients rarely contend. A power of two.
const shardCount = 1 << clientkey.ShardBits

type shard struct {
	mu sync.Mutex
	m  map[netip.Addr]int64
	// loc counts, of m, the connections counted here alone and not in a
	// shared store: a predecessor's, imported at an upgrade (handover.go).
	// Usually nil.
	loc map[netip.Addr]int64
	// epoch is the shared store's epoch this shard's counts are asserted
	// in (store.go): its releases go to that epoch's share.
	epoch uint64
	// forward: the shard was exported (handover.go); its releases are
	// passed on to the limiter's remote.
	forward bool
	_       [39]byte // keep neighbouring shards' mutexes off one cache line
}

// Limiter counts open connections per client key and admits a connection only
// while its key holds fewer than the amount. The zero value is not usable; get
// one from a Registry (or NewLimiter in tests).
type Limiter struct {
	amount  atomic.Int64
	dryRun  atomic.Bool
	v6Bits  int // 0: key IPv6 clients by full address; immutable for a Limiter
	shards  [shardCount]shard
	total   atomic.Int64  // connections admitted and not yet released
	keys    atomic.Int64  // distinct keys with an open connection
	admits  atomic.Uint64 // connections admitted, ever
	rejects atomic.Uint64 // connections rejected (or, in dry run, that would have been)
	logs    rejectLog
	remote  atomic.Pointer[Remote]    // set while the budget is another process's (handover.go)
	link    atomic.Pointer[storeLink] // the shared store, when the middleware names one (store.go)

	fallbacks   atomic.Uint64 // admitted by the per-replica amount, the store unreachable (open)
	unreachable atomic.Uint64 // rejected: the store unreachable (closed)
	queueFull   atomic.Uint64 // rejected: the store's queue of round trips full
}

// NewLimiter returns an empty limiter admitting amount connections per key.
// v6Bits > 0 keys IPv6 clients by their /v6Bits prefix.
func NewLimiter(amount int64, dryRun bool, v6Bits int) *Limiter {
	l := &Limiter{v6Bits: v6Bits} // shard maps are made on first use
	l.amount.Store(amount)
	l.dryRun.Store(dryRun)
	return l
}

// Key returns the key a client address is counted under: the address itself
// (IPv4-mapped IPv6 unmapped), or its IPv6 prefix when the limiter groups by subnet.
func (l *Limiter) Key(a netip.Addr) netip.Addr { return clientkey.Key(a, l.v6Bits) }

func (l *Limiter) shard(k netip.Addr) *shard { return &l.shards[clientkey.Shard(k)] }

// Acquire counts a new connection for key k and reports whether it may
// proceed. In dry run every connection proceeds and would-be rejections are
// only counted. Every true result must be paired with one Release(k).
func (l *Limiter) Acquire(k netip.Addr) bool {
	s := l.shard(k)
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[netip.Addr]int64)
	}
	n := s.m[k]
	if n >= l.amount.Load() {
		if !l.dryRun.Load() {
			s.mu.Unlock()
			l.rejects.Add(1)
			return false
		}
		l.rejects.Add(1)
	}
	s.m[k] = n + 1
	s.mu.Unlock()
	if n == 0 {
		l.keys.Add(1)
	}
	l.total.Add(1)
	l.admits.Add(1)
	return true
}

// Release ends a connection counted by Acquire(k). The entry for k is deleted
// when its count reaches zero. With a shared store, the store's count is
// released too.
func (l *Limiter) Release(k netip.Addr) { l.release(k, true) }

// ReleaseLocal ends a connection counted by Import or AcquireLocal: here,
// but not in the shared store (a predecessor's, at an upgrade: its store
// count is the predecessor's own, which releases it there).
func (l *Limiter) ReleaseLocal(k netip.Addr) { l.release(k, false) }

func (l *Limiter) release(k netip.Addr, toStore bool) {
	s := l.shard(k)
	s.mu.Lock()
	n, ok := s.m[k]
	if !ok {
		s.mu.Unlock()
		return // not counted: a bug elsewhere, but never go negative
	}
	if n <= 1 {
		delete(s.m, k)
	} else {
		s.m[k] = n - 1
	}
	if c, ok := s.loc[k]; ok {
		switch {
		case !toStore:
			c--
		case c > n-1: // never more counted here alone than counted
			c = n - 1
		}
		if c <= 0 {
			delete(s.loc, k)
		} else {
			s.loc[k] = c
		}
	}
	fwd, epoch := s.forward, s.epoch
	s.mu.Unlock()
	if n <= 1 {
		l.keys.Add(-1)
	}
	l.total.Add(-1)
	if ln := l.link.Load(); ln != nil && toStore {
		ln.s.release(ln.mw, k, epoch)
	}
	if fwd {
		if r := l.remote.Load(); r != nil {
			(*r).Release(k)
		}
	}
}

// Count returns the open connections counted for key k.
func (l *Limiter) Count(k netip.Addr) int64 {
	s := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k]
}

// Amount returns the current per-key limit.
func (l *Limiter) Amount() int64 { return l.amount.Load() }

// DryRun reports whether the limiter only counts would-be rejections.
func (l *Limiter) DryRun() bool { return l.dryRun.Load() }

// ClientCount is one key's open connections.
type ClientCount struct {
	IP    string `json:"ip"`
	Count int64  `json:"count"`
}

// State is a point-in-time view of a limiter for the API.
type State struct {
	Amount      int64         `json:"amount"`
	DryRun      bool          `json:"dryRun,omitempty"`
	InFlight    int64         `json:"inFlight"`
	DistinctIPs int64         `json:"distinctIPs"`
	Admitted    uint64        `json:"admittedTotal"`
	Rejected    uint64        `json:"rejectedTotal"`
	Top         []ClientCount `json:"topClients,omitempty"`
}

// Stats returns the counters without walking the per-IP maps.
func (l *Limiter) Stats() State {
	return State{
		Amount:      l.amount.Load(),
		DryRun:      l.dryRun.Load(),
		InFlight:    l.total.Load(),
		DistinctIPs: l.keys.Load(),
		Admitted:    l.admits.Load(),
		Rejected:    l.rejects.Load(),
	}
}

// Snapshot returns the counters plus up to top keys by open connections
// (ties by address), walking every shard under its lock in turn.
func (l *Limiter) Snapshot(top int) State {
	st := l.Stats()
	if top <= 0 {
		return st
	}
	type kc struct {
		k netip.Addr
		n int64
	}
	var all []kc
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for k, n := range s.m {
			all = append(all, kc{k, n})
		}
		s.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b kc) int {
		if a.n != b.n {
			if a.n > b.n {
				return -1
			}
			return 1
		}
		return a.k.Compare(b.k)
	})
	if len(all) > top {
		all = all[:top]
	}
	st.Top = make([]ClientCount, len(all))
	for i, e := range all {
		st.Top[i] = ClientCount{IP: e.k.String(), Count: e.n}
	}
	return st
}

// Entries returns the number of per-key entries held (for tests of memory
// behaviour): zero when no connection is open.
func (l *Limiter) Entries() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
