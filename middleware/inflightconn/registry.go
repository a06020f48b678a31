package inflightconn

import (
	"sync"

	"github.com/tollgate-proxy/tollgate/middleware/internal/registry"
)

// Registry holds one Limiter per qualified middleware name across config
// generations. Compile asks it for limiters; the table it builds holds them;
// when a generation no longer names a limiter and no connection is counted in
// it, Sweep forgets it.
//
// The zero value is ready to use. A Registry is safe for concurrent use.
type Registry struct {
	reg registry.Registry[*Limiter]

	mu     sync.Mutex
	stores map[string]*Store
}

// SetStores gives the registry the shared stores of the static
// configuration, by name, for the middlewares that name one
// (inFlightConn.store). Set once, before the first configuration.
func (r *Registry) SetStores(stores map[string]*Store) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stores = stores
}

func (r *Registry) store(name string) *Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stores[name]
}

// Get returns the limiter for name, creating it or updating its amount and dry
// run in place. Counts are kept. A change of ipv6Subnet changes how clients are
// keyed, so it replaces the limiter with a fresh one; connections counted in the
// old one still release into it (they hold it), and it is garbage once they end.
func (r *Registry) Get(name string, amount int64, dryRun bool, v6Bits int) *Limiter {
	return r.reg.Get(name,
		func(l *Limiter) bool {
			if l.v6Bits != v6Bits {
				return false
			}
			l.amount.Store(amount)
			l.dryRun.Store(dryRun)
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
