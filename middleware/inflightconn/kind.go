package inflightconn

import (
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Name is the key an inFlightConn block is written under
// (tcp.middlewares.<name>.inFlightConn): the kind's name.
const Name = "inFlightConn"

func init() {
	middleware.Register(middleware.Kind[config.TCPInFlightConn]{
		Name:    Name,
		Block:   func(m *config.TCPMiddleware) *config.TCPInFlightConn { return m.InFlightConn },
		New:     New,
		Keeper:  newKeeper,
		Metrics: metrics,
	})
}

// Limiters returns the inFlightConn limiters among ks (nil when ks is nil,
// or the kind is not registered).
func Limiters(ks *middleware.Keepers) *Registry { return middleware.KeeperOf[*Registry](ks, Name) }

// metrics is the kind's Kind.Metrics: each limiter's decisions, the
// refusals of its shared store apart from those of the amount.
func metrics(k middleware.Keeper, f func(name string, c middleware.Counts)) {
	var reasons [3]middleware.Refused // reused: f keeps no Reasons (Counts)
	for name, l := range k.(*Registry).reg.All() {
		s := l.Stats()
		_, unreachable, queueFull := l.StoreCounts()
		reasons[0] = middleware.Refused{Reason: tcp.ReasonLimit, N: s.Rejected - unreachable - queueFull, WouldBe: s.DryRun}
		c := middleware.Counts{Admitted: s.Admitted, Rejected: s.Rejected, DryRun: s.DryRun, InFlight: s.InFlight, Clients: s.DistinctIPs,
			Reasons: reasons[:1]}
		if l.Store() != nil || unreachable+queueFull > 0 {
			// A store's refusals are refusals even in dry run.
			reasons[1] = middleware.Refused{Reason: tcp.ReasonStoreUnreachable, N: unreachable}
			reasons[2] = middleware.Refused{Reason: tcp.ReasonStoreQueueFull, N: queueFull}
			c.Reasons = reasons[:3]
		}
		f(name, c)
	}
}

var (
	_ middleware.Viewer       = (*Limiter)(nil)
	_ middleware.ClientLister = (*Limiter)(nil)
)

// View is what the API shows of the limiter beside its middleware's
// configuration: its counts and top clients (inFlight) and its shared
// store as this replica sees it (store).
func (l *Limiter) View(top int) map[string]any {
	v := map[string]any{"inFlight": l.Snapshot(top)}
	if s := l.Store(); s != nil {
		v["store"] = s.State(l)
	}
	return v
}

// Clients is the limiter's counts with its top clients.
func (l *Limiter) Clients(top int) any { return l.Snapshot(top) }
