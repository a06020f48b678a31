package ratelimit

import (
	"time"

	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/internal/registry"
)

// Registry holds one Limiter per qualified middleware name across config
// generations: the rateLimit kind's middleware.Keeper (Limiters). Compile
// asks it for limiters; the table it builds holds them; when a generation
// no longer names a limiter and none of its buckets is still refilling,
// Sweep forgets it.
//
// The zero value is ready to use. A Registry is safe for concurrent use.
type Registry struct {
	// Clock, when set before the first Get, is every limiter's clock
	// (monotonic time since a fixed instant); nil means the real one.
	Clock func() time.Duration

	reg registry.Registry[*Limiter]
}

// Get returns the limiter for name, creating it or changing its rule in
// place: buckets are kept, and rescaled when the rate changes (Limiter.set);
// a change of ipv6Subnet moves the IPv6 buckets to their new keys and keeps
// the IPv4 ones (Limiter.rebits).
func (r *Registry) Get(name string, rule Rule, v6Bits int) *Limiter {
	return r.reg.Get(name,
		func(l *Limiter) bool {
			l.rebits(v6Bits)
			l.set(rule)
			return true
		},
		func() *Limiter { return NewLimiter(rule, v6Bits, r.Clock) })
}

// Lookup returns the limiter registered under name, or nil.
func (r *Registry) Lookup(name string) *Limiter {
	l, _ := r.reg.Lookup(name)
	return l
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string { return r.reg.Names() }

// Each calls f for every registered limiter, sorted by name.
func (r *Registry) Each(f func(name string, l *Limiter)) { r.reg.Each(f) }

// Sweep forgets the limiters whose names are not in keep and whose buckets
// are all full. One with a bucket still refilling stays registered, so a
// middleware removed and re-added within a few intervals resumes its
// buckets instead of handing every client a fresh burst.
func (r *Registry) Sweep(keep map[string]bool) {
	r.reg.Sweep(keep, func(l *Limiter) bool { return l.keys.Load() == 0 }, nil)
}

var _ middleware.Keeper = (*Registry)(nil)

// Close does nothing: a limiter runs nothing in the background.
func (r *Registry) Close() {}
