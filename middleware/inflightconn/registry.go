package inflightconn

import (
	"sort"
	"sync"
)

// Registry holds one Limiter per qualified middleware name across config
// generations. Compile asks it for limiters; the table it builds holds them;
// when a generation no longer names a limiter and no connection is counted in
// it, Sweep forgets it.
//
// The zero value is ready to use. A Registry is safe for concurrent use.
type Registry struct {
	mu     sync.Mutex
	m      map[string]*Limiter
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]*Limiter)
	}
	if l, ok := r.m[name]; ok && l.v6Bits == v6Bits {
		l.amount.Store(amount)
		l.dryRun.Store(dryRun)
		return l
	}
	l := NewLimiter(amount, dryRun, v6Bits)
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

// Sweep forgets the limiters whose names are not in keep and that count no
// open connection. A limiter still counting connections stays registered, so
// a middleware removed and re-added while its connections live resumes their
// counts.
func (r *Registry) Sweep(keep map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, l := range r.m {
		if !keep[name] && l.total.Load() == 0 {
			delete(r.m, name)
			l.setStore(nil, "", "") // its lease in a shared store ends with it
		}
	}
}
