package proxy

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// backend is a loopback TCP server for tests (itest.Backend): it echoes,
// or greets first.
type backend struct{ *itest.Backend }

func startBackend(t testing.TB, banner string) *backend {
	t.Helper()
	return &backend{itest.StartBackend(t, nil, func(c net.Conn) {
		if banner != "" {
			_, _ = io.WriteString(c, banner)
		}
		// Plain read/write echo: io.Copy(c, c) would splice and hold a
		// pipe per connection, which TestIdleConnectionsHoldNoPipe counts.
		_, _ = io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{c})
	})}
}

func (b *backend) addr() string { return b.Addr() }

func (b *backend) accepted() int { return b.Accepted() }

// newTestServer binds the named entry points on 127.0.0.1:0 and starts them.
func newTestServer(t testing.TB, eps ...string) *Server {
	t.Helper()
	return newServerOpts(t, StateOptions{}, nil, eps...)
}

// newServerOpts binds the named entry points on 127.0.0.1:0, each as edit
// changes it (nil: none), with o for its state, and starts them.
func newServerOpts(t testing.TB, o StateOptions, edit func(name string, ep *config.EntryPoint), eps ...string) *Server {
	t.Helper()
	cfg := map[string]*config.EntryPoint{}
	for _, n := range eps {
		ep := &config.EntryPoint{Address: "127.0.0.1:0"}
		ep.SetDefaults()
		ep.Transport.LifeCycle.GraceTimeOut = config.Duration(time.Second)
		if edit != nil {
			edit(n, ep)
		}
		cfg[n] = ep
	}
	s, err := NewServer(cfg, Options{State: o})
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
