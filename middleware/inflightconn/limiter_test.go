package inflightconn

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

func TestAcquireReleaseDeletesAtZero(t *testing.T) {
	l := NewLimiter(2, false, 0)
	a := netip.MustParseAddr("10.0.0.1")
	if !l.Acquire(a) || !l.Acquire(a) {
		t.Fatal("first two acquires must pass")
	}
	if l.Acquire(a) {
		t.Fatal("third acquire passed with amount 2")
	}
	if st := l.Stats(); st.InFlight != 2 || st.DistinctIPs != 1 || st.Rejected != 1 || st.Admitted != 2 {
		t.Fatalf("stats %+v", st)
	}
	l.Release(a)
	l.Release(a)
	if n := l.Entries(); n != 0 {
		t.Fatalf("%d entries left after every connection ended, want 0", n)
	}
	if st := l.Stats(); st.InFlight != 0 || st.DistinctIPs != 0 {
		t.Fatalf("stats after release %+v", st)
	}
	l.Release(a) // an unmatched release must not go negative
	if l.Count(a) != 0 || l.Stats().InFlight != 0 {
		t.Fatal("unmatched release changed the counts")
	}
}

func TestKeyUnmapsAndGroupsIPv6(t *testing.T) {
	l := NewLimiter(1, false, 0)
	if got := l.Key(netip.MustParseAddr("::ffff:127.0.0.1")); got != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("mapped key %v", got)
	}
	g := NewLimiter(1, false, 64)
	k1 := g.Key(netip.MustParseAddr("2001:db8::1"))
	k2 := g.Key(netip.MustParseAddr("2001:db8::ffff:2"))
	k3 := g.Key(netip.MustParseAddr("2001:db8:0:1::1"))
	if k1 != k2 || k1 == k3 {
		t.Fatalf("ipv6Subnet 64 keys: %v %v %v", k1, k2, k3)
	}
	if g.Key(netip.MustParseAddr("192.0.2.1")) != netip.MustParseAddr("192.0.2.1") {
		t.Fatal("IPv4 must be keyed by address")
	}
}

func TestDryRunAdmitsAndCounts(t *testing.T) {
	l := NewLimiter(2, true, 0)
	a := netip.MustParseAddr("10.0.0.1")
	for i := 0; i < 5; i++ {
		if !l.Acquire(a) {
			t.Fatalf("dry run rejected connection %d", i+1)
		}
	}
	if st := l.Stats(); st.Rejected != 3 || st.InFlight != 5 {
		t.Fatalf("dry run stats %+v, want 3 would-be rejections and 5 in flight", st)
	}
}

// Many goroutines hammer few keys: the count never exceeds the amount and
// returns to zero. Run with -race.
func TestConcurrentNeverExceedsAmount(t *testing.T) {
	const amount, workers, rounds = 3, 32, 2000
	l := NewLimiter(amount, false, 0)
	keys := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("::1")}
	var held [3]atomic.Int64
	var over atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				ki := (w + i) % len(keys)
				if !l.Acquire(keys[ki]) {
					continue
				}
				if n := held[ki].Add(1); n > amount {
					over.Add(1)
				}
				held[ki].Add(-1)
				l.Release(keys[ki])
			}
		}(w)
	}
	wg.Wait()
	if over.Load() != 0 {
		t.Fatalf("count exceeded the amount %d times", over.Load())
	}
	if l.Entries() != 0 || l.Stats().InFlight != 0 || l.Stats().DistinctIPs != 0 {
		t.Fatalf("state left after all released: entries %d stats %+v", l.Entries(), l.Stats())
	}
}

func TestRegistrySharesAndSweeps(t *testing.T) {
	var r Registry
	a := r.Get("m@file", 5, false, 0)
	b := r.Get("m@file", 7, false, 0)
	if a != b || a.Amount() != 7 {
		t.Fatal("same name must return the same limiter with the new amount")
	}
	k := netip.MustParseAddr("10.0.0.1")
	a.Acquire(k)
	r.Sweep(map[string]bool{})
	if r.Lookup("m@file") != a {
		t.Fatal("a limiter counting a connection was swept")
	}
	a.Release(k)
	r.Sweep(map[string]bool{})
	if r.Lookup("m@file") != nil {
		t.Fatal("an unused, empty limiter was kept")
	}
	c := r.Get("v6@file", 1, false, 0)
	if r.Get("v6@file", 1, false, 64) != c || c.V6Bits() != 64 {
		t.Fatal("changing ipv6Subnet must keep the limiter (and its counts), keyed anew")
	}
}

// New validates its block once: a warning for amount 0, an error naming the
// field (and no limiter registered) for a value out of range.
func TestNewValidates(t *testing.T) {
	bits := 200
	for _, tc := range []struct {
		cfg   config.TCPInFlightConn
		warn  string
		field string // the warning's
		err   string
	}{
		{config.TCPInFlightConn{Amount: 10}, "", "", ""},
		{config.TCPInFlightConn{Amount: 0}, "every connection is rejected", "inFlightConn.amount", ""},
		{config.TCPInFlightConn{Amount: 1, FailureMode: "open"}, "no effect without inFlightConn.store", "inFlightConn.failureMode", ""},
		{config.TCPInFlightConn{Amount: -1}, "", "", "-1 is negative"},
		{config.TCPInFlightConn{Amount: 1, IPv6Subnet: &bits}, "", "", "ipv6Subnet 200"},
	} {
		var reg Registry
		mw, l, warns, err := newMiddleware("m@file", &tc.cfg, &reg, zerolog.Nop())
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc.cfg, err, tc.err)
			}
			if mw != nil || l != nil || reg.Lookup("m@file") != nil {
				t.Errorf("%+v: a rejected block returned or registered a limiter", tc.cfg)
			}
			continue
		}
		if err != nil || mw == nil || l == nil || (tc.warn == "") != (len(warns) == 0) ||
			(tc.warn != "" && (len(warns) != 1 || !strings.Contains(warns[0].Message, tc.warn) || warns[0].Field != tc.field)) {
			t.Errorf("%+v: warnings %+v err %v, want %q on %q", tc.cfg, warns, err, tc.warn, tc.field)
		}
	}
}

// A flood of rejections logs a bounded number of lines, names the IP with the
// phrase operators alert on, and reports how many lines were suppressed.
func TestRejectionLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	var reg Registry
	mw, l, _, err := newMiddleware("lim@file", &config.TCPInFlightConn{Amount: 0}, &reg, log)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(tcp.HandlerFunc(func(c *tcp.Conn) { t.Error("a rejected connection reached the next handler") }))
	const n = 5000
	for i := 0; i < n; i++ {
		var ip [4]byte
		binary.BigEndian.PutUint32(ip[:], 0x0a000000+uint32(i%3))
		h.ServeTCP(&tcp.Conn{Client: netip.AddrPortFrom(netip.AddrFrom4(ip), 1)})
	}
	lines := strings.Count(buf.String(), "\n")
	if lines == 0 || lines > 2*logLinesPerSecond {
		t.Fatalf("%d log lines for %d rejections from 3 IPs, want between 1 and %d", lines, n, 2*logLinesPerSecond)
	}
	if !strings.Contains(buf.String(), "Connection rejected") || !strings.Contains(buf.String(), "max number of connections reached for 10.0.0.") {
		t.Fatalf("log lacks the operator phrases: %s", buf.String())
	}
	// At Traefik's level, error (its default level: a rejection at info
	// would never be seen).
	if strings.Count(buf.String(), `"level":"error"`) != lines {
		t.Fatalf("rejections not logged at error level, as Traefik logs them: %s", buf.String())
	}
	if got := l.Stats().Rejected; got != n {
		t.Fatalf("rejected counter %d, want %d: metrics must count every rejection", got, n)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	l := NewLimiter(1<<30, false, 0)
	var next atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine is a different client subnet, like real traffic.
		base := next.Add(1) << 16
		i := uint32(0)
		for pb.Next() {
			var ip [4]byte
			binary.BigEndian.PutUint32(ip[:], 0x7f000000|base|(i&0xff))
			k := netip.AddrFrom4(ip)
			if l.Acquire(k) {
				l.Release(k)
			}
			i++
		}
	})
}

func BenchmarkAcquireReleaseOneIP(b *testing.B) {
	l := NewLimiter(1<<30, false, 0)
	k := netip.MustParseAddr("127.0.0.1")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if l.Acquire(k) {
				l.Release(k)
			}
		}
	})
}

// subEntries counts the per-address entries held besides the keys' (for
// tests: zero when no connection is open).
func (l *Limiter) subEntries() int {
	n := 0
	for i := range shardCount {
		s := &l.table()[i]
		s.mu.Lock()
		n += len(s.sub) + len(s.loc)
		s.mu.Unlock()
	}
	return n
}

// A reload that changes only ipv6Subnet keeps the limiter and every count:
// IPv4 keys are unchanged, each IPv6 client's connections move to the key
// its address has under the new prefix (finer and coarser alike), the
// amount holds across each change, and every release (by address, as
// Finish does) takes back exactly what its connection added.
func TestIPv6SubnetChangeKeepsCounts(t *testing.T) {
	var reg Registry
	l := reg.Get("m@file", 3, false, 0)
	v4 := netip.MustParseAddr("192.0.2.7")
	a1 := netip.MustParseAddr("2001:db8:1:1::1")
	a2 := netip.MustParseAddr("2001:db8:1:1::2")
	b1 := netip.MustParseAddr("2001:db8:1:2::1")
	held := map[netip.Addr]int{}
	acquire := func(a netip.Addr, want bool) {
		t.Helper()
		if got := l.Acquire(a); got != want {
			t.Fatalf("ipv6Subnet %d: Acquire(%s) = %v, want %v (counts: %s %d, key %s %d)", l.V6Bits(), a, got, want, a, held[a], l.Key(a), l.Count(l.Key(a)))
		}
		if want {
			held[a]++
		}
	}
	for range 3 {
		acquire(v4, true)
	}
	acquire(a1, true)
	acquire(a1, true)
	acquire(a2, true)
	acquire(b1, true)
	check := func(counts map[string]int64) {
		t.Helper()
		for k, want := range counts {
			if got := l.Count(netip.MustParseAddr(k)); got != want {
				t.Errorf("ipv6Subnet %d: count of %s = %d, want %d", l.V6Bits(), k, got, want)
			}
		}
		if st := l.Stats(); st.InFlight != 7 || st.DistinctIPs != int64(len(counts)) {
			t.Errorf("ipv6Subnet %d: stats %+v, want 7 in flight over %d keys", l.V6Bits(), st, len(counts))
		}
	}
	check(map[string]int64{"192.0.2.7": 3, "2001:db8:1:1::1": 2, "2001:db8:1:1::2": 1, "2001:db8:1:2::1": 1})

	for round := range 3 {
		// /64: a1 and a2 share a key holding 3 of 3.
		if got := reg.Get("m@file", 3, false, 64); got != l {
			t.Fatal("a change of ipv6Subnet replaced the limiter")
		}
		check(map[string]int64{"192.0.2.7": 3, "2001:db8:1:1::": 3, "2001:db8:1:2::": 1})
		acquire(v4, false)
		acquire(netip.MustParseAddr("2001:db8:1:1::99"), false)
		// /48: all three IPv6 clients in one key, over the amount: kept, not cut.
		reg.Get("m@file", 3, false, 48)
		check(map[string]int64{"192.0.2.7": 3, "2001:db8:1::": 4})
		acquire(b1, false)
		acquire(v4, false)
		// By full address again: each client its own count.
		reg.Get("m@file", 3, false, 0)
		check(map[string]int64{"192.0.2.7": 3, "2001:db8:1:1::1": 2, "2001:db8:1:1::2": 1, "2001:db8:1:2::1": 1})
		acquire(v4, false)
		if round == 0 {
			acquire(a1, true) // a1 has 2 of 3 by its own address
			l.Release(a1)
			held[a1]--
		}
	}
	// Released under another keying than they were admitted under.
	reg.Get("m@file", 3, false, 64)
	for a, n := range held {
		for range n {
			l.Release(a)
		}
	}
	if st := l.Stats(); st.InFlight != 0 || st.DistinctIPs != 0 || l.Entries() != 0 || l.subEntries() != 0 {
		t.Fatalf("after every release: %+v, %d key entries, %d address entries; want nothing", st, l.Entries(), l.subEntries())
	}
}

// Connections come and go on many goroutines while ipv6Subnet changes under
// them: no count is lost or doubled (everything returns to zero, with no
// entry left), and afterwards the amount holds exactly per key. Run with
// -race.
func TestIPv6SubnetChangeUnderLoad(t *testing.T) {
	const amount, workers, rounds = 4, 8, 3000
	l := NewLimiter(amount, false, 0)
	addrs := []netip.Addr{
		netip.MustParseAddr("2001:db8:1:1::1"), netip.MustParseAddr("2001:db8:1:1::2"),
		netip.MustParseAddr("2001:db8:1:2::1"), netip.MustParseAddr("2001:db8:2::1"),
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.1"),
	}
	stop := make(chan struct{})
	var toggler sync.WaitGroup
	toggler.Add(1)
	go func() {
		defer toggler.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			l.setV6Bits([]int{0, 64, 48, 128, 32}[i%5])
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []netip.Addr
			for i := range rounds {
				a := addrs[(w+i)%len(addrs)]
				if l.Acquire(a) {
					mine = append(mine, a)
				}
				if len(mine) > 2 || (i%3 == 0 && len(mine) > 0) {
					l.Release(mine[0])
					mine = mine[1:]
				}
			}
			for _, a := range mine {
				l.Release(a)
			}
		}()
	}
	wg.Wait()
	close(stop)
	toggler.Wait()
	if st := l.Stats(); st.InFlight != 0 || st.DistinctIPs != 0 || l.Entries() != 0 || l.subEntries() != 0 {
		t.Fatalf("after everything was released under changing keyings: %+v, %d key entries, %d address entries", st, l.Entries(), l.subEntries())
	}
	// With the keying still: exactly the amount per /64.
	l.setV6Bits(64)
	n := 0
	for i := range 10 {
		if l.Acquire(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 1, 15: byte(i)})) {
			n++
		}
	}
	if n != amount {
		t.Fatalf("%d of 10 admitted in one /64, want %d", n, amount)
	}
}

// A reload that changes amount or dryRun, or adds or removes a store, keeps
// the limiter and its counts (DESIGN.md §5.2); the new amount applies to
// new connections at once.
func TestReloadOfOtherOptionsKeepsCounts(t *testing.T) {
	s := OfflineStore("shared")
	reg := NewRegistry(map[string]*Store{"shared": s})
	k := netip.MustParseAddr("10.0.0.9")
	newMW := func(cfg config.TCPInFlightConn) *Limiter {
		t.Helper()
		_, l, _, err := newMiddleware("m@file", &cfg, reg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := newMW(config.TCPInFlightConn{Amount: 3})
	for range 3 {
		l.Acquire(k)
	}
	for _, cfg := range []config.TCPInFlightConn{
		{Amount: 3, DryRun: true},
		{Amount: 2},
		{Amount: 3, Store: "shared"},
		{Amount: 3},
		{Amount: 4, Store: "shared", FailureMode: "open"},
		{Amount: 3},
	} {
		if got := newMW(cfg); got != l || l.Count(k) != 3 || l.Stats().InFlight != 3 {
			t.Fatalf("reload to %+v: limiter %p (was %p), count %d; want the same limiter with 3", cfg, got, l, l.Count(k))
		}
		if cfg.Store == "" && l.Acquire(k) != cfg.DryRun {
			t.Fatalf("reload to %+v: a 4th connection admitted %v", cfg, !cfg.DryRun)
		}
		if cfg.DryRun {
			l.Release(k)
		}
		if (l.Store() != nil) != (cfg.Store != "") || l.Amount() != cfg.Amount || l.DryRun() != cfg.DryRun {
			t.Fatalf("reload to %+v: store %v amount %d dry run %v", cfg, l.Store(), l.Amount(), l.DryRun())
		}
	}
	if !s.dirty.Load() {
		t.Error("joining the store with counts did not ask for them to be asserted there")
	}
}
