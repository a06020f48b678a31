package proxy

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/rule"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// clientHello returns the bytes a real tls.Client writes first: its
// ClientHello in one or more TLS records.
func clientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	cli, srv := net.Pipe()
	defer srv.Close()
	go func() {
		_ = tls.Client(cli, cfg).Handshake()
		_ = cli.Close()
	}()
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	var msg []byte // handshake payload so far
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(srv, hdr[:]); err != nil {
			t.Fatalf("reading the ClientHello record header: %v", err)
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		body := make([]byte, n)
		if _, err := io.ReadFull(srv, body); err != nil {
			t.Fatalf("reading the ClientHello record: %v", err)
		}
		out = append(append(out, hdr[:]...), body...)
		msg = append(msg, body...)
		if len(msg) >= 4 && len(msg) >= 4+int(msg[1])<<16|int(msg[2])<<8|int(msg[3]) {
			return out
		}
	}
}

// reframe re-splits the handshake payload of TLS records into records of at
// most size bytes each (a legal fragmentation that crypto/tls reassembles).
func reframe(records []byte, size int) []byte {
	var payload []byte
	vers := records[1:3]
	for len(records) >= 5 {
		n := int(binary.BigEndian.Uint16(records[3:5]))
		payload = append(payload, records[5:5+n]...)
		records = records[5+n:]
	}
	var out []byte
	for len(payload) > 0 {
		n := min(size, len(payload))
		out = append(out, recordTypeHandshake, vers[0], vers[1], byte(n>>8), byte(n))
		out = append(out, payload[:n]...)
		payload = payload[n:]
	}
	return out
}

func TestReadHello(t *testing.T) {
	hi := clientHello(t, &tls.Config{ServerName: "Db.Example.COM", NextProtos: []string{"h2", "postgresql"}})
	small := reframe(hi, 50)
	after := []byte("early bytes the client sent behind its hello")
	for _, tc := range []struct {
		name  string
		prior []byte
		src   io.Reader
		want  []byte // peeked
	}{
		{"one read", nil, bytes.NewReader(hi), hi},
		{"one byte per read", nil, iotest.OneByteReader(bytes.NewReader(hi)), hi},
		{"50-byte records, 3 bytes per read", nil, iotest.HalfReader(iotest.OneByteReader(bytes.NewReader(small))), small},
		{"records split by reads", nil, &chunkReader{r: bytes.NewReader(small), n: 7}, small},
		{"bytes after a PROXY header", hi[:9], bytes.NewReader(hi[9:]), hi},
		{"all bytes already peeked", slices.Clone(hi), bytes.NewReader(nil), hi},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := readHello(tc.src, tc.prior, maxHelloBytes)
			if err != nil {
				t.Fatal(err)
			}
			if !h.tls || h.sni != "db.example.com" || !slices.Equal(h.alpn, []string{"h2", "postgresql"}) {
				t.Fatalf("got tls=%v sni=%q alpn=%q", h.tls, h.sni, h.alpn)
			}
			if !bytes.Equal(h.peeked, tc.want) {
				t.Fatalf("peeked %d bytes, want exactly the %d-byte hello", len(h.peeked), len(tc.want))
			}
		})
	}
	t.Run("bytes behind the hello are kept", func(t *testing.T) {
		in := append(slices.Clone(hi), after...)
		h, err := readHello(bytes.NewReader(in), nil, maxHelloBytes)
		if err != nil || h.sni != "db.example.com" {
			t.Fatalf("sni %q, err %v", h.sni, err)
		}
		if !bytes.HasPrefix(in, h.peeked) || len(h.peeked) < len(hi) {
			t.Fatalf("peeked %d bytes that are not a prefix of the input covering the hello", len(h.peeked))
		}
	})
	t.Run("plain TCP", func(t *testing.T) {
		h, err := readHello(iotest.OneByteReader(strings.NewReader("GET / HTTP/1.0\r\n")), nil, maxHelloBytes)
		if err != nil || h.tls || h.sni != "" || string(h.peeked) != "G" {
			t.Fatalf("got %+v, %v: want plain with exactly the one byte read", h, err)
		}
	})
	t.Run("no SNI", func(t *testing.T) {
		h, err := readHello(bytes.NewReader(clientHello(t, &tls.Config{InsecureSkipVerify: true})), nil, maxHelloBytes)
		if err != nil || !h.tls || h.sni != "" {
			t.Fatalf("got %+v, %v", h, err)
		}
	})
	for _, tc := range []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"truncated", hi[:len(hi)-1], maxHelloBytes, io.ErrUnexpectedEOF},
		{"empty", nil, maxHelloBytes, io.EOF},
		{"over the cap", hi, len(hi) - 1, errHelloTooLarge},
		{"not a hello", append([]byte{0x16, 3, 1, 0, 4}, 2, 0, 0, 0), maxHelloBytes, nil},
		{"garbage record", append([]byte{0x16, 3, 1, 0, 10}, "0123456789"...), maxHelloBytes, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := readHello(bytes.NewReader(tc.in), nil, tc.max)
			if err == nil {
				t.Fatalf("got %+v and no error", h)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if len(h.peeked) > tc.max || !bytes.HasPrefix(tc.in, h.peeked) {
				t.Fatalf("peeked %d bytes: not a prefix of the input within the cap", len(h.peeked))
			}
		})
	}
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// The SNI maps give the same answer as trying every TLS route in order.
func TestTLSTableMatchesLinearOrder(t *testing.T) {
	rules := []struct {
		name, rule string
		prio       int
	}{
		{"exact", "HostSNI(`a.example.com`)", 0},
		{"wild", "HostSNI(`*.example.com`)", 0},
		{"wild-high", "HostSNI(`*.example.com`)", 500},
		{"both", "HostSNI(`b.example.com`) || HostSNI(`*.test`)", 0},
		{"regexp", "HostSNIRegexp(`^[a-c]\\.example\\.com$`)", 0},
		{"ip-and-name", "HostSNI(`a.example.com`) && ClientIP(`10.0.0.0/8`)", 0},
		{"alpn", "ALPN(`h2`)", 0},
		{"catch-all", "HostSNI(`*`)", 1},
		{"dup-exact", "HostSNI(`a.example.com`)", 0},
	}
	var all []*route
	for _, r := range rules {
		ru, err := rule.Parse(r.rule)
		if err != nil {
			t.Fatal(err)
		}
		prio := r.prio
		if prio == 0 {
			prio = len(r.rule)
		}
		all = append(all, &route{name: r.name, rule: ru, priority: prio})
	}
	// Every subset of rules, in the compiler's order, gives the same routes.
	for mask := 1; mask < 1<<len(all); mask++ {
		var rs []*route
		for i, r := range all {
			if mask&(1<<i) != 0 {
				rs = append(rs, r)
			}
		}
		slices.SortStableFunc(rs, func(a, b *route) int {
			if a.priority != b.priority {
				return b.priority - a.priority
			}
			return strings.Compare(a.name, b.name)
		})
		tab := newTable(rs, func(*route) bool { return true })
		for _, sni := range []string{"", "a.example.com", "b.example.com", "c.example.com", "d.example.com", "x.y.example.com", "example.com", "q.test", "test", ".example.com"} {
			for _, ip := range []string{"10.1.2.3", "192.0.2.1"} {
				for _, alpn := range [][]string{nil, {"h2"}} {
					c := &tcp.Conn{SNI: sni, ALPN: alpn, Peeked: []byte{recordTypeHandshake}}
					c.Client = netipAP(ip)
					want := firstMatch(rs, c)
					if got := tab.match(c); got != want {
						t.Fatalf("routes %v, sni %q ip %s alpn %v: map gave %v, linear order gives %v", names(rs), sni, ip, alpn, nameOf(got), nameOf(want))
					}
				}
			}
		}
	}
}

func names(rs []*route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.name)
	}
	return out
}

func nameOf(r *route) string {
	if r == nil {
		return "<nil>"
	}
	return r.name
}

// Compile marks TLS tables and splits plain routes from TLS ones.
func TestCompileTLSTable(t *testing.T) {
	cfg := &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"sni":   passthrough("HostSNI(`a.test`)", "s"),
			"plain": {Rule: "HostSNI(`*`)", Service: "s", EntryPoints: []string{"tls", "tcp"}},
		},
		Services: map[string]*config.TCPService{"s": lbConfig("127.0.0.1:1")},
	}
	cfg.Routers["sni"].EntryPoints = []string{"tls"}
	tables, _ := Compile(cfg, []string{"tcp", "tls"}, NewState(nopLog), nopLog)
	if tables["tcp"].peek {
		t.Error("an entry point with only plain routes peeks")
	}
	tl := tables["tls"]
	if !tl.peek || len(tl.plain) != 1 || tl.plain[0].name != "plain" {
		t.Errorf("tls table: peek %v, plain %v", tl.peek, names(tl.plain))
	}
	if _, ok := tl.tls.exact["a.test"]; !ok {
		t.Error("a.test is not in the exact-name map")
	}
}

func netipAP(ip string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(ip), 40000) }

// The SNI lookup of a table with many TLS routes costs two map lookups and
// no allocation.
func BenchmarkTLSTableMatch(b *testing.B) {
	var rs []*route
	for i := range 1000 {
		ru, err := rule.Parse(fmt.Sprintf("HostSNI(`db%d.example.com`)", i))
		if err != nil {
			b.Fatal(err)
		}
		rs = append(rs, &route{name: fmt.Sprint(i), rule: ru})
	}
	wild, _ := rule.Parse("HostSNI(`*.wild.test`)")
	rs = append(rs, &route{name: "wild", rule: wild})
	tab := newTable(rs, func(*route) bool { return true })
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := &tcp.Conn{SNI: "db777.example.com", Peeked: []byte{recordTypeHandshake}}
		w := &tcp.Conn{SNI: "x.wild.test", Peeked: []byte{recordTypeHandshake}}
		for pb.Next() {
			if tab.match(c) == nil || tab.match(w) == nil {
				b.Fatal("no route")
			}
		}
	})
}
