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
	m  map[netip.Addr]int64 // connections per client key
	// sub counts, of m, the connections per client address where the
	// address is not its own key (IPv6 clients keyed by their prefix with
	// ipv6Subnet), so that a change of ipv6Subnet can move each connection
	// to its new key (Limiter.setV6Bits). Kept in the shard of the key.
	// Nil unless ipv6Subnet is set.
	sub map[netip.Addr]int64
	// loc counts, per client address (or key, for a predecessor's: it
	// exports keys), the connections counted here alone and not in a
	// shared store: a predecessor's, imported at an upgrade (handover.go).
	// Kept in the shard of the address's key. Usually nil.
	loc map[netip.Addr]int64
	// epoch is the shared store's epoch this shard's counts are asserted
	// in (store.go): its releases go to that epoch's share.
	epoch uint64
	// forward: the shard was exported (handover.go); its releases are
	// passed on to the limiter's remote.
	forward bool
	_       [31]byte // keep neighbouring shards' mutexes off one cache line
}

// Limiter counts open connections per client key and admits a connection only
// while its key holds fewer than the amount. The zero value is not usable; get
// one from a Registry (or NewLimiter in tests).
type Limiter struct {
	amount atomic.Int64
	dryRun atomic.Bool
	// v6Bits > 0 keys IPv6 clients by their /v6Bits prefix. It changes only
	// with every shard locked (setV6Bits), so under any shard's lock it is
	// the keying of every count.
	v6Bits atomic.Int32
	// shards is made on first use (table): a configuration may hold a
	// limiter per router, most of them idle (100,000 empty tables were
	// 600 MB).
	shards  atomic.Pointer[[shardCount]shard]
	total   atomic.Int64  // connections admitted and not yet released
	keys    atomic.Int64  // distinct keys with an open connection (changed under the key's shard lock)
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
	l := &Limiter{} // shard maps are made on first use
	l.amount.Store(amount)
	l.dryRun.Store(dryRun)
	l.v6Bits.Store(int32(v6Bits))
	return l
}

// Key returns the key a client address is counted under now: the address
// itself (IPv4-mapped IPv6 unmapped), or its IPv6 prefix when the limiter
// groups by subnet.
func (l *Limiter) Key(a netip.Addr) netip.Addr { return clientkey.Key(a, int(l.v6Bits.Load())) }

// V6Bits returns the IPv6 prefix length clients are keyed by (0: the full
// address).
func (l *Limiter) V6Bits() int { return int(l.v6Bits.Load()) }

func (l *Limiter) shard(k netip.Addr) *shard { return &l.table()[clientkey.Shard(k)] }

// table returns the limiter's shards, made on first use.
func (l *Limiter) table() *[shardCount]shard {
	if t := l.shards.Load(); t != nil {
		return t
	}
	l.shards.CompareAndSwap(nil, new([shardCount]shard))
	return l.shards.Load()
}

// lock locks the shard of client address a's key and returns it with the
// key, computed with the keying that holds while the lock is held.
func (l *Limiter) lock(a netip.Addr) (*shard, netip.Addr) {
	for {
		bits := l.v6Bits.Load()
		k := clientkey.Key(a, int(bits))
		s := l.shard(k)
		s.mu.Lock()
		if l.v6Bits.Load() == bits {
			return s, k
		}
		s.mu.Unlock() // setV6Bits ran meanwhile: key again
	}
}

// count adds n connections of address a under its key k (the shard locked).
func (l *Limiter) count(s *shard, a, k netip.Addr, n int64) {
	if s.m == nil {
		s.m = make(map[netip.Addr]int64)
	}
	old := s.m[k]
	s.m[k] = old + n
	if old == 0 {
		l.keys.Add(1)
	}
	if a != k {
		if s.sub == nil {
			s.sub = make(map[netip.Addr]int64)
		}
		s.sub[a] += n
	}
}

// Acquire counts a new connection of client address a (or of key a: a key
// is its own address) and reports whether it may proceed. In dry run every
// connection proceeds and would-be rejections are only counted. Every true
// result must be paired with one Release(a).
func (l *Limiter) Acquire(a netip.Addr) bool {
	ok, _ := l.acquire(a.Unmap())
	return ok
}

// acquire is Acquire; it returns the key the connection was counted (or
// refused) under.
func (l *Limiter) acquire(a netip.Addr) (bool, netip.Addr) {
	s, k := l.lock(a)
	n := s.m[k]
	if n >= l.amount.Load() {
		if !l.dryRun.Load() {
			s.mu.Unlock()
			l.rejects.Add(1)
			return false, k
		}
		l.rejects.Add(1)
	}
	l.count(s, a, k, 1)
	s.mu.Unlock()
	l.total.Add(1)
	l.admits.Add(1)
	return true, k
}

// Release ends a connection counted by Acquire(a). A key's entry is deleted
// when its count reaches zero. With a shared store, the store's count is
// released too. A connection counted under an old ipv6Subnet is released
// from the key its address has now: setV6Bits moved it there.
func (l *Limiter) Release(a netip.Addr) { l.release(a.Unmap(), true) }

// ReleaseLocal ends a connection counted by Import or AcquireLocal: here,
// but not in the shared store (a predecessor's, at an upgrade: its store
// count is the predecessor's own, which releases it there).
func (l *Limiter) ReleaseLocal(a netip.Addr) { l.release(a.Unmap(), false) }

func (l *Limiter) release(a netip.Addr, toStore bool) {
	s, k := l.lock(a)
	n, ok := s.m[k]
	if !ok {
		s.mu.Unlock()
		return // not counted: a bug elsewhere, but never go negative
	}
	if a != k {
		c, ok := s.sub[a]
		if !ok {
			s.mu.Unlock()
			return // not counted under this address: never take another's
		}
		if c <= 1 {
			delete(s.sub, a)
		} else {
			s.sub[a] = c - 1
		}
	}
	if n <= 1 {
		delete(s.m, k)
		l.keys.Add(-1)
	} else {
		s.m[k] = n - 1
	}
	if c, ok := s.loc[a]; ok {
		switch {
		case !toStore:
			c--
		case c > n-1: // never more counted here alone than counted
			c = n - 1
		}
		if c <= 0 {
			delete(s.loc, a)
		} else {
			s.loc[a] = c
		}
	}
	fwd, epoch := s.forward, s.epoch
	s.mu.Unlock()
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

// setV6Bits keys IPv6 clients by their /bits prefix from now on (0: by
// full address) and moves every count to the key its client address has
// under it, with every shard locked: a connection is counted under exactly
// one key before and after, and its release (by its address) finds it. A
// count known only by its key (a predecessor's, imported at an upgrade)
// moves as if the key were a client's address. It reports whether the
// keying changed. With a shared store, the store re-asserts this replica's
// shares under the new keys (Store.markDirty) before its next admission.
func (l *Limiter) setV6Bits(bits int) bool {
	if int(l.v6Bits.Load()) == bits {
		return false
	}
	for i := range shardCount {
		l.table()[i].mu.Lock()
	}
	defer func() {
		for i := range shardCount {
			l.table()[i].mu.Unlock()
		}
	}()
	old := int(l.v6Bits.Load())
	if old == bits {
		return false
	}
	// Every connection by the address it was counted for.
	type unit struct{ n, loc int64 }
	units := map[netip.Addr]unit{}
	for i := range shardCount {
		s := &l.table()[i]
		for k, n := range s.m {
			u := units[k]
			u.n += n
			units[k] = u
		}
		for a, n := range s.sub { // counted under Key(a, old), not as a
			k := clientkey.Key(a, old)
			uk := units[k]
			uk.n -= n
			units[k] = uk
			u := units[a]
			u.n += n
			units[a] = u
		}
		for a, n := range s.loc {
			u := units[a]
			u.loc += n
			units[a] = u
		}
		s.m, s.sub, s.loc = nil, nil, nil
	}
	if ln := l.link.Load(); ln != nil {
		// Before the new keying is visible: a connection keyed by it finds
		// the store marked (store.go, admit).
		ln.s.markDirty()
	}
	l.v6Bits.Store(int32(bits))
	l.keys.Store(0)
	for a, u := range units {
		if u.n <= 0 {
			continue
		}
		k := clientkey.Key(a, bits)
		s := l.shard(k)
		l.count(s, a, k, u.n)
		if u.loc > 0 {
			if s.loc == nil {
				s.loc = make(map[netip.Addr]int64)
			}
			s.loc[a] = min(u.loc, u.n)
		}
	}
	return true
}

// Count returns the open connections counted for key k.
func (l *Limiter) Count(k netip.Addr) int64 {
	if l.shards.Load() == nil {
		return 0
	}
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
	if top <= 0 || l.shards.Load() == nil {
		return st
	}
	type kc struct {
		k netip.Addr
		n int64
	}
	var all []kc
	for i := range shardCount {
		s := &l.table()[i]
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
	if l.shards.Load() == nil {
		return 0
	}
	for i := range shardCount {
		s := &l.table()[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
