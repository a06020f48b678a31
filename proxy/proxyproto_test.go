package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// ppServer has one entry point "pp" that believes PROXY headers from
// 127.0.0.2 only.
func ppServer(t testing.TB, readTimeout time.Duration) *Server {
	return newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.ProxyProtocol = &config.EntryPointProxyProto{TrustedIPs: []string{"127.0.0.2/32"}}
		if readTimeout > 0 {
			ep.Transport.RespondingTimeouts.ReadTimeout = config.Duration(readTimeout)
		}
	}, "pp")
}

// sendFirst connects from src, writes pre then a ping byte in one write, and
// reports whether the echo backend answered with exactly the ping: a header
// that leaked to the backend would come back first and fail the check.
func sendFirst(t testing.TB, src, addr string, pre []byte) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(append(append([]byte(nil), pre...), 'x')); err != nil {
		_ = c.Close()
		return nil, false
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'x' {
		_ = c.Close()
		return nil, false
	}
	_ = c.SetDeadline(time.Time{})
	return c, true
}

// Acceptance: from a trusted sender, 15 connections claiming 5 sources × 3
// with amount 2 admit exactly 10, 2 per claimed source; the same headers from
// an untrusted sender are keyed on the real peer (2 in all) and stripped.
func TestProxyProtocolInFlightConn(t *testing.T) {
	be := startBackend(t, "")
	s := ppServer(t, 0)
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"two": limitMW(2)}, "two"))
	addr := s.addr("pp")

	run := func(sender string) map[string]int {
		admitted := map[string]int{}
		var held []net.Conn
		defer func() { closeAll(held) }()
		for i := 0; i < 15; i++ {
			claimed := fmt.Sprintf("198.51.100.%d", i%5+1)
			ver := byte(1 + i%2) // v1 and v2 alike
			hdr := itest.ProxyHeader(t, ver, claimed+":4000", "192.0.2.1:5432")
			if c, ok := sendFirst(t, sender, addr, hdr); ok {
				admitted[claimed]++
				held = append(held, c)
			}
		}
		return admitted
	}
	trusted := run("127.0.0.2")
	total := 0
	for src, n := range trusted {
		total += n
		if n != 2 {
			t.Errorf("trusted sender: claimed source %s admitted %d times, want 2", src, n)
		}
	}
	if total != 10 || len(trusted) != 5 {
		t.Fatalf("trusted sender: admitted %v (total %d), want 2 for each of 5 sources", trusted, total)
	}
	waitFor(t, "the trusted connections to close", func() bool { return s.EntryPoint("pp").Open() == 0 })

	untrusted := run("127.0.0.3")
	total = 0
	for _, n := range untrusted {
		total += n
	}
	if total != 2 {
		t.Fatalf("untrusted sender: admitted %v (total %d), want 2 keyed on 127.0.0.3", untrusted, total)
	}
}

// ClientIP and the allow list see the PROXY source from a trusted sender only.
func TestProxyProtocolClientIPAndAllowList(t *testing.T) {
	a := startBackend(t, "A")
	b := startBackend(t, "B")
	s := ppServer(t, 0)
	apply(s, "file", &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"all":     {Rule: "HostSNI(`*`)", Service: "a", Middlewares: []string{"allow"}},
			"claimed": {Rule: "ClientIP(`198.51.100.0/24`)", Service: "b", Middlewares: []string{"allow"}},
		},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr()), "b": lbConfig(b.addr())},
		Middlewares: map[string]*config.TCPMiddleware{
			"allow": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"198.51.100.0/24", "127.0.0.3"}}},
		},
	})
	addr := s.addr("pp")
	for _, tc := range []struct {
		sender, claimed, want string
	}{
		{"127.0.0.2", "198.51.100.7", "B"},     // trusted: routed and allowed as the claimed client
		{"127.0.0.2", "203.0.113.9", "closed"}, // trusted: the claimed client is not allowed
		{"127.0.0.3", "198.51.100.7", "A"},     // untrusted: the peer is the client
		{"127.0.0.4", "198.51.100.7", "closed"},
	} {
		got := greetingAfter(t, tc.sender, addr, itest.ProxyHeader(t, 2, tc.claimed+":1234", "192.0.2.1:80"))
		if got != tc.want {
			t.Errorf("from %s claiming %s: reached %q, want %q", tc.sender, tc.claimed, got, tc.want)
		}
	}
}

// greetingAfter connects from src, sends pre, and returns the backend's
// one-byte banner or "closed".
func greetingAfter(t testing.TB, src, addr string, pre []byte) string {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(pre); err != nil {
		return "closed"
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return "closed"
	}
	return string(b[:])
}

// A malformed or unfinished header closes the connection; a silent client is
// served as one without a header once the deadline passes (servers that
// speak first still work behind a PROXY-enabled entry point).
func TestProxyProtocolBadAndMissingHeaders(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	banner := startBackend(t, "S")
	s := ppServer(t, readTimeout)
	apply(s, "file", singleRouter(banner.addr(), nil))
	addr := s.addr("pp")
	for _, tc := range []struct {
		name, sender string
		pre          []byte
		want         string
	}{
		{"malformed v1, trusted", "127.0.0.2", []byte("PROXY TCP4 nonsense\r\n"), "closed"},
		{"malformed v1, untrusted", "127.0.0.3", []byte("PROXY TCP4 nonsense\r\n"), "closed"},
		{"unfinished header", "127.0.0.2", []byte("PROXY TCP4 198.51"), "closed"},
		{"v2 signature, bad command", "127.0.0.2", append(append([]byte(nil), proxyproto.SIGV2...), 0x2f, 0x11, 0, 12), "closed"},
		{"silent client", "127.0.0.2", nil, "S"},
		{"no header, client speaks first", "127.0.0.3", []byte("hello"), "S"},
	} {
		start := time.Now()
		got := greetingAfter(t, tc.sender, addr, tc.pre)
		if got != tc.want {
			t.Errorf("%s: reached %q, want %q", tc.name, got, tc.want)
		}
		if el := time.Since(start); el > readTimeout+2*time.Second {
			t.Errorf("%s: took %v, want the read timeout to bound it", tc.name, el)
		}
	}
}

// proxyBackend reads the PROXY header tollgate sends, records it, then echoes.
type proxyBackend struct {
	ln      *itest.Backend
	mu      sync.Mutex
	headers []*proxyproto.Header
}

func startProxyBackend(t testing.TB) *proxyBackend {
	t.Helper()
	b := &proxyBackend{}
	b.ln = itest.StartBackend(t, nil, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		h, err := proxyproto.Read(br)
		if err != nil {
			return
		}
		b.mu.Lock()
		b.headers = append(b.headers, h)
		b.mu.Unlock()
		_, _ = io.Copy(c, br)
	})
	return b
}

func (b *proxyBackend) last() *proxyproto.Header {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.headers) == 0 {
		return nil
	}
	return b.headers[len(b.headers)-1]
}

// Acceptance: the backend reads a v1 and a v2 header naming the real client
// address and port; behind a trusted PROXY sender, the claimed client.
func TestProxyProtocolOut(t *testing.T) {
	for _, ver := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", ver), func(t *testing.T) {
			be := startProxyBackend(t)
			s := ppServer(t, 0)
			svc := lbConfig(be.ln.Addr())
			svc.LoadBalancer.ProxyProtocol = &config.ProxyProtocol{Version: ver}
			apply(s, "file", &config.TCPConfiguration{
				Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}},
				Services: map[string]*config.TCPService{"s": svc},
			})
			addr := s.addr("pp")

			c, ok := sendFirst(t, "127.0.0.5", addr, nil)
			if !ok {
				t.Fatal("connection not forwarded")
			}
			client := c.LocalAddr().(*net.TCPAddr).AddrPort()
			c.Close()
			checkHeader(t, be.last(), byte(ver), client, netip.MustParseAddrPort(addr))

			// Behind a trusted sender the backend learns the claimed client.
			claimed := netip.MustParseAddrPort("198.51.100.23:61000")
			dst := netip.MustParseAddrPort("192.0.2.80:5432")
			c, ok = sendFirst(t, "127.0.0.2", addr, itest.ProxyHeader(t, 2, claimed.String(), dst.String()))
			if !ok {
				t.Fatal("connection with a trusted PROXY header not forwarded")
			}
			c.Close()
			checkHeader(t, be.last(), byte(ver), claimed, dst)
		})
	}
}

func checkHeader(t *testing.T, h *proxyproto.Header, ver byte, src, dst netip.AddrPort) {
	t.Helper()
	if h == nil {
		t.Fatal("backend read no PROXY header")
	}
	gotSrc, _ := h.SourceAddr.(*net.TCPAddr)
	gotDst, _ := h.DestinationAddr.(*net.TCPAddr)
	if h.Version != ver || gotSrc == nil || gotDst == nil ||
		unmapAP(gotSrc.AddrPort()) != src || unmapAP(gotDst.AddrPort()) != dst {
		t.Fatalf("backend read v%d %v -> %v, want v%d %v -> %v", h.Version, h.SourceAddr, h.DestinationAddr, ver, src, dst)
	}
}

// A trusted header followed by a ClientHello in the same segment routes by
// SNI and claimed client, and only the hello is replayed (the backend
// completes the handshake).
func TestProxyProtocolThenTLS(t *testing.T) {
	a := startTLSBackend(t, "A", "a.test")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.ProxyProtocol = &config.EntryPointProxyProto{TrustedIPs: []string{"127.0.0.1"}}
	}, "pp")
	apply(s, "file", &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"a": passthrough("HostSNI(`a.test`) && ClientIP(`198.51.100.1`)", "a")},
		Services: map[string]*config.TCPService{"a": lbConfig(a.addr())},
	})
	for _, tc := range []struct {
		claimed, want string
	}{
		{"198.51.100.1", "A"},
		{"198.51.100.2", "closed"},
	} {
		hdr := itest.ProxyHeader(t, 1, tc.claimed+":1000", "192.0.2.1:443")
		prepend := func(c net.Conn) net.Conn { return &prefixConn{Conn: c, prefix: hdr} }
		if got := tlsGreeting(t, s.addr("pp"), "a.test", mergePools(a), nil, prepend); got != tc.want {
			t.Errorf("PROXY header claiming %s then a ClientHello for a.test reached %q, want %q", tc.claimed, got, tc.want)
		}
	}
}

// prefixConn sends prefix in the same write as the first write.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Write(b []byte) (int, error) {
	if p.prefix != nil {
		buf := append(p.prefix, b...)
		p.prefix = nil
		if _, err := p.Conn.Write(buf); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return p.Conn.Write(b)
}

// A reload that only changes inFlightConn's ipv6Subnet keeps every count,
// through real sockets: IPv4 clients (127.0.0.x, keyed on the peer) never
// get more than the amount across the changes, IPv6 clients (claimed by a
// trusted PROXY sender) are counted under their new prefix at once, and
// everything returns to zero once the connections close.
func TestInFlightConnIPv6SubnetReload(t *testing.T) {
	be := startBackend(t, "")
	s := ppServer(t, 0)
	cfg := func(bits int) *config.TCPConfiguration {
		mw := limitMW(3)
		if bits > 0 {
			mw.InFlightConn.IPv6Subnet = &bits
		}
		return singleRouter(be.addr(), map[string]*config.TCPMiddleware{"three": mw}, "three")
	}
	apply(s, "file", cfg(0))
	addr := s.addr("pp")
	l := limiterOf(s, "three@file")
	var held []net.Conn
	defer func() { closeAll(held) }()
	v6 := func(src string) (net.Conn, bool) {
		return sendFirst(t, "127.0.0.2", addr, itest.ProxyHeader(t, 2, "["+src+"]:4000", "[2001:db8::ffff]:5432"))
	}
	hold := func(what string, c net.Conn, ok bool) {
		t.Helper()
		if !ok {
			t.Fatalf("%s: refused", what)
		}
		held = append(held, c)
	}
	refused := func(what string, c net.Conn, ok bool) {
		t.Helper()
		if ok {
			c.Close()
			t.Fatalf("%s: admitted past the amount 3", what)
		}
	}
	for i := range 3 {
		c, ok := dialFrom(t, "127.0.0.3", addr)
		hold(fmt.Sprintf("IPv4 connection %d", i+1), c, ok)
	}
	c, ok := v6("2001:db8:1:1::1")
	hold("2001:db8:1:1::1", c, ok)
	c, ok = v6("2001:db8:1:1::1")
	hold("2001:db8:1:1::1 again", c, ok)
	c, ok = v6("2001:db8:1:1::2")
	hold("2001:db8:1:1::2", c, ok)
	for round, bits := range []int{64, 0, 64, 0, 48, 0} {
		apply(s, "file", cfg(bits))
		if got := limiterOf(s, "three@file"); got != l {
			t.Fatalf("change %d (ipv6Subnet %d) replaced the limiter", round+1, bits)
		}
		c, ok := dialFrom(t, "127.0.0.3", addr)
		refused(fmt.Sprintf("change %d (ipv6Subnet %d): a 4th IPv4 connection", round+1, bits), c, ok)
		switch bits {
		case 64, 48: // 2001:db8:1:1::1 (2) and ::2 (1) share one prefix: full
			c, ok := v6("2001:db8:1:1::3")
			refused(fmt.Sprintf("change %d (ipv6Subnet %d): a 4th in 2001:db8:1:1::/%d", round+1, bits, bits), c, ok)
		case 0: // by address: ::1 holds 2 of 3
			c, ok := v6("2001:db8:1:1::1")
			if !ok {
				t.Fatalf("change %d (ipv6Subnet unset): 2001:db8:1:1::1 holding 2 of 3 refused", round+1)
			}
			c.Close()
			waitFor(t, "the extra connection's release", func() bool { return l.Stats().InFlight == 6 })
		}
		if st := l.Stats(); st.InFlight != 6 {
			t.Fatalf("change %d (ipv6Subnet %d): %d in flight, want the 6 held", round+1, bits, st.InFlight)
		}
	}
	closeAll(held)
	held = nil
	waitFor(t, "every count back to zero", func() bool { return l.Stats().InFlight == 0 && l.Entries() == 0 })
	if st := l.Stats(); st.DistinctIPs != 0 {
		t.Fatalf("after every connection closed: %+v", st)
	}
}
