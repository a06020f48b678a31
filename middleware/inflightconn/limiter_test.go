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
	if r.Get("v6@file", 1, false, 64) == c {
		t.Fatal("changing ipv6Subnet must start a fresh limiter")
	}
}

// New validates its block once: a warning for amount 0, an error naming the
// field (and no limiter registered) for a value out of range.
func TestNewValidates(t *testing.T) {
	bits := 200
	for _, tc := range []struct {
		cfg  config.TCPInFlightConn
		warn string
		err  string
	}{
		{config.TCPInFlightConn{Amount: 10}, "", ""},
		{config.TCPInFlightConn{Amount: 0}, "every connection is rejected", ""},
		{config.TCPInFlightConn{Amount: -1}, "", "-1 is negative"},
		{config.TCPInFlightConn{Amount: 1, IPv6Subnet: &bits}, "", "ipv6Subnet 200"},
	} {
		var reg Registry
		mw, l, warn, err := New("m@file", &tc.cfg, &reg, zerolog.Nop())
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc.cfg, err, tc.err)
			}
			if mw != nil || l != nil || reg.Lookup("m@file") != nil {
				t.Errorf("%+v: a rejected block returned or registered a limiter", tc.cfg)
			}
			continue
		}
		if err != nil || !strings.Contains(warn, tc.warn) || (tc.warn == "" && warn != "") || mw == nil || l == nil {
			t.Errorf("%+v: warn %q err %v", tc.cfg, warn, err)
		}
	}
}

// A flood of rejections logs a bounded number of lines, names the IP with the
// phrase operators alert on, and reports how many lines were suppressed.
func TestRejectionLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	var reg Registry
	mw, l, _, err := New("lim@file", &config.TCPInFlightConn{Amount: 0}, &reg, log)
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
