package proxy

import (
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
)

// BenchmarkProxyConnectionMetrics is BenchmarkProxyConnection with
// --metrics.prometheus: compare the two for what per-router bytes and the
// duration histogram cost per connection.
func BenchmarkProxyConnectionMetrics(b *testing.B) {
	be := startBackend(b, "")
	s := newServerOpts(b, StateOptions{Observers: ConnObservers{Metrics: true}}, nil, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"l": limitMW(1000)}, "l"))
	benchConnections(b, s.addr("tcp"))
}

// BenchmarkObserveEndMetrics is the metrics work at the end of a connection:
// the router lookup, two byte counters and the histogram.
func BenchmarkObserveEndMetrics(b *testing.B) {
	st := NewState(nopLog, StateOptions{})
	st.RouterCounters("r@file")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rc := st.routerStats.Get("r@file")
			rc.BytesIn.Add(64)
			rc.BytesOut.Add(64)
			rc.Duration.Observe(3 * time.Millisecond)
		}
	})
}
