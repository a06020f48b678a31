package ratelimit

import (
	"net/netip"
	"testing"
	"time"
)

// The buckets move to a new process at an upgrade: a client that emptied
// its bucket in the old process gets nothing more in the new one until it
// refills there, at the new process's rate; other clients keep full buckets;
// the totals carry on.
func TestExportImport(t *testing.T) {
	rule := Rule{Average: 10, Period: time.Second, Burst: 3} // one every 100ms, 3 at once
	oldL, oldClock := newTestLimiter(rule)
	oldClock.advance(time.Hour) // the two processes' clocks share nothing
	a, b := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("2001:db8::7")
	for i := 0; i < 3; i++ {
		if ok, _ := oldL.Allow(a); !ok {
			t.Fatalf("connection %d of a refused in the old process", i+1)
		}
	}
	if ok, _ := oldL.Allow(a); ok {
		t.Fatal("a's fourth connection admitted in the old process")
	}
	if ok, _ := oldL.Allow(b); !ok {
		t.Fatal("b refused in the old process")
	}
	ex := oldL.Export("r@file")
	if ex.Name != "r@file" || ex.Interval != 100*time.Millisecond || ex.Admitted != 4 || ex.Rejected != 1 || len(ex.Keys) != 2 {
		t.Fatalf("export %+v", ex)
	}
	if ex.Keys[0].Key != a || ex.Keys[0].Ahead != 300*time.Millisecond || ex.Keys[1].Ahead != 100*time.Millisecond {
		t.Fatalf("export's debts %+v, want a 300ms then b 100ms", ex.Keys)
	}

	newClock := &clock{}
	reg := Registry{Clock: newClock.now}
	l := reg.Get("r@file", rule, 0)
	if got, n := reg.Import(&ex); got != l || n != 2 {
		t.Fatalf("Import: %p with %d keys, want the registered %p with 2", got, n, l)
	}
	if st := l.Stats(); st.Admitted != 4 || st.Rejected != 1 || st.DistinctIPs != 2 {
		t.Fatalf("after the import: %+v", st)
	}
	if ok, _ := l.Allow(a); ok {
		t.Fatal("a, whose bucket was empty in the old process, admitted at once in the new one")
	}
	newClock.advance(100 * time.Millisecond)
	if ok, _ := l.Allow(a); !ok {
		t.Fatal("a not admitted after one interval")
	}
	if ok, _ := l.Allow(a); ok {
		t.Fatal("a admitted twice after one interval")
	}
	for i := 0; i < 3; i++ { // b used 1 of 3, 100ms ago: full again
		if ok, _ := l.Allow(b); !ok {
			t.Fatalf("b's connection %d refused", i+1)
		}
	}
	c := netip.MustParseAddr("127.0.0.9")
	for i := 0; i < 3; i++ {
		if ok, _ := l.Allow(c); !ok {
			t.Fatalf("a client the old process never saw refused at connection %d", i+1)
		}
	}
}

// A changed rate rescales the debts, as a reload does; a changed
// ipv6Subnet keeps them, as a reload does; a name the new configuration
// does not have takes nothing.
func TestImportRescalesOrTakesNothing(t *testing.T) {
	oldL, _ := newTestLimiter(Rule{Average: 10, Period: time.Second, Burst: 3})
	a := netip.MustParseAddr("127.0.0.2")
	for i := 0; i < 3; i++ {
		oldL.Allow(a)
	}
	ex := oldL.Export("r@file") // a: 300ms ahead at 100ms a connection

	c := &clock{}
	reg := Registry{Clock: c.now}
	l := reg.Get("r@file", Rule{Average: 20, Period: time.Second, Burst: 3}, 0) // 50ms, tolerance 100ms
	if _, n := reg.Import(&ex); n != 1 {
		t.Fatalf("imported %d keys, want 1", n)
	}
	if ok, _ := l.Allow(a); ok {
		t.Fatal("a admitted at once after a rescaled import (150ms ahead, tolerance 100ms)")
	}
	c.advance(50 * time.Millisecond)
	if ok, _ := l.Allow(a); !ok {
		t.Fatal("a not admitted one new interval later")
	}

	other := Registry{Clock: c.now}
	l6 := other.Get("r@file", Rule{Average: 10, Period: time.Second, Burst: 3}, 64)
	if got, n := other.Import(&ex); got != l6 || n != 1 {
		t.Fatalf("an ipv6Subnet change imported %d keys into %p, want 1 into %p", n, got, l6)
	}
	if ok, _ := l6.Allow(a); ok {
		t.Fatal("a admitted at once by a limiter keyed by another ipv6Subnet, after its debt was imported")
	}
	if got, n := (&Registry{}).Import(&ex); got != nil || n != 0 {
		t.Fatal("an import into a registry without the name registered something")
	}
	if (&Registry{}).Lookup("r@file") != nil {
		t.Fatal("Import registered a limiter")
	}

	unlimited := Registry{Clock: c.now}
	u := unlimited.Get("r@file", Rule{Average: 0, Period: time.Second, Burst: 1}, 0)
	if _, n := unlimited.Import(&ex); n != 0 || u.Entries() != 0 {
		t.Fatal("a limiter with no limit took buckets")
	}
}
