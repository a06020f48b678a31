package crowdsec

import (
	"errors"
	"net/netip"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/internal/registry"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// This file is the crowdSec kind (registered in init, built by Build): the
// running bouncer of the Registry for its name, its handler,
// middleware.AddrGate, which decides at accept from the source address
// alone, as ipAllowList does, its counts and its log
// (docs/reference/middlewares/crowdsec.md), and its Keeper.

// RefusalReason is the reason crowdSec's refusals are counted under
// (tollgate_middleware_connections_total{reason="crowdsec"}): a ban, or
// failureMode closed before the first pull.
const RefusalReason = tcp.ReasonCrowdSec

func init() {
	middleware.Register(middleware.Kind[Config]{
		Name:    Key,
		Block:   func(m *config.TCPMiddleware) *Config { return m.CrowdSec },
		New:     Build,
		Keeper:  func(middleware.Options) middleware.Keeper { return &Keeper{} },
		Metrics: metrics,
	})
}

// Bouncers returns the crowdSec middlewares' Keeper among ks (nil when ks
// is nil, or the kind is not registered).
func Bouncers(ks *middleware.Keepers) *Keeper { return middleware.KeeperOf[*Keeper](ks, Key) }

// Keeper is the state of a proxy's crowdSec middlewares that outlives
// reloads: the running bouncers (Registry) and each middleware's Live by
// qualified name. The zero value is ready to use; it is safe for
// concurrent use.
type Keeper struct {
	reg   Registry
	lives registry.Registry[*Live]
}

var _ middleware.Keeper = (*Keeper)(nil)

// Build validates cfg and returns the middleware spec names (qualified),
// whose Live is its *Live, with the bouncer's warnings; its bouncer is the
// Keepers' (Bouncers). Offline (tollgate check) no file is read and no
// bouncer started.
func Build(spec middleware.Spec, cfg *Config) (middleware.Built, error) {
	k := Bouncers(spec.Keepers)
	if k == nil {
		return middleware.Built{}, errors.New(Key + ": no keeper to run its bouncer in")
	}
	if cfg == nil {
		return middleware.Built{}, errors.New(Key + ": no configuration")
	}
	var b *Bouncer
	var warns []error
	var err error
	if spec.Offline {
		b, warns, err = newOffline(spec.Name, cfg)
	} else {
		b, warns, err = k.reg.Get(spec.Name, cfg, spec.Log)
	}
	if err != nil {
		return middleware.Built{}, err
	}
	live := k.live(spec.Name, b)
	g := &middleware.AddrGate[Decision]{
		Name:   spec.Name,
		Reason: RefusalReason,
		Decide: func(a netip.Addr) (Decision, bool) {
			d := b.Decide(a)
			return d, d.Allow
		},
		Note:   func(d Decision) string { return refusalMessages[d.Reason] },
		Why:    Decision.String,
		Counts: &live.AddrCounts,
		Log:    b.log,
	}
	return middleware.Built{Middleware: g.Middleware(), Live: live, Warnings: middleware.WarningsOf(warns)}, nil
}

// newOffline validates cfg and returns a bouncer that is never started
// (it answers by its failure mode).
func newOffline(name string, cfg *Config) (*Bouncer, []error, error) {
	s, warns, err := validate(cfg)
	if err != nil {
		return nil, nil, err
	}
	b := &Bouncer{name: name, cfg: *cfg, s: s, log: zerolog.Nop()}
	b.tab.Store(&table{})
	return b, warns, nil
}

// live returns name's Live, made on first use, now reading b.
func (k *Keeper) live(name string, b *Bouncer) *Live {
	l := k.lives.Get(name, func(*Live) bool { return true }, func() *Live { return &Live{} })
	l.b.Store(b)
	return l
}

// Each calls f for every crowdSec middleware's state, by name.
func (k *Keeper) Each(f func(name string, l *Live)) { k.lives.Each(f) }

// Sweep stops the bouncers of the middlewares not in keep (a middleware of
// an older table answers from their last decisions). The counts are kept,
// as ipAllowList's are.
func (k *Keeper) Sweep(keep map[string]bool) { k.reg.Sweep(keep) }

// Close stops every bouncer.
func (k *Keeper) Close() { k.reg.Close() }

// metrics is the kind's Kind.Metrics.
func metrics(k middleware.Keeper, f func(name string, c middleware.Counts)) {
	middleware.AddrMetrics(k.(*Keeper).lives.All(), RefusalReason, f)
}

// Live is a crowdSec middleware's state for the API and metrics: what it
// decided (Counts), and its bouncer.
type Live struct {
	middleware.AddrCounts
	b atomic.Pointer[Bouncer]
}

// Bouncer returns the state of the middleware's bouncer (nil before one).
func (l *Live) Bouncer() *Status {
	b := l.b.Load()
	if b == nil {
		return nil
	}
	st := b.Status()
	return &st
}

var _ middleware.Viewer = (*Live)(nil)

// View is what the API shows beside the middleware's configuration: its
// bouncer (crowdSecBouncer).
func (l *Live) View(int) map[string]any {
	if st := l.Bouncer(); st != nil {
		return map[string]any{"crowdSecBouncer": st}
	}
	return nil
}

// What the record of recent refusals says (tcp.Conn.NoteRefusal: built
// once, never per connection); the log line names the ban.
var refusalMessages = [...]string{
	ReasonBanned:       "banned by CrowdSec",
	ReasonNotReady:     Decision{Reason: ReasonNotReady}.String(),
	ReasonNone:         "",
	ReasonNotReadyOpen: "",
}
