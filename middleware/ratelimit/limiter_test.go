package ratelimit

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// clock is a test clock: time moves only when the test says.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Duration      { return time.Duration(c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func newTestLimiter(r Rule) (*Limiter, *clock) {
	c := &clock{}
	c.ns.Store(int64(time.Hour)) // any start: TATs are relative to it
	return NewLimiter(r, 0, c.now), c
}

var ipA, ipB = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")

func admitN(l *Limiter, k netip.Addr, n int) (admitted int) {
	for i := 0; i < n; i++ {
		if ok, _ := l.Allow(k); ok {
			admitted++
		}
	}
	return admitted
}

// Traefik's meaning: burst at once from a full bucket, then average per
// period; each key has its own bucket.
func TestBurstThenAverage(t *testing.T) {
	l, c := newTestLimiter(Rule{Average: 10, Period: time.Second, Burst: 5})
	if got := admitN(l, ipA, 8); got != 5 {
		t.Fatalf("full bucket: %d of 8 admitted, want burst 5", got)
	}
	if got := admitN(l, ipB, 8); got != 5 {
		t.Fatalf("another key: %d of 8 admitted, want its own 5", got)
	}
	c.advance(99 * time.Millisecond)
	if got := admitN(l, ipA, 3); got != 0 {
		t.Fatalf("99 ms after emptying at 10/s: %d admitted, want 0", got)
	}
	c.advance(time.Millisecond)
	if got := admitN(l, ipA, 3); got != 1 {
		t.Fatalf("100 ms after emptying at 10/s: %d admitted, want 1", got)
	}
	// A client trying every millisecond for one second gets the average.
	got := 0
	for i := 0; i < 1000; i++ {
		c.advance(time.Millisecond)
		got += admitN(l, ipA, 1)
	}
	if got != 10 {
		t.Fatalf("one second of attempts every ms: %d admitted, want average 10", got)
	}
	if st := l.Stats(); st.Admitted != 5+5+1+10 || st.Rejected != 3+3+3+2+990 {
		t.Fatalf("stats %+v", st)
	}
	// ipA's last connection was at +1100 ms and left its bucket empty (full
	// again at +1600 ms); ipB's has been full since +500 ms: its entry goes
	// at the next sweep.
	c.advance(499 * time.Millisecond)
	l.Expire()
	if n := l.Entries(); n != 1 {
		t.Fatalf("%d entries while ipA's bucket still refills, want 1", n)
	}
	c.advance(time.Millisecond)
	l.Expire()
	if n, k := l.Entries(), l.Stats().DistinctIPs; n != 0 || k != 0 {
		t.Fatalf("%d entries (counter %d) once every bucket is full, want 0", n, k)
	}
	if got := admitN(l, ipA, 8); got != 5 {
		t.Fatalf("after the entry was deleted: %d admitted, want a full burst 5", got)
	}
}

// reference is a token bucket in integer nanoseconds of credit: capacity
// burst*T, one connection costs T. GCRA must decide exactly as it does.
type reference struct {
	credit, cap, t, last int64
	seen                 bool
}

func (r *reference) allow(now int64) bool {
	if !r.seen {
		r.credit, r.seen = r.cap, true
	} else {
		r.credit = min(r.cap, r.credit+(now-r.last))
	}
	r.last = now
	if r.credit >= r.t {
		r.credit -= r.t
		return true
	}
	return false
}

// ops drives a limiter and the reference with the same arrivals: each pair
// of bytes is a time step (in units of a tenth of the interval) and a key.
func checkAgainstReference(t *testing.T, ru Rule, script []byte) {
	l, c := newTestLimiter(ru)
	nr := newRule(ru)
	refs := map[byte]*reference{}
	for i := 0; i+1 < len(script); i += 2 {
		c.advance(time.Duration(int64(script[i]) * max(nr.t/10, 1)))
		key := script[i+1] % 4
		ref := refs[key]
		if ref == nil {
			ref = &reference{cap: nr.Burst * nr.t, t: nr.t}
			refs[key] = ref
		}
		want := ref.allow(c.ns.Load())
		got, over := l.Allow(netip.AddrFrom4([4]byte{10, 0, 0, key}))
		if got != want || over == want {
			t.Fatalf("%+v step %d (key %d): admit %v over %v, token bucket says %v", ru, i/2, key, got, over, want)
		}
		if i%16 == 0 {
			l.Expire() // deleting full buckets must not change a decision
		}
	}
}

func TestMatchesTokenBucket(t *testing.T) {
	script := make([]byte, 4000)
	x := uint32(1)
	for i := range script {
		x = x*1664525 + 1013904223
		script[i] = byte(x >> 24)
		if i%2 == 0 {
			script[i] %= 24 // mostly faster than the rate, sometimes quiet
		}
	}
	for _, ru := range []Rule{
		{Average: 10, Period: time.Second, Burst: 1},
		{Average: 10, Period: time.Second, Burst: 5},
		{Average: 3, Period: time.Minute, Burst: 2},
		{Average: 1000, Period: time.Second, Burst: 50},
	} {
		checkAgainstReference(t, ru, script)
	}
}

// FuzzLimiter: for any rule a rateLimit block can validate into and any
// arrivals, the limiter never panics and decides as a token bucket.
func FuzzLimiter(f *testing.F) {
	f.Add(int64(10), int64(time.Second), int64(5), []byte{0, 1, 5, 1, 30, 2, 0, 1, 0, 1})
	f.Add(int64(1), int64(time.Hour), int64(1), []byte{255, 0, 255, 0})
	f.Add(int64(1<<40), int64(1), int64(1<<50), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, average, period, burst int64, script []byte) {
		p := config.Duration(period)
		cfg := &config.TCPRateLimit{Average: average, Period: &p, Burst: &burst}
		ru, _, err := validate(cfg)
		if err != nil {
			return
		}
		if ru.Average <= 0 {
			l, _ := newTestLimiter(ru)
			if admitN(l, ipA, 3) != 3 || l.Entries() != 0 {
				t.Fatal("average 0 must admit everything and keep no state")
			}
			return
		}
		if nr := newRule(ru); nr.tau >= maxTime/4 || nr.t > maxTime/1024 {
			return // saturated: the reference's integers would overflow
		}
		checkAgainstReference(t, ru, script)
	})
}

// A burst of simultaneous attempts admits exactly the burst, whatever the
// interleaving (run with -race).
func TestConcurrentBurstIsExact(t *testing.T) {
	const burst, attempts = 7, 64
	l, _ := newTestLimiter(Rule{Average: 1, Period: time.Hour, Burst: burst})
	keys := []netip.Addr{ipA, ipB, netip.MustParseAddr("2001:db8::1")}
	var admitted [3]atomic.Int64
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for w := 0; w < attempts; w++ {
		for ki, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				if ok, _ := l.Allow(k); ok {
					admitted[ki].Add(1)
				}
			}()
		}
	}
	close(gate)
	wg.Wait()
	for ki := range keys {
		if got := admitted[ki].Load(); got != burst {
			t.Errorf("key %v: %d of %d simultaneous attempts admitted, want exactly %d", keys[ki], got, attempts, burst)
		}
	}
	if st := l.Stats(); st.Admitted != 3*burst || st.Rejected != 3*(attempts-burst) || st.DistinctIPs != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// dryRun admits everything and counts exactly what enforcing would refuse.
func TestDryRunCountsWhatEnforcingRefuses(t *testing.T) {
	enf, c1 := newTestLimiter(Rule{Average: 10, Period: time.Second, Burst: 3})
	dry, c2 := newTestLimiter(Rule{Average: 10, Period: time.Second, Burst: 3, DryRun: true})
	for i := 0; i < 200; i++ {
		c1.advance(7 * time.Millisecond)
		c2.advance(7 * time.Millisecond)
		ok1, over1 := enf.Allow(ipA)
		ok2, over2 := dry.Allow(ipA)
		if !ok2 || over1 != over2 || ok1 == over1 {
			t.Fatalf("attempt %d: enforcing %v/%v, dry run %v/%v", i, ok1, over1, ok2, over2)
		}
	}
	if e, d := enf.Stats(), dry.Stats(); e.Rejected == 0 || d.Rejected != e.Rejected || d.Admitted != 200 {
		t.Fatalf("enforcing %+v, dry run %+v: dry run must admit all 200 and count the same rejections", e, d)
	}
}

func TestAverageZeroHasNoLimitAndNoState(t *testing.T) {
	l, _ := newTestLimiter(Rule{Average: 0, Period: time.Second, Burst: 1})
	if got := admitN(l, ipA, 1000); got != 1000 || l.Entries() != 0 {
		t.Fatalf("average 0: %d of 1000 admitted, %d entries; want all and none", got, l.Entries())
	}
}

// A changed average applies at once, to the buckets as they are: a client
// that emptied its bucket is not refilled, and refills at the new rate.
func TestRateChangeKeepsBuckets(t *testing.T) {
	l, c := newTestLimiter(Rule{Average: 1, Period: time.Minute, Burst: 3})
	if got := admitN(l, ipA, 5); got != 3 {
		t.Fatalf("%d admitted, want 3", got)
	}
	admitN(l, ipB, 1) // ipB used one of its three
	l.set(Rule{Average: 60, Period: time.Minute, Burst: 3})
	if got := admitN(l, ipA, 1); got != 0 {
		t.Fatal("the rate change refilled an empty bucket")
	}
	if got := admitN(l, ipB, 5); got != 2 {
		t.Fatalf("ipB after the change: %d admitted, want the 2 it had left", got)
	}
	c.advance(time.Second)
	if got := admitN(l, ipA, 5); got != 1 {
		t.Fatalf("1 s after the change to 60/min: %d admitted, want 1 (the old rate would give 0 for a minute)", got)
	}
	if got := admitN(l, netip.MustParseAddr("10.0.0.3"), 5); got != 3 {
		t.Fatalf("a new client: %d admitted, want burst 3", got)
	}
	// Lowering the rate keeps used connections too: ipA used 3 at the fast
	// rate (3 s to refill); at 1/min it has 3 minutes to go.
	l.set(Rule{Average: 1, Period: time.Minute, Burst: 3})
	c.advance(30 * time.Second)
	if got := admitN(l, ipA, 1); got != 0 {
		t.Fatal("30 s after slowing to 1/min an empty bucket admitted")
	}
	c.advance(31 * time.Second)
	if got := admitN(l, ipA, 2); got != 1 {
		t.Fatalf("61 s after slowing to 1/min: %d admitted, want 1", got)
	}
	// A burst change keeps used connections and applies the new size.
	l.set(Rule{Average: 1, Period: time.Minute, Burst: 10})
	if got := admitN(l, netip.MustParseAddr("10.0.0.4"), 12); got != 10 {
		t.Fatalf("new client after burst 10: %d admitted", got)
	}
	// Going to no limit drops the state; coming back starts full.
	l.set(Rule{Average: 0, Period: time.Minute, Burst: 10})
	if l.Entries() != 0 || l.Stats().DistinctIPs != 0 {
		t.Fatalf("average 0 kept %d entries", l.Entries())
	}
	l.set(Rule{Average: 1, Period: time.Minute, Burst: 2})
	if got := admitN(l, ipA, 3); got != 2 {
		t.Fatalf("back from no limit: %d admitted, want a full burst 2", got)
	}
}

// Entries of full buckets are deleted; maps that empty are given back.
func TestExpireDeletesFullBuckets(t *testing.T) {
	l, c := newTestLimiter(Rule{Average: 10, Period: time.Second, Burst: 2})
	for i := 0; i < 5000; i++ {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], 0x0a000000+uint32(i))
		l.Allow(netip.AddrFrom4(b))
		l.Allow(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)}))
	}
	if n := l.Entries(); n != 10000 || l.Stats().DistinctIPs != 10000 {
		t.Fatalf("%d entries (counter %d), want 10000", n, l.Stats().DistinctIPs)
	}
	c.advance(99 * time.Millisecond)
	l.Expire()
	if n := l.Entries(); n != 10000 {
		t.Fatalf("buckets still refilling: %d entries, want 10000", n)
	}
	c.advance(time.Millisecond)
	l.Expire()
	if n := l.Entries(); n != 0 || l.Stats().DistinctIPs != 0 {
		t.Fatalf("every bucket full: %d entries (counter %d), want 0", n, l.Stats().DistinctIPs)
	}
	for i := range l.shards {
		if s := &l.shards[i]; s.v4 != nil || s.v6 != nil {
			t.Fatalf("shard %d kept its emptied maps", i)
		}
	}
}

// The sweeper runs by itself while entries exist, and stops when they are
// gone (real clock, bounded wait).
func TestSweeperDeletesAndStops(t *testing.T) {
	l := NewLimiter(Rule{Average: 10, Period: time.Second, Burst: 1}, 0, nil)
	admitN(l, ipA, 1)
	admitN(l, ipB, 1)
	deadline := time.Now().Add(5 * time.Second)
	for l.Entries() != 0 || l.sweep.armed.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %d entries, sweeper armed %v; want 0 and stopped", l.Entries(), l.sweep.armed.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	admitN(l, ipA, 1) // arms again
	if !l.sweep.armed.Load() {
		t.Fatal("a new entry did not arm the sweeper")
	}
}

// Bytes per tracked IP: the heap that 100,000 IPv4 entries take, and that
// it is given back when their buckets are full.
func TestMemoryPerTrackedIP(t *testing.T) {
	const n = 100_000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for _, tc := range []struct {
		name string
		key  func(i int) netip.Addr
		max  float64
	}{
		{"ipv4", func(i int) netip.Addr {
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], 0x0a000000+uint32(i))
			return netip.AddrFrom4(b)
		}, 48},
		{"ipv6", func(i int) netip.Addr {
			return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)})
		}, 64},
	} {
		l, c := newTestLimiter(Rule{Average: 1, Period: time.Second, Burst: 1})
		before := heap()
		for i := 0; i < n; i++ {
			l.Allow(tc.key(i))
		}
		during := heap()
		per := float64(during-before) / n
		c.advance(time.Second)
		l.Expire()
		after := heap()
		t.Logf("%s: %.1f bytes per tracked IP (%d entries); %d bytes left once every bucket is full", tc.name, per, n, int64(after)-int64(before))
		if per > tc.max {
			t.Errorf("%s: %.1f bytes per tracked IP, want at most %.0f", tc.name, per, tc.max)
		}
		if after > before+64<<10 {
			t.Errorf("%s: %d bytes still held after every entry was deleted", tc.name, after-before)
		}
		runtime.KeepAlive(l)
	}
}

// A map that keeps a few entries of many gives the rest of its memory back
// (a Go map does not shrink by deletion).
func TestMostlyExpiredMapsShrink(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	key := func(i int) netip.Addr {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], 0x0a000000+uint32(i))
		return netip.AddrFrom4(b)
	}
	l, c := newTestLimiter(Rule{Average: 1, Period: time.Second, Burst: 1})
	before := heap()
	for i := 0; i < 100_000; i++ {
		l.Allow(key(i))
	}
	peak := heap() - before
	c.advance(500 * time.Millisecond)
	for i := 100_000; i < 105_000; i++ {
		l.Allow(key(i))
	}
	c.advance(500 * time.Millisecond)
	l.Expire()
	if n := l.Entries(); n != 5000 {
		t.Fatalf("%d entries, want the 5000 still refilling", n)
	}
	left := int64(heap()) - int64(before)
	t.Logf("100,000 entries: %d bytes; 5,000 left: %d bytes", peak, left)
	if left > int64(peak)/4 {
		t.Fatalf("5%% of the entries left hold %d of %d bytes: the maps did not shrink", left, peak)
	}
	runtime.KeepAlive(l)
}

func TestSnapshotShowsBuckets(t *testing.T) {
	l, c := newTestLimiter(Rule{Average: 10, Period: time.Second, Burst: 4})
	admitN(l, ipA, 4) // empty
	admitN(l, ipB, 1) // 3 left
	c.advance(50 * time.Millisecond)
	st := l.Snapshot(10)
	if len(st.Top) != 2 || st.Top[0].IP != "10.0.0.1" || st.Top[1].IP != "10.0.0.2" {
		t.Fatalf("top %+v, want 10.0.0.1 then 10.0.0.2", st.Top)
	}
	if a := st.Top[0]; a.Available != 0 || time.Duration(a.FullIn) != 350*time.Millisecond {
		t.Fatalf("emptied bucket %+v, want 0 available, full in 350ms", a)
	}
	if b := st.Top[1]; b.Available != 3 || time.Duration(b.FullIn) != 50*time.Millisecond {
		t.Fatalf("bucket with one used %+v, want 3 available (1 refilling), full in 50ms", b)
	}
	if st.Average != 10 || time.Duration(st.Period) != time.Second || st.Burst != 4 || st.DistinctIPs != 2 {
		t.Fatalf("state %+v", st)
	}
	if top1 := l.Snapshot(1); len(top1.Top) != 1 {
		t.Fatalf("top 1: %+v", top1.Top)
	}
}

func TestKeyUnmapsAndGroupsIPv6(t *testing.T) {
	l := NewLimiter(Rule{Average: 1, Period: time.Second, Burst: 1}, 0, nil)
	if got := l.Key(netip.MustParseAddr("::ffff:127.0.0.1")); got != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("mapped key %v", got)
	}
	g := NewLimiter(Rule{Average: 1, Period: time.Second, Burst: 1}, 64, nil)
	k1 := g.Key(netip.MustParseAddr("2001:db8::1"))
	k2 := g.Key(netip.MustParseAddr("2001:db8::ffff:2"))
	k3 := g.Key(netip.MustParseAddr("2001:db8:0:1::1"))
	if k1 != k2 || k1 == k3 {
		t.Fatalf("ipv6Subnet 64 keys: %v %v %v", k1, k2, k3)
	}
	if ok, _ := g.Allow(k1); !ok {
		t.Fatal("first connection of a /64 refused")
	}
	if ok, _ := g.Allow(k2); ok {
		t.Fatal("a second address of the same /64 had its own bucket")
	}
}

func TestRegistrySharesAndSweeps(t *testing.T) {
	c := &clock{}
	r := Registry{Clock: c.now}
	a := r.Get("m@file", Rule{Average: 1, Period: time.Minute, Burst: 2}, 0)
	b := r.Get("m@file", Rule{Average: 2, Period: time.Minute, Burst: 2}, 0)
	if a != b || a.Rule().Average != 2 {
		t.Fatal("same name must return the same limiter with the new rule")
	}
	admitN(a, ipA, 1)
	r.Sweep(map[string]bool{})
	if r.Lookup("m@file") != a {
		t.Fatal("a limiter with a bucket still refilling was swept")
	}
	c.advance(time.Minute)
	a.Expire()
	r.Sweep(map[string]bool{})
	if r.Lookup("m@file") != nil {
		t.Fatal("an unused limiter with every bucket full was kept")
	}
	v := r.Get("v6@file", Rule{Average: 1, Period: time.Second, Burst: 1}, 0)
	if r.Get("v6@file", Rule{Average: 1, Period: time.Second, Burst: 1}, 64) != v || v.V6Bits() != 64 {
		t.Fatal("changing ipv6Subnet must keep the limiter and key IPv6 clients by the new prefix")
	}
	if names := r.Names(); len(names) != 1 || names[0] != "v6@file" {
		t.Fatalf("names %v", names)
	}
}

// New validates its block once: warnings and errors name the field, and a
// rejected block registers nothing.
func TestNewValidates(t *testing.T) {
	d := func(x time.Duration) *config.Duration { v := config.Duration(x); return &v }
	i64 := func(x int64) *int64 { return &x }
	bits := 200
	for _, tc := range []struct {
		cfg          config.TCPRateLimit
		want         Rule
		field, words string // warning or error
		isErr        bool
	}{
		{cfg: config.TCPRateLimit{Average: 10}, want: Rule{Average: 10, Period: time.Second, Burst: 1}},
		{cfg: config.TCPRateLimit{Average: 100, Period: d(time.Minute), Burst: i64(50), DryRun: true}, want: Rule{Average: 100, Period: time.Minute, Burst: 50, DryRun: true}},
		{cfg: config.TCPRateLimit{}, want: Rule{Period: time.Second, Burst: 1}, field: "rateLimit.average", words: "no connection is rate-limited"},
		{cfg: config.TCPRateLimit{Average: 5, Burst: i64(0)}, want: Rule{Average: 5, Period: time.Second, Burst: 1}, field: "rateLimit.burst", words: "burst 0 is less than 1"},
		{cfg: config.TCPRateLimit{Average: 5, Burst: i64(-3)}, want: Rule{Average: 5, Period: time.Second, Burst: 1}, field: "rateLimit.burst", words: "burst -3 is less than 1"},
		{cfg: config.TCPRateLimit{Average: -1}, field: "rateLimit.average", words: "-1 is negative", isErr: true},
		{cfg: config.TCPRateLimit{Average: 1, Period: d(0)}, field: "rateLimit.period", words: "period 0s is not positive", isErr: true},
		{cfg: config.TCPRateLimit{Average: 1, Period: d(-time.Second)}, field: "rateLimit.period", words: "period -1s is not positive", isErr: true},
		{cfg: config.TCPRateLimit{Average: 1, IPv6Subnet: &bits}, field: "rateLimit.ipv6Subnet", words: "ipv6Subnet 200", isErr: true},
	} {
		var reg Registry
		mw, l, warns, err := newMiddleware("m@file", &tc.cfg, &reg, zerolog.Nop())
		if len(warns) > 1 {
			t.Errorf("%+v: warnings %+v, want at most one", tc.cfg, warns)
		}
		var got error
		if len(warns) == 1 {
			got = config.FieldErrorf(warns[0].Field, "%s", warns[0].Message)
		}
		if tc.isErr {
			got = err
			if mw != nil || l != nil || reg.Lookup("m@file") != nil {
				t.Errorf("%+v: a rejected block returned or registered a limiter", tc.cfg)
			}
		} else if err != nil || mw == nil || l == nil || l.Rule() != tc.want {
			t.Errorf("%+v: err %v, rule %+v, want %+v", tc.cfg, err, l.Rule(), tc.want)
			continue
		}
		switch {
		case tc.words == "" && got != nil:
			t.Errorf("%+v: unexpected %v", tc.cfg, got)
		case tc.words != "" && (got == nil || !strings.Contains(got.Error(), tc.words) || config.FieldOf(got) != tc.field):
			t.Errorf("%+v: got %v (field %q), want %q on %s", tc.cfg, got, config.FieldOf(got), tc.words, tc.field)
		}
	}
	if _, _, _, err := newMiddleware("m@file", nil, &Registry{}, zerolog.Nop()); err == nil {
		t.Error("a nil block must be an error")
	}
}

// A flood of rejections logs a bounded number of lines, names the IP with the
// phrase operators alert on, and reports how many lines were suppressed;
// rejected connections never reach the next handler.
func TestRejectionLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	var reg Registry
	one := int64(1)
	mw, l, _, err := newMiddleware("rl@file", &config.TCPRateLimit{Average: 1, Period: durp(time.Hour), Burst: &one}, &reg, zerolog.New(&buf))
	if err != nil {
		t.Fatal(err)
	}
	var passed atomic.Int64
	h := mw(tcp.HandlerFunc(func(c *tcp.Conn) { passed.Add(1) }))
	const n = 5000
	for i := 0; i < n; i++ {
		var ip [4]byte
		binary.BigEndian.PutUint32(ip[:], 0x0a000000+uint32(i%3))
		h.ServeTCP(&tcp.Conn{Client: netip.AddrPortFrom(netip.AddrFrom4(ip), 1)})
	}
	if passed.Load() != 3 {
		t.Fatalf("%d connections reached the next handler, want 3 (burst 1 for each of 3 IPs)", passed.Load())
	}
	out := buf.String()
	lines := strings.Count(out, "\n")
	if lines == 0 || lines > 2*logLinesPerSecond {
		t.Fatalf("%d log lines for %d rejections from 3 IPs, want between 1 and %d", lines, n-3, 2*logLinesPerSecond)
	}
	for _, want := range []string{"Connection rejected", "connection rate limit reached for 10.0.0.", "average 1 per 1h0m0s, burst 1", `"middlewareType":"RateLimit"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %q: %s", want, out)
		}
	}
	if got := l.Stats().Rejected; got != n-3 {
		t.Fatalf("rejected counter %d, want %d: metrics must count every rejection", got, n-3)
	}
}

func durp(d time.Duration) *config.Duration { v := config.Duration(d); return &v }

func BenchmarkAllow(b *testing.B) {
	l := NewLimiter(Rule{Average: 1 << 30, Period: time.Second, Burst: 1 << 20}, 0, nil)
	var next atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine is a different client subnet, like real traffic.
		base := next.Add(1) << 16
		i := uint32(0)
		for pb.Next() {
			var ip [4]byte
			binary.BigEndian.PutUint32(ip[:], 0x7f000000|base|(i&0xff))
			l.Allow(netip.AddrFrom4(ip))
			i++
		}
	})
}

func BenchmarkAllowOneIP(b *testing.B) {
	l := NewLimiter(Rule{Average: 1 << 30, Period: time.Second, Burst: 1 << 20}, 0, nil)
	k := netip.MustParseAddr("127.0.0.1")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow(k)
		}
	})
}

// A reload that only changes ipv6Subnet keeps every bucket: an IPv4 client
// that used its burst gets no new one at any change; two IPv6 clients of one
// /64 that each used theirs share one bucket with both debts once grouped by
// /64; a finer prefix keeps the grouped bucket under the prefix, so a client
// of it starts full then (rebits). A fresh limiter at each change gave every
// client a new burst.
func TestIPv6SubnetChangeKeepsBuckets(t *testing.T) {
	c := &clock{}
	r := Registry{Clock: c.now}
	rule := Rule{Average: 1, Period: time.Minute, Burst: 2}
	l := r.Get("m@file", rule, 0)
	v4 := netip.MustParseAddr("192.0.2.7")
	a6 := netip.MustParseAddr("2001:db8:1:2::a")
	b6 := netip.MustParseAddr("2001:db8:1:2::b")
	for _, a := range []netip.Addr{v4, a6, b6} {
		for i := 0; i < 2; i++ {
			if _, admit, _ := l.AllowAddr(a); !admit {
				t.Fatalf("%s: connection %d refused within its burst", a, i+1)
			}
		}
	}
	if got := r.Get("m@file", rule, 64); got != l || l.V6Bits() != 64 {
		t.Fatal("ipv6Subnet 64 replaced the limiter")
	}
	for _, a := range []netip.Addr{v4, a6, b6} {
		if _, admit, _ := l.AllowAddr(a); admit {
			t.Fatalf("ipv6Subnet 64: %s got a new burst", a)
		}
	}
	if k := l.Key(a6); k != netip.MustParseAddr("2001:db8:1:2::") {
		t.Fatalf("key %s, want the /64", k)
	}
	if n := l.keys.Load(); n != 2 {
		t.Fatalf("%d keys held, want 2 (the IPv4 client and the /64)", n)
	}
	// Finer again: the IPv4 bucket is kept; the /64's stays under its key.
	if got := r.Get("m@file", rule, 128); got != l {
		t.Fatal("ipv6Subnet 128 replaced the limiter")
	}
	if _, admit, _ := l.AllowAddr(v4); admit {
		t.Fatal("ipv6Subnet 128: the IPv4 client got a new burst")
	}
	if n := l.keys.Load(); n != 2 {
		t.Fatalf("%d keys held after going finer, want the 2 buckets kept", n)
	}
	if r.Get("m@file", rule, 64); l.V6Bits() != 64 {
		t.Fatal("ipv6Subnet 64 again was not applied")
	}
	// Grouped by /64, the prefix holds both clients' debts: 4 connections
	// against a burst of 2, so one interval gives nothing back yet.
	c.advance(time.Minute)
	if _, admit, _ := l.AllowAddr(a6); admit {
		t.Fatal("the /64 got a connection back after one interval, with two clients' debts")
	}
}

// AllowAddr stays exact while ipv6Subnet changes under it: the clients of
// one /64 are never admitted more than burst between two changes.
func TestAllowAddrWhileIPv6SubnetChanges(t *testing.T) {
	c := &clock{}
	r := Registry{Clock: c.now}
	rule := Rule{Average: 1, Period: time.Hour, Burst: 50}
	l := r.Get("m@file", rule, 64)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(g + 1)})
			for i := 0; i < 200; i++ {
				if _, admit, _ := l.AllowAddr(a); admit {
					admitted.Add(1)
				}
			}
		}(g)
	}
	for i := 0; i < 20; i++ {
		r.Get("m@file", rule, []int{0, 64}[i%2])
	}
	wg.Wait()
	// Four addresses of one /64: at most a burst each while keyed apart,
	// and their debts add up when grouped, so never more than 4 bursts.
	if n := admitted.Load(); n > 4*50 {
		t.Fatalf("%d admitted, more than 4 bursts of 50", n)
	}
}
