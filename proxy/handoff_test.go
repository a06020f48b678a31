package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
)

// handOver is the old process's side of a handover in one test process:
// stop accepting, park what is unrouted, hand it to adopt.
func handOver(t *testing.T, old *Server, ep string, adopt func(Handed)) int {
	t.Helper()
	old.StopAccepting()
	if n := old.Park([]string{ep}); n == 0 {
		t.Fatal("nothing parked")
	}
	return old.HandOff(adopt)
}

// A PostgreSQL client answered 'S' by one server and handed over before its
// ClientHello is routed by the other: no second 'S' reaches it (its TLS
// handshake with the backend would fail on the stray byte), and the backend
// is asked for TLS by the server that routes it.
func TestHandOffAfterSSLRequest(t *testing.T) {
	ca := newTestCA(t)
	kp, _, _ := ca.issue(t, leafOpts{}, "db1.example")
	db := startPgTLSBackend(t, kp, 'S', false, "1")
	conf := &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db1@file": passthrough("HostSNI(`db1.example`)", "db1@file")},
		Services: map[string]*config.TCPService{"db1@file": lbConfig(db.addr)},
	}
	old, next := newServerWith(t, nil, "pg"), newServerWith(t, nil, "pg")
	mustEnabled(t, old.Apply(conf))
	mustEnabled(t, next.Apply(conf))
	raw := pgDial(t, old.addr("pg")) // answered 'S' by old
	var adoptErr error
	if n := handOver(t, old, "pg", func(h Handed) {
		if h.Answered != 1 || string(h.Read) != string(sniff.SSLRequest) {
			t.Errorf("handed with %d answers and %q read, want 1 and the SSLRequest", h.Answered, h.Read)
		}
		adoptErr = next.Adopt(h)
	}); n != 1 || adoptErr != nil {
		t.Fatalf("handed %d, adopt: %v", n, adoptErr)
	}
	if got := old.EntryPoint("pg").Open(); got != 0 {
		t.Errorf("the old server still counts %d open connections", got)
	}
	c := tls.Client(raw, &tls.Config{ServerName: "db1.example", RootCAs: ca.pool})
	if err := c.Handshake(); err != nil {
		t.Fatalf("handshake through the server the connection was handed to: %v", err)
	}
	if got := greetTLS(t, c); got != "1" {
		t.Errorf("reached %q, want backend 1", got)
	}
	if got := <-db.before; got != "ssl" {
		t.Errorf("the backend read %q before its handshake, want %q", got, "ssl")
	}
	if got := next.EntryPoint("pg").Open(); got != 1 {
		t.Errorf("the adopting server counts %d open connections, want 1", got)
	}

	// Handed to a server whose configuration has no TLS route any more:
	// the client, told 'S', cannot be served there, and is reset.
	plain := newServerWith(t, nil, "pg")
	mustEnabled(t, plain.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"any@file": {Rule: "HostSNI(`*`)", Service: "db1@file"}},
		Services: map[string]*config.TCPService{"db1@file": lbConfig(db.addr)},
	}))
	old2 := newServerWith(t, nil, "pg")
	mustEnabled(t, old2.Apply(conf))
	raw = pgDial(t, old2.addr("pg"))
	handOver(t, old2, "pg", func(h Handed) {
		if err := plain.Adopt(h); err != nil {
			t.Error(err)
		}
	})
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client told 'S' and handed to a server without TLS routes read %v, want a reset", err)
	}
}

// A PROXY header cut in two by the handover is completed and applied where
// the connection was handed: the client it names is held to that server's
// limit, which a connection through the old one never counted.
func TestHandOffHalfAHeader(t *testing.T) {
	be := startBackend(t, "")
	edit := func(_ string, ep *config.EntryPoint) {
		ep.ProxyProtocol = &config.EntryPointProxyProto{TrustedIPs: []string{"127.0.0.1"}}
		ep.Transport.RespondingTimeouts.ServerFirstTimeout = 0
	}
	conf := &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{"r@file": {Rule: "HostSNI(`*`)", Service: "s@file",
			Middlewares: []string{"one@file"}}},
		Services:    map[string]*config.TCPService{"s@file": lbConfig(be.addr())},
		Middlewares: map[string]*config.TCPMiddleware{"one@file": limitMW(1)},
	}
	old, next := newServerWith(t, edit, "pp"), newServerWith(t, edit, "pp")
	mustEnabled(t, old.Apply(conf))
	mustEnabled(t, next.Apply(conf))
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// 198.51.100.7 holds its one connection through the new server.
	held := dial(next.addr("pp"))
	if _, err := io.WriteString(held, "PROXY TCP4 198.51.100.7 192.0.2.1 1000 5432\r\n"); err != nil || !ping(held) {
		t.Fatal("the first connection of 198.51.100.7 was not forwarded")
	}
	late, other := dial(old.addr("pp")), dial(old.addr("pp"))
	for _, c := range []net.Conn{late, other} {
		if _, err := io.WriteString(c, "PROXY TCP4 198.51."); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "two connections being read on the old server", func() bool { return old.EntryPoint("pp").Open() == 2 })
	handOver(t, old, "pp", func(h Handed) {
		if err := next.Adopt(h); err != nil {
			t.Error(err)
		}
	})
	_, _ = io.WriteString(late, "100.7 192.0.2.1 1001 5432\r\n")
	_, _ = io.WriteString(other, "100.8 192.0.2.1 1002 5432\r\n")
	if !ping(other) {
		t.Error("198.51.100.8, whose header was completed after the handover, was not forwarded")
	}
	if ping(late) {
		t.Error("198.51.100.7, at its limit on the server it was handed to, got a second connection")
	}
	if got := old.EntryPoint("pp").Open(); got != 0 {
		t.Errorf("the old server still counts %d open connections", got)
	}
}

// halfHeader starts a server whose entry point pp takes PROXY headers from
// 127.0.0.1 and routes everything to an echo backend, and a client that has
// sent it part of a header; the server is reading it.
func halfHeader(t *testing.T, part string) (*Server, net.Conn) {
	t.Helper()
	be := startBackend(t, "")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.ProxyProtocol = &config.EntryPointProxyProto{TrustedIPs: []string{"127.0.0.1"}}
		ep.Transport.RespondingTimeouts.ServerFirstTimeout = 0
	}, "pp")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}},
		Services: map[string]*config.TCPService{"s": lbConfig(be.addr())},
	})
	c, err := net.Dial("tcp", s.addr("pp"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, part); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection being read", func() bool { return s.EntryPoint("pp").Open() == 1 })
	return s, c
}

// A handover that does not complete puts the parked connections back: what
// the client sent while parked is read, and the connection is routed.
func TestUnparkReadsOn(t *testing.T) {
	s, c := halfHeader(t, "PROXY TCP4 198.51.100.9 ")
	s.StopAccepting()
	if n := s.Park([]string{"pp"}); n != 1 {
		t.Fatalf("parked %d, want 1", n)
	}
	_, _ = io.WriteString(c, "192.0.2.1 1000 5432\r\n")
	s.Unpark()
	s.Resume()
	if !ping(c) {
		t.Fatal("the connection parked and put back was not forwarded")
	}
}

// A connection handed for an entry point the adopting server does not have
// is reset, and the error names it.
func TestAdoptWithoutItsEntryPoint(t *testing.T) {
	old, c := halfHeader(t, "PROXY ")
	next := newServerWith(t, nil, "other")
	var adoptErr error
	handOver(t, old, "pp", func(h Handed) { adoptErr = next.Adopt(h) })
	if adoptErr == nil || !strings.Contains(adoptErr.Error(), `no entry point "pp"`) {
		t.Fatalf("adopt: %v, want an error naming entry point pp", adoptErr)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client read %v, want a reset", err)
	}
}

// splitConn writes its first Write in two parts and runs between them what
// the test needs done while the peer has half of it.
type splitConn struct {
	net.Conn
	between func()
}

func (c *splitConn) Write(b []byte) (int, error) {
	if c.between == nil || len(b) < 2 {
		return c.Conn.Write(b)
	}
	half := len(b) / 2
	if _, err := c.Conn.Write(b[:half]); err != nil {
		return 0, err
	}
	between := c.between
	c.between = nil
	between()
	if _, err := c.Conn.Write(b[half:]); err != nil {
		return half, err
	}
	return len(b), nil
}

// A ClientHello cut in two by the handover is completed where the
// connection was handed, and its router there terminates TLS: the handshake
// is with that server's certificate, and the backend is reached.
func TestHandOffHalfAClientHello(t *testing.T) {
	ca := newTestCA(t)
	_, c1, k1 := ca.issue(t, leafOpts{}, "db.example")
	be := startBackend(t, "B")
	conf := &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "s@file", "")},
		Services: map[string]*config.TCPService{"s@file": lbConfig(be.addr())},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(c1, k1)}},
	}
	old, next := newServerWith(t, nil, "tls"), newServerWith(t, nil, "tls")
	mustEnabled(t, old.Apply(conf))
	mustEnabled(t, next.Apply(conf))
	raw, err := net.DialTimeout("tcp", old.addr("tls"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	handed := 0
	sc := &splitConn{Conn: raw, between: func() {
		waitFor(t, "half a ClientHello read on the old server", func() bool { return old.EntryPoint("tls").Open() == 1 })
		handed = handOver(t, old, "tls", func(h Handed) {
			if err := next.Adopt(h); err != nil {
				t.Error(err)
			}
		})
	}}
	c := tls.Client(sc, &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		t.Fatalf("handshake after the handover: %v", err)
	}
	if handed != 1 {
		t.Fatalf("handed %d connections, want 1", handed)
	}
	if got := greetTLS(t, c); got != "B" {
		t.Errorf("reached %q, want the backend", got)
	}
	if n := next.State().TLSCounters("db@file").Handshakes.Load(); n != 1 {
		t.Errorf("the adopting server's handshakes = %d, want 1", n)
	}
}
