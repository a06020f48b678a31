package proxy

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// backend is a loopback TCP server for tests: it echoes, or greets first.
type backend struct {
	ln     net.Listener
	banner string
	mu     sync.Mutex
	conns  int // accepted so far
	wg     sync.WaitGroup
}

func startBackend(t testing.TB, banner string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{ln: ln, banner: banner}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns++
			b.mu.Unlock()
			go func() {
				defer c.Close()
				if b.banner != "" {
					_, _ = io.WriteString(c, b.banner)
				}
				// Plain read/write echo: io.Copy(c, c) would splice and hold a
				// pipe per connection, which TestIdleConnectionsHoldNoPipe counts.
				_, _ = io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{c})
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); b.wg.Wait() })
	return b
}

func (b *backend) addr() string { return b.ln.Addr().String() }

func (b *backend) accepted() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns
}

// newTestServer binds the named entry points on 127.0.0.1:0 and starts them.
func newTestServer(t testing.TB, eps ...string) *Server {
	t.Helper()
	cfg := map[string]*config.EntryPoint{}
	for _, n := range eps {
		ep := &config.EntryPoint{Address: "127.0.0.1:0"}
		ep.SetDefaults()
		ep.Transport.LifeCycle.GraceTimeOut = config.Duration(time.Second)
		cfg[n] = ep
	}
	s, err := NewServer(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	return s
}

// apply merges one provider's configuration the way the watcher does.
func apply(s *Server, prov string, tcp *config.TCPConfiguration) *Runtime {
	return s.Apply(provider.Merge(map[string]*config.Dynamic{prov: {TCP: tcp}}))
}

func (s *Server) addr(ep string) string { return s.EntryPoint(ep).Addr().String() }

// dialFrom connects to addr from source IP src and reports whether the
// connection is forwarded: a byte written comes back from the echo backend.
// A forwarded connection is returned open; the caller closes it.
func dialFrom(t testing.TB, src, addr string) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil, false // rejected with a reset before connect returned
	}
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	if ping(c) {
		return c, true
	}
	_ = c.Close()
	return nil, false
}

// ping writes one byte and waits up to 2 s for it to come back.
func ping(c net.Conn) bool { return itest.Echoes(c) }

// holdN opens n connections from src and returns the forwarded ones.
func holdN(t testing.TB, n int, src, addr string) []net.Conn {
	t.Helper()
	var held []net.Conn
	for i := 0; i < n; i++ {
		if c, ok := dialFrom(t, src, addr); ok {
			held = append(held, c)
		}
	}
	t.Cleanup(func() { closeAll(held) })
	return held
}

func closeAll(cs []net.Conn) { itest.CloseAll(cs) }

// waitFor polls cond for up to 5 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	itest.Eventually(t, 5*time.Second, cond, "timed out waiting for %s", what)
}

func lbConfig(addrs ...string) *config.TCPService {
	lb := &config.TCPServersLoadBalancer{}
	for _, a := range addrs {
		lb.Servers = append(lb.Servers, config.TCPServer{Address: a})
	}
	return &config.TCPService{LoadBalancer: lb}
}

func limitMW(amount int64) *config.TCPMiddleware {
	return &config.TCPMiddleware{InFlightConn: &config.TCPInFlightConn{Amount: amount}}
}

var nopLog = zerolog.Nop()

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
