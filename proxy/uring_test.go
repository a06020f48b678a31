package proxy

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// needRing skips (fails in CI) where the kernel gives the loops no ring.
func needRing(t *testing.T) {
	t.Helper()
	l, err := newLoop(0, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{loops: []*loop{l}}
	defer e.close()
	if l.ring == nil {
		if itest.Required() {
			t.Fatalf("the loops run without io_uring here: %v (TOLLGATE_REQUIRE_INTEGRATION=1)", l.noRing)
		}
		t.Skipf("the loops run without io_uring here: %v", l.noRing)
	}
}

// ringOps sums the operations the server's loops have queued in their rings.
func ringOps(s *Server) uint64 {
	var total uint64
	ch := make(chan uint64, len(s.engine.loops))
	s.engine.each(func(l *loop) {
		if l.ring != nil {
			ch <- l.ring.ops
		} else {
			ch <- 0
		}
	})
	for range s.engine.loops {
		total += <-ch
	}
	return total
}

// ringWorkers counts the process's io-wq worker threads (iou-wrk-*), which
// a ring starts for an operation it cannot make inline.
func ringWorkers(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, task := range tasks {
		comm, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "comm"))
		if err == nil && strings.HasPrefix(string(comm), "iou-wrk") {
			n++
		}
	}
	return n
}

// TestRingCarriesAProxiedConnectionsCalls: the calls whose results a loop
// does not wait for go through its ring: for each proxied connection the
// client's and the backend's epoll_ctl, the backend's TCP_NODELAY and the
// two closes. Without the ring each is a system call of its own
// (ARCHITECTURE.md). None goes to an io-wq worker, whose late look-up of
// the descriptor's number could find another connection's socket
// (uring.go): the process has no iou-wrk thread.
func TestRingCarriesAProxiedConnectionsCalls(t *testing.T) {
	needRing(t)
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"l": limitMW(10)}, "l"))
	const n = 50
	before := ringOps(s)
	for i := 0; i < n; i++ {
		c, ok := dialFrom(t, "127.0.0.1", s.addr("tcp"))
		if !ok {
			t.Fatalf("connection %d not forwarded", i)
		}
		_ = c.Close()
	}
	// The last connection's closes are queued once the backend's end is
	// seen, after the client's close returned.
	waitFor(t, "every connection's calls queued", func() bool { return ringOps(s)-before >= 5*n })
	if got := ringOps(s) - before; got > 5*n+2 {
		t.Fatalf("%d operations queued for %d connections, want 5 each", got, n)
	}
	if w := ringWorkers(t); w > 0 {
		t.Fatalf("%d io-wq worker threads: an operation the ring was given did not complete inline", w)
	}
}

// TestRingReportsAFailedWatch: an epoll_ctl ADD queued in the ring that
// fails (here: a regular file, which epoll refuses) ends the connection it
// was for; one whose slot has a new generation by then is left alone.
func TestRingReportsAFailedWatch(t *testing.T) {
	needRing(t)
	l, err := newLoop(0, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer (&engine{loops: []*loop{l}}).close()
	ep := &EntryPoint{log: zerolog.Nop()}
	file := func() int {
		f, err := os.Create(filepath.Join(t.TempDir(), "f"))
		if err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Dup(int(f.Fd()))
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	rc := ep.newConn(l, file(), netip.MustParseAddrPort("127.0.0.1:1"))
	if err := l.watch(rc.cfd, eventData(tagClient, rc.slot, rc.gen)); err != nil {
		t.Fatalf("a queued watch failed at once: %v", err)
	}
	stale := ep.newConn(l, file(), netip.MustParseAddrPort("127.0.0.1:2"))
	if err := l.watch(stale.cfd, eventData(tagClient, stale.slot, stale.gen+1)); err != nil {
		t.Fatal(err)
	}
	l.flush()
	waitFor(t, "the failed watch reported", func() bool {
		l.ring.reap()
		return rc.state == stateDone
	})
	if l.conns[rc.slot] == rc {
		t.Fatal("the connection whose watch failed still holds its slot")
	}
	if stale.state == stateDone || l.conns[stale.slot] != stale {
		t.Fatal("a failed watch for an older generation ended the slot's new connection")
	}
	stale.c.Reject()
}

// TestLoopsWithoutRingServeTheSame runs core tests with the ring turned off
// (TOLLGATE_IO_URING=off, or a kernel without one): every call made
// directly, as before the ring.
func TestLoopsWithoutRingServeTheSame(t *testing.T) {
	was := uringOff
	uringOff = true
	t.Cleanup(func() { uringOff = was })
	for name, f := range map[string]func(*testing.T){
		"FourSteps":                      TestInFlightConnFourSteps,
		"HalfCloseDeliversResponse":      TestHalfCloseDeliversResponse,
		"SlotFreedWhenTheClientCloses":   TestSlotFreedWhenTheClientCloses,
		"TerminationDelayZero":           TestTerminationDelayZeroEndsBothAtOnce,
		"RoundRobinAndDialFailover":      TestRoundRobinAndDialFailover,
		"ProxyHeaderAndHelloInFragments": TestProxyHeaderAndHelloInFragments,
		"ShutdownDrains":                 TestShutdownDrains,
	} {
		t.Run(name, func(t *testing.T) {
			s := newTestServer(t, "probe")
			if ringOps(s) != 0 || s.engine.loops[0].ring != nil {
				t.Fatal("a loop has a ring with TOLLGATE_IO_URING=off")
			}
			f(t)
		})
	}
}
