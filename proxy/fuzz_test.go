package proxy

import (
	"bytes"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// go test ./proxy -run TestWriteFuzzSeeds -update-fuzz-seeds rewrites the
// seed corpora under testdata/fuzz from real tls.Client hellos and
// go-proxyproto headers.
var updateFuzzSeeds = flag.Bool("update-fuzz-seeds", false, "rewrite testdata/fuzz seed corpora")

// helloSeeds are ClientHellos as clients send them, and things that are not.
func helloSeeds(t testing.TB) [][]byte {
	plain := clientHello(t, &tls.Config{ServerName: "db.example.com"})
	alpn := clientHello(t, &tls.Config{ServerName: "X.Example.COM", NextProtos: []string{"h2", "http/1.1"}})
	tls12 := clientHello(t, &tls.Config{ServerName: "a.test", MaxVersion: tls.VersionTLS12})
	noSNI := clientHello(t, &tls.Config{InsecureSkipVerify: true})
	big := clientHello(t, cfgWith("big.test", longALPN(70)))
	return [][]byte{
		plain, alpn, tls12, noSNI, big,
		reframe(alpn, 17),
		append(slices.Clone(plain), "GET / HTTP/1.1\r\n"...),
		plain[:len(plain)/2],
		[]byte("SSH-2.0-OpenSSH_9.6\r\n"),
		{0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00},
		{0x16},
	}
}

// proxySeeds are PROXY headers go-proxyproto writes, followed by payloads.
func proxySeeds(t testing.TB) [][]byte {
	tcp4 := ppHeader(t, 1, "198.51.100.7:4000", "192.0.2.1:5432")
	tcp6 := ppHeader(t, 1, "[2001:db8::7]:4000", "[2001:db8::1]:443")
	v2 := ppHeader(t, 2, "198.51.100.7:4000", "192.0.2.1:5432")
	v26 := ppHeader(t, 2, "[::ffff:198.51.100.7]:4000", "[2001:db8::1]:443")
	local, _ := (&proxyproto.Header{Version: 2, Command: proxyproto.LOCAL, TransportProtocol: proxyproto.UNSPEC}).Format()
	udp, _ := proxyproto.HeaderProxyFromAddrs(2, &net.UDPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 53}, &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 53}).Format()
	tlv := &proxyproto.Header{Version: 2, Command: proxyproto.PROXY, TransportProtocol: proxyproto.TCPv4,
		SourceAddr: &net.TCPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 1}, DestinationAddr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 2}}
	_ = tlv.SetTLVs([]proxyproto.TLV{{Type: proxyproto.PP2_TYPE_AUTHORITY, Value: []byte("db.example.com")}})
	withTLV, _ := tlv.Format()
	hello := clientHello(t, &tls.Config{ServerName: "db.example.com"})
	return [][]byte{
		tcp4, tcp6, v2, v26, local, udp, withTLV,
		append(slices.Clone(tcp4), "payload"...),
		append(slices.Clone(v2), hello...),
		[]byte("PROXY UNKNOWN\r\n"),
		[]byte("PROXY TCP4 198.51.100.7 192.0.2.1 4000\r\n"),
		v2[:20],
		[]byte("hello, no header"),
	}
}

func TestWriteFuzzSeeds(t *testing.T) {
	if !*updateFuzzSeeds {
		t.Skip("run with -update-fuzz-seeds to rewrite testdata/fuzz")
	}
	write := func(target string, seeds [][]byte, args func([]byte) string) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := "go test fuzz v1\n" + args(s)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("FuzzPeekHello", helloSeeds(t), func(b []byte) string {
		return fmt.Sprintf("[]byte(%q)\nuint8(%d)\n", b, len(b)%13+1)
	})
	write("FuzzProxyHeader", proxySeeds(t), func(b []byte) string {
		return fmt.Sprintf("[]byte(%q)\nbool(%v)\n", b, len(b)%2 == 0)
	})
}

// FuzzPeekHello feeds arbitrary first bytes to the ClientHello reader, whole
// and in chunks of every size. It must not panic, must read only a prefix of
// its input within the cap, must agree with itself however the bytes are
// split, and must only report lower-case ASCII server names.
func FuzzPeekHello(f *testing.F) {
	for i, s := range helloSeeds(f) {
		f.Add(s, uint8(i%13+1))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		whole, errWhole := readHello(bytes.NewReader(data), nil, maxHelloBytes)
		n := int(chunk)%64 + 1
		split, errSplit := readHello(&chunkReader{r: bytes.NewReader(data), n: n}, nil, maxHelloBytes)
		k := min(int(chunk)%8, len(data))
		prior, errPrior := readHello(bytes.NewReader(data[k:]), slices.Clone(data[:k]), maxHelloBytes)

		for _, h := range []hello{whole, split, prior} {
			if len(h.peeked) > maxHelloBytes {
				t.Fatalf("peeked %d bytes, over the %d cap", len(h.peeked), maxHelloBytes)
			}
			if !bytes.HasPrefix(data, h.peeked) {
				t.Fatalf("peeked bytes are not a prefix of the input")
			}
		}
		if (errWhole == nil) != (errSplit == nil) || (errWhole == nil) != (errPrior == nil) {
			t.Fatalf("whole: %v, %d-byte chunks: %v, %d bytes prior: %v", errWhole, n, errSplit, k, errPrior)
		}
		if errWhole != nil {
			return
		}
		for _, h := range []hello{split, prior} {
			if h.tls != whole.tls || h.sni != whole.sni || !slices.Equal(h.alpn, whole.alpn) {
				t.Fatalf("split reads gave %q %q, whole gave %q %q", h.sni, h.alpn, whole.sni, whole.alpn)
			}
		}
		if whole.tls != (data[0] == recordTypeHandshake) {
			t.Fatalf("tls=%v for first byte %#x", whole.tls, data[0])
		}
		if !isASCII(whole.sni) || whole.sni != strings.ToLower(whole.sni) || strings.HasSuffix(whole.sni, ".") {
			t.Fatalf("server name %q is not lower-case ASCII without a trailing dot", whole.sni)
		}
		if !whole.tls && (whole.sni != "" || len(whole.peeked) == 0) {
			t.Fatalf("plain client: sni %q, %d bytes peeked", whole.sni, len(whole.peeked))
		}
	})
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzProxyHeader feeds arbitrary first bytes to the PROXY-header step of
// the pre-routing decision, as trusted and untrusted sender, then hands what
// follows to the ClientHello reader as the entry point does. It must not
// panic; the bytes kept for the backend must be exactly those past the
// header; an untrusted sender never changes the client; a trusted header's
// addresses are unmapped and survive being written out again (PROXY out).
func FuzzProxyHeader(f *testing.F) {
	for i, s := range proxySeeds(f) {
		f.Add(s, i%2 == 0)
	}
	peer := netip.MustParseAddrPort("127.0.0.9:40000")
	local := netip.MustParseAddrPort("127.0.0.1:5432")
	f.Fuzz(func(t *testing.T, data []byte, trusted bool) {
		c := &tcp.Conn{Client: peer, Local: local}
		p := preroute{pp: true, trusted: trusted}
		out, _ := p.step(data, true, c)
		if out != preRoute {
			return
		}
		hdrLen := p.hdrEnd
		if hdrLen < 0 || hdrLen > len(data) {
			t.Fatalf("header of %d bytes in %d", hdrLen, len(data))
		}
		if hdrLen > 0 && !bytes.HasPrefix(data, proxyproto.SIGV1) && !bytes.HasPrefix(data, proxyproto.SIGV2) {
			t.Fatalf("consumed %d bytes without a PROXY signature", hdrLen)
		}
		if !trusted && (c.Client != peer || c.Local != local) {
			t.Fatalf("untrusted header changed the client to %v -> %v", c.Client, c.Local)
		}
		if c.Client.Addr().Is4In6() || c.Local.Addr().Is4In6() {
			t.Fatalf("addresses %v -> %v are not unmapped", c.Client, c.Local)
		}
		if c.Client != peer {
			for _, ver := range []byte{1, 2} {
				out, err := proxyproto.HeaderProxyFromAddrs(ver, tcpAddr(c.Client), tcpAddr(c.Local)).Format()
				if err != nil {
					t.Fatalf("v%d header for %v -> %v: %v", ver, c.Client, c.Local, err)
				}
				back := &tcp.Conn{Client: peer, Local: local}
				bp := preroute{pp: true, trusted: true}
				if o, err := bp.step(out, true, back); o != preRoute || back.Client != c.Client || back.Local != c.Local {
					t.Fatalf("v%d round trip of %v -> %v gave %v -> %v, %v", ver, c.Client, c.Local, back.Client, back.Local, err)
				}
			}
		}
		// The entry point peeks the hello from what is left.
		h, _ := readHello(bytes.NewReader(nil), slices.Clone(data[hdrLen:]), maxHelloBytes)
		if !bytes.HasPrefix(data[hdrLen:], h.peeked) {
			t.Fatal("hello bytes after the header are not a prefix of what followed it")
		}
	})
}

// FuzzPostgresPreamble: pgPreamble never panics, and says pgSSL or
// pgGSSENC exactly for an input starting with the 8 request bytes, pgMore
// exactly for a proper prefix of them.
func FuzzPostgresPreamble(f *testing.F) {
	f.Add(pgSSLRequest)
	f.Add(pgGSSENCRequest)
	f.Add(pgSSLRequest[:3])
	f.Add([]byte{0, 0, 0, 8, 4, 210, 22, 47, 0x16, 3, 1})
	f.Add([]byte{0, 0, 0, 9})
	f.Add([]byte{0x16, 3, 1, 0, 5})
	f.Fuzz(func(t *testing.T, b []byte) {
		k := pgPreamble(b)
		startsWith := func(req []byte) bool { return len(b) >= 8 && bytes.Equal(b[:8], req) }
		prefixOf := func(req []byte) bool { return len(b) < 8 && bytes.Equal(b, req[:len(b)]) }
		switch {
		case startsWith(pgSSLRequest) != (k == pgSSL):
			t.Fatalf("%x: %d", b, k)
		case startsWith(pgGSSENCRequest) != (k == pgGSSENC):
			t.Fatalf("%x: %d", b, k)
		case (prefixOf(pgSSLRequest) || prefixOf(pgGSSENCRequest)) != (k == pgMore):
			t.Fatalf("%x: %d", b, k)
		}
	})
}
