package inflightconn

import (
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/internal/registry"
)

// Registry holds one Limiter per qualified middleware name across config
// generations: the inFlightConn kind's middleware.Keeper (Limiters). Compile
// asks it for limiters; the table it builds holds them; when a generation
// no longer names a limiter and no connection is counted in it, Sweep
// forgets it.
//
// The zero value is ready to use, with no shared store. A Registry is safe
// for concurrent use.
type Registry struct {
	reg registry.Registry[*Limiter]
	// base is the logger the last New was given: every middleware's
	// logger starts from it (one copy, not one per middleware).
	base   atomic.Pointer[zerolog.Logger]
	stores map[string]*Store // read-only once made
}

// NewRegistry returns a registry with the shared stores of the static
// configuration, by name, for the middlewares that name one
// (inFlightConn.store).
func NewRegistry(stores map[string]*Store) *Registry {
	return &Registry{stores: stores}
}

// newKeeper is the kind's Kind.Keeper: a registry with the stores of o
// that are this package's.
func newKeeper(o middleware.Options) middleware.Keeper {
	stores := map[string]*Store{}
	for name, s := range o.Stores {
		if st, ok := s.(*Store); ok {
			stores[name] = st
		}
	}
	return NewRegistry(stores)
}

func (r *Registry) store(name string) *Store { return r.stores[name] }

var _ middleware.Keeper = (*Registry)(nil)

// Close does nothing: the stores are the process's, closed by it at exit.
func (r *Registry) Close() {}

// Get returns the limiter for name, creating it or updating its amount, dry
// run and ipv6Subnet in place. Counts are kept: a change of ipv6Subnet moves
// each IPv6 client's connections to the key its address has under the new
// prefix (Limiter.setV6Bits), and IPv4 keys do not change.
func (r *Registry) Get(name string, amount int64, dryRun bool, v6Bits int) *Limiter {
	return r.reg.Get(name,
		func(l *Limiter) bool {
			l.amount.Store(amount)
			l.dryRun.Store(dryRun)
			l.setV6Bits(v6Bits)
			return true
		},
		func() *Limiter { return NewLimiter(amount, dryRun, v6Bits) })
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

// Sweep forgets the limiters whose names are not in keep and that count no
// open connection. A limiter still counting connections stays registered, so
// a middleware removed and re-added while its connections live resumes their
// counts.
func (r *Registry) Sweep(keep map[string]bool) {
	r.reg.Sweep(keep,
		func(l *Limiter) bool { return l.total.Load() == 0 },
		func(l *Limiter) { l.setStore(nil, "", "") }) // its lease in a shared store ends with it
}
