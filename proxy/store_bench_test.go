package proxy

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
)

// BenchmarkSharedStore measures what inFlightConn.store costs one replica
// (docs/operations/replicas.md), in one run: one proxied connection
// per op (dial, 64-byte echo, close) through an inFlightConn limiter kept
// in this process alone ("local") and in a redis-server on loopback
// ("redis"), one client at a time ("serial": the latency a connection
// gains) and from 4 goroutines over many source IPs ("parallel": the
// connection rate). conns/s is b.N over the elapsed time.
func BenchmarkSharedStore(b *testing.B) {
	itest.ConntrackRoom(b, 120000) // 4 runs of up to ~15,000 connections, two entries each
	rd := itest.StartRedis(b)
	for _, par := range []bool{false, true} {
		mode := "serial"
		if par {
			mode = "parallel"
		}
		for _, shared := range []bool{false, true} {
			name := "local"
			if shared {
				name = "redis"
			}
			b.Run(name+"/"+mode, func(b *testing.B) {
				be := startBackend(b, "")
				mw := limitMW(1000)
				var store *inflightconn.Store
				var so StateOptions
				if shared {
					st, err := inflightconn.NewRedisStore("shared", &config.RedisStore{Endpoints: []string{rd.Addr},
						LeaseExpiry: config.Duration(10 * time.Second), Timeout: config.Duration(time.Second)}, nil, nopLog)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(st.Close)
					store = st
					itest.Eventually(b, 5*time.Second, st.Reachable, "redis store not reachable")
					so.Stores = map[string]middleware.Store{"shared": st}
					mw.InFlightConn.Store = "shared"
				}
				s := newServerOpts(b, so, nil, "tcp")
				apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"l": mw}, "l"))
				var rt0 uint64
				var tot0 time.Duration
				if store != nil {
					rt0, tot0, _ = store.RoundTrips()
				}
				benchSharedConns(b, s.addr("tcp"), par)
				if store != nil {
					rt, tot, _ := store.RoundTrips()
					if n := rt - rt0; n > 0 {
						b.ReportMetric(float64((tot-tot0).Microseconds())/float64(n), "µs/roundtrip")
						b.ReportMetric(float64(b.N)/float64(n), "conns/roundtrip")
					}
				}
			})
		}
	}
}

func benchSharedConns(b *testing.B, addr string, par bool) {
	var ip atomic.Uint32
	one := func(pb interface{ Next() bool }) {
		n := ip.Add(1)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 3, byte(n>>8), byte(n))}}
		msg, buf := make([]byte, 64), make([]byte, 64)
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
	}
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	if par {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) { one(pb) })
	} else {
		one(&serial{n: b.N})
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "conns/s")
}

type serial struct{ n int }

func (s *serial) Next() bool { s.n--; return s.n >= 0 }
