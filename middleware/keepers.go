package middleware

import (
	"strings"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Keeper is a kind's state that outlives reloads, keyed by qualified
// middleware name (a limiter registry, the databases a geoIP reads, the
// running CrowdSec bouncers): one per proxy state, made by the kind's
// Kind.Keeper, reached by the kind's constructor through Spec.Keepers.
type Keeper interface {
	// Sweep is given, after each configuration is applied, the names of
	// the kind's middlewares it built: the state of the others may go
	// (each kind says what it keeps for a while, such as a limiter still
	// counting connections).
	Sweep(keep map[string]bool)
	// Close stops what it runs in the background; the state is not used
	// after.
	Close()
}

// Store is a shared store of the static configuration (stores.<name>), in
// which a kind keeps state common to several replicas; the kind that uses
// it knows its type (inflightconn.Store).
type Store interface {
	Name() string
}

// StoresOf is stores as Options.Stores takes them.
func StoresOf[S Store](stores map[string]S) map[string]Store {
	out := make(map[string]Store, len(stores))
	for name, s := range stores {
		out[name] = s
	}
	return out
}

// Options are what the Keepers are made with: the parts of the static
// configuration and the process the kinds' state needs.
type Options struct {
	// Log is where the kinds' state logs.
	Log zerolog.Logger
	// Stores are the shared stores of the static configuration, by name
	// (nil: none; tollgate check gives stores that are never reached).
	Stores map[string]Store
}

// Keepers are a proxy state's Keeper of each registered kind that has one.
// They are safe for concurrent use (each Keeper is).
type Keepers struct {
	kinds []kind
	by    map[string]Keeper
}

// NewKeepers makes the Keeper of every registered kind that has one.
func NewKeepers(o Options) *Keepers {
	ks := &Keepers{kinds: registered(), by: map[string]Keeper{}}
	for _, k := range ks.kinds {
		if kp := k.keeper(o); kp != nil {
			ks.by[k.name()] = kp
		}
	}
	return ks
}

// KeeperOf returns the Keeper of the named kind as its type K; the zero K
// when ks is nil or the kind is not registered or has none. Each kind
// wraps it in an accessor of its own (inflightconn.Limiters).
func KeeperOf[K Keeper](ks *Keepers, kind string) K {
	var zero K
	if ks == nil {
		return zero
	}
	k, ok := ks.by[kind].(K)
	if !ok {
		return zero
	}
	return k
}

// Sweep gives each Keeper the names of its kind's middlewares in built
// (qualified name -> kind name): the middlewares a configuration built.
func (ks *Keepers) Sweep(built map[string]string) {
	keep := make(map[string]map[string]bool, len(ks.by))
	for kind := range ks.by {
		keep[kind] = map[string]bool{}
	}
	for name, kind := range built {
		if m := keep[kind]; m != nil {
			m[name] = true
		}
	}
	for _, k := range ks.kinds {
		if kp := ks.by[k.name()]; kp != nil {
			kp.Sweep(keep[k.name()])
		}
	}
}

// Close closes every Keeper.
func (ks *Keepers) Close() {
	for _, k := range ks.kinds {
		if kp := ks.by[k.name()]; kp != nil {
			kp.Close()
		}
	}
}

// Counts calls f with the decisions of every middleware whose state a
// Keeper holds, kind by kind in their order, in no order within a kind
// (the history and /metrics read it every second or scrape, and order
// nothing by it). f must not keep c.Reasons: a kind reuses its array.
func (ks *Keepers) Counts(f func(name string, c Counts)) {
	for _, k := range ks.kinds {
		typ := strings.ToLower(k.name())
		k.counts(ks.by[k.name()], func(name string, c Counts) {
			c.Type = typ
			f(name, c)
		})
	}
}

// Counts are one middleware's decisions since its state was made, as
// tollgate_middleware_connections_total and the API's history count them.
type Counts struct {
	// Type is the kind's name lower-cased (inflightconn), set by
	// Keepers.Counts.
	Type string
	// Admitted and Rejected are the connections it passed on and refused
	// (would have refused, in dry run) in all.
	Admitted, Rejected uint64
	// DryRun: it refuses nothing; the history counts no refusal of it.
	DryRun bool
	// InFlight and Clients are the connections it holds open now and the
	// clients holding them, for the kinds that count them.
	InFlight, Clients int64
	// Reasons are its refusals by reason (tcp.Reason's String is the
	// metric's reason label), valid during the call that gives them.
	Reasons []Refused
}

// Refused is a middleware's refusals for one reason.
type Refused struct {
	Reason tcp.Reason
	N      uint64
	// WouldBe: counted in dry run, nothing refused
	// (result="would_reject").
	WouldBe bool
}

// A Viewer is a Live that the API shows beside its middleware's
// configuration (GET /api/rawdata, /api/tcp/middlewares): View returns its
// members by JSON key, none when nil; top bounds the clients it lists.
type Viewer interface {
	View(top int) map[string]any
}

// A ClientLister is a Live whose clients the API lists (GET
// /api/tcp/middlewares/{name}/clients): the top busiest.
type ClientLister interface {
	Clients(top int) any
}
