package proxy

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// go test ./proxy -run TestWriteFuzzSeeds -update-fuzz-seeds rewrites the
// seed corpora under testdata/fuzz from real tls.Client hellos and
// go-proxyproto headers.
var updateFuzzSeeds = flag.Bool("update-fuzz-seeds", false, "rewrite testdata/fuzz seed corpora")

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
	write("FuzzProxyHeader", itest.ProxySeeds(t), func(b []byte) string {
		return fmt.Sprintf("[]byte(%q)\nbool(%v)\n", b, len(b)%2 == 0)
	})
}

// FuzzProxyHeader feeds arbitrary first bytes to the PROXY-header step of
// the pre-routing decision, as trusted and untrusted sender, then hands what
// follows to the ClientHello reader as the entry point does. It must not
// panic; the bytes kept for the backend must be exactly those past the
// header; an untrusted sender never changes the client; a trusted header's
// addresses are unmapped and survive being written out again (PROXY out).
func FuzzProxyHeader(f *testing.F) {
	for i, s := range itest.ProxySeeds(f) {
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
		h, _ := sniff.ReadHello(bytes.NewReader(nil), slices.Clone(data[hdrLen:]), sniff.MaxHelloBytes)
		if !bytes.HasPrefix(data[hdrLen:], h.Peeked) {
			t.Fatal("hello bytes after the header are not a prefix of what followed it")
		}
	})
}
