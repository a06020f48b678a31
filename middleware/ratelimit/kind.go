package ratelimit

import (
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Name is the key a rateLimit block is written under
// (tcp.middlewares.<name>.rateLimit): the kind's name.
const Name = "rateLimit"

func init() {
	middleware.Register(middleware.Kind[config.TCPRateLimit]{
		Name:    Name,
		Block:   func(m *config.TCPMiddleware) *config.TCPRateLimit { return m.RateLimit },
		New:     New,
		Keeper:  func(middleware.Options) middleware.Keeper { return &Registry{} },
		Metrics: metrics,
	})
}

// Limiters returns the rateLimit limiters among ks (nil when ks is nil, or
// the kind is not registered).
func Limiters(ks *middleware.Keepers) *Registry { return middleware.KeeperOf[*Registry](ks, Name) }

// metrics is the kind's Kind.Metrics: each limiter's decisions. It holds
// no connection: the history counts none in flight.
func metrics(k middleware.Keeper, f func(name string, c middleware.Counts)) {
	var reason [1]middleware.Refused // reused: f keeps no Reasons (Counts)
	for name, l := range k.(*Registry).reg.All() {
		s := l.Stats()
		reason[0] = middleware.Refused{Reason: tcp.ReasonRate, N: s.Rejected, WouldBe: s.DryRun}
		f(name, middleware.Counts{Admitted: s.Admitted, Rejected: s.Rejected, DryRun: s.DryRun, Reasons: reason[:]})
	}
}

var (
	_ middleware.Viewer       = (*Limiter)(nil)
	_ middleware.ClientLister = (*Limiter)(nil)
)

// View is what the API shows of the limiter beside its middleware's
// configuration (rateLimitState: "rateLimit" is the configuration's).
func (l *Limiter) View(top int) map[string]any {
	return map[string]any{"rateLimitState": l.Snapshot(top)}
}

// Clients is the limiter's counts with its top clients.
func (l *Limiter) Clients(top int) any { return l.Snapshot(top) }
