package proxy

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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
			ka, _ := syscall.GetsockoptInt(fdOf(t, c.TCP), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
			idle, _ := syscall.GetsockoptInt(fdOf(t, c.TCP), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
			got <- [2]int{ka, idle}
			c.Reject()
		}),
	}}})
	if c, err := net.Dial("tcp", s.addr("tcp")); err == nil { // the probe resets it: an error is fine
		defer c.Close()
	}
	if v := <-got; v[0] != 1 || v[1] != keepAliveIdle {
		t.Fatalf("accepted socket SO_KEEPALIVE=%d TCP_KEEPIDLE=%d, want 1 and %d", v[0], v[1], keepAliveIdle)
	}
}

func fdOf(t *testing.T, c *net.TCPConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	_ = rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

func mustRule(t *testing.T, s string) *rule.Rule {
	r, err := rule.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Issue 10.4: when no splice pipe can be created (the process is out of file
// descriptors), an established connection keeps moving data through a
// buffer, and the service counts it, instead of ending.
func TestCopyFallsBackWithoutPipes(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), nil))
	c, ok := dialFrom(t, "127.0.0.1", s.addr("tcp"))
	if !ok {
		t.Fatal("not forwarded")
	}
	defer c.Close()
	counters := s.State().ServiceCounters("s@file")
	if counters.SpliceFallbacks.Load() != 0 {
		t.Fatal("fallbacks counted while pipes could be made")
	}
	// Take every free descriptor below a lowered limit, so that a new pipe
	// cannot be made, then take the pooled pipes out of reach: with one P
	// the pool has one local list (a P's private item cannot be taken from
	// another P), and changing GOMAXPROCS starts the pool's lists afresh.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
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
	var taken []*splicePipe
	drain := func() {
		for p := getPipe(); p != nil; p = getPipe() {
			taken = append(taken, p)
		}
	}
	okNoPipe := true
	for i := 0; i < 5 && counters.SpliceFallbacks.Load() < 2; i++ {
		drain() // a copier may return a pipe just after the previous round trip
		okNoPipe = okNoPipe && ping(c)
	}
	n := counters.SpliceFallbacks.Load()
	for _, p := range taken {
		putPipe(p)
	}
	restore()
	if !okNoPipe {
		t.Fatal("the connection stopped echoing when no pipe could be created")
	}
	if n < 2 {
		t.Fatalf("%d fallbacks counted for two round trips without pipes, want at least 2", n)
	}
	if !ping(c) {
		t.Fatal("the connection stopped echoing after descriptors were available again")
	}
}
