// Package registry keeps one value per qualified middleware name across
// configuration generations: the limiters of inFlightConn and rateLimit.
// Compile asks for a name's value, the table it builds holds it, and a sweep
// after each generation forgets the values no generation names any more once
// they hold no state worth keeping.
package registry

import (
	"iter"
	"sort"
	"sync"
)

// Registry maps names to values. The zero value is ready to use; it is safe
// for concurrent use.
type Registry[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

// Update calls f with name's registered value (ok false when there is none)
// under the registry's lock, and registers what f returns when register is
// true. It returns f's value, registered or not.
func (r *Registry[V]) Update(name string, f func(cur V, ok bool) (v V, register bool)) V {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.m[name]
	v, register := f(cur, ok)
	if register {
		if r.m == nil {
			r.m = make(map[string]V)
		}
		r.m[name] = v
	}
	return v
}

// Get returns name's value when keep reports it can stay (keep may change
// it in place), or else a new one from create, registered in its place.
// Both run under the lock.
func (r *Registry[V]) Get(name string, keep func(V) bool, create func() V) V {
	return r.Update(name, func(cur V, ok bool) (V, bool) {
		if ok && keep(cur) {
			return cur, false
		}
		return create(), true
	})
}

// Lookup returns the value registered under name.
func (r *Registry[V]) Lookup(name string) (V, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[name]
	return v, ok
}

// Names returns the registered names, sorted.
func (r *Registry[V]) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.m))
	for n := range r.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Each calls f for every registered value, sorted by name, without the
// lock held.
func (r *Registry[V]) Each(f func(name string, v V)) {
	for _, n := range r.Names() {
		if v, ok := r.Lookup(n); ok {
			f(n, v)
		}
	}
}

// All ranges over the registered values in no order: a snapshot taken
// under the lock when the range starts, ranged over without it. The
// readers that run every second (the API's history, /metrics) use it
// rather than Each: at 100,000 middlewares, sorting the names and taking
// the lock for each was most of an idle process's CPU.
func (r *Registry[V]) All() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		r.mu.Lock()
		names, vals := make([]string, 0, len(r.m)), make([]V, 0, len(r.m))
		for n, v := range r.m {
			names, vals = append(names, n), append(vals, v)
		}
		r.mu.Unlock()
		for i, n := range names {
			if !yield(n, vals[i]) {
				return
			}
		}
	}
}

// Sweep forgets the values whose names are not in keep and that idle
// reports hold nothing worth keeping; forgotten, when not nil, is called
// for each under the lock, before a new value can take its name.
func (r *Registry[V]) Sweep(keep map[string]bool, idle func(V) bool, forgotten func(V)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, v := range r.m {
		if !keep[name] && idle(v) {
			delete(r.m, name)
			if forgotten != nil {
				forgotten(v)
			}
		}
	}
}
