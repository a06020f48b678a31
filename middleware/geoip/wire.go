package geoip

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/internal/registry"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// This file is the geoIP kind (registered in init, built by Build): its
// handler, middleware.AddrGate, which decides at accept from the source
// address alone, as ipAllowList does, its counts and its log
// (docs/reference/middlewares/geoip.md), and its Keeper.

// RefusalReason is the reason geoIP's refusals are counted under
// (tollgate_middleware_connections_total{reason="geoip"}).
const RefusalReason = tcp.ReasonGeoIP

func init() {
	middleware.Register(middleware.Kind[Config]{
		Name:    Key,
		Block:   func(m *config.TCPMiddleware) *Config { return m.GeoIP },
		New:     Build,
		Keeper:  func(middleware.Options) middleware.Keeper { return &Keeper{} },
		Metrics: metrics,
	})
}

// Middlewares returns the geoIP middlewares' Keeper among ks (nil when ks
// is nil, or the kind is not registered).
func Middlewares(ks *middleware.Keepers) *Keeper { return middleware.KeeperOf[*Keeper](ks, Key) }

// Keeper is the state of a proxy's geoIP middlewares that outlives
// reloads: the databases (one Pool) and each middleware's Live by
// qualified name. The zero value is ready to use; it is safe for
// concurrent use.
type Keeper struct {
	once  sync.Once
	p     *Pool
	lives registry.Registry[*Live]
}

var _ middleware.Keeper = (*Keeper)(nil)

// Build validates cfg and returns the middleware spec names (qualified),
// whose Live is its *Live, with New's warnings; its Keeper is the Keepers'
// (Middlewares). Offline (tollgate check) no database is read: they are
// the serving host's files.
func Build(spec middleware.Spec, cfg *Config) (middleware.Built, error) {
	k := Middlewares(spec.Keepers)
	if k == nil {
		return middleware.Built{}, errors.New(Key + ": no keeper to keep its databases in")
	}
	if cfg == nil {
		return middleware.Built{}, errors.New(Key + ": no configuration")
	}
	var m *Middleware
	var warns []error
	var err error
	if spec.Offline {
		m, warns, err = newOffline(spec.Name, cfg)
	} else {
		m, warns, err = New(spec.Name, cfg, k.pool(spec.Log))
	}
	if err != nil {
		return middleware.Built{}, err
	}
	live := k.live(spec.Name, m)
	g := &middleware.AddrGate[Decision]{
		Name:   spec.Name,
		Reason: RefusalReason,
		Decide: func(a netip.Addr) (Decision, bool) {
			d := m.Decide(a)
			return d, d.Allow
		},
		Note:   refusalMessages(cfg).of,
		Why:    func(d Decision) string { return "geoIP " + d.String() },
		Counts: &live.AddrCounts,
		Log:    spec.Log.With().Str("middleware", spec.Name).Str("middlewareType", "GeoIP").Logger(),
	}
	return middleware.Built{Middleware: g.Middleware(), Live: live, Warnings: middleware.WarningsOf(warns)}, nil
}

// newOffline validates cfg and returns a middleware that reads no
// database (every address unknown to it).
func newOffline(name string, cfg *Config) (*Middleware, []error, error) {
	p, warns, err := validate(cfg)
	if err != nil {
		return nil, nil, err
	}
	return &Middleware{name: name, p: p}, warns, nil
}

// pool is the keeper's Pool, made at the first call with log for its
// reloads and warnings.
func (k *Keeper) pool(log zerolog.Logger) *Pool {
	k.once.Do(func() { k.p = &Pool{Log: log.With().Str("middlewareType", "GeoIP").Logger()} })
	return k.p
}

// live returns name's Live, made on first use, now reading m's databases.
func (k *Keeper) live(name string, m *Middleware) *Live {
	l := k.lives.Get(name, func(*Live) bool { return true }, func() *Live { return &Live{} })
	dbs := m.Databases()
	l.dbs.Store(&dbs)
	return l
}

// Each calls f for every geoIP middleware's state, by name.
func (k *Keeper) Each(f func(name string, l *Live)) { k.lives.Each(f) }

// Sweep stops watching the databases that no middleware in keep reads (a
// middleware of an older table keeps its last version). The counts are
// kept, as ipAllowList's are: their series count from the process's start.
func (k *Keeper) Sweep(keep map[string]bool) {
	paths := map[string]bool{}
	k.lives.Each(func(name string, l *Live) {
		if !keep[name] {
			return
		}
		if dbs := l.dbs.Load(); dbs != nil {
			for _, d := range *dbs {
				paths[d.Path()] = true
			}
		}
	})
	k.pool(zerolog.Nop()).Sweep(paths)
}

// Close stops watching every database.
func (k *Keeper) Close() { k.pool(zerolog.Nop()).Close() }

// metrics is the kind's Kind.Metrics.
func metrics(k middleware.Keeper, f func(name string, c middleware.Counts)) {
	middleware.AddrMetrics(k.(*Keeper).lives.All(), RefusalReason, f)
}

// Live is a geoIP middleware's state for the API and metrics: what it
// decided (Counts), and the databases it reads.
type Live struct {
	middleware.AddrCounts
	dbs atomic.Pointer[[]*Database]
}

// ShownDatabase is a database as the API shows it beside the middleware's
// configuration.
type ShownDatabase struct {
	Path string `json:"path"`
	DatabaseStatus
}

// Databases are the databases the middleware reads: each one's path, type,
// build date, networks, reloads and last error.
func (l *Live) Databases() []ShownDatabase {
	p := l.dbs.Load()
	if p == nil || len(*p) == 0 {
		return nil
	}
	out := make([]ShownDatabase, len(*p))
	for i, d := range *p {
		out[i] = ShownDatabase{Path: d.Path(), DatabaseStatus: d.Status()}
	}
	return out
}

var _ middleware.Viewer = (*Live)(nil)

// View is what the API shows beside the middleware's configuration: its
// databases (geoIPDatabases), when it reads any.
func (l *Live) View(int) map[string]any {
	if dbs := l.Databases(); dbs != nil {
		return map[string]any{"geoIPDatabases": dbs}
	}
	return nil
}

// messages are what the record of recent refusals says of each refusal
// (tcp.Conn.NoteRefusal: built once, never per connection): by reason,
// and for a denied country, continent or AS by the value denied.
type messages struct {
	byReason  [numReasons]string
	country   map[[2]byte]string
	continent map[[2]byte]string
	asn       map[uint32]string
}

func refusalMessages(cfg *Config) *messages {
	m := &messages{country: map[[2]byte]string{}, continent: map[[2]byte]string{}, asn: map[uint32]string{}}
	for r := Reason(0); r < numReasons; r++ {
		m.byReason[r] = Decision{Reason: r}.String()
	}
	for _, s := range cfg.DenyCountries {
		if c, ok := parseCountry(s); ok {
			m.country[c] = Decision{Reason: ReasonDeniedCountry, Country: c}.String()
		}
	}
	for _, s := range cfg.DenyContinents {
		if len(s) == 2 {
			c := [2]byte{upper(s[0]), upper(s[1])}
			m.continent[c] = Decision{Reason: ReasonDeniedContinent, Continent: c}.String()
		}
	}
	for _, s := range cfg.DenyASNs {
		if n, err := parseASN(s); err == nil {
			m.asn[n] = Decision{Reason: ReasonDeniedASN, ASN: n}.String()
		}
	}
	m.byReason[ReasonNotAllowed] = "denied: not in the allow lists"
	m.byReason[ReasonDeniedCountry] = "denied: country in geoIP.denyCountries"
	m.byReason[ReasonDeniedContinent] = "denied: continent in geoIP.denyContinents"
	m.byReason[ReasonDeniedASN] = "denied: autonomous system in geoIP.denyASNs"
	return m
}

func (m *messages) of(d Decision) string {
	var s string
	switch d.Reason {
	case ReasonDeniedCountry:
		s = m.country[d.Country]
	case ReasonDeniedContinent:
		s = m.continent[d.Continent]
	case ReasonDeniedASN:
		s = m.asn[d.ASN]
	}
	if s == "" && d.Reason < numReasons {
		s = m.byReason[d.Reason]
	}
	return s
}
