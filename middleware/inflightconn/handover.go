package inflightconn

import (
	"net/netip"
	"sort"
)

// Handover: the counts of a limiter move to a new process during a binary
// upgrade (docs/operations/upgrading.md) and stay one budget while the old
// process drains. The old process exports each limiter once: per shard, under
// its lock, it copies the counts and marks the shard, so that every release
// after the copy is also forwarded (a release before it is simply not in the
// copy). From then on the old process admits nothing by itself: a connection
// that reaches the middleware after the export (it was accepted before, and
// was reading its PROXY header or ClientHello) asks the new process, which
// holds the budget. The new process imports the counts into its own limiter
// as if those connections had been acquired there, and releases them as the
// old process forwards their ends.

// Remote is where an exported limiter's budget went: the new process.
// Acquire asks it for one connection of key k and calls done with its answer,
// later, on any goroutine (false when it cannot be asked any more). Release
// ends a connection counted there. Neither may block.
type Remote interface {
	Acquire(k netip.Addr, done func(ok bool))
	Release(k netip.Addr)
}

// KeyCount is one key's open connections in an exported limiter.
type KeyCount struct {
	Key   netip.Addr
	Count int64
}

// Export is a limiter's state as handed to a new process.
type Export struct {
	Name     string
	Amount   int64
	DryRun   bool
	V6Bits   int
	Admitted uint64
	Rejected uint64
	Keys     []KeyCount // sorted by key
}

// Export copies the limiter's counts and makes remote the holder of its
// budget: every Release after the copy of a key's shard is passed on to
// remote.Release, and the middleware asks remote.Acquire instead of counting
// by itself. The limiter keeps counting its own connections (for the API,
// and so that Unexport leaves it exact).
func (l *Limiter) Export(name string, remote Remote) Export {
	// remote first: a release in a shard marked below finds it. A connection
	// the middleware sends to remote meanwhile is answered only after the
	// new process has read this export, so it is not in it twice.
	l.remote.Store(&remote)
	ex := Export{Name: name, Amount: l.amount.Load(), DryRun: l.dryRun.Load()}
	for i := range shardCount {
		s := &l.table()[i]
		s.mu.Lock()
		ex.V6Bits = l.V6Bits() // the keying of the counts copied
		for k, n := range s.m {
			ex.Keys = append(ex.Keys, KeyCount{k, n})
		}
		s.forward = true
		s.mu.Unlock()
	}
	// The totals after the shards: a connection admitted meanwhile is in
	// both (it was counted before its shard was copied).
	ex.Admitted, ex.Rejected = l.admits.Load(), l.rejects.Load()
	sort.Slice(ex.Keys, func(i, j int) bool { return ex.Keys[i].Key.Less(ex.Keys[j].Key) })
	return ex
}

// Unexport takes the budget back after a handover that did not complete
// (the new process died before it started accepting): releases stop being
// forwarded and the middleware counts by itself again. The counts are
// exact: the limiter kept counting its own connections.
func (l *Limiter) Unexport() {
	for i := range shardCount {
		s := &l.table()[i]
		s.mu.Lock()
		s.forward = false
		s.mu.Unlock()
	}
	l.remote.Store(nil)
}

// Remote returns where the limiter's budget went, or nil when it is its own.
func (l *Limiter) Remote() Remote {
	if r := l.remote.Load(); r != nil {
		return *r
	}
	return nil
}

// Import counts n connections of key k without checking the amount: they
// are open already, in the process the counts came from, and are not in a
// shared store under this process's name. Each must be released with
// ReleaseLocal(k). k is a key of the exporting process; counted as a client
// address, it goes under the key it has here.
func (l *Limiter) Import(k netip.Addr, n int64) { l.add(k.Unmap(), n, true) }

// AcquireLocal is Acquire for a connection counted here alone, not in a
// shared store (one a predecessor asks for at an upgrade); released with
// ReleaseLocal.
func (l *Limiter) AcquireLocal(a netip.Addr) bool {
	a = a.Unmap()
	s, k := l.lock(a)
	n := s.m[k]
	if n >= l.amount.Load() {
		l.rejects.Add(1)
		if !l.dryRun.Load() {
			s.mu.Unlock()
			return false
		}
	}
	l.count(s, a, k, 1)
	if s.loc == nil {
		s.loc = make(map[netip.Addr]int64)
	}
	s.loc[a]++
	s.mu.Unlock()
	l.total.Add(1)
	l.admits.Add(1)
	return true
}

// add counts n connections of client address a without checking the
// amount; local: not in a shared store.
func (l *Limiter) add(a netip.Addr, n int64, local bool) {
	if n <= 0 {
		return
	}
	s, k := l.lock(a)
	l.count(s, a, k, n)
	if local {
		if s.loc == nil {
			s.loc = make(map[netip.Addr]int64)
		}
		s.loc[a] += n
	}
	s.mu.Unlock()
	l.total.Add(n)
}

// AddTotals adds a predecessor's admitted and rejected totals, so that the
// counters a dashboard graphs do not start over at an upgrade.
func (l *Limiter) AddTotals(admitted, rejected uint64) {
	l.admits.Add(admitted)
	l.rejects.Add(rejected)
}

// CountRejected counts one rejection decided elsewhere (by a Remote that
// answered no), so that this process's metrics show it too.
func (l *Limiter) CountRejected() { l.rejects.Add(1) }

// Import returns the limiter that a predecessor's export of ex goes into:
// the registered one for ex.Name, or a new registered one (with the
// predecessor's amount) when the name is not registered. The counts are
// imported before the registry's lock is released, so that no Sweep
// forgets the limiter in between. When the predecessor keyed IPv6 clients
// differently (another ipv6Subnet), each exported key is counted as a
// client address under the key it has here, as a reload's change of
// ipv6Subnet moves counts (Limiter.setV6Bits): the predecessor releases
// them by the same keys.
func (r *Registry) Import(ex *Export) *Limiter {
	return r.reg.Update(ex.Name, func(l *Limiter, ok bool) (*Limiter, bool) {
		if !ok {
			l = NewLimiter(ex.Amount, ex.DryRun, ex.V6Bits)
		}
		for _, kc := range ex.Keys {
			l.Import(kc.Key, kc.Count)
		}
		l.AddTotals(ex.Admitted, ex.Rejected)
		return l, !ok
	})
}
