package inflightconn

import (
	"errors"
	"net/netip"
	"strings"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// validate is the one rule for an inFlightConn block. It returns a warning
// (not an error) for amount 0, which rejects every connection as in Traefik
// but is almost always a mistake.
func validate(cfg *config.TCPInFlightConn) (warning string, err error) {
	if cfg.Amount < 0 {
		return "", config.FieldErrorf("inFlightConn.amount", "inFlightConn.amount %d is negative: the amount must not be negative (use 0 or more; 0 rejects every connection)", cfg.Amount)
	}
	if b := cfg.IPv6Subnet; b != nil && (*b < 1 || *b > 128) {
		return "", config.FieldErrorf("inFlightConn.ipv6Subnet", "inFlightConn.ipv6Subnet %d is out of range 1..128", *b)
	}
	switch strings.ToLower(cfg.FailureMode) {
	case "", FailOpen, FailClosed:
	default:
		return "", config.FieldErrorf("inFlightConn.failureMode", "inFlightConn.failureMode %q is not open or closed", cfg.FailureMode)
	}
	if cfg.Amount == 0 {
		return "inFlightConn.amount is 0: every connection is rejected", nil
	}
	if cfg.FailureMode != "" && cfg.Store == "" {
		return "inFlightConn.failureMode has no effect without inFlightConn.store", nil
	}
	return "", nil
}

// New validates the inFlightConn block named name (qualified) and returns its
// middleware, backed by the registry's limiter for that name. A block that
// applies but probably not as meant (amount 0) comes with a warning; a block
// that cannot apply (negative amount, ipv6Subnet outside 1..128) is an error
// naming the field, and nothing is registered.
func New(name string, cfg *config.TCPInFlightConn, reg *Registry, log zerolog.Logger) (mw tcp.Middleware, l *Limiter, warning string, err error) {
	if cfg == nil {
		return nil, nil, "", errors.New("inFlightConn: no configuration")
	}
	if warning, err = validate(cfg); err != nil {
		return nil, nil, "", err
	}
	bits := 0
	if cfg.IPv6Subnet != nil {
		bits = *cfg.IPv6Subnet
	}
	var store *Store
	mode := FailClosed
	if cfg.Store != "" {
		if store = reg.store(cfg.Store); store == nil {
			return nil, nil, "", config.FieldErrorf("inFlightConn.store", "inFlightConn.store %q: no such store in the static configuration (stores.%s.redis)", cfg.Store, cfg.Store)
		}
		if strings.EqualFold(cfg.FailureMode, FailOpen) {
			mode = FailOpen
		}
	}
	l = reg.Get(name, cfg.Amount, cfg.DryRun, bits)
	l.setStore(store, name, mode)
	log = log.With().Str("middleware", name).Str("middlewareType", "InFlightConn").Logger()
	mw = func(next tcp.Handler) tcp.Handler {
		return &handler{l: l, next: next, log: log}
	}
	return mw, l, warning, nil
}

type handler struct {
	l    *Limiter
	next tcp.Handler
	log  zerolog.Logger
}

var _ tcp.Handler = (*handler)(nil)

// ServeTCP admits c if its client holds fewer connections than the amount,
// else refuses it: gently (an orderly close) when the rejection is logged,
// that is the first of this client in a second, with a reset when it is one
// of a flood (see tcp.Conn.Refuse).
func (h *handler) ServeTCP(c *tcp.Conn) {
	k := h.l.Key(c.Client.Addr())
	if r := h.l.remote.Load(); r != nil {
		h.serveRemote(c, k, *r)
		return
	}
	if ln := h.l.link.Load(); ln != nil {
		h.serveShared(c, k, ln)
		return
	}
	admitted := h.l.Acquire(k)
	if !admitted {
		c.Refuse(tcp.Gently(h.l.logs.reject(&h.log, k, false)))
		return
	}
	if h.l.dryRun.Load() && h.l.Count(k) > h.l.amount.Load() {
		h.l.logs.reject(&h.log, k, true)
	}
	c.DeferClient(h.l)
	h.next.ServeTCP(c)
}

// serveRemote admits c by asking the process the limiter's budget was handed
// to (handover.go): c was accepted before the handover and reached the
// middleware after it. The connection waits for the answer (tcp.Conn.Later);
// admitted, it is counted here too, so that its release is forwarded like the
// others'. Ended before the answer was used, its slot is given back there.
func (h *handler) serveRemote(c *tcp.Conn, k netip.Addr, r Remote) {
	r.Acquire(k, func(ok bool) {
		c.Later(func() {
			if !ok {
				h.l.CountRejected()
				c.Refuse(tcp.Gently(h.l.logs.reject(&h.log, k, false)))
				return
			}
			h.l.Import(k, 1)
			c.DeferClient((*localOnly)(h.l)) // counted by the remote, not in a shared store
			h.next.ServeTCP(c)
		}, func() {
			if ok {
				r.Release(k)
			}
		})
	})
}

// Finish releases the connection's slot; Limiter is the tcp.Finisher that
// ServeTCP registers, so no closure is allocated per connection.
func (l *Limiter) Finish(c *tcp.Conn) { l.Release(l.Key(c.Client.Addr())) }

var _ tcp.Finisher = (*Limiter)(nil)

// localOnly is the Finisher of a connection counted here but not in the
// limiter's shared store (one the remote admitted during a handover).
type localOnly Limiter

func (l *localOnly) Finish(c *tcp.Conn) {
	lim := (*Limiter)(l)
	lim.ReleaseLocal(lim.Key(c.Client.Addr()))
}

// Rejection logging: operators alert on "max number of connections reached for
// <ip>", so the line keeps Traefik's words, but a flood must not become a log
// flood: at most one line per client key per second and ratelog's default
// number of lines per second per limiter; the next line written says how many
// were suppressed. Metrics count every rejection.
const logLinesPerSecond = ratelog.DefaultPerSecond

type rejectLog struct{ rl ratelog.Limiter }

// reject logs a rejection unless it is one of a flood; it reports whether
// it did.
func (r *rejectLog) reject(log *zerolog.Logger, k netip.Addr, dryRun bool) bool {
	return r.rejectFor(log, k, dryRun, "max number of connections reached for "+k.String())
}

// rejectFor is reject with the reason given (the limit, or a shared store
// that could not be asked).
func (r *rejectLog) rejectFor(log *zerolog.Logger, k netip.Addr, dryRun bool, why string) bool {
	ok, suppressed := r.rl.Allow(ratelog.Addr(k))
	if !ok {
		return false
	}
	ev := log.Info()
	msg := "Connection rejected"
	if dryRun {
		msg = "Connection would be rejected (dry run)"
	}
	ev = ev.Str("client_ip", k.String())
	if suppressed > 0 {
		ev = ev.Uint64("suppressed", suppressed)
	}
	ev.Str("error", why).Msg(msg)
	return true
}
