package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/proxy/internal/netpoll"
	"github.com/tollgate-proxy/tollgate/proxy/rule"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Go's io.Copy between TCP connections holds a splice pipe (two descriptors)
// per direction for the life of the connection. The copier parks without
// one: 200 idle proxied connections must not hold 400 pipes.
func TestIdleConnectionsHoldNoPipe(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), nil))
	before := pipeFDs(t)
	held := holdN(t, 200, "127.0.0.1", s.addr("tcp"))
	if len(held) != 200 {
		t.Fatalf("%d of 200 forwarded", len(held))
	}
	for i, c := range held {
		if !ping(c) { // data has crossed both copiers at least twice
			t.Fatalf("connection %d stopped echoing", i)
		}
	}
	// Pipes dropped from the pool (the race detector drops pool items at
	// random) are closed by their finalizers: collect, then count.
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		n := pipeFDs(t) - before
		if n <= 16 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pipe descriptors held by 200 idle connections, want at most a small pooled handful", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pipeFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// Accepted client sockets inherit keepalive from the listener, so a client
// that vanishes without a FIN frees its slot.
func TestAcceptedConnectionsHaveKeepalive(t *testing.T) {
	s := newTestServer(t, "tcp")
	be := startBackend(t, "")
	apply(s, "file", singleRouter(be.addr(), nil))
	got := make(chan [2]int, 1)
	s.EntryPoint("tcp").SetTable(&Table{routes: []*route{{
		name: "probe", rule: mustRule(t, "HostSNI(`*`)"), open: new(atomic.Int64),
		handler: tcp.HandlerFunc(func(c *tcp.Conn) {
			fd := c.Sock.(*rconn).cfd
			ka, _ := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
			idle, _ := syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
			got <- [2]int{ka, idle}
			c.Reject()
		}),
	}}})
	if c, err := net.Dial("tcp", s.addr("tcp")); err == nil { // the probe resets it: an error is fine
		defer c.Close()
	}
	if v := <-got; v[0] != 1 || v[1] != netpoll.KeepAliveIdle {
		t.Fatalf("accepted socket SO_KEEPALIVE=%d TCP_KEEPIDLE=%d, want 1 and %d", v[0], v[1], netpoll.KeepAliveIdle)
	}
}

func mustRule(t *testing.T, s string) *rule.Rule {
	r, err := rule.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// echoBulk writes n bytes through c and reads them back, and reports
// whether they came back intact.
func echoBulk(c net.Conn, n int, seed byte) bool {
	out := make([]byte, n)
	for i := range out {
		out[i] = seed + byte(i*7)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	errc := make(chan error, 1)
	go func() { _, err := c.Write(out); errc <- err }()
	in := make([]byte, n)
	if _, err := io.ReadFull(c, in); err != nil {
		return false
	}
	return <-errc == nil && bytes.Equal(in, out)
}

// Issue 10.4: when no splice pipe can be created (the process is out of file
// descriptors), an established connection keeps moving bulk data through the
// loop's buffer, and the service counts it, instead of ending.
func TestCopyFallsBackWithoutPipes(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), nil))
	c, ok := dialFrom(t, "127.0.0.1", s.addr("tcp"))
	if !ok {
		t.Fatal("not forwarded")
	}
	defer c.Close()
	// A bulk transfer first: reads that fill the loop's buffer move both
	// directions to splicing.
	if !echoBulk(c, 4<<20, 1) {
		t.Fatal("bulk echo failed")
	}
	counters := s.State().ServiceCounters("s@file")
	if counters.SpliceFallbacks.Load() != 0 {
		t.Fatal("fallbacks counted while pipes could be made")
	}
	// Take the loops' pooled pipes out of reach, then every free descriptor
	// below a lowered limit, so that no new pipe can be made.
	var taken []*netpoll.Pipe
	var mu sync.Mutex
	s.engine.each(func(l *loop) {
		mu.Lock()
		taken = append(taken, l.pipes...)
		mu.Unlock()
		l.pipes = nil
	})
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	highest := 0
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil && fd > highest {
			highest = fd
		}
	}
	lim := old
	lim.Cur = uint64(highest + 1)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot lower the descriptor limit: %v", err)
	}
	var fillers []*os.File
	restore := func() {
		for _, f := range fillers {
			f.Close()
		}
		fillers = nil
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	}
	defer restore()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break // every descriptor below the limit is taken
		}
		fillers = append(fillers, f)
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err == nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		t.Skip("a pipe could still be created: cannot exhaust descriptors here")
	}
	okNoPipe := echoBulk(c, 1<<20, 2)
	n := counters.SpliceFallbacks.Load()
	restore()
	for _, p := range taken {
		p.Close()
	}
	if !okNoPipe {
		t.Fatal("the connection stopped echoing when no pipe could be created")
	}
	if n == 0 {
		t.Fatal("no fallback counted for a bulk transfer without pipes")
	}
	if !echoBulk(c, 1<<20, 3) {
		t.Fatal("the connection stopped echoing after descriptors were available again")
	}
}

// lingerBackend accepts connections, answers one byte to each byte, and
// keeps a connection open for hold after its client's end (as a slow
// server finishing its side would).
func lingerBackend(t *testing.T, hold time.Duration) string {
	t.Helper()
	return itest.Listen(t, func(c net.Conn) {
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				break
			}
			_, _ = c.Write(b)
		}
		time.Sleep(hold) // the server's own pace after the client's end
	})
}

// Issue 13.5: a client's limiter slot is freed as soon as the client has
// closed its side, without waiting for the backend's half of the close (here
// held up to the termination delay): the client can connect again at once,
// as with nginx. With a termination delay without limit, the slot waits for
// the whole connection.
func TestSlotFreedWhenTheClientCloses(t *testing.T) {
	be := lingerBackend(t, 3*time.Second)
	for _, tc := range []struct {
		delay   int // termination delay, ms; negative: no limit
		freedBy time.Duration
	}{{2000, 500 * time.Millisecond}, {-1, 0}} {
		s := newTestServer(t, "tcp")
		cfg := singleRouter(be, map[string]*config.TCPMiddleware{"one": limitMW(1)}, "one")
		d := tc.delay
		cfg.Services["s"].LoadBalancer.TerminationDelay = &d
		apply(s, "file", cfg)
		c, ok := dialFrom(t, "127.0.0.30", s.addr("tcp"))
		if !ok {
			t.Fatal("first connection not forwarded")
		}
		l := limiterOf(s, "one@file")
		c.Close()
		if tc.delay < 0 {
			time.Sleep(300 * time.Millisecond) // a window in which the slot must stay held
			if l.Count(mustAddr("127.0.0.30")) != 1 {
				t.Fatal("with no termination delay limit, the slot was freed before the connection ended")
			}
			continue
		}
		start := time.Now()
		waitFor(t, "the slot to be freed after the client's close", func() bool { return l.Count(mustAddr("127.0.0.30")) == 0 })
		if d := time.Since(start); d > tc.freedBy {
			t.Fatalf("slot freed %v after the client closed, want within %v", d, tc.freedBy)
		}
		if s.EntryPoint("tcp").Open() != 1 {
			t.Fatalf("open connections %d: the first one should still be draining to the backend", s.EntryPoint("tcp").Open())
		}
		c2, ok := dialFrom(t, "127.0.0.30", s.addr("tcp"))
		if !ok {
			t.Fatal("the client could not connect again while its old connection drained")
		}
		c2.Close()
	}
}

// Bulk streams keep moving to the end: many parallel streams, each
// splicing, never stall waiting for an event that does not come (a short
// splice is not a drained socket).
func TestBulkStreamsDoNotStall(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), nil))
	// One-page pipes: a splice then stops at the first TCP segment that
	// does not fit, with more queued behind it.
	s.engine.each(func(l *loop) {
		for _, p := range l.pipes {
			p.Close()
		}
		l.pipes, l.pipeSize = nil, 4096
	})
	size := 64 << 20
	if testing.Short() || raceEnabled {
		size = 8 << 20
	}
	for round := 0; round < 2; round++ {
		var wg sync.WaitGroup
		errs := make(chan string, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				c, err := net.DialTimeout("tcp", s.addr("tcp"), 2*time.Second)
				if err != nil {
					errs <- err.Error()
					return
				}
				defer c.Close()
				if !echoBulk(c, size, byte(i)) {
					errs <- fmt.Sprintf("stream %d: %d bytes did not all come back intact within the deadline", i, size)
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
	}
}

// A termination delay of 0 gives the second direction no time: the
// connection ends with the first end, both sides closed at once, as nginx
// does by default. The backend, still holding its side open, reads a clean
// end (not a reset), and the access log says the connection closed, not
// that it failed: no deadline ran out.
func TestTerminationDelayZeroEndsBothAtOnce(t *testing.T) {
	ends := make(chan error, 1)
	be := itest.Listen(t, func(c net.Conn) {
		b := make([]byte, 1)
		var err error
		for err == nil {
			if _, err = c.Read(b); err == nil {
				_, _ = c.Write(b)
			}
		}
		ends <- err
		time.Sleep(3 * time.Second) // its own side stays open
	})
	var buf syncBuffer
	al := zerolog.New(&buf)
	s := newServerOpts(t, StateOptions{Observers: ConnObservers{AccessLog: &al}}, nil, "tcp")
	cfg := singleRouter(be, nil)
	zero := 0
	cfg.Services["s"].LoadBalancer.TerminationDelay = &zero
	apply(s, "file", cfg)
	c, ok := dialFrom(t, "127.0.0.31", s.addr("tcp"))
	if !ok {
		t.Fatal("connection not forwarded")
	}
	c.Close()
	waitFor(t, "the connection to end while the backend holds its side", func() bool { return s.EntryPoint("tcp").Open() == 0 })
	select {
	case err := <-ends:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("the backend read %v, want a clean end (EOF)", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the backend never saw the end")
	}
	waitFor(t, "the access log line", func() bool { return !buf.empty() })
	if l := buf.lines(); len(l) != 1 || !strings.Contains(l[0], `"end":"closed"`) {
		t.Fatalf("access log %q, want one line with \"end\":\"closed\"", l)
	}
}
