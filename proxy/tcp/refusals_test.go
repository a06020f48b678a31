package tcp

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"
)

func conn(ip, router string) *Conn {
	return &Conn{Client: netip.AddrPortFrom(netip.MustParseAddr(ip), 40000), EntryPoint: "db", Router: router}
}

// TestRefusalsFoldRepeatsWithinASecond: a client's repeats for the same
// reason, middleware and router within a second are one entry with their
// count; another client, reason, middleware or router is an entry of its own.
func TestRefusalsFoldRepeatsWithinASecond(t *testing.T) {
	r := NewRefusals(100)
	for i := 0; i < 50; i++ {
		r.Add(conn("10.0.0.1", "r1@file"), ReasonLimit, "lim@file", "max")
	}
	r.Add(conn("10.0.0.2", "r1@file"), ReasonLimit, "lim@file", "max")
	r.Add(conn("10.0.0.1", "r1@file"), ReasonRate, "rate@file", "rate")
	r.Add(conn("10.0.0.1", "r2@file"), ReasonLimit, "lim@file", "max")
	r.Add(conn("::ffff:10.0.0.1", "r1@file"), ReasonLimit, "lim@file", "max") // mapped: the same client
	all, n := r.Find(Match{}, 0)
	if n != 4 || len(all) != 4 {
		t.Fatalf("%d entries (%d returned), want 4: %+v", n, len(all), all)
	}
	if r.Total() != 54 {
		t.Fatalf("Total %d, want 54", r.Total())
	}
	got, _ := r.Find(Match{Client: netip.MustParseAddr("10.0.0.1"), Router: "r1@file", Reason: ReasonLimit}, 0)
	if len(got) != 1 || got[0].Count != 51 || got[0].By != "lim@file" || got[0].EntryPoint != "db" || got[0].Message != "max" {
		t.Fatalf("10.0.0.1 on r1 for the limit: %+v, want one entry counting 51", got)
	}
	// Newest first.
	if all[0].Router != "r2@file" || all[len(all)-1].Client != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("not newest first: %+v", all)
	}
}

// TestRefusalsKeepTheLatest: past its size the record keeps the latest
// entries; Find's limit returns the newest and counts every match.
func TestRefusalsKeepTheLatest(t *testing.T) {
	r := NewRefusals(10)
	for i := 0; i < 25; i++ {
		r.Add(conn(fmt.Sprintf("10.0.1.%d", i), "r"), ReasonNoRoute, "", "no route")
	}
	all, n := r.Find(Match{}, 3)
	if n != 10 || len(all) != 3 {
		t.Fatalf("matched %d, returned %d, want 10 and 3", n, len(all))
	}
	if all[0].Client != netip.MustParseAddr("10.0.1.24") || all[2].Client != netip.MustParseAddr("10.0.1.22") {
		t.Fatalf("the newest are not first: %+v", all)
	}
	if got, _ := r.Find(Match{Client: netip.MustParseAddr("10.0.1.5")}, 0); len(got) != 0 {
		t.Fatalf("an overwritten entry was found: %+v", got)
	}
	if got, _ := r.Find(Match{Prefix: netip.MustParsePrefix("10.0.1.16/30")}, 0); len(got) != 4 {
		t.Fatalf("prefix 10.0.1.16/30 matched %d entries, want 4", len(got))
	}
	// A repeat of a client whose entry was overwritten starts a new one.
	r.Add(conn("10.0.1.0", "r"), ReasonNoRoute, "", "no route")
	if got, _ := r.Find(Match{Client: netip.MustParseAddr("10.0.1.0")}, 0); len(got) != 1 || got[0].Count != 1 {
		t.Fatalf("10.0.1.0 again: %+v", got)
	}
}

// TestRefusalsFindAcrossChunks: a scan longer than one hold of the lock
// returns every entry once, newest first.
func TestRefusalsFindAcrossChunks(t *testing.T) {
	const size = 3*findChunk + 7
	r := NewRefusals(size)
	c := conn("10.0.0.1", "r")
	for i := 0; i < size+100; i++ {
		c.Client = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 4, byte(i >> 8), byte(i)}), 1)
		r.Add(c, ReasonLimit, "m", "x")
	}
	all, n := r.Find(Match{}, 0)
	if n != size || len(all) != size {
		t.Fatalf("%d entries (%d matched), want %d", len(all), n, size)
	}
	for i, e := range all {
		j := size + 100 - 1 - i
		if want := netip.AddrFrom4([4]byte{10, 4, byte(j >> 8), byte(j)}); e.Client != want {
			t.Fatalf("entry %d is %s, want %s", i, e.Client, want)
		}
	}
}

// TestRefusalsFoldOnlyWithinTheWindow: a repeat a second after an entry's
// first refusal starts a new entry, so that the times stay exact to a second.
func TestRefusalsFoldOnlyWithinTheWindow(t *testing.T) {
	r := NewRefusals(10)
	c := conn("10.0.0.9", "r")
	r.Add(c, ReasonLimit, "m", "x")
	r.mu.Lock()
	r.ring[0].first -= 2 * foldWindow
	r.ring[0].last -= 2 * foldWindow
	r.mu.Unlock()
	r.Add(c, ReasonLimit, "m", "x")
	if got, _ := r.Find(Match{}, 0); len(got) != 2 {
		t.Fatalf("%d entries, want 2: a repeat after the window is a new entry", len(got))
	}
	since, _ := r.Find(Match{Since: time.Now().Add(-time.Second)}, 0)
	if len(since) != 1 {
		t.Fatalf("Since a second ago: %d entries, want 1", len(since))
	}
}

// TestRefusalsAddAllocatesNothing: recording is on the refusal path of
// every connection, which allocates nothing.
func TestRefusalsAddAllocatesNothing(t *testing.T) {
	r := NewRefusals(100)
	cs := []*Conn{conn("10.0.0.1", "r"), conn("10.0.0.2", "r"), conn("2001:db8::1", "r")}
	for _, c := range cs {
		c.Refusals = r
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		cs[i%3].NoteRefusal(Reason(1+i%int(NumReasons-1)), "m", "msg")
		i++
	}); n != 0 {
		t.Fatalf("Add allocates %.1f objects per refusal, want 0", n)
	}
	var nilRecord *Conn = conn("10.0.0.3", "r")
	if n := testing.AllocsPerRun(100, func() { nilRecord.NoteRefusal(ReasonLimit, "m", "x") }); n != 0 {
		t.Fatalf("without a record: %.1f allocations", n)
	}
	if r.Total() < 1000 {
		t.Fatalf("%d refusals recorded", r.Total())
	}
}

// TestRefusalsConcurrent: writers on several goroutines and a reader; the
// count of every refusal is kept (run with -race).
func TestRefusalsConcurrent(t *testing.T) {
	r := NewRefusals(64)
	var wg sync.WaitGroup
	const writers, each = 4, 2000
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := conn(fmt.Sprintf("10.1.0.%d", w), "r")
			for i := 0; i < each; i++ {
				c.Client = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(w), byte(i % 50)}), 1)
				r.Add(c, ReasonLimit, "m", "x")
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100; i++ {
			r.Find(Match{Reason: ReasonLimit}, 10)
		}
	}()
	wg.Wait()
	<-done
	if r.Total() != writers*each {
		t.Fatalf("Total %d, want %d", r.Total(), writers*each)
	}
	all, _ := r.Find(Match{}, 0)
	if len(all) == 0 || len(all) > 64 {
		t.Fatalf("%d entries in a record of 64", len(all))
	}
	for _, e := range all {
		if e.Count == 0 || !e.Client.IsValid() || e.By != "m" {
			t.Fatalf("a torn entry: %+v", e)
		}
	}
}

func TestReasonNames(t *testing.T) {
	for _, r := range Reasons() {
		got, ok := ParseReason(r.String())
		if !ok || got != r {
			t.Fatalf("ParseReason(%q) = %v, %v", r.String(), got, ok)
		}
	}
	if _, ok := ParseReason(""); ok {
		t.Fatal(`ParseReason("") succeeded`)
	}
	if !ReasonQueueEvicted.ByService() || ReasonLimit.ByService() {
		t.Fatal("ByService")
	}
}

// BenchmarkRefusalsAdd: the cost recording adds to a refusal, from every
// loop at once (one client flooding: folded; a spray: an entry each).
func BenchmarkRefusalsAdd(b *testing.B) {
	for _, spray := range []bool{false, true} {
		b.Run(fmt.Sprintf("spray=%v", spray), func(b *testing.B) {
			r := NewRefusals(DefaultRefusals)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				c := conn("10.2.0.1", "r@file")
				i := uint32(0)
				for pb.Next() {
					if spray {
						i++
						c.Client = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 1)
					}
					r.Add(c, ReasonLimit, "lim@file", "max")
				}
			})
		})
	}
}

// BenchmarkRefusalsFind: a lookup by client IP in a full record, the time
// refusals wait for the lock (most of it: the scan).
func BenchmarkRefusalsFind(b *testing.B) {
	r := NewRefusals(DefaultRefusals)
	c := conn("10.3.0.1", "r@file")
	for i := 0; i < DefaultRefusals; i++ {
		c.Client = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 3, byte(i >> 8), byte(i)}), 1)
		r.Add(c, ReasonLimit, "lim@file", "max")
	}
	want := netip.MustParseAddr("10.3.0.7")
	b.ReportAllocs()
	for b.Loop() {
		if got, _ := r.Find(Match{Client: want}, 100); len(got) != 1 {
			b.Fatalf("%d entries", len(got))
		}
	}
}
