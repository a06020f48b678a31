package ratelimit

import (
	"sort"
	"sync"
	"time"
)

// Registry holds one Limiter per qualified middleware name across config
// generations. Compile asks it for limiters; the table it builds holds them;
// when a generation no longer names a limiter and none of its buckets is
// still refilling, Sweep forgets it.
//
// The zero value is ready to use. A Registry is safe for concurrent use.
type Registry struct {
	// Clock, when set before the first Get, is every limiter's clock
	// (monotonic time since a fixed instant); nil means the real one.
	Clock func() time.Duration

	mu sync.Mutex
	m  map[string]*Limiter
}

// Get returns the limiter for name, creating it or changing its rule in
// place: buckets are kept, and rescaled when the rate changes (Limiter.set).
// A change of ipv6Subnet changes how clients are keyed, so it replaces the
// limiter with a fresh one (every bucket full).
func (r *Registry) Get(name string, rule Rule, v6Bits int) *Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]*Limiter)
	}
	if l, ok := r.m[name]; ok && l.v6Bits == v6Bits {
		l.set(rule)
		return l
	}
	l := NewLimiter(rule, v6Bits, r.Clock)
	r.m[name] = l
	return l
}

// Lookup returns the limiter registered under name, or nil.
func (r *Registry) Lookup(name string) *Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[name]
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.m))
	for n := range r.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Sweep forgets the limiters whose names are not in keep and whose buckets
// are all full. One with a bucket still refilling stays registered, so a
// middleware removed and re-added within a few intervals resumes its
// buckets instead of handing every client a fresh burst.
func (r *Registry) Sweep(keep map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, l := range r.m {
		if !keep[name] && l.keys.Load() == 0 {
			delete(r.m, name)
		}
	}
}
