package middleware

import (
	"iter"
	"net/netip"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// AddrCounts are an AddrGate's decisions and which of its refusals were
// logged; a kind's Live embeds them. The zero value is ready to use; it is
// safe for concurrent use.
type AddrCounts struct {
	allowed, denied atomic.Uint64
	rl              ratelog.Limiter // which refusals are logged, and so closed gently
}

// Counts returns the connections admitted and refused.
func (c *AddrCounts) Counts() (allowed, denied uint64) { return c.allowed.Load(), c.denied.Load() }

// AddrMetrics is the Kind.Metrics of an AddrGate kind: the counts of each
// middleware in lives, its refusals under reason.
func AddrMetrics[L interface{ Counts() (uint64, uint64) }](lives iter.Seq2[string, L], reason tcp.Reason, f func(name string, c Counts)) {
	var r [1]Refused // reused: f keeps no Reasons (Kind.Metrics)
	for name, l := range lives {
		a, d := l.Counts()
		r[0] = Refused{Reason: reason, N: d}
		f(name, Counts{Admitted: a, Rejected: d, Reasons: r[:]})
	}
}

// AddrGate is the accept-time handler of a middleware that decides on the
// client's address alone, before any byte is read, as ipAllowList does
// (geoIP, crowdSec): it asks Decide, counts, records a refusal with a
// message built once, logs one line per client a second and ratelog's
// bound in all (with the count suppressed), and closes gently the
// refusals it logs. D is the kind's decision. Every router's handler of
// one built middleware shares it; it allocates nothing per connection.
type AddrGate[D any] struct {
	// Name is the middleware's qualified name, which the record of
	// recent refusals names.
	Name string
	// Reason is the reason its refusals are counted under.
	Reason tcp.Reason
	// Decide decides on a client address (unmapped).
	Decide func(a netip.Addr) (d D, allow bool)
	// Note is what the record of recent refusals says of a refusal for
	// d: a message built once, not per connection.
	Note func(d D) string
	// Why is the log line's error for d, built only when a line is
	// written.
	Why func(d D) string
	// Counts are where it counts (the kind's Live's).
	Counts *AddrCounts
	// Log is the middleware's logger (its name and type as fields).
	Log zerolog.Logger
}

// Middleware returns the middleware that puts g in front of each router's
// handler.
func (g *AddrGate[D]) Middleware() tcp.Middleware {
	return func(next tcp.Handler) tcp.Handler { return &addrHandler[D]{g: g, next: next} }
}

type addrHandler[D any] struct {
	g    *AddrGate[D]
	next tcp.Handler
}

func (h *addrHandler[D]) ServeTCP(c *tcp.Conn) {
	g := h.g
	a := c.Client.Addr()
	d, allow := g.Decide(a)
	if allow {
		g.Counts.allowed.Add(1)
		h.next.ServeTCP(c)
		return
	}
	g.Counts.denied.Add(1)
	logged := g.logRefusal(a, d)
	c.NoteRefusal(g.Reason, g.Name, g.Note(d))
	c.Refuse(c.Gently(logged))
}

// logRefusal logs a refusal unless it is one of a flood; it reports
// whether it did.
func (g *AddrGate[D]) logRefusal(a netip.Addr, d D) bool {
	ok, suppressed := g.Counts.rl.Allow(ratelog.Addr(a))
	if !ok {
		return false
	}
	ev := g.Log.Error().Str("client_ip", a.String())
	if suppressed > 0 {
		ev = ev.Uint64("suppressed", suppressed)
	}
	ev.Str("error", g.Why(d)).Msg("Connection rejected")
	return true
}
