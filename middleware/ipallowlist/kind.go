package ipallowlist

import (
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/internal/registry"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

func init() {
	middleware.Register(middleware.Kind[config.TCPIPAllowList]{
		Name: DefaultKey,
		// ipAllowList, or its deprecated name ipWhiteList: config's
		// AllowList is the one reader of the latter.
		Block: func(m *config.TCPMiddleware) *config.TCPIPAllowList {
			l, _ := m.AllowList()
			return l
		},
		Key: func(m *config.TCPMiddleware) string {
			_, key := m.AllowList()
			return key
		},
		New:     New,
		Keeper:  func(middleware.Options) middleware.Keeper { return &Registry{} },
		Metrics: metrics,
	})
}

// Registry holds the Counters of each allow list by qualified name: the
// kind's middleware.Keeper (Lists). The counts are never swept: their
// series count from the process's start. The zero value is ready to use;
// it is safe for concurrent use.
type Registry struct {
	reg registry.Registry[*Counters]
}

// Lists returns the allow lists' counters among ks (nil when ks is nil, or
// the kind is not registered).
func Lists(ks *middleware.Keepers) *Registry { return middleware.KeeperOf[*Registry](ks, DefaultKey) }

// Get returns the counters of the named allow list, made on first use; on
// a nil Registry, counters of their own.
func (r *Registry) Get(name string) *Counters {
	if r == nil {
		return &Counters{}
	}
	return r.reg.Get(name, func(*Counters) bool { return true }, func() *Counters { return &Counters{} })
}

// Each calls f for every allow list's counters, sorted by name.
func (r *Registry) Each(f func(name string, c *Counters)) { r.reg.Each(f) }

// Sweep keeps every count (see Registry).
func (r *Registry) Sweep(map[string]bool) {}

// Close does nothing.
func (r *Registry) Close() {}

var _ middleware.Keeper = (*Registry)(nil)

func metrics(k middleware.Keeper, f func(name string, c middleware.Counts)) {
	var reason [1]middleware.Refused // reused: f keeps no Reasons (Counts)
	for name, c := range k.(*Registry).reg.All() {
		d := c.Denied.Load()
		reason[0] = middleware.Refused{Reason: tcp.ReasonAllowList, N: d}
		f(name, middleware.Counts{Admitted: c.Allowed.Load(), Rejected: d, Reasons: reason[:]})
	}
}
