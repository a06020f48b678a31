package inflightconn

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// validate is the one rule for an inFlightConn block. It returns warnings
// (not errors), each on its field, for a block that applies but probably
// not as meant: amount 0, which rejects every connection as in Traefik, and
// a failureMode without a store, which changes nothing.
func validate(cfg *config.TCPInFlightConn) ([]middleware.Warning, error) {
	if cfg.Amount < 0 {
		return nil, config.FieldErrorf("inFlightConn.amount", "inFlightConn.amount %d is negative: the amount must not be negative (use 0 or more; 0 rejects every connection)", cfg.Amount)
	}
	if b := cfg.IPv6Subnet; b != nil && (*b < 1 || *b > 128) {
		return nil, config.FieldErrorf("inFlightConn.ipv6Subnet", "inFlightConn.ipv6Subnet %d is out of range 1..128", *b)
	}
	switch strings.ToLower(cfg.FailureMode) {
	case "", FailOpen, FailClosed:
	default:
		return nil, config.FieldErrorf("inFlightConn.failureMode", "inFlightConn.failureMode %q is not open or closed", cfg.FailureMode)
	}
	if cfg.Amount == 0 {
		return []middleware.Warning{{Field: "inFlightConn.amount", Message: "inFlightConn.amount is 0: every connection is rejected"}}, nil
	}
	if cfg.FailureMode != "" && cfg.Store == "" {
		return []middleware.Warning{{Field: "inFlightConn.failureMode", Message: "inFlightConn.failureMode has no effect without inFlightConn.store"}}, nil
	}
	return nil, nil
}

// New validates the inFlightConn block named spec.Name (qualified) and
// returns its middleware, backed by the limiter for that name in the
// Keepers' Registry (Limiters), which is its Live. A block that applies
// but probably not as meant (amount 0) comes with a warning; a block that
// cannot apply (negative amount, ipv6Subnet outside 1..128) is an error
// naming the field, and nothing is registered.
func New(spec middleware.Spec, cfg *config.TCPInFlightConn) (middleware.Built, error) {
	reg := Limiters(spec.Keepers)
	if reg == nil {
		return middleware.Built{}, errors.New("inFlightConn: no registry to keep its limiter in")
	}
	mw, l, warns, err := newMiddleware(spec.Name, cfg, reg, spec.Log)
	if err != nil {
		return middleware.Built{}, err
	}
	return middleware.Built{Middleware: mw, Live: l, Warnings: warns}, nil
}

// newMiddleware is New with the registry given.
func newMiddleware(name string, cfg *config.TCPInFlightConn, reg *Registry, log zerolog.Logger) (mw tcp.Middleware, l *Limiter, warns []middleware.Warning, err error) {
	if cfg == nil {
		return nil, nil, nil, errors.New("inFlightConn: no configuration")
	}
	if warns, err = validate(cfg); err != nil {
		return nil, nil, nil, err
	}
	bits := 0
	if cfg.IPv6Subnet != nil {
		bits = *cfg.IPv6Subnet
	}
	var store *Store
	mode := FailClosed
	if cfg.Store != "" {
		if store = reg.store(cfg.Store); store == nil {
			return nil, nil, nil, config.FieldErrorf("inFlightConn.store", "inFlightConn.store %q: no such store in the static configuration (stores.%s.redis)", cfg.Store, cfg.Store)
		}
		if strings.EqualFold(cfg.FailureMode, FailOpen) {
			mode = FailOpen
		}
	}
	l = reg.Get(name, cfg.Amount, cfg.DryRun, bits)
	l.setStore(store, name, mode)
	reg.base.Store(&log)
	sh := &shared{reg: reg, name: name, amount: cfg.Amount}
	if store != nil {
		sh.whyQueue = "shared store " + store.Name() + ": too many connections waiting for it"
		sh.whyDown = "shared store " + store.Name() + " unreachable (failureMode closed)"
	}
	mw = func(next tcp.Handler) tcp.Handler {
		return &handler{l: l, next: next, shared: sh}
	}
	return mw, l, warns, nil
}

type handler struct {
	l    *Limiter
	next tcp.Handler
	*shared
}

// shared is what every router's handler of one middleware (of one
// Compile) shares. A configuration may hold a middleware per router, most
// of which never refuse: what a refusal needs is made on the first one.
type shared struct {
	// name is the middleware's, and whyQueue and whyDown what the record
	// of recent refusals says of a shared store's refusals
	// (tcp.Conn.NoteRefusal), built once.
	name, whyQueue, whyDown string
	amount                  int64
	why                     atomic.Pointer[string] // over the amount: made on the first refusal (whyLimit)
	// reg's logger and name make log on the first line written: a logger
	// with the middleware's fields is a buffer of its own, 500 bytes for
	// each of 100,000 middlewares that mostly never log (and the logger
	// itself, held once by the registry, 112).
	reg *Registry
	log atomic.Pointer[zerolog.Logger]
}

// logger returns the middleware's logger.
func (s *shared) logger() *zerolog.Logger {
	if l := s.log.Load(); l != nil {
		return l
	}
	l := s.reg.base.Load().With().Str("middleware", s.name).Str("middlewareType", "InFlightConn").Logger()
	s.log.CompareAndSwap(nil, &l)
	return s.log.Load()
}

// whyLimit is what the record of recent refusals says of a client over the
// amount, made once.
func (s *shared) whyLimit() string {
	if w := s.why.Load(); w != nil {
		return *w
	}
	w := fmt.Sprintf("max number of connections reached (inFlightConn.amount %d)", s.amount)
	s.why.CompareAndSwap(nil, &w)
	return *s.why.Load()
}

var _ tcp.Handler = (*handler)(nil)

// ServeTCP admits c if its client holds fewer connections than the amount,
// else refuses it: gently (an orderly close) when the rejection is logged,
// that is the first of this client in a second, with a reset when it is one
// of a flood (see tcp.Conn.Refuse).
func (h *handler) ServeTCP(c *tcp.Conn) {
	a := c.Client.Addr().Unmap()
	if r := h.l.remote.Load(); r != nil {
		h.serveRemote(c, a, *r)
		return
	}
	if ln := h.l.link.Load(); ln != nil {
		h.serveShared(c, a, ln)
		return
	}
	admitted, k := h.l.acquire(a)
	if !admitted {
		c.NoteRefusal(tcp.ReasonLimit, h.name, h.whyLimit())
		c.Refuse(c.Gently(h.l.logs.reject(h.logger(), k, false)))
		return
	}
	if h.l.dryRun.Load() && h.l.Count(k) > h.l.amount.Load() {
		h.l.logs.reject(h.logger(), k, true)
	}
	c.DeferClient(h.l)
	h.next.ServeTCP(c)
}

// serveRemote admits c by asking the process the limiter's budget was handed
// to (handover.go): c was accepted before the handover and reached the
// middleware after it. The connection waits for the answer (tcp.Conn.Later);
// admitted, it is counted here too, so that its release is forwarded like the
// others'. Ended before the answer was used, its slot is given back there.
func (h *handler) serveRemote(c *tcp.Conn, a netip.Addr, r Remote) {
	k := h.l.Key(a)
	r.Acquire(k, func(ok bool) {
		c.Later(func() {
			if !ok {
				h.l.CountRejected()
				c.NoteRefusal(tcp.ReasonLimit, h.name, h.whyLimit())
				c.Refuse(c.Gently(h.l.logs.reject(h.logger(), k, false)))
				return
			}
			h.l.add(a, 1, true)              // by its address, as its release is
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
// The connection is released by its client address: under the key that
// address has now, where a change of ipv6Subnet moved its count.
func (l *Limiter) Finish(c *tcp.Conn) { l.Release(c.Client.Addr()) }

var _ tcp.Finisher = (*Limiter)(nil)

// localOnly is the Finisher of a connection counted here but not in the
// limiter's shared store (one the remote admitted during a handover).
type localOnly Limiter

func (l *localOnly) Finish(c *tcp.Conn) {
	(*Limiter)(l).ReleaseLocal(c.Client.Addr())
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
	// At error level, as Traefik logs it (its default level is ERROR):
	// alerts on the line keep working. A dry run rejects nothing: info.
	ev := log.Error()
	msg := "Connection rejected"
	if dryRun {
		ev, msg = log.Info(), "Connection would be rejected (dry run)"
	}
	ev = ev.Str("client_ip", k.String())
	if suppressed > 0 {
		ev = ev.Uint64("suppressed", suppressed)
	}
	ev.Str("error", why).Msg(msg)
	return true
}
