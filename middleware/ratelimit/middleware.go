package ratelimit

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// DefaultPeriod is the period of a block that does not set one, as in Traefik.
const DefaultPeriod = time.Second

// validate is the one rule for a rateLimit block: every reader (the
// providers, tollgate check) reaches it through New. It returns the rule to
// enforce, and warnings, each on its field, for a block that applies but
// probably not as meant.
func validate(cfg *config.TCPRateLimit) (r Rule, warns []middleware.Warning, err error) {
	if cfg.Average < 0 {
		return Rule{}, nil, config.FieldErrorf("rateLimit.average", "rateLimit.average %d is negative: set the connections one client IP may open per period (0 means no limit)", cfg.Average)
	}
	r = Rule{Average: cfg.Average, Period: DefaultPeriod, Burst: 1, DryRun: cfg.DryRun}
	if p := cfg.Period; p != nil {
		if *p <= 0 {
			return Rule{}, nil, config.FieldErrorf("rateLimit.period", "rateLimit.period %s is not positive: the period must be longer than 0 (leave it out for %s)", time.Duration(*p), DefaultPeriod)
		}
		r.Period = time.Duration(*p)
	}
	if b := cfg.IPv6Subnet; b != nil && (*b < 1 || *b > 128) {
		return Rule{}, nil, config.FieldErrorf("rateLimit.ipv6Subnet", "rateLimit.ipv6Subnet %d is out of range 1..128", *b)
	}
	if cfg.Average == 0 {
		return r, []middleware.Warning{{Field: "rateLimit.average", Message: "rateLimit.average is 0: no connection is rate-limited (as in Traefik); set a positive average to limit"}}, nil
	}
	if b := cfg.Burst; b != nil {
		if *b < 1 {
			return r, []middleware.Warning{{Field: "rateLimit.burst", Message: fmt.Sprintf("rateLimit.burst %d is less than 1: the bucket holds 1 connection, as in Traefik", *b)}}, nil
		}
		r.Burst = *b
	}
	return r, nil, nil
}

// New validates the rateLimit block named spec.Name (qualified) and
// returns its middleware, backed by the limiter for that name in the
// Keepers' Registry (Limiters), which is its Live. A block that applies
// but probably not as meant (average 0, burst below 1) comes with a
// warning on that field; a block that cannot apply (a negative average, a
// period that is not positive, ipv6Subnet outside 1..128) is an error
// naming the field, and nothing is registered.
func New(spec middleware.Spec, cfg *config.TCPRateLimit) (middleware.Built, error) {
	reg := Limiters(spec.Keepers)
	if reg == nil {
		return middleware.Built{}, errors.New("rateLimit: no registry to keep its limiter in")
	}
	mw, l, warns, err := newMiddleware(spec.Name, cfg, reg, spec.Log)
	if err != nil {
		return middleware.Built{}, err
	}
	return middleware.Built{Middleware: mw, Live: l, Warnings: warns}, nil
}

// newMiddleware is New with the registry given.
func newMiddleware(name string, cfg *config.TCPRateLimit, reg *Registry, log zerolog.Logger) (mw tcp.Middleware, l *Limiter, warns []middleware.Warning, err error) {
	if cfg == nil {
		return nil, nil, nil, errors.New("rateLimit: no configuration")
	}
	r, warns, err := validate(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	bits := 0
	if cfg.IPv6Subnet != nil {
		bits = *cfg.IPv6Subnet
	}
	l = reg.Get(name, r, bits)
	log = log.With().Str("middleware", name).Str("middlewareType", "RateLimit").Logger()
	why := fmt.Sprintf("connection rate limit reached (average %d per %s, burst %d)", r.Average, r.Period, r.Burst)
	mw = func(next tcp.Handler) tcp.Handler {
		return &handler{l: l, next: next, log: log, name: name, why: why}
	}
	return mw, l, warns, nil
}

type handler struct {
	l    *Limiter
	next tcp.Handler
	log  zerolog.Logger
	// name is the middleware's, why what the record of recent refusals
	// says of a refusal (tcp.Conn.NoteRefusal), built once.
	name, why string
}

var _ tcp.Handler = (*handler)(nil)

// ServeTCP admits c if its client's bucket holds a connection, else refuses
// it: gently (an orderly close) when the rejection is logged, that is the
// first of this client in a second, with a reset when it is one of a flood
// (see tcp.Conn.Refuse). It holds nothing for the connection's lifetime: the
// decision is the whole of its work.
func (h *handler) ServeTCP(c *tcp.Conn) {
	k, admit, over := h.l.AllowAddr(c.Client.Addr())
	if !admit {
		c.NoteRefusal(tcp.ReasonRate, h.name, h.why)
		c.Refuse(c.Gently(h.l.logs.reject(&h.log, k, h.l.Rule(), false)))
		return
	}
	if over {
		h.l.logs.reject(&h.log, k, h.l.Rule(), true)
	}
	h.next.ServeTCP(c)
}

// Rejection logging: operators alert on "connection rate limit reached for
// <ip>", but a flood must not become a log flood: at most one line per client
// key per second and ratelog's default number of lines per second per
// limiter; the next line written says how many were suppressed. Metrics
// count every rejection.
const logLinesPerSecond = ratelog.DefaultPerSecond

type rejectLog struct{ rl ratelog.Limiter }

// reject logs a rejection unless it is one of a flood; it reports whether
// it did.
func (r *rejectLog) reject(log *zerolog.Logger, k netip.Addr, ru Rule, dryRun bool) bool {
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
	ev.Str("error", fmt.Sprintf("connection rate limit reached for %s (average %d per %s, burst %d)", k, ru.Average, ru.Period, ru.Burst)).Msg(msg)
	return true
}
