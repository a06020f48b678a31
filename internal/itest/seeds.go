package itest

import (
	"crypto/tls"
	"net"
	"net/netip"
	"slices"
	"testing"

	proxyproto "github.com/pires/go-proxyproto"
)

// ProxyHeader formats a PROXY header of version ver claiming src -> dst.
func ProxyHeader(t testing.TB, ver byte, src, dst string) []byte {
	t.Helper()
	h := proxyproto.HeaderProxyFromAddrs(ver,
		net.TCPAddrFromAddrPort(netip.MustParseAddrPort(src)),
		net.TCPAddrFromAddrPort(netip.MustParseAddrPort(dst)))
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// HelloSeeds are ClientHellos as clients send them, and things that are
// not: the seeds of every fuzz target that reads a client's first bytes.
func HelloSeeds(t testing.TB) [][]byte {
	plain := ClientHello(t, &tls.Config{ServerName: "db.example.com"})
	alpn := ClientHello(t, &tls.Config{ServerName: "X.Example.COM", NextProtos: []string{"h2", "http/1.1"}})
	tls12 := ClientHello(t, &tls.Config{ServerName: "a.test", MaxVersion: tls.VersionTLS12})
	noSNI := ClientHello(t, &tls.Config{InsecureSkipVerify: true})
	big := ClientHello(t, WithSNI("big.test", LongALPN(70)))
	return [][]byte{
		plain, alpn, tls12, noSNI, big,
		Reframe(alpn, 17),
		append(slices.Clone(plain), "GET / HTTP/1.1\r\n"...),
		plain[:len(plain)/2],
		[]byte("SSH-2.0-OpenSSH_9.6\r\n"),
		{0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00},
		{0x16},
	}
}

// ProxySeeds are PROXY headers go-proxyproto writes, followed by payloads,
// and things that are not headers.
func ProxySeeds(t testing.TB) [][]byte {
	tcp4 := ProxyHeader(t, 1, "198.51.100.7:4000", "192.0.2.1:5432")
	tcp6 := ProxyHeader(t, 1, "[2001:db8::7]:4000", "[2001:db8::1]:443")
	v2 := ProxyHeader(t, 2, "198.51.100.7:4000", "192.0.2.1:5432")
	v26 := ProxyHeader(t, 2, "[::ffff:198.51.100.7]:4000", "[2001:db8::1]:443")
	local, _ := (&proxyproto.Header{Version: 2, Command: proxyproto.LOCAL, TransportProtocol: proxyproto.UNSPEC}).Format()
	udp, _ := proxyproto.HeaderProxyFromAddrs(2, &net.UDPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 53}, &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 53}).Format()
	tlv := &proxyproto.Header{Version: 2, Command: proxyproto.PROXY, TransportProtocol: proxyproto.TCPv4,
		SourceAddr: &net.TCPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 1}, DestinationAddr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 2}}
	_ = tlv.SetTLVs([]proxyproto.TLV{{Type: proxyproto.PP2_TYPE_AUTHORITY, Value: []byte("db.example.com")}})
	withTLV, _ := tlv.Format()
	hello := ClientHello(t, &tls.Config{ServerName: "db.example.com"})
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
