package proxy

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// TestProxiedConnectionsAllocateNothing: a proxied connection (accepted,
// admitted by inFlightConn, dialled, echoed, closed) costs the proxy no heap
// allocation once its loop has spare rconns: the same client and backend
// allocate as much with the proxy between them as without it. Before loops
// recycled rconns, each connection allocated one, and the collector ran
// every few thousand connections (bench/results/2026-12-02-0445-intel-xeon.md).
func TestProxiedConnectionsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what the runtime and net allocate (sync.Pool drops items at random)")
	}
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"l": limitMW(10)}, "l"))
	const n = 2000
	itest.ConntrackRoom(t, 6*n)
	// Both warmed up first: the loops fill their spare lists, the runtime
	// and net their caches.
	perConn(t, be.addr(), 200)
	perConn(t, s.addr("tcp"), 200)
	direct := perConn(t, be.addr(), n)
	proxied := perConn(t, s.addr("tcp"), n)
	if extra := proxied - direct; extra > 0.2 {
		t.Fatalf("a proxied connection allocates %.2f objects more than a direct one (%.2f against %.2f): the proxy should allocate none per connection", extra, proxied, direct)
	}
}

// perConn runs n connections to addr one after another (dial, one-byte echo,
// close) and returns the heap allocations per connection, everything in
// the process counted.
func perConn(t *testing.T, addr string, n int) float64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		c, ok := dialFrom(t, "127.0.0.1", addr)
		if !ok {
			t.Fatalf("connection %d to %s not forwarded", i, addr)
		}
		_ = c.Close()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(n)
}

// TestRecycleKeepsOnlyWhatNothingHolds: an ended connection's rconn is
// reused for the next one unless it was pinned (something off the loop may
// still hold it), and never kept twice.
func TestRecycleKeepsOnlyWhatNothingHolds(t *testing.T) {
	l := &loop{}
	pinned := &rconn{pinned: true}
	l.recycle(pinned)
	if len(l.spare) != 0 {
		t.Fatal("a pinned rconn was kept for reuse")
	}
	rc := &rconn{}
	l.recycle(rc)
	l.recycle(rc) // a second end of the same connection
	if len(l.spare) != 1 {
		t.Fatalf("%d spare rconns after one was recycled twice, want 1", len(l.spare))
	}
	if got := l.newRconn(); got != rc {
		t.Fatal("the spare rconn was not reused")
	}
	if got := l.newRconn(); got == rc || got == pinned {
		t.Fatal("an rconn was handed out twice")
	}
	for i := 0; i < maxSpare+10; i++ {
		l.recycle(&rconn{})
	}
	if len(l.spare) != maxSpare {
		t.Fatalf("%d spare rconns kept, want at most %d", len(l.spare), maxSpare)
	}
}

// TestWaitingConnectionIsNotReused: a connection that a handler holds while
// it decides asynchronously (tcp.Conn.Later) and that ends meanwhile (a
// shutdown) keeps its rconn: a later connection on the same loop gets
// another, and the handler's answer, when it comes, is dropped rather than
// run on whatever connection the rconn would have become.
func TestWaitingConnectionIsNotReused(t *testing.T) {
	be := startBackend(t, "B")
	s := newTestServer(t, "slow", "held")
	apply(s, "file", singleRouter(be.addr(), nil))
	answer := make(chan bool)
	var ran, dropped atomic.Int32
	waiting := make(chan *rconn, 1)
	s.EntryPoint("slow").SetTable(&Table{routes: []*route{{
		name: "slow", rule: mustRule(t, "HostSNI(`*`)"), open: new(atomic.Int64),
		handler: tcp.HandlerFunc(func(c *tcp.Conn) {
			waiting <- c.Sock.(*rconn)
			go func() {
				if <-answer {
					c.Later(func() { ran.Add(1) }, func() { dropped.Add(1) })
				}
			}()
		}),
	}}})
	// Every connection of the other entry point waits in its chain for
	// good: an rconn it were given that was the first connection's would
	// still be waiting when the first's answer comes.
	// A loop that holds 8 connections more than the least loaded one stops
	// accepting (loop.rebalance), so enough tries reach every loop.
	tries := 40 + 16*len(s.engine.loops)
	held := make(chan *rconn, tries)
	s.EntryPoint("held").SetTable(&Table{routes: []*route{{
		name: "held", rule: mustRule(t, "HostSNI(`*`)"), open: new(atomic.Int64),
		handler: tcp.HandlerFunc(func(c *tcp.Conn) { held <- c.Sock.(*rconn) }),
	}}})

	c := dialSrc(t, "127.0.4.3", s.addr("slow"))
	defer c.Close()
	first := <-waiting
	go s.EntryPoint("slow").Shutdown(t.Context())
	waitFor(t, "the waiting connection closed by the shutdown", func() bool { return s.EntryPoint("slow").Open() == 0 })

	// Connections on the first one's loop (the kernel picks the loop: dial
	// until one lands there, at most tries).
	sameLoop := false
	for i := 0; i < tries && !sameLoop; i++ {
		hc := dialSrc(t, "127.0.4.4", s.addr("held"))
		defer hc.Close()
		rc := <-held
		if rc == first {
			t.Fatal("a new connection was filed in the rconn of one a handler still holds")
		}
		sameLoop = rc.l == first.l
	}
	if !sameLoop {
		t.Fatalf("no connection of %d landed on the first connection's loop", tries)
	}
	answer <- true
	waitFor(t, "the held connection's answer dropped", func() bool { return dropped.Load() == 1 })
	if ran.Load() != 0 {
		t.Fatal("the answer for a connection that had ended ran")
	}
}
