package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// dialSrc connects to addr from source IP src.
func dialSrc(t testing.TB, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	return c
}

// dialOrReset connects to addr from src; it returns nil when the proxy reset
// the connection before connect returned (a rejection at accept).
func dialOrReset(t testing.TB, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	return c
}

// stillOpen reports whether the proxy has neither closed nor reset c: a read
// that waits for wait without an answer.
func stillOpen(c net.Conn, wait time.Duration) bool {
	if c == nil {
		return false
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tlsFrom completes a TLS handshake with serverName from source IP src and
// returns the backend's one-byte banner, or "closed".
func tlsFrom(t testing.TB, src, addr, serverName string, roots *x509.CertPool) string {
	t.Helper()
	raw := dialSrc(t, src, addr)
	defer raw.Close()
	c := tls.Client(raw, &tls.Config{ServerName: serverName, RootCAs: roots})
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		return "closed"
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return "closed"
	}
	return string(b[:])
}

// Issue 10.1: on an entry point that reads before routing, one client IP can
// hold at most maxUnroutedPerIP connections that have not sent their
// ClientHello; the rest are refused at accept, counted, and another IP is
// served meanwhile. Closing the silent ones frees their slots.
func TestUnroutedBoundPerIP(t *testing.T) {
	const bound = 5
	a := startTLSBackend(t, "A", "a.test")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.Transport.RespondingTimeouts.ReadTimeout = config.Duration(10 * time.Second)
		ep.Transport.MaxUnroutedPerIP = bound
	}, "tls")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"a": passthrough("HostSNI(`a.test`)", "a")},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr())},
	})
	ep, addr := s.EntryPoint("tls"), s.addr("tls")
	var silent []net.Conn
	defer func() { closeAll(silent) }()
	for i := 0; i < 4*bound; i++ {
		if c := dialOrReset(t, "127.0.0.5", addr); c != nil {
			silent = append(silent, c)
		}
	}
	waitFor(t, "the bound to refuse the extra connections", func() bool {
		u := ep.Unrouted(10)
		return u.Connections == bound && u.Rejected == 3*bound
	})
	open := 0
	for _, c := range silent {
		if stillOpen(c, 50*time.Millisecond) {
			open++
		}
	}
	if open != bound {
		t.Fatalf("%d silent connections from one IP still open, want the bound %d", open, bound)
	}
	u := ep.Unrouted(10)
	if u.Clients != 1 || len(u.Top) != 1 || u.Top[0].IP != "127.0.0.5" || u.Top[0].Count != bound {
		t.Fatalf("unrouted state %+v, want 127.0.0.5 holding %d", u, bound)
	}
	if got := tlsFrom(t, "127.0.0.6", addr, "a.test", mergePools(a)); got != "A" {
		t.Fatalf("a client from another IP reached %q while 127.0.0.5 held its bound, want A", got)
	}
	closeAll(silent)
	silent = nil
	waitFor(t, "the silent connections' slots to be freed", func() bool { return ep.Unrouted(0).Connections == 0 })
	if got := tlsFrom(t, "127.0.0.5", addr, "a.test", mergePools(a)); got != "A" {
		t.Fatalf("127.0.0.5 after closing its silent connections reached %q, want A", got)
	}
	if n := ep.unrouted.Entries(); n != 0 {
		t.Fatalf("%d unrouted entries left, want 0", n)
	}
}

// A sender trusted for PROXY protocol speaks for many clients: it is not
// bound as one. Its connections are bound under the client each header names
// while they wait for their ClientHello.
func TestUnroutedBoundTrustedSender(t *testing.T) {
	const bound = 3
	a := startTLSBackend(t, "A", "a.test")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.ProxyProtocol = &config.EntryPointProxyProto{TrustedIPs: []string{"127.0.0.2"}}
		ep.Transport.RespondingTimeouts.ReadTimeout = config.Duration(10 * time.Second)
		ep.Transport.MaxUnroutedPerIP = bound
	}, "pp")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"a": passthrough("HostSNI(`a.test`)", "a")},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr())},
	})
	ep, addr := s.EntryPoint("pp"), s.addr("pp")
	var conns []net.Conn
	defer func() { closeAll(conns) }()
	send := func(src, claimed string) net.Conn {
		c := dialOrReset(t, src, addr)
		if c == nil {
			return nil
		}
		conns = append(conns, c)
		if _, err := c.Write(itest.ProxyHeader(t, 2, claimed+":1000", "192.0.2.1:443")); err != nil {
			return nil // reset at accept
		}
		return c
	}
	// Ten different clients through the trusted sender: none refused.
	for i := 0; i < 10; i++ {
		send("127.0.0.2", fmt.Sprintf("198.51.100.%d", i+1))
	}
	waitFor(t, "ten clients behind the trusted sender to wait for their hellos", func() bool { return ep.Unrouted(0).Connections == 10 })
	// Ten connections of one client through it: the bound holds for that client.
	var same []net.Conn
	for i := 0; i < 10; i++ {
		same = append(same, send("127.0.0.2", "203.0.113.9"))
	}
	waitFor(t, "the bound to refuse the extra connections of one claimed client", func() bool {
		return ep.Unrouted(0).Rejected == 10-bound
	})
	open := 0
	for _, c := range same {
		if stillOpen(c, 50*time.Millisecond) {
			open++
		}
	}
	if open != bound {
		t.Fatalf("%d connections of one claimed client open, want %d", open, bound)
	}
	// An untrusted sender is bound as itself, whatever its headers claim.
	var untrusted []net.Conn
	for i := 0; i < 10; i++ {
		untrusted = append(untrusted, send("127.0.0.3", fmt.Sprintf("198.51.100.%d", 100+i)))
	}
	open = 0
	for _, c := range untrusted {
		if stillOpen(c, 50*time.Millisecond) {
			open++
		}
	}
	if open != bound {
		t.Fatalf("%d connections from an untrusted sender open, want %d", open, bound)
	}
}

// Issue 10.3: a client without a PROXY header whose first bytes are short and
// begin like a signature (Redis's "PING\r\n" starts like v1, "\r\n..." like
// v2) is served as soon as its bytes cannot be a header, not held until the
// read deadline.
func TestProxyProtocolShortClientsNotHeld(t *testing.T) {
	const readTimeout = 3 * time.Second
	be := startBackend(t, "")
	s := ppServer(t, readTimeout)
	apply(s, "file", singleRouter(be.addr(), nil))
	addr := s.addr("pp")
	for _, sender := range []string{"127.0.0.2", "127.0.0.3"} { // trusted and not
		for _, first := range []string{"PING\r\n", "\r\nQUIT\r\n", "PROXIED\r\n", "\r\n\r\n\x00\r\nX", "P\n"} {
			c := dialSrc(t, sender, addr)
			start := time.Now()
			_ = c.SetDeadline(time.Now().Add(readTimeout + time.Second))
			if _, err := c.Write([]byte(first)); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(first))
			_, err := io.ReadFull(c, got)
			el := time.Since(start)
			_ = c.Close()
			if err != nil || string(got) != first {
				t.Fatalf("from %s, %q: echoed %q, %v", sender, first, got, err)
			}
			if el > readTimeout/3 {
				t.Fatalf("from %s, %q: echoed after %v, want at once (read timeout %v)", sender, first, el, readTimeout)
			}
		}
	}
}

// fragmentedWrite writes b in pieces cut at random points, pausing up to
// maxPause between them.
func fragmentedWrite(c net.Conn, b []byte, rng *rand.Rand, maxPause time.Duration) error {
	for len(b) > 0 {
		n := 1 + rng.IntN(min(len(b), 24))
		if _, err := c.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
		if maxPause > 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(maxPause))))
		}
	}
	return nil
}

// Issue 10.3: a trusted sender's header (v1, v2, v2 with TLVs) and the
// ClientHello behind it, delivered through a real socket in random fragments
// with random pauses, are assembled under the deadline: the connection is
// routed as the client the header names, and the backend gets exactly the
// client's bytes.
func TestProxyHeaderAndHelloInFragments(t *testing.T) {
	a := startTLSBackend(t, "A", "a.test")
	claimed := startBackend(t, "C") // plain route for the claimed client
	other := startBackend(t, "O")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.ProxyProtocol = &config.EntryPointProxyProto{TrustedIPs: []string{"127.0.0.2"}}
		ep.Transport.RespondingTimeouts.ReadTimeout = config.Duration(5 * time.Second)
		ep.Transport.RespondingTimeouts.ServerFirstTimeout = config.Duration(2 * time.Second)
	}, "pp")
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"a":       passthrough("HostSNI(`a.test`) && ClientIP(`198.51.100.7`)", "a"),
			"claimed": {Rule: "ClientIP(`198.51.100.7`)", Service: "claimed"},
			"other":   {Rule: "HostSNI(`*`)", Service: "other", Priority: 1},
		},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr()), "claimed": lbConfig(claimed.addr()), "other": lbConfig(other.addr())},
	})
	addr := s.addr("pp")
	tlv := &proxyproto.Header{Version: 2, Command: proxyproto.PROXY, TransportProtocol: proxyproto.TCPv4,
		SourceAddr: &net.TCPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 1}, DestinationAddr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 2}}
	if err := tlv.SetTLVs([]proxyproto.TLV{{Type: proxyproto.PP2_TYPE_AUTHORITY, Value: []byte("db.example.com")}}); err != nil {
		t.Fatal(err)
	}
	withTLV, err := tlv.Format()
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string][]byte{
		"v1":      itest.ProxyHeader(t, 1, "198.51.100.7:4000", "192.0.2.1:5432"),
		"v2":      itest.ProxyHeader(t, 2, "198.51.100.7:4000", "192.0.2.1:5432"),
		"v2+tlv":  withTLV,
		"v1-ipv6": itest.ProxyHeader(t, 1, "[::ffff:198.51.100.7]:4000", "[2001:db8::1]:5432"),
	}
	rng := rand.New(rand.NewPCG(10, 3))
	for name, hdr := range headers {
		for i := 0; i < 6; i++ {
			// Plain payload: the claimed client's route, payload intact.
			c := dialSrc(t, "127.0.0.2", addr)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			payload := []byte(fmt.Sprintf("hello %s %d", name, i))
			if err := fragmentedWrite(c, append(slices.Clone(hdr), payload...), rng, 15*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 1+len(payload))
			if _, err := io.ReadFull(c, got); err != nil || got[0] != 'C' || !bytes.Equal(got[1:], payload) {
				t.Fatalf("%s #%d: got %q, %v; want banner C and the payload back", name, i, got, err)
			}
			_ = c.Close()
		}
		// A TLS client behind the header, hello fragmented too.
		c := dialSrc(t, "127.0.0.2", addr)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fc := &randFragConn{Conn: c, rng: rng, pause: 10 * time.Millisecond}
		if err := fragmentedWrite(c, hdr, rng, 15*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(fc, &tls.Config{ServerName: "a.test", RootCAs: mergePools(a)})
		var b [1]byte
		if err := tc.Handshake(); err != nil {
			t.Fatalf("%s: TLS handshake behind a fragmented header: %v", name, err)
		}
		if _, err := io.ReadFull(tc, b[:]); err != nil || b[0] != 'A' {
			t.Fatalf("%s: TLS client reached %q, %v; want A", name, b[:], err)
		}
		_ = c.Close()
	}
}

// randFragConn writes in random fragments with random pauses.
type randFragConn struct {
	net.Conn
	rng   *rand.Rand
	pause time.Duration
}

func (f *randFragConn) Write(b []byte) (int, error) {
	if err := fragmentedWrite(f.Conn, b, f.rng, f.pause); err != nil {
		return 0, err
	}
	return len(b), nil
}

// FuzzPreroute: the pre-routing decision reached from bytes that arrive in
// fragments (cut where cuts says, as reads from a socket return them) is the
// one reached from all of them at once: the same outcome, header, client and
// SNI; a fragment never makes it route earlier on less than it needs. It
// must not panic on anything.
func FuzzPreroute(f *testing.F) {
	for i, s := range itest.ProxySeeds(f) {
		f.Add(s, []byte{byte(i), 3, 1, 7}, i%2 == 0, i%3 == 0)
	}
	for i, s := range itest.HelloSeeds(f) {
		f.Add(append(itest.ProxyHeader(f, 2, "198.51.100.7:4000", "192.0.2.1:443"), s...), []byte{byte(i + 1), 16, 5}, true, true)
		f.Add(s, []byte{9, 40, 2}, false, true)
	}
	f.Add([]byte("PING\r\n"), []byte{1, 1, 1}, true, true)
	peer := netip.MustParseAddrPort("127.0.0.9:40000")
	local := netip.MustParseAddrPort("127.0.0.1:5432")
	f.Fuzz(func(t *testing.T, data, cuts []byte, trusted, peek bool) {
		if len(data) > 64<<10 {
			return
		}
		whole := &tcp.Conn{Client: peer, Local: local}
		pw := preroute{pp: true, trusted: trusted, peek: peek}
		outW, _ := pw.step(data, true, whole)

		frag := &tcp.Conn{Client: peer, Local: local}
		pf := preroute{pp: true, trusted: trusted, peek: peek}
		outF, at := preWait, 0
		for i := 0; outF == preWait && at < len(data); i++ {
			n := len(data) - at
			if i < len(cuts) && cuts[i] > 0 {
				n = min(n, int(cuts[i]))
			}
			at += n
			outF, _ = pf.step(data[:at], false, frag)
		}
		if outF == preWait {
			outF, _ = pf.step(data, true, frag)
		}
		if outF != outW {
			t.Fatalf("in fragments %v: %v; all at once: %v", cuts, outF, outW)
		}
		if outW != preRoute {
			return
		}
		if pf.hdrEnd != pw.hdrEnd || frag.Client != whole.Client || frag.Local != whole.Local || frag.SNI != whole.SNI {
			t.Fatalf("in fragments: header %d, %v -> %v, SNI %q; at once: header %d, %v -> %v, SNI %q",
				pf.hdrEnd, frag.Client, frag.Local, frag.SNI, pw.hdrEnd, whole.Client, whole.Local, whole.SNI)
		}
		if !trusted && whole.Client != peer {
			t.Fatalf("an untrusted header changed the client to %v", whole.Client)
		}
	})
}

// Issue 10.4: out of file descriptors, accepts fail, succeed once for each
// descriptor freed, and fail again. The pause keeps growing through those
// successes while the same error repeats; a different error or a quiet
// second starts it again from 5 ms.
func TestAcceptBackoffPersistsAcrossSuccesses(t *testing.T) {
	var b acceptBackoff
	emfile := errors.New("accept4: too many open files")
	now := time.Unix(1000, 0)
	var pauses []time.Duration
	for i := 0; i < 10; i++ {
		d := b.failed(emfile, now)
		pauses = append(pauses, d)
		now = now.Add(d + time.Millisecond) // a successful accept happens in between
	}
	want := []int{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		if pauses[i] != time.Duration(want[i])*time.Millisecond {
			t.Fatalf("pauses %v, want %v ms", pauses, want)
		}
	}
	if d := b.failed(errors.New("accept4: software caused connection abort"), now); d != 5*time.Millisecond {
		t.Fatalf("a different error paused %v, want 5ms", d)
	}
	b.failed(emfile, now)
	if d := b.failed(emfile, now.Add(3*time.Second)); d != 5*time.Millisecond {
		t.Fatalf("after a quiet period the pause was %v, want 5ms", d)
	}
}

// FuzzPrerouteStartTLS is FuzzPreroute on an entry point where a router
// terminates TLS: PostgreSQL's SSLRequest (and GSSENCRequest) are answered
// (preAnswer) and stepped past, in fragments as at once, to the same
// outcome, the same requests skipped and the same SNI.
func FuzzPrerouteStartTLS(f *testing.F) {
	for i, s := range itest.HelloSeeds(f) {
		f.Add(append(append([]byte{}, sniff.SSLRequest...), s...), []byte{byte(i + 1), 3, 5})
		f.Add(append(append(append([]byte{}, sniff.GSSENCRequest...), sniff.SSLRequest...), s...), []byte{1, 7, 9})
		f.Add(s, []byte{9, 40, 2})
	}
	f.Add(sniff.SSLRequest[:5], []byte{2, 2})
	f.Add([]byte{0, 0, 0, 8, 4, 210, 22, 47, 'x'}, []byte{8, 1})
	peer := netip.MustParseAddrPort("127.0.0.9:40000")
	run := func(p *preroute, c *tcp.Conn, data []byte, eof bool) preOutcome {
		out, _ := p.step(data, eof, c)
		for n := 0; out == preAnswer && n < 4; n++ {
			out, _ = p.step(data, eof, c)
		}
		return out
	}
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		if len(data) > 64<<10 {
			return
		}
		whole := &tcp.Conn{Client: peer}
		pw := preroute{peek: true, starttls: true}
		outW := run(&pw, whole, data, true)

		frag := &tcp.Conn{Client: peer}
		pf := preroute{peek: true, starttls: true}
		outF, at := preWait, 0
		for i := 0; outF == preWait && at < len(data); i++ {
			n := len(data) - at
			if i < len(cuts) && cuts[i] > 0 {
				n = min(n, int(cuts[i]))
			}
			at += n
			outF = run(&pf, frag, data[:at], false)
		}
		if outF == preWait {
			outF = run(&pf, frag, data, true)
		}
		if outF == preAnswer || outW == preAnswer {
			t.Fatalf("more than four answers: %v %v", outF, outW)
		}
		if outF != outW {
			t.Fatalf("in fragments %v: %v; all at once: %v", cuts, outF, outW)
		}
		if outW == preRoute && (pf.pgSkip != pw.pgSkip || frag.SNI != whole.SNI) {
			t.Fatalf("in fragments: skipped %d, SNI %q; at once: %d, %q", pf.pgSkip, frag.SNI, pw.pgSkip, whole.SNI)
		}
	})
}
