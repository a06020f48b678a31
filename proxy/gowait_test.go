package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/proxy/internal/netpoll"
)

// loopsInPoller counts the server's loops that wait in Go's poller (asked on
// each loop: a loop only switches in wait, so asking wakes it once more).
func loopsInPoller(s *Server) int {
	var n atomic.Int32
	s.engine.each(func(l *loop) {
		if l.poller != nil {
			n.Add(1)
		}
	})
	return int(n.Load())
}

// While goroutines work for the server's connections (here the handshake
// and the copies of a terminated TLS connection), the loops wait in Go's
// poller, leaving their Ps to the goroutines; pollerFor after the goroutines
// last worked, they block in epoll_wait again, though the TLS connection is
// still open, idle. Plain proxied connections never send them there, and
// keep flowing while they do.
func TestLoopsWaitInGoPollerWhileGoroutinesWork(t *testing.T) {
	ca := newTestCA(t)
	_, cert, key := ca.issue(t, leafOpts{}, "db.example")
	be := startBackend(t, "")
	s := newTestServer(t, "tls", "tcp")
	rt := s.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"db@file":    {EntryPoints: []string{"tls"}, Rule: "HostSNI(`db.example`)", Service: "a@file", TLS: &config.RouterTCPTLSConfig{}},
			"plain@file": {EntryPoints: []string{"tcp"}, Rule: "HostSNI(`*`)", Service: "a@file"},
		},
		Services: map[string]*config.TCPService{"a@file": lbConfig(be.addr())},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(cert, key)}},
	})
	mustEnabled(t, rt)
	loops := len(s.engine.loops)
	leftPoller := func(what string) {
		t.Helper()
		since := time.Now()
		waitFor(t, what, func() bool { return loopsInPoller(s) == 0 })
		if d := time.Since(since); d < pollerFor/2 {
			t.Errorf("%s after %v, want about pollerFor (%v)", what, d, pollerFor)
		}
	}

	plain, ok := dialFrom(t, "127.0.0.1", s.addr("tcp"))
	if !ok {
		t.Fatal("plain connection not forwarded")
	}
	defer plain.Close()
	for range 3 {
		if n := loopsInPoller(s); n != 0 {
			t.Fatalf("%d loops in the poller with plain connections only", n)
		}
	}

	c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "every loop in the poller after a handshake", func() bool { return loopsInPoller(s) == loops })
	if !ping(plain) {
		t.Fatal("the plain connection stopped forwarding while the loops wait in the poller")
	}
	leftPoller("the loops blocking in epoll_wait again, the TLS connection idle")

	if n, err := c.Write([]byte("x")); n != 1 || err != nil {
		t.Fatalf("write through the terminated connection: %d, %v", n, err)
	}
	var b [1]byte
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'x' {
		t.Fatalf("echo through the terminated connection: %q, %v", b[:], err)
	}
	waitFor(t, "every loop in the poller again while bytes move on the TLS connection", func() bool { return loopsInPoller(s) == loops })
	leftPoller("the loops blocking in epoll_wait again after the bytes")
	if !ping(plain) {
		t.Fatal("the plain connection stopped forwarding after the loops left the poller")
	}
}

// copyGo moves the bytes through its pooled buffers, never through either
// side's ReadFrom or WriteTo, which allocate a buffer per call when neither
// side can splice.
func TestCopyGoUsesItsOwnBuffer(t *testing.T) {
	data := strings.Repeat("0123456789", 10_000)
	src := &onlyRead{t: t, r: strings.NewReader(data)}
	dst := &onlyWrite{t: t}
	ep := &EntryPoint{}
	n, err := copyBlocking(dst, src, ep)
	if err != nil || n != int64(len(data)) || dst.b.String() != data {
		t.Fatalf("copied %d of %d bytes (%d arrived), err %v", n, len(data), dst.b.Len(), err)
	}
	if raceEnabled {
		return // the race detector makes sync.Pool drop buffers at random
	}
	// Without the pools, or through ReadFrom/WriteTo, each copy allocates
	// 32 KiB; through the pools, nothing.
	dst.discard = true
	_, _ = copyBlocking(dst, src, ep) // the pools' first buffers
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 20
	for range runs {
		src.r.Reset(data)
		_, _ = copyBlocking(dst, src, ep)
	}
	runtime.ReadMemStats(&after)
	if perCopy := (after.TotalAlloc - before.TotalAlloc) / runs; perCopy > 1024 {
		t.Errorf("copyGo allocates %d bytes per copy, want a pooled buffer (under 1 KiB)", perCopy)
	}
}

type onlyRead struct {
	t *testing.T
	r *strings.Reader
}

func (s *onlyRead) Read(p []byte) (int, error) { return s.r.Read(p) }

func (s *onlyRead) WriteTo(io.Writer) (int64, error) {
	s.t.Error("copyGo used the source's WriteTo")
	return 0, errors.New("WriteTo")
}

type onlyWrite struct {
	t       *testing.T
	b       strings.Builder
	discard bool
}

func (d *onlyWrite) Write(p []byte) (int, error) {
	if d.discard {
		return len(p), nil
	}
	return d.b.Write(p)
}

func (d *onlyWrite) ReadFrom(io.Reader) (int64, error) {
	d.t.Error("copyGo used the destination's ReadFrom")
	return 0, errors.New("ReadFrom")
}

// scriptedReader returns, for each Read, the next of its sizes (at most
// len(p)), recording len(p); then io.EOF.
type scriptedReader struct {
	sizes []int
	asked []int
}

func (r *scriptedReader) Read(p []byte) (int, error) {
	r.asked = append(r.asked, len(p))
	if len(r.sizes) == 0 {
		return 0, io.EOF
	}
	n := min(r.sizes[0], len(p))
	r.sizes = r.sizes[1:]
	return n, nil
}

// A copy goroutine waits in Read with a small buffer, so that an idle
// connection holds 2 KiB per direction: a read that fills it switches to
// the 32 KiB buffer, which stays while reads bring more than the small
// size (a TLS record of 16 KiB, a burst of plain bytes) and goes back to
// the pool after a read that does not.
func TestCopyGoWaitsWithASmallBuffer(t *testing.T) {
	r := &scriptedReader{sizes: []int{100, copySmall, 16 << 10, copyBig, 500, 10}}
	dst := &onlyWrite{t: t}
	n, err := copyBlocking(dst, r, &EntryPoint{})
	want := []int{copySmall, copySmall, copyBig, copyBig, copyBig, copySmall, copySmall}
	if err != nil || n != int64(100+copySmall+16<<10+copyBig+500+10) || !slices.Equal(r.asked, want) {
		t.Fatalf("copied %d, err %v; buffer sizes asked %v, want %v", n, err, r.asked, want)
	}
}

// goroutinesIn counts the goroutines with a frame in fn (a function name as
// runtime.Stack prints it, without the package path).
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "/proxy."+fn+"(") {
			count++
		}
	}
	return count
}

// waitsFiled counts the idle waiter's filed waits.
func waitsFiled() int {
	w, err := netpoll.Idle()
	if err != nil {
		return -1
	}
	return w.Filed()
}

// An idle terminated connection holds no goroutine and no copy buffer: each
// direction, finding no bytes, is filed with the idle waiter and its
// goroutine ends (the goroutine that did the handshake, its stack grown by
// the cryptography, returned when the copy started). Bytes in either
// direction start a goroutine that copies them and files the direction
// again. When the clients close, the copies end, and the entry point no
// longer owns the connections (a shutdown would wait for them).
func TestIdleTerminatedConnectionHoldsNoGoroutine(t *testing.T) {
	ca := newTestCA(t)
	_, cert, key := ca.issue(t, leafOpts{}, "db.example")
	be := startBackend(t, "g")
	s := newTestServer(t, "tls")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "a@file", "")},
		Services: map[string]*config.TCPService{"a@file": lbConfig(be.addr())},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(cert, key)}},
	}))
	const n = 5
	held, filed := copyBufsHeld.Load(), waitsFiled()
	var conns []*tls.Conn
	for range n {
		c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		greetTLS(t, c)
		conns = append(conns, c)
	}
	ep := s.EntryPoint("tls")
	owned := func() int {
		ep.gmu.Lock()
		defer ep.gmu.Unlock()
		return len(ep.gconns)
	}
	idle := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool {
			return waitsFiled()-filed == 2*n && copyBufsHeld.Load() == held &&
				goroutinesIn("(*copyPair).pump") == 0 && goroutinesIn("(*copyPair).run") == 0 &&
				goroutinesIn("(*gconn).startCopy") == 0 && goroutinesIn("(*terminator).handshake") == 0
		})
		if got := owned(); got != n {
			t.Fatalf("the entry point owns %d goroutine-served connections, want %d", got, n)
		}
	}
	idle("both directions of every connection filed with the idle waiter, no goroutine or buffer held")
	for _, c := range conns {
		greetAgain(t, c)
	}
	idle("filed again after bytes moved both ways")
	for _, c := range conns {
		_ = c.Close()
	}
	waitFor(t, "the copies ended after the clients closed", func() bool {
		return owned() == 0 && waitsFiled() == filed && copyBufsHeld.Load() == held
	})
}

// A terminated connection whose server ends first, while the client keeps
// its side open and silent, ends after the termination delay, also when
// both directions had gone idle: the client's direction, filed with the
// idle waiter, is started by the close and ends (it would otherwise wait
// for bytes that never come). The client reads the end (close_notify, then
// the close).
func TestIdleTerminatedDirectionEndsAfterTerminationDelay(t *testing.T) {
	ca := newTestCA(t)
	_, cert, key := ca.issue(t, leafOpts{}, "db.example")
	end := make(chan struct{})
	be := itest.Listen(t, func(c net.Conn) {
		_, _ = c.Write([]byte("g"))
		<-end
		_ = c.Close() // the server ends first
	})
	s := newTestServer(t, "tls")
	svc := lbConfig(be)
	delay := 100
	svc.LoadBalancer.TerminationDelay = &delay
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "a@file", "")},
		Services: map[string]*config.TCPService{"a@file": svc},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(cert, key)}},
	}))
	filed := waitsFiled()
	c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "both directions filed with the idle waiter", func() bool { return waitsFiled()-filed == 2 })
	close(end)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if string(got) != "g" || err != nil {
		t.Fatalf("read %q, %v through the terminated connection; want the server's byte, then the end", got, err)
	}
	waitFor(t, "the connection ended while the client holds its side", func() bool {
		return s.EntryPoint("tls").Open() == 0 && waitsFiled() == filed
	})
}

// A plain client's connection to a TLS server (a servers transport with
// TLS) holds no goroutine once idle either: the client's side is a plain
// socket, the server's a TLS connection over one, and both are filed with
// the idle waiter; bytes still cross both ways afterwards.
func TestIdleBackendTLSConnectionHoldsNoGoroutine(t *testing.T) {
	ca := newTestCA(t)
	good, _, _ := ca.issue(t, leafOpts{}, "backend.example")
	addr, _ := startTLSEcho(t, "G", good, nil)
	s := newTestServer(t, "tcp")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"r@file": {EntryPoints: []string{"tcp"}, Rule: "HostSNI(`*`)", Service: "s@file"}},
		Services: map[string]*config.TCPService{"s@file": tlsService(addr, "verify@file")},
		ServersTransports: map[string]*config.TCPServersTransport{"verify@file": {TLS: &config.TLSClientConfig{
			ServerName: "backend.example", RootCAs: []config.FileOrContent{config.FileOrContent(ca.caFile(t))}}}},
	}))
	filed := waitsFiled()
	c, err := net.DialTimeout("tcp", s.addr("tcp"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b [1]byte
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'G' {
		t.Fatalf("greeting %q, %v", b[:], err)
	}
	idle := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool {
			return waitsFiled()-filed == 2 && goroutinesIn("(*copyPair).pump") == 0 && goroutinesIn("(*copyPair).run") == 0
		})
	}
	idle("both directions filed with the idle waiter")
	if !ping(c) {
		t.Fatal("no echo through the idle connection")
	}
	idle("both directions filed again after the echo")
	_ = c.Close()
	waitFor(t, "the connection ended after the client closed", func() bool {
		return s.EntryPoint("tcp").Open() == 0 && waitsFiled() == filed
	})
}
