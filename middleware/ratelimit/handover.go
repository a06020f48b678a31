package ratelimit

import (
	"math"
	"net/netip"
	"sort"
	"time"
)

// Handover: at a binary upgrade (docs/operations/upgrading.md) the buckets
// move to the new process with the inFlightConn counts, while neither
// process accepts. A bucket is sent as how far its key's theoretical arrival
// time was ahead of the old process's clock, so that no clock is shared: the
// new process puts it that far ahead of its own. Unlike a connection count,
// a bucket needs nothing forwarded afterwards: once the old process stops
// accepting, the buckets change only in the new one.

// KeyDebt is one client key's bucket in an export: how far ahead of the
// export its next connection's theoretical arrival time was. Ahead is at
// most the bucket's tolerance plus one interval; a key whose bucket is full
// is not exported.
type KeyDebt struct {
	Key   netip.Addr
	Ahead time.Duration
}

// Export is a limiter's buckets as handed to a new process.
type Export struct {
	Name   string
	V6Bits int
	// Interval is the emission interval (period/average) the debts were
	// run up at; 0 for a limiter with no limit, which exports no key.
	Interval time.Duration
	Admitted uint64
	Rejected uint64
	Keys     []KeyDebt // sorted by key
}

// Export copies the limiter's buckets that are not full.
func (l *Limiter) Export(name string) Export {
	l.setMu.Lock() // one rule across the shards while they are copied
	defer l.setMu.Unlock()
	t := l.rule.Load().t
	ex := Export{Name: name, V6Bits: l.V6Bits(), Interval: time.Duration(t)}
	now := l.now()
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		if t > 0 {
			for k, tat := range s.v4 {
				if tat > now {
					ex.Keys = append(ex.Keys, KeyDebt{netip.AddrFrom4([4]byte{byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)}), time.Duration(tat - now)})
				}
			}
			for k, tat := range s.v6 {
				if tat > now {
					ex.Keys = append(ex.Keys, KeyDebt{netip.AddrFrom16(k), time.Duration(tat - now)})
				}
			}
		}
		s.mu.Unlock()
	}
	ex.Admitted, ex.Rejected = l.admits.Load(), l.rejects.Load()
	sort.Slice(ex.Keys, func(i, j int) bool { return ex.Keys[i].Key.Less(ex.Keys[j].Key) })
	return ex
}

// importBuckets puts ex's debts into the limiter's buckets: each key's
// bucket is as empty as it was in the old process, rescaled to this
// limiter's rate when the rate differs (as a reload rescales), and the
// totals carry on. A bucket this limiter already holds keeps the emptier of
// the two. It returns how many keys it imported.
func (l *Limiter) importBuckets(ex *Export) int {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	l.admits.Add(ex.Admitted)
	l.rejects.Add(ex.Rejected)
	t := l.rule.Load().t
	if t == 0 || ex.Interval <= 0 {
		return 0 // no limit here, or none there: every bucket is full
	}
	f := float64(t) / float64(ex.Interval)
	now := l.now()
	n, added := 0, 0
	for _, kd := range ex.Keys {
		ahead := int64(math.Min(float64(kd.Ahead)*f, maxTime/2))
		if ahead <= 0 {
			continue
		}
		k := l.Key(kd.Key)
		tat := now + ahead
		s := l.shard(k)
		s.mu.Lock()
		old, found := s.get(k)
		if !found || old < tat {
			s.put(k, tat)
		}
		s.mu.Unlock()
		if !found {
			added++
		}
		n++
	}
	if added > 0 {
		l.keys.Add(int64(added))
		l.sweep.arm()
	}
	return n
}

// Import puts a predecessor's export into the limiter registered under
// ex.Name and returns it with the number of keys imported. A name that is
// not registered (the new configuration has no such middleware) takes
// nothing. A limiter that keys IPv6 clients by another prefix (ipv6Subnet
// changed) takes each bucket under the key its client has here, as a reload
// keeps them (Limiter.rebits). The import runs under the registry's lock,
// so that no Sweep forgets the limiter in between.
func (r *Registry) Import(ex *Export) (l *Limiter, keys int) {
	l = r.reg.Update(ex.Name, func(cur *Limiter, ok bool) (*Limiter, bool) {
		if !ok {
			return nil, false
		}
		keys = cur.importBuckets(ex)
		return cur, false
	})
	return l, keys
}
