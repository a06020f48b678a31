package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
)

// selfSigned returns a certificate for names whose key only its holder (a
// test backend) has, and a pool that trusts it.
func selfSigned(t testing.TB, names ...string) (tls.Certificate, *x509.CertPool) {
	return itest.SelfSigned(t, names...)
}

// tlsBackend is a TLS server holding its own key: after the handshake it
// greets with its name, then echoes.
type tlsBackend struct {
	name string
	ln   *itest.Backend // counts the TCP connections accepted, handshake or not
	cert tls.Certificate

	mu   sync.Mutex
	snis []string // ServerName of each completed handshake
}

func startTLSBackend(t testing.TB, name string, dnsNames ...string) *tlsBackend {
	t.Helper()
	cert, _ := selfSigned(t, dnsNames...)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	b := &tlsBackend{name: name, cert: cert}
	b.ln = itest.StartBackend(t, ln, func(c net.Conn) {
		tc := c.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			return
		}
		b.mu.Lock()
		b.snis = append(b.snis, tc.ConnectionState().ServerName)
		b.mu.Unlock()
		_ = tc.SetDeadline(time.Time{})
		if _, err := io.WriteString(tc, b.name); err != nil {
			return
		}
		_, _ = io.Copy(tc, tc)
	})
	return b
}

func (b *tlsBackend) addr() string { return b.ln.Addr() }

func (b *tlsBackend) count() int { return b.ln.Accepted() }

// tlsGreeting dials addr with a real tls.Client for serverName (verifying the
// backend's certificate against roots), completes the handshake through the
// proxy, and returns the backend's greeting after checking it echoes; or
// "closed" when the handshake or the greeting fails. wrap, if not nil, wraps
// the TCP connection (to fragment what the client writes).
func tlsGreeting(t testing.TB, addr, serverName string, roots *x509.CertPool, cfg func(*tls.Config), wrap func(net.Conn) net.Conn) string {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer raw.Close()
	conn := raw
	if wrap != nil {
		conn = wrap(raw)
	}
	tc := &tls.Config{ServerName: serverName, RootCAs: roots}
	if cfg != nil {
		cfg(tc)
	}
	c := tls.Client(conn, tc)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			t.Fatalf("%s: certificate not trusted (wrong backend?): %v", serverName, err)
		}
		return "closed"
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return "closed"
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatalf("%s: write after handshake: %v", serverName, err)
	}
	var echo [4]byte
	if _, err := io.ReadFull(c, echo[:]); err != nil || string(echo[:]) != "ping" {
		t.Fatalf("%s: echo through the proxy = %q, %v", serverName, echo[:], err)
	}
	return string(b[:])
}

// newServerWith is newTestServer with each entry point's configuration
// adjusted by edit (read timeout, PROXY protocol).
func newServerWith(t testing.TB, edit func(name string, ep *config.EntryPoint), eps ...string) *Server {
	t.Helper()
	return newServerOpts(t, StateOptions{}, edit, eps...)
}

func passthrough(rule, svc string) *config.TCPRouter {
	return &config.TCPRouter{Rule: rule, Service: svc, TLS: &config.RouterTCPTLSConfig{Passthrough: true}}
}

// sniFixture: A for a.test, B for b.test, W for *.example.com, and a plain
// HostSNI(`*`) route to an echo server greeting "P", on one entry point.
type sniFixture struct {
	s       *Server
	a, b, w *tlsBackend
	p       *backend
	roots   *x509.CertPool
}

func newSNIFixture(t *testing.T, edit func(string, *config.EntryPoint)) *sniFixture {
	f := &sniFixture{
		a: startTLSBackend(t, "A", "a.test"),
		b: startTLSBackend(t, "B", "b.test"),
		w: startTLSBackend(t, "W", "*.example.com"),
		p: startBackend(t, "P"),
	}
	f.roots = mergePools(f.a, f.b, f.w)
	f.s = newServerWith(t, edit, "tls")
	rt := apply(f.s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"a":     passthrough("HostSNI(`a.test`)", "a"),
			"b":     passthrough("HostSNI(`b.test`)", "b"),
			"w":     passthrough("HostSNI(`*.example.com`)", "w"),
			"plain": {Rule: "HostSNI(`*`)", Service: "p"},
		},
		Services: map[string]*config.TCPService{
			"a": lbConfig(f.a.addr()), "b": lbConfig(f.b.addr()), "w": lbConfig(f.w.addr()), "p": lbConfig(f.p.addr()),
		},
	})
	for name, ri := range rt.Routers {
		if ri.Status != StatusEnabled {
			t.Fatalf("router %s: %s %v", name, ri.Status, ri.Err)
		}
	}
	return f
}

// mergePools trusts every given backend's certificate.
func mergePools(bs ...*tlsBackend) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, b := range bs {
		pool.AddCert(b.cert.Leaf)
	}
	return pool
}

func (f *sniFixture) backendsContacted() int { return f.a.count() + f.b.count() + f.w.count() }

// Acceptance: a real tls.Client reaches the backend named by its SNI, which
// holds its own key; unknown names are closed; the wildcard takes one label.
func TestTLSPassthroughBySNI(t *testing.T) {
	f := newSNIFixture(t, nil)
	addr := f.s.addr("tls")
	for _, tc := range []struct{ sni, want string }{
		{"a.test", "A"},
		{"b.test", "B"},
		{"A.Test", "A"}, // SNI is matched case-insensitively
		{"x.example.com", "W"},
		{"unknown.test", "closed"},
		{"x.y.example.com", "closed"},
		{"example.com", "closed"},
	} {
		before := f.backendsContacted()
		got := tlsGreeting(t, addr, tc.sni, f.roots, nil, nil)
		if got != tc.want {
			t.Errorf("ServerName %q reached %q, want %q", tc.sni, got, tc.want)
		}
		if tc.want == "closed" && f.backendsContacted() != before {
			t.Errorf("ServerName %q: a TLS backend was dialled for a connection that matches no route", tc.sni)
		}
	}
	if got := f.a.seen(); len(got) != 2 || got[0] != "a.test" || got[1] != "A.Test" {
		t.Errorf("backend A saw ServerNames %q, want [a.test A.Test] (the hello is replayed unchanged)", got)
	}
}

func (b *tlsBackend) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.snis...)
}

// A client that speaks first in plain TCP on an entry point with TLS routes
// reaches the non-TLS HostSNI(`*`) route, and its first bytes are replayed.
func TestTLSEntryPointServesPlainClients(t *testing.T) {
	f := newSNIFixture(t, nil)
	c, err := net.DialTimeout("tcp", f.s.addr("tls"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "hello plain"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("P")+len("hello plain"))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("plain client on a TLS entry point: %v (read %q)", err, got)
	}
	if string(got) != "Phello plain" {
		t.Fatalf("plain client got %q, want the banner then its own bytes echoed", got)
	}
	if f.backendsContacted() != 0 {
		t.Fatal("a plain client reached a TLS backend")
	}
}

// fragConn rewrites the client's first write (its ClientHello): re-split into
// TLS records of at most recSize bytes (0 keeps the client's records), then
// written chunk bytes per TCP write (the first dozen writes; the rest in
// 256-byte writes) with a short pause between writes so the
// proxy sees the pieces in separate reads. Later writes pass through.
type fragConn struct {
	net.Conn
	recSize, chunk int
	done           bool
}

func (f *fragConn) Write(p []byte) (int, error) {
	if f.done {
		return f.Conn.Write(p)
	}
	f.done = true
	b := p
	if f.recSize > 0 {
		b = itest.Reframe(p, f.recSize)
	}
	for i := 0; len(b) > 0; i++ {
		n := min(f.chunk, len(b))
		if i >= 12 {
			n = min(256, len(b)) // enough small pieces: keep the test quick
		}
		if _, err := f.Conn.Write(b[:n]); err != nil {
			return 0, err
		}
		b = b[n:]
		time.Sleep(time.Millisecond) // not a wait for an outcome: it separates segments
	}
	return len(p), nil
}

func fragment(recSize, chunk int) func(net.Conn) net.Conn {
	return func(c net.Conn) net.Conn { return &fragConn{Conn: c, recSize: recSize, chunk: chunk} }
}

// Acceptance: a hello split across TCP writes and across TLS records is
// reassembled for routing and replayed byte for byte (the backend completes
// the handshake the client started).
func TestTLSFragmentedHello(t *testing.T) {
	f := newSNIFixture(t, nil)
	addr := f.s.addr("tls")
	for _, tc := range []struct {
		name           string
		recSize, chunk int
	}{
		{"3-byte TCP writes", 0, 3},
		{"40-byte TLS records", 40, 1 << 16},
		{"7-byte records in 5-byte writes", 7, 5},
		{"record header split", 0, 2},
	} {
		if got := tlsGreeting(t, addr, "b.test", f.roots, nil, fragment(tc.recSize, tc.chunk)); got != "B" {
			t.Errorf("%s: reached %q, want B", tc.name, got)
		}
	}
}

// Acceptance: a hello larger than one TLS record is read whole; one larger
// than the peek limit is closed without a backend being dialled.
func TestTLSOversizedHello(t *testing.T) {
	f := newSNIFixture(t, nil)
	addr := f.s.addr("tls")
	if n := len(itest.ClientHello(t, itest.WithSNI("a.test", itest.LongALPN(80)))); n <= 16384+5 || n >= sniff.MaxHelloBytes {
		t.Fatalf("test hello is %d bytes: want more than one record and less than the cap", n)
	}
	if got := tlsGreeting(t, addr, "a.test", f.roots, itest.LongALPN(80), nil); got != "A" {
		t.Errorf("a 20 KiB hello in two records reached %q, want A", got)
	}
	if n := len(itest.ClientHello(t, itest.WithSNI("a.test", itest.LongALPN(140)))); n <= sniff.MaxHelloBytes {
		t.Fatalf("oversized test hello is only %d bytes", n)
	}
	before := f.backendsContacted() + f.p.accepted()
	if got := tlsGreeting(t, addr, "a.test", f.roots, itest.LongALPN(140), nil); got != "closed" {
		t.Errorf("a hello over %d bytes reached %q, want closed", sniff.MaxHelloBytes, got)
	}
	if f.backendsContacted()+f.p.accepted() != before {
		t.Error("a backend was dialled for an oversized hello")
	}
}

// Acceptance: a client that sends nothing to an entry point with only TLS
// routes is closed at the read deadline: no route could take it.
func TestTLSSilentClientClosedAtDeadline(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	a := startTLSBackend(t, "A", "a.test")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.Transport.RespondingTimeouts.ReadTimeout = config.Duration(readTimeout)
	}, "tls")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"a": passthrough("HostSNI(`a.test`)", "a")},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr())},
	})
	c, err := net.DialTimeout("tcp", s.addr("tls"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	elapsed := time.Since(start)
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("silent client: read returned %v after %v, want the proxy to close it", err, elapsed)
	}
	if elapsed < readTimeout-50*time.Millisecond || elapsed > readTimeout+2*time.Second {
		t.Fatalf("silent client closed after %v, want about the %v read timeout", elapsed, readTimeout)
	}
	waitFor(t, "the entry point to forget the silent client", func() bool { return s.EntryPoint("tls").Open() == 0 })
	if a.count() != 0 {
		t.Fatal("a backend was dialled for a silent client")
	}
}

// A client of a server-first protocol (it sends nothing and waits for the
// server's greeting) on an entry point that has TLS routes and a plain
// HostSNI(`*`) route is routed as plain TCP once it has been silent for
// serverFirstTimeout, not reset at the read deadline: it gets the plain
// backend's banner. TLS clients on the same entry point are unaffected.
func TestSilentClientIsServedAsServerFirst(t *testing.T) {
	const serverFirst = 200 * time.Millisecond
	f := newSNIFixture(t, func(_ string, ep *config.EntryPoint) {
		ep.Transport.RespondingTimeouts.ReadTimeout = config.Duration(3 * time.Second)
		ep.Transport.RespondingTimeouts.ServerFirstTimeout = config.Duration(serverFirst)
	})
	for i := 0; i < 3; i++ {
		c, err := net.DialTimeout("tcp", f.s.addr("tls"), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 1)
		_, err = io.ReadFull(c, b)
		elapsed := time.Since(start)
		_ = c.Close()
		if err != nil || b[0] != 'P' {
			t.Fatalf("silent client %d: read %q, %v after %v; want the plain backend's banner P", i, b, err, elapsed)
		}
		if elapsed < serverFirst-50*time.Millisecond || elapsed > 2*time.Second {
			t.Fatalf("silent client %d greeted after %v, want about the %v server-first wait", i, elapsed, serverFirst)
		}
	}
	if got := tlsGreeting(t, f.s.addr("tls"), "a.test", f.roots, nil, nil); got != "A" {
		t.Fatalf("TLS client for a.test reached %q, want A", got)
	}
	if f.backendsContacted() != 1 {
		t.Fatalf("%d TLS backends contacted, want 1 (the TLS client's)", f.backendsContacted())
	}
}

// A hello that fails to parse is closed, even with TLS and plain catch-alls.
func TestTLSBrokenHelloNeverReachesCatchAll(t *testing.T) {
	a := startTLSBackend(t, "A", "a.test")
	p := startBackend(t, "P")
	s := newTestServer(t, "tls")
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"tls-all":   passthrough("HostSNI(`*`)", "a"),
			"plain-all": {Rule: "HostSNI(`*`)", Service: "p"},
		},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr()), "p": lbConfig(p.addr())},
	})
	addr := s.addr("tls")
	// The catch-alls work: any name reaches A over TLS, plain bytes reach P.
	if got := tlsGreeting(t, addr, "anything.test", mergePools(a), func(c *tls.Config) { c.InsecureSkipVerify = true }, nil); got != "A" {
		t.Fatalf("TLS catch-all: reached %q, want A", got)
	}
	for _, bad := range [][]byte{
		{0x16, 0x03, 0x01, 0x00, 0x05, 'a', 'b', 'c', 'd', 'e'}, // a record that is no handshake message
		{0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00},  // a ServerHello
		{0x16, 0x03, 0x01, 0xff, 0xff},                          // a record longer than TLS allows
		{0x16, 0x03},                                            // then EOF
	} {
		before := a.count() + p.accepted()
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(bad); err != nil {
			t.Fatal(err)
		}
		if len(bad) == 2 {
			_ = c.(*net.TCPConn).CloseWrite()
		}
		n, err := c.Read(make([]byte, 16))
		c.Close()
		var ne net.Error
		if n > 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("broken hello % x: read %d bytes, %v; want the connection closed", bad, n, err)
		}
		if a.count()+p.accepted() != before {
			t.Fatalf("broken hello % x reached a backend", bad)
		}
	}
}

// HostSNIRegexp and ALPN route TLS clients too; they are tried in priority
// order alongside the SNI maps.
func TestTLSRegexpAndALPN(t *testing.T) {
	a := startTLSBackend(t, "A", "a.test")
	b := startTLSBackend(t, "B", "b.test")
	s := newTestServer(t, "tls")
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"regexp": passthrough("HostSNIRegexp(`^r[0-9]+\\.test$`)", "b"),
			"alpn":   passthrough("ALPN(`imap`)", "a"),
			"exact":  passthrough("HostSNI(`r1.test`)", "a"),
		},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr()), "b": lbConfig(b.addr())},
	})
	skip := func(protos ...string) func(*tls.Config) {
		return func(c *tls.Config) { c.InsecureSkipVerify = true; c.NextProtos = protos }
	}
	addr := s.addr("tls")
	for _, tc := range []struct {
		sni   string
		alpn  []string
		want  string
		about string
	}{
		{"r7.test", nil, "B", "regexp"},
		{"R7.TEST", nil, "B", "regexp on the lower-cased name"},
		{"r1.test", nil, "B", "the longer regexp rule outranks HostSNI(`r1.test`) by Traefik's rule-length default"},
		{"other.test", []string{"h2", "imap"}, "A", "ALPN"},
		{"other.test", []string{"h2"}, "closed", "no route"},
	} {
		if got := tlsGreeting(t, addr, tc.sni, nil, skip(tc.alpn...), nil); got != tc.want {
			t.Errorf("%s (sni %q, alpn %q): reached %q, want %q", tc.about, tc.sni, tc.alpn, got, tc.want)
		}
	}
}
