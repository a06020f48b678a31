package proxy

import (
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
)

// BenchmarkProxyConnection: one proxied connection per op (dial, 64-byte echo
// round trip, close) through an inFlightConn limiter, from many goroutines
// and source IPs. Compare with BenchmarkDirectConnection for the proxy's cost.
func BenchmarkProxyConnection(b *testing.B) {
	be := startBackend(b, "")
	s := newTestServer(b, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"l": limitMW(1000)}, "l"))
	benchConnections(b, s.addr("tcp"))
}

func BenchmarkDirectConnection(b *testing.B) {
	be := startBackend(b, "")
	benchConnections(b, be.addr())
}

func benchConnections(b *testing.B, addr string) {
	var ip atomic.Uint32
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := ip.Add(1)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 2, byte(n>>8), byte(n))}}
		msg := make([]byte, 64)
		buf := make([]byte, 64)
		for pb.Next() {
			c, err := d.Dial("tcp", addr)
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := c.Write(msg); err != nil {
				b.Error(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Error(err)
			}
			_ = c.Close()
		}
	})
}

// BenchmarkProxyThroughput streams 1 MiB per op through the proxy and back.
func BenchmarkProxyThroughput(b *testing.B) {
	be := startBackend(b, "")
	s := newTestServer(b, "tcp")
	apply(s, "file", singleRouter(be.addr(), nil))
	c, err := net.Dial("tcp", s.addr("tcp"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	chunk := make([]byte, 1<<20)
	got := make([]byte, 1<<20)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		go func() { _, _ = c.Write(chunk) }()
		if _, err := io.ReadFull(c, got); err != nil {
			b.Fatal(err)
		}
	}
}
