// Package geoip decides at accept, from the peer address alone, whether a
// client may connect by where MaxMind-format databases place it: config.go
// is the geoIP block (Config) and its one validation (country codes from
// iso.go, continents, ASNs, the unknown/private/loopback policies), every
// error and warning a *config.FieldError naming its field; database.go reads
// a .mmdb file whole, walks its whole tree and decodes each record's country,
// continent and autonomous system once (a damaged file is refused there), and keeps the last good
// version of each file in a Pool that watches it (a file replaced as
// geoipupdate replaces it is used from the next look on; a broken
// replacement leaves the last good version serving, with a warning); this
// file is the Middleware, whose Decide answers allow or deny with a Reason
// for a netip.Addr without allocating; wire.go is the kind as the
// middleware registry knows it (Build: one Pool per proxy in its Keeper,
// the handler, middleware.AddrGate, its counts, its log).
package geoip

import (
	"errors"
	"net/netip"
)

// Reason says why Decide decided as it did.
type Reason uint8

// The reasons, in the order Decide tries them.
const (
	ReasonNone             Reason = iota
	ReasonLoopback                // a loopback address: the loopback policy
	ReasonPrivate                 // a private, shared or link-local address: the private policy
	ReasonUnknown                 // the databases know nothing the rules consult: the unknown policy
	ReasonDeniedCountry           // the country is in denyCountries
	ReasonDeniedContinent         // the continent is in denyContinents
	ReasonDeniedASN               // the autonomous system is in denyASNs
	ReasonAllowedCountry          // the country is in allowCountries
	ReasonAllowedContinent        // the continent is in allowContinents
	ReasonAllowedASN              // the autonomous system is in allowASNs
	ReasonNotAllowed              // allow lists are set and none matches
	ReasonNoDeny                  // no allow list is set and no deny list matches
	numReasons
)

var reasonNames = [numReasons]string{"", "loopback", "private", "unknown", "denied_country", "denied_continent",
	"denied_asn", "allowed_country", "allowed_continent", "allowed_asn", "not_allowed", "not_denied"}

// String is the reason's name, for metrics labels and logs.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "invalid"
}

// Decision is Decide's answer: whether the client may connect, why, and what
// the databases said of it (zero values where they said nothing).
type Decision struct {
	Allow     bool
	Reason    Reason
	Country   [2]byte // ISO 3166-1 alpha-2
	Continent [2]byte
	ASN       uint32
}

// String says the decision in words, for logs and the record of refusals
// (it allocates; Decide does not).
func (d Decision) String() string {
	verb := "denied"
	if d.Allow {
		verb = "allowed"
	}
	what := ""
	switch d.Reason {
	case ReasonLoopback:
		return verb + ": loopback address (geoIP.loopback)"
	case ReasonPrivate:
		return verb + ": private address (geoIP.private)"
	case ReasonUnknown:
		return verb + ": address unknown to the databases (geoIP.unknown)"
	case ReasonDeniedCountry:
		what = "country " + string(d.Country[:]) + " in geoIP.denyCountries"
	case ReasonDeniedContinent:
		what = "continent " + string(d.Continent[:]) + " in geoIP.denyContinents"
	case ReasonDeniedASN:
		what = "AS" + itoa(d.ASN) + " in geoIP.denyASNs"
	case ReasonAllowedCountry:
		what = "country " + string(d.Country[:]) + " in geoIP.allowCountries"
	case ReasonAllowedContinent:
		what = "continent " + string(d.Continent[:]) + " in geoIP.allowContinents"
	case ReasonAllowedASN:
		what = "AS" + itoa(d.ASN) + " in geoIP.allowASNs"
	case ReasonNotAllowed:
		what = "not in the allow lists (" + d.placed() + ")"
	case ReasonNoDeny:
		what = "in no deny list (" + d.placed() + ")"
	default:
		return verb
	}
	return verb + ": " + what
}

func (d Decision) placed() string {
	s := ""
	if d.Country != [2]byte{} {
		s = "country " + string(d.Country[:])
	}
	if d.Continent != [2]byte{} {
		if s != "" {
			s += ", "
		}
		s += "continent " + string(d.Continent[:])
	}
	if d.ASN != 0 {
		if s != "" {
			s += ", "
		}
		s += "AS" + itoa(d.ASN)
	}
	return s
}

func itoa(n uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// Middleware is one geoIP block, compiled: its rules and the databases it
// reads. It is immutable and safe for concurrent use; the databases it
// holds change under it as their files are replaced.
type Middleware struct {
	name string
	p    *policy
	dbs  []*Database
}

// New validates the geoIP block named name (qualified) and returns its
// middleware, with the databases from pool (read when the pool does not
// hold them yet). A block that applies but perhaps not as meant comes with
// warnings; a block that cannot apply is an error naming the field (a
// *config.FieldError), and so is a database file that is missing or not a
// valid database at this point (its message names the file): the
// middleware, and so its routers, then fail closed.
func New(name string, cfg *Config, pool *Pool) (*Middleware, []error, error) {
	if cfg == nil {
		return nil, nil, errors.New(Key + ": no configuration")
	}
	p, warns, err := validate(cfg)
	if err != nil {
		return nil, nil, err
	}
	m := &Middleware{name: name, p: p}
	seen := map[*Database]bool{}
	for i, path := range cfg.Databases {
		d, err := pool.Get(path)
		if err != nil {
			return nil, nil, fieldErr(i, err)
		}
		if !seen[d] {
			seen[d] = true
			m.dbs = append(m.dbs, d)
		}
	}
	return m, warns, nil
}

// Name is the middleware's qualified name.
func (m *Middleware) Name() string { return m.name }

// Databases are the databases m reads, in its order.
func (m *Middleware) Databases() []*Database { return m.dbs }

// shared is 100.64.0.0/10 (RFC 6598), which netip does not call private.
var shared = netip.MustParsePrefix("100.64.0.0/10")

// Decide says whether a client connecting from a may pass, and why. It
// reads nothing from the client, and does not allocate: one tree walk per
// database and a map read. IPv4-mapped IPv6 addresses are taken as IPv4.
func (m *Middleware) Decide(a netip.Addr) Decision {
	a = a.Unmap().WithZone("")
	p := m.p
	switch {
	case a.IsLoopback():
		if !p.loopbackLookup {
			return Decision{Allow: p.loopbackAllow, Reason: ReasonLoopback}
		}
	case a.IsPrivate() || a.IsLinkLocalUnicast() || shared.Contains(a):
		if !p.privateLookup {
			return Decision{Allow: p.privateAllow, Reason: ReasonPrivate}
		}
	}
	var at attrs
	for _, d := range m.dbs {
		l := d.cur.Load()
		if l == nil {
			continue
		}
		got, ok := l.lookup(a)
		if !ok {
			continue
		}
		if at.country == [2]byte{} {
			at.country = got.country
		}
		if at.continent == [2]byte{} {
			at.continent = got.continent
		}
		if at.asn == 0 {
			at.asn = got.asn
		}
	}
	dec := Decision{Country: at.country, Continent: at.continent, ASN: at.asn}
	hasCountry := p.useCountry && at.country != [2]byte{}
	hasContinent := p.useContinent && at.continent != [2]byte{}
	hasASN := p.useASN && at.asn != 0
	if !hasCountry && !hasContinent && !hasASN {
		dec.Allow, dec.Reason = p.unknownAllow, ReasonUnknown
		return dec
	}
	switch {
	case hasCountry && p.denyCountry.has(at.country):
		dec.Reason = ReasonDeniedCountry
		return dec
	case hasContinent && p.denyContinent&continentBit(at.continent) != 0:
		dec.Reason = ReasonDeniedContinent
		return dec
	case hasASN && inSet(p.denyASN, at.asn):
		dec.Reason = ReasonDeniedASN
		return dec
	}
	if !p.hasAllow {
		dec.Allow, dec.Reason = true, ReasonNoDeny
		return dec
	}
	dec.Allow = true
	switch {
	case hasCountry && p.allowCountry.has(at.country):
		dec.Reason = ReasonAllowedCountry
	case hasContinent && p.allowContinent&continentBit(at.continent) != 0:
		dec.Reason = ReasonAllowedContinent
	case hasASN && inSet(p.allowASN, at.asn):
		dec.Reason = ReasonAllowedASN
	default:
		dec.Allow, dec.Reason = false, ReasonNotAllowed
	}
	return dec
}

func inSet(m map[uint32]struct{}, n uint32) bool {
	if m == nil {
		return false
	}
	_, ok := m[n]
	return ok
}
