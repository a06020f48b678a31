// Package ratelimit limits the rate of new connections per client IP: the
// TCP rateLimit middleware, with the meaning of Traefik's HTTP rateLimit
// counted in connections. Each client key has a token bucket of burst
// connections, refilled with average connections per period; a connection
// is admitted or refused when it is accepted, from its source address alone.
//
// A Limiter is the state behind one qualified middleware name. It lives in a
// Registry, outside any compiled table, so its buckets survive reloads: every
// router and entry point naming the middleware shares the one Limiter, and a
// changed rate applies at once to the buckets as they are (none is refilled).
//
// The per-key state is one timestamp, as the generic cell rate algorithm
// (GCRA) keeps: the theoretical arrival time (TAT) of the key's next
// connection. A bucket is full when its TAT is in the past; a full bucket is
// the same as no entry at all, so entries are deleted as soon as their bucket
// is full again (by a sweep that runs only while entries exist): memory
// follows the clients that connected within about burst intervals, not
// every client ever seen.
package ratelimit

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware/internal/clientkey"
)

// shardCount spreads client keys over independently locked maps so that
// connections from different clients rarely contend. A power of two.
const shardCount = 1 << clientkey.ShardBits

// maxTime caps every TAT and tolerance (about 73 years of nanoseconds), so
// that a burst or period too large to mean anything saturates instead of
// overflowing.
const maxTime = math.MaxInt64 / 4

// Rule is what a limiter enforces, from a validated rateLimit block.
type Rule struct {
	// Average connections per Period in the long run; 0 means no limit.
	Average int64
	// Period Average is counted over; more than 0.
	Period time.Duration
	// Burst is the bucket size, at least 1.
	Burst int64
	// DryRun admits every connection and only counts would-be rejections.
	DryRun bool
}

// interval is the time between two connections at the average rate (GCRA's
// emission interval T), or 0 without a limit.
func (r Rule) interval() int64 {
	if r.Average <= 0 {
		return 0
	}
	return max(int64(r.Period)/r.Average, 1)
}

// rule is a Rule with what GCRA derives from it. Immutable once published.
type rule struct {
	Rule
	t   int64 // emission interval in ns; 0: no limit
	tau int64 // tolerance: (burst-1)*t, how far ahead of now a TAT may be
}

func newRule(r Rule) *rule {
	r.Burst = max(r.Burst, 1)
	t := r.interval()
	return &rule{Rule: r, t: t, tau: satMul(r.Burst-1, t)}
}

func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > maxTime/b {
		return maxTime
	}
	return a * b
}

func satAdd(a, b int64) int64 { return min(a+b, maxTime) } // a, b in [0, maxTime]

type shard struct {
	mu sync.Mutex
	r  *rule // the rule this shard's TATs are in; switched under mu
	// TATs by key, in ns on the limiter's clock. IPv4 keys take a 4-byte
	// key: 16 bytes a slot with the TAT, against 32 for a netip.Addr.
	v4     map[uint32]int64
	v6     map[[16]byte]int64
	peak4  int      // largest len(v4) since it was made (shrinking, sweep)
	peak6  int      // same for v6
	maxTAT int64    // no TAT in the shard is later: past it, every bucket is full
	_      [24]byte // 80 bytes a shard: neighbouring shards' mutexes never share a cache line
}

// Limiter holds one token bucket per client key. The zero value is not
// usable: get one from a Registry (or NewLimiter in tests).
type Limiter struct {
	// v6Bits: 0 keys IPv6 clients by full address, else by their prefix
	// of that many bits. Changed only by rebits, which holds every shard's
	// lock: read under a shard's lock, it is the one that shard's keys are in.
	v6Bits  atomic.Int32
	clock   func() time.Duration
	shards  [shardCount]shard
	keys    atomic.Int64  // entries held (distinct keys whose bucket is not full yet)
	admits  atomic.Uint64 // connections admitted, ever
	rejects atomic.Uint64 // connections rejected (or, in dry run, that would have been)
	rule    atomic.Pointer[rule]
	setMu   sync.Mutex // serializes set
	sweep   sweeper
	logs    rejectLog
}

// NewLimiter returns a limiter with every bucket full. v6Bits > 0 keys IPv6
// clients by their /v6Bits prefix. clock returns monotonic time elapsed since
// any fixed instant; nil means the process's monotonic clock. Only a limiter
// on the real clock sweeps by itself; one on a test's clock is swept when
// the test calls Expire (its time moves when the test says).
func NewLimiter(r Rule, v6Bits int, clock func() time.Duration) *Limiter {
	l := &Limiter{clock: clock}
	l.v6Bits.Store(int32(v6Bits))
	if clock == nil {
		start := time.Now()
		l.clock = func() time.Duration { return time.Since(start) }
		l.sweep.auto = true
	}
	nr := newRule(r)
	l.rule.Store(nr)
	for i := range l.shards {
		l.shards[i].r = nr
	}
	l.sweep.l = l
	return l
}

func (l *Limiter) now() int64 { return int64(l.clock()) }

// Key returns the key a client address is counted under: the address itself
// (IPv4-mapped IPv6 unmapped), or its IPv6 prefix when the limiter groups by
// subnet.
func (l *Limiter) Key(a netip.Addr) netip.Addr { return clientkey.Key(a, l.V6Bits()) }

// V6Bits is the prefix length IPv6 clients are keyed by (0: full address).
func (l *Limiter) V6Bits() int { return int(l.v6Bits.Load()) }

func (l *Limiter) shard(k netip.Addr) *shard { return &l.shards[clientkey.Shard(k)] }

func v4key(k netip.Addr) uint32 {
	b := k.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// get returns k's TAT, or false when it has no entry.
func (s *shard) get(k netip.Addr) (int64, bool) {
	if k.Is4() {
		t, ok := s.v4[v4key(k)]
		return t, ok
	}
	t, ok := s.v6[k.As16()]
	return t, ok
}

func (s *shard) put(k netip.Addr, tat int64) {
	if k.Is4() {
		if s.v4 == nil {
			s.v4 = make(map[uint32]int64)
		}
		s.v4[v4key(k)] = tat
		s.peak4 = max(s.peak4, len(s.v4))
	} else {
		if s.v6 == nil {
			s.v6 = make(map[[16]byte]int64)
		}
		s.v6[k.As16()] = tat
		s.peak6 = max(s.peak6, len(s.v6))
	}
	s.maxTAT = max(s.maxTAT, tat)
}

func (s *shard) len() int { return len(s.v4) + len(s.v6) }

// AllowAddr decides a new connection from client address a, as Allow
// decides one from a's key, and returns that key. Unlike Key then Allow, it
// is exact while a reload changes the limiter's ipv6Subnet (rebits): the key
// is computed again when the prefix length changed before its shard was
// locked.
func (l *Limiter) AllowAddr(a netip.Addr) (k netip.Addr, admit, over bool) {
	for {
		b := l.v6Bits.Load()
		k = clientkey.Key(a, int(b))
		s := l.shard(k)
		s.mu.Lock()
		if l.v6Bits.Load() != b {
			s.mu.Unlock()
			continue
		}
		admit, over = l.allowLocked(s, k)
		return k, admit, over
	}
}

// Allow decides a new connection from key k. over reports that k's bucket
// was empty; admit is false then, except in dry run, which admits every
// connection (and leaves the bucket as a rejection would: a dry run shows
// exactly what enforcing would refuse). Exact under concurrency: the
// decision and the bucket update are one step under the key's shard lock.
func (l *Limiter) Allow(k netip.Addr) (admit, over bool) {
	s := l.shard(k)
	s.mu.Lock()
	return l.allowLocked(s, k)
}

// allowLocked is Allow with k's shard s locked; it unlocks it.
func (l *Limiter) allowLocked(s *shard, k netip.Addr) (admit, over bool) {
	r := s.r
	if r.t == 0 { // average 0: no limit, no state
		s.mu.Unlock()
		l.admits.Add(1)
		return true, false
	}
	now := l.now()
	tat, found := s.get(k)
	tat = max(tat, now)
	if tat-now > r.tau {
		s.mu.Unlock()
		l.rejects.Add(1)
		if r.DryRun {
			l.admits.Add(1)
			return true, true
		}
		return false, true
	}
	s.put(k, satAdd(tat, r.t))
	s.mu.Unlock()
	if !found {
		l.keys.Add(1)
		l.sweep.arm()
	}
	l.admits.Add(1)
	return true, false
}

// set makes r the limiter's rule. A change of the emission interval (average
// or period) rescales every bucket in place, keeping the connections each
// key has used: a client that emptied its bucket does not get a refill, and
// from now on it refills at the new rate. Going to average 0 (no limit) drops
// every entry; coming back from it starts with every bucket full.
func (l *Limiter) set(r Rule) {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	nr := newRule(r)
	if old := l.rule.Load(); old.Rule == nr.Rule {
		return
	}
	l.rule.Store(nr)
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		if old := s.r; old.t != nr.t {
			l.keys.Add(-int64(s.rescale(l.now(), old.t, nr.t)))
		}
		s.r = nr
		s.mu.Unlock()
	}
}

// rebits makes the limiter key IPv6 clients by their prefix of bits (0:
// full address), keeping every bucket: IPv4 keys are unchanged, and each
// IPv6 bucket moves to the key its prefix has at the new length. Buckets
// that land on one key (a shorter prefix) add up their debts (the
// connections they used that have not been refilled), as one bucket would
// have counted them, within the tolerance's saturation; a longer prefix
// keeps each bucket under the prefix's first address, so a client of it
// starts with a full bucket of its own. A reload that only changes
// ipv6Subnet thus gives no IPv4 client a new burst, where a new limiter
// gave every client one.
func (l *Limiter) rebits(bits int) {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	if l.V6Bits() == bits {
		return
	}
	for i := range l.shards {
		l.shards[i].mu.Lock()
	}
	now := l.now()
	type entry struct {
		k   netip.Addr
		tat int64
	}
	var moved []entry
	for i := range l.shards {
		s := &l.shards[i]
		for k, t := range s.v6 {
			moved = append(moved, entry{netip.AddrFrom16(k), t})
		}
		s.v6, s.peak6 = nil, 0
	}
	l.v6Bits.Store(int32(bits))
	gone := 0
	for _, e := range moved {
		k := clientkey.Key(e.k, bits)
		s := l.shard(k)
		old, found := s.get(k)
		tat := e.tat
		if found {
			gone++
			tat = satAdd(max(old, now), max(e.tat-now, 0))
		}
		s.put(k, tat)
	}
	for i := range l.shards {
		l.shards[i].mu.Unlock()
	}
	l.keys.Add(-int64(gone))
}

// rescale converts the shard's TATs from emission interval from to to at
// time now, deleting full buckets; it returns how many entries it deleted.
func (s *shard) rescale(now, from, to int64) (deleted int) {
	if from == 0 || to == 0 {
		deleted = s.len()
		s.drop()
		return deleted
	}
	f := float64(to) / float64(from)
	return s.update(func(t int64) (int64, bool) {
		if t <= now {
			return 0, false
		}
		return now + int64(math.Min(float64(t-now)*f, maxTime/2)), true
	})
}

func (s *shard) drop() {
	s.v4, s.v6, s.peak4, s.peak6, s.maxTAT = nil, nil, 0, 0, 0
}

// expire deletes the entries whose bucket is full at now and returns how
// many it deleted.
func (s *shard) expire(now int64) (deleted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.len() == 0 {
		return 0
	}
	if s.maxTAT <= now {
		deleted = s.len()
		s.drop()
		return deleted
	}
	return s.update(func(t int64) (int64, bool) { return t, t > now })
}

// update replaces every TAT t by f(t), or deletes its entry when f says so,
// recomputes maxTAT and gives back memory (shrink); it returns how many
// entries it deleted. The caller holds s.mu.
func (s *shard) update(f func(t int64) (int64, bool)) (deleted int) {
	s.maxTAT = 0
	deleted = updateMap(s.v4, f, &s.maxTAT) + updateMap(s.v6, f, &s.maxTAT)
	s.v4, s.peak4 = shrink(s.v4, s.peak4)
	s.v6, s.peak6 = shrink(s.v6, s.peak6)
	return deleted
}

func updateMap[K comparable](m map[K]int64, f func(int64) (int64, bool), maxTAT *int64) (deleted int) {
	for k, t := range m {
		if nt, keep := f(t); keep {
			m[k] = nt
			*maxTAT = max(*maxTAT, nt)
		} else {
			delete(m, k)
			deleted++
		}
	}
	return deleted
}

// shrink gives back the memory of a map that emptied, or that holds far
// fewer entries than it grew for (peak): a Go map never shrinks by deletion.
// It returns the map to keep and its new peak.
func shrink[K comparable](m map[K]int64, peak int) (map[K]int64, int) {
	const minPeak = 64
	switch {
	case len(m) == 0:
		return nil, 0
	case peak >= minPeak && len(m) < peak/8:
		c := make(map[K]int64, len(m))
		for k, t := range m {
			c[k] = t
		}
		return c, len(c)
	}
	return m, peak
}

// Expire deletes every entry whose bucket is full now. The limiter's own
// sweeper calls it while entries exist; tests call it with their clock.
func (l *Limiter) Expire() {
	now := l.now()
	for i := range l.shards {
		if n := l.shards[i].expire(now); n > 0 {
			l.keys.Add(-int64(n))
		}
	}
}

// sweeper runs Expire on a timer while the limiter holds entries, and not at
// all when it holds none: an idle limiter costs no goroutine and no timer,
// and one that is dropped from the registry stops by itself once its buckets
// are full.
type sweeper struct {
	l     *Limiter
	auto  bool        // sweep on a timer (the real clock)
	armed atomic.Bool // a sweep is scheduled; checked without a lock per new key
	mu    sync.Mutex  // guards timer
	timer *time.Timer
}

// sweepEvery is how often entries are swept: each emission interval, within
// 100 ms and 1 s (an entry lives at least one interval).
func sweepEvery(t int64) time.Duration {
	return min(max(time.Duration(t), 100*time.Millisecond), time.Second)
}

// arm schedules a sweep unless one is scheduled.
func (s *sweeper) arm() {
	if !s.auto || s.armed.Load() || !s.armed.CompareAndSwap(false, true) {
		return
	}
	s.schedule()
}

func (s *sweeper) schedule() {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := sweepEvery(s.l.rule.Load().t)
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.run)
	} else {
		s.timer.Reset(d)
	}
}

func (s *sweeper) run() {
	s.l.Expire()
	if s.l.keys.Load() > 0 {
		s.schedule()
		return
	}
	s.armed.Store(false)
	// An Allow that added an entry after the load above saw armed true and
	// left the sweep to this one: look again.
	if s.l.keys.Load() > 0 && s.armed.CompareAndSwap(false, true) {
		s.schedule()
	}
}

// Rule returns the rule the limiter enforces.
func (l *Limiter) Rule() Rule { return l.rule.Load().Rule }

// ClientBucket is one client key's bucket, as the API shows it.
type ClientBucket struct {
	IP string `json:"ip"`
	// Available is how many connections the key may open right now.
	Available int64 `json:"available"`
	// FullIn is how long until its bucket is full again (and its entry is
	// deleted), if it opens nothing more.
	FullIn config.Duration `json:"fullIn"`
}

// State is a point-in-time view of a limiter for the API.
type State struct {
	Average int64           `json:"average"`
	Period  config.Duration `json:"period"`
	Burst   int64           `json:"burst"`
	DryRun  bool            `json:"dryRun,omitempty"`
	// DistinctIPs is the number of keys held: those whose bucket is not full
	// (and, for at most a sweep, some that just filled up).
	DistinctIPs int64          `json:"distinctIPs"`
	Admitted    uint64         `json:"admittedTotal"`
	Rejected    uint64         `json:"rejectedTotal"`
	Top         []ClientBucket `json:"topClients,omitempty"`
}

// Stats returns the counters without walking the per-key maps.
func (l *Limiter) Stats() State {
	r := l.rule.Load()
	return State{
		Average:     r.Average,
		Period:      config.Duration(r.Period),
		Burst:       r.Burst,
		DryRun:      r.DryRun,
		DistinctIPs: l.keys.Load(),
		Admitted:    l.admits.Load(),
		Rejected:    l.rejects.Load(),
	}
}

// Snapshot returns the counters plus up to top keys whose bucket is not
// full, fewest available connections first (then longest to full, then by
// address), walking every shard under its lock in turn.
func (l *Limiter) Snapshot(top int) State {
	st := l.Stats()
	if top <= 0 {
		return st
	}
	type kt struct {
		k     netip.Addr
		debt  int64
		avail int64
	}
	var all []kt
	now := l.now()
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		r := s.r
		add := func(k netip.Addr, tat int64) {
			if d := tat - now; d > 0 && r.t > 0 {
				avail := int64(0)
				if d <= r.tau {
					avail = (r.tau-d)/r.t + 1
				}
				all = append(all, kt{k, d, avail})
			}
		}
		for k, t := range s.v4 {
			add(netip.AddrFrom4([4]byte{byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)}), t)
		}
		for k, t := range s.v6 {
			add(netip.AddrFrom16(k), t)
		}
		s.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b kt) int {
		if c := cmp.Compare(a.avail, b.avail); c != 0 {
			return c
		}
		if c := cmp.Compare(b.debt, a.debt); c != 0 {
			return c
		}
		return a.k.Compare(b.k)
	})
	if len(all) > top {
		all = all[:top]
	}
	st.Top = make([]ClientBucket, len(all))
	for i, e := range all {
		st.Top[i] = ClientBucket{IP: e.k.String(), Available: e.avail, FullIn: config.Duration(e.debt)}
	}
	return st
}

// Entries returns the number of per-key entries held, counted in the maps
// (for tests of memory behaviour; Stats' DistinctIPs is the same figure,
// kept as a counter).
func (l *Limiter) Entries() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += s.len()
		s.mu.Unlock()
	}
	return n
}
