package sniff

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

func TestHeaderEnd(t *testing.T) {
	v1 := itest.ProxyHeader(t, 1, "198.51.100.7:4000", "192.0.2.1:5432")
	v2 := itest.ProxyHeader(t, 2, "[::ffff:198.51.100.7]:4000", "[2001:db8::1]:443")
	for _, tc := range []struct {
		name string
		in   []byte
		want int
		err  bool
	}{
		{"empty: more", nil, 0, false},
		{"not a signature", []byte("GET /"), -1, false},
		{"redis PING starts like v1, then is not", []byte("PING\r\n"), -1, false},
		{"v1 prefix", v1[:3], 0, false},
		{"v1 without its CRLF", v1[:len(v1)-2], 0, false},
		{"v1 whole, payload behind", append(bytes.Clone(v1), "x"...), len(v1), false},
		{"v1 too long", append([]byte("PROXY "), bytes.Repeat([]byte("1"), MaxV1Header)...), 0, true},
		{"v2 fixed part only", v2[:15], 0, false},
		{"v2 whole", v2, len(v2), false},
		{"v2 too long", append(bytes.Clone(v2[:14]), 0xff, 0xff), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := HeaderEnd(tc.in)
			if got != tc.want || (err != nil) != tc.err {
				t.Fatalf("HeaderEnd = %d, %v; want %d, error %v", got, err, tc.want, tc.err)
			}
			if err != nil && !errors.Is(err, ErrBadHeader) {
				t.Fatalf("error %v does not wrap ErrBadHeader", err)
			}
		})
	}
}

func TestParseHeader(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       []byte
		src, dst string // "" for invalid
	}{
		{"v1 TCP4", itest.ProxyHeader(t, 1, "198.51.100.7:4000", "192.0.2.1:5432"), "198.51.100.7:4000", "192.0.2.1:5432"},
		{"v2 mapped IPv4 is unmapped", itest.ProxyHeader(t, 2, "[::ffff:198.51.100.7]:4000", "[2001:db8::1]:443"), "198.51.100.7:4000", "[2001:db8::1]:443"},
		{"v1 UNKNOWN keeps the peer", []byte("PROXY UNKNOWN\r\n"), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseHeader(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if tc.src == "" {
				if h.Source.IsValid() || h.Destination.IsValid() {
					t.Fatalf("got %v -> %v, want no addresses", h.Source, h.Destination)
				}
				return
			}
			if h.Source != netip.MustParseAddrPort(tc.src) || h.Destination != netip.MustParseAddrPort(tc.dst) {
				t.Fatalf("got %v -> %v, want %s -> %s", h.Source, h.Destination, tc.src, tc.dst)
			}
		})
	}
	if _, err := ParseHeader([]byte("PROXY TCP4 198.51.100.7 192.0.2.1 4000\r\n")); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("a v1 line without its destination port: %v, want ErrBadHeader", err)
	}
}

// FuzzHeader feeds arbitrary first bytes to the framing and the parser, as
// the pre-routing step does. They must not panic; a header's end is within
// the bytes and follows a signature; a parsed header's addresses are unmapped
// and survive being written out again (PROXY out) and read back.
func FuzzHeader(f *testing.F) {
	for _, s := range itest.ProxySeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		end, err := HeaderEnd(data)
		if err != nil || end <= 0 {
			return
		}
		if end > len(data) {
			t.Fatalf("header of %d bytes in %d", end, len(data))
		}
		if !bytes.HasPrefix(data, proxyproto.SIGV1) && !bytes.HasPrefix(data, proxyproto.SIGV2) {
			t.Fatalf("a header of %d bytes without a PROXY signature", end)
		}
		h, err := ParseHeader(data[:end])
		if err != nil {
			if !errors.Is(err, ErrBadHeader) {
				t.Fatalf("error %v does not wrap ErrBadHeader", err)
			}
			return
		}
		if h.Source.IsValid() != h.Destination.IsValid() {
			t.Fatalf("one address of two: %v -> %v", h.Source, h.Destination)
		}
		if !h.Source.IsValid() {
			return
		}
		if h.Source.Addr().Is4In6() || h.Destination.Addr().Is4In6() {
			t.Fatalf("addresses %v -> %v are not unmapped", h.Source, h.Destination)
		}
		for _, ver := range []byte{1, 2} {
			out, err := proxyproto.HeaderProxyFromAddrs(ver, net.TCPAddrFromAddrPort(h.Source), net.TCPAddrFromAddrPort(h.Destination)).Format()
			if err != nil {
				t.Fatalf("v%d header for %v -> %v: %v", ver, h.Source, h.Destination, err)
			}
			n, err := HeaderEnd(out)
			if err != nil || n != len(out) {
				t.Fatalf("v%d header of %d bytes framed as %d, %v", ver, len(out), n, err)
			}
			back, err := ParseHeader(out)
			if err != nil || back != h {
				t.Fatalf("v%d round trip of %v -> %v gave %v -> %v, %v", ver, h.Source, h.Destination, back.Source, back.Destination, err)
			}
		}
	})
}
