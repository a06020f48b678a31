package proxy

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestTimerHeap drives the loop's timer heap with random pushes, moves and
// removals, checking after each step that it is a heap and that every
// connection's recorded position is where its entry is; then it drains the
// heap, which must come out in time order.
func TestTimerHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h timerHeap
	conns := make([]*rconn, 200)
	for i := range conns {
		conns[i] = &rconn{timerIdx: -1}
	}
	check := func(step int) {
		t.Helper()
		for i := range h {
			if i > 0 && h[(i-1)/2].at > h[i].at {
				t.Fatalf("step %d: entry %d (at %d) is due before its parent (at %d)", step, i, h[i].at, h[(i-1)/2].at)
			}
			if rc := h[i].rc; rc != nil && rc.timerIdx != i {
				t.Fatalf("step %d: entry %d's connection says it is at %d", step, i, rc.timerIdx)
			}
		}
		for _, rc := range conns {
			if rc.timerIdx >= 0 && (rc.timerIdx >= len(h) || h[rc.timerIdx].rc != rc) {
				t.Fatalf("step %d: a connection's position %d holds another entry", step, rc.timerIdx)
			}
		}
	}
	for step := 0; step < 20000; step++ {
		rc := conns[r.IntN(len(conns))]
		switch op := r.IntN(4); {
		case op == 0 && len(h) < 300: // a loop-level timer
			h.push(timerEntry{at: r.Int64N(1000), fn: func() {}})
		case rc.timerIdx < 0:
			h.push(timerEntry{at: r.Int64N(1000), rc: rc})
		case op == 1:
			h.remove(rc.timerIdx)
		default:
			h[rc.timerIdx].at = r.Int64N(1000)
			h.fix(rc.timerIdx)
		}
		check(step)
	}
	last := int64(-1)
	for len(h) > 0 {
		e := h.remove(0)
		if e.at < last {
			t.Fatalf("drained out of order: %d after %d", e.at, last)
		}
		if e.rc != nil && e.rc.timerIdx != -1 {
			t.Fatalf("a removed entry's connection still has position %d", e.rc.timerIdx)
		}
		last = e.at
		check(-1)
	}
}

// TestSpareP: the loops stay one per CPU and the scheduler gets one P more,
// once however often it is called.
func TestSpareP(t *testing.T) {
	if loopCount.Load() != 0 {
		t.Fatal("SpareP was called before this test")
	}
	n := runtime.GOMAXPROCS(0)
	t.Cleanup(func() {
		runtime.GOMAXPROCS(n)
		loopCount.Store(0)
	})
	SpareP()
	SpareP()
	if got := runtime.GOMAXPROCS(0); got != n+1 {
		t.Errorf("GOMAXPROCS %d after SpareP, want %d", got, n+1)
	}
	if got := loops(); got != n {
		t.Errorf("%d loops after SpareP, want %d (one per CPU)", got, n)
	}
}
