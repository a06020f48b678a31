package proxy

import (
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
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

// TestLoopsOption: a Server runs Options.Loops loops (main's: one per CPU,
// with a P to spare), and one per P without it.
func TestLoopsOption(t *testing.T) {
	for _, tc := range []struct{ loops, want int }{{3, 3}, {0, runtime.GOMAXPROCS(0)}} {
		s, err := NewServer(map[string]*config.EntryPoint{"tcp": {Address: "127.0.0.1:0"}}, Options{Loops: tc.loops})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(s.engine.loops); got != tc.want {
			t.Errorf("Options.Loops %d: %d loops, want %d", tc.loops, got, tc.want)
		}
		s.Shutdown(t.Context())
	}
}

// Persistent connections opened in one burst spread over the loops: the
// kernel's EPOLLEXCLUSIVE wake-up would hand most of them to the loop that
// is already awake, and a loop that holds shedAbove more than the least
// loaded one stops accepting until it is within shedBelow. Every connection
// is served throughout, and once they close no loop is left shedding.
func TestLoopsShareABurstOfLongConnections(t *testing.T) {
	n := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(4)
	t.Cleanup(func() { runtime.GOMAXPROCS(n) })
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	if got := len(s.engine.loops); got != 4 {
		t.Fatalf("%d loops, want 4", got)
	}
	apply(s, "file", singleRouter(be.addr(), nil))
	addr := s.addr("tcp")

	const conns = 96
	held := make([]net.Conn, conns)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Errorf("dial %d: %v", i, err)
				return
			}
			if !ping(c) {
				t.Errorf("connection %d not forwarded", i)
			}
			held[i] = c
		}()
	}
	close(start)
	wg.Wait()
	t.Cleanup(func() { closeAll(held) })
	loads := func() (lo, hi, sum int64) {
		lo = 1 << 62
		for _, l := range s.engine.loops {
			v := l.load.Load()
			lo, hi, sum = min(lo, v), max(hi, v), sum+v
		}
		return lo, hi, sum
	}
	lo, hi, sum := loads()
	var per []int64
	for _, l := range s.engine.loops {
		per = append(per, l.load.Load())
	}
	t.Logf("connections per loop: %v", per)
	if sum != conns {
		t.Fatalf("the loops hold %d connections, want %d", sum, conns)
	}
	if hi-lo > 2*shedAbove {
		t.Fatalf("connections per loop %v: the busiest holds %d more than the least loaded, want at most %d", per, hi-lo, 2*shedAbove)
	}
	for _, c := range held {
		if !ping(c) {
			t.Fatal("a held connection stopped echoing")
		}
	}
	closeAll(held)
	waitFor(t, "every connection to end and no loop to shed", func() bool {
		if _, _, sum := loads(); sum != 0 {
			return false
		}
		for _, l := range s.engine.loops {
			if l.shed.Load() {
				return false
			}
		}
		return true
	})
	if c, ok := dialFrom(t, "127.0.0.1", addr); !ok {
		t.Fatal("a new connection is not served after the burst")
	} else {
		c.Close()
	}
}
