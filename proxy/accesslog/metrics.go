package accesslog

import (
	"sync"
	"sync/atomic"
	"time"
)

// DurationBuckets are the upper bounds, in seconds, of the connection
// duration histogram: TCP connections last from milliseconds (a health probe)
// to hours (a database pool), so the buckets are spread wide.
var DurationBuckets = [...]float64{0.005, 0.05, 0.5, 1, 5, 30, 60, 300, 1800, 3600, 14400}

// DurationHistogram is a fixed-bucket histogram of connection durations kept
// with atomic adds: an observation costs a short scan of DurationBuckets and
// two atomic adds. The zero value is ready to use.
type DurationHistogram struct {
	counts [len(DurationBuckets) + 1]atomic.Uint64 // the last one is +Inf
	sumNs  atomic.Uint64
}

// Observe records one connection of duration d.
func (h *DurationHistogram) Observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(DurationBuckets) && s > DurationBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	if d > 0 {
		h.sumNs.Add(uint64(d))
	}
}

// Snapshot returns the observation count, the sum of durations in seconds and
// the cumulative count per upper bound, as Prometheus expects them.
func (h *DurationHistogram) Snapshot() (count uint64, sum float64, cumulative map[float64]uint64) {
	cumulative = make(map[float64]uint64, len(DurationBuckets))
	for i, le := range DurationBuckets {
		count += h.counts[i].Load()
		cumulative[le] = count
	}
	count += h.counts[len(DurationBuckets)].Load()
	return count, float64(h.sumNs.Load()) / 1e9, cumulative
}

// RouterCounters is what a router's closed connections add up to. It is kept
// by name (Routers), so it survives reloads. Only connections proxied
// while metrics are on (Config.Metrics) are counted.
type RouterCounters struct {
	BytesIn  atomic.Uint64 // client -> backend
	BytesOut atomic.Uint64 // backend -> client
	Duration DurationHistogram
}

// Routers maps a qualified router name to its *RouterCounters. A sync.Map:
// the end of every observed connection reads it without a lock; Compile
// adds an entry per router it builds. The zero value is ready to use.
type Routers struct{ m sync.Map }

// Get returns the named router's counters, made on first use.
func (r *Routers) Get(name string) *RouterCounters {
	if v, ok := r.m.Load(name); ok {
		return v.(*RouterCounters)
	}
	v, _ := r.m.LoadOrStore(name, new(RouterCounters))
	return v.(*RouterCounters)
}

// Each calls f for every router that has counters.
func (r *Routers) Each(f func(name string, rc *RouterCounters)) {
	r.m.Range(func(k, v any) bool {
		f(k.(string), v.(*RouterCounters))
		return true
	})
}
