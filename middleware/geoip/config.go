package geoip

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tollgate-proxy/tollgate/config"
)

// Key is the key a geoIP block is written under (tcp.middlewares.<name>.geoIP);
// every error and warning names its field below it.
const Key = "geoIP"

// Config is a geoIP block: which clients may connect, by where the
// databases place them (its fields: config.TCPGeoIP, where every reader of
// the configuration finds it). The zero value is not valid (it names no
// database and no rule).
type Config = config.TCPGeoIP

// Policy values. Lookup, for private and loopback addresses only, looks
// them up in the databases as any other (a database of one's own that
// places internal networks, or a test's loopback clients); what the
// databases do not place then follows unknown.
const (
	Allow  = "allow"
	Deny   = "deny"
	Lookup = "lookup"
)

// policy is a validated Config, precomputed for Decide: country and
// continent codes as bits of fixed tables, ASNs in maps.
type policy struct {
	allowCountry, denyCountry     countrySet
	allowContinent, denyContinent uint8 // bit i: continents[i]
	allowASN, denyASN             map[uint32]struct{}
	hasAllow                      bool
	// which attributes any rule consults (an address is unknown when the
	// databases give none of them)
	useCountry, useContinent, useASN bool
	unknownAllow, privateAllow       bool
	loopbackAllow                    bool
	// private and loopback addresses looked up like public ones (policy
	// "lookup"), instead of decided by privateAllow, loopbackAllow
	privateLookup, loopbackLookup bool
}

// countrySet is a set of two-letter codes: bit (a-'A')*26+(b-'A').
type countrySet [(26*26 + 63) / 64]uint64

func codeIndex(c [2]byte) (int, bool) {
	if c[0] < 'A' || c[0] > 'Z' || c[1] < 'A' || c[1] > 'Z' {
		return 0, false
	}
	return int(c[0]-'A')*26 + int(c[1]-'A'), true
}

func (s *countrySet) add(c [2]byte) {
	if i, ok := codeIndex(c); ok {
		s[i/64] |= 1 << (i % 64)
	}
}

func (s *countrySet) has(c [2]byte) bool {
	i, ok := codeIndex(c)
	return ok && s[i/64]&(1<<(i%64)) != 0
}

func (s *countrySet) empty() bool {
	for _, w := range s {
		if w != 0 {
			return false
		}
	}
	return true
}

// continents are the continent codes MaxMind-format databases use.
var continents = [...]string{"AF", "AN", "AS", "EU", "NA", "OC", "SA"}

func continentBit(c [2]byte) uint8 {
	for i, k := range continents {
		if c[0] == k[0] && c[1] == k[1] {
			return 1 << i
		}
	}
	return 0
}

// validate is the one rule for a geoIP block: every reader reaches it through
// New. It does no I/O. Errors and warnings are *config.FieldError naming the
// field (geoIP.allowCountries[2]); the first error is returned.
func validate(cfg *Config) (*policy, []error, error) {
	w := &warnings{}
	if err := checkDatabases(cfg.Databases, w); err != nil {
		return nil, nil, err
	}
	p := &policy{}
	for _, step := range []func(*Config, *warnings) error{p.countries, p.continents, p.asns} {
		if err := step(cfg, w); err != nil {
			return nil, nil, err
		}
	}
	p.useCountry = !p.allowCountry.empty() || !p.denyCountry.empty()
	p.useContinent = p.allowContinent|p.denyContinent != 0
	p.useASN = len(p.allowASN)+len(p.denyASN) > 0
	p.hasAllow = !p.allowCountry.empty() || p.allowContinent != 0 || len(p.allowASN) > 0
	if !p.useCountry && !p.useContinent && !p.useASN {
		return nil, nil, fail(Key, "no rule: set allowCountries, allowContinents, allowASNs, denyCountries, denyContinents or denyASNs")
	}
	var err error
	if p.unknownAllow, err = parsePolicy(cfg.Unknown, Key+".unknown", !p.hasAllow); err != nil {
		return nil, nil, err
	}
	if p.privateLookup = strings.EqualFold(cfg.Private, Lookup); !p.privateLookup {
		if p.privateAllow, err = parsePolicy(cfg.Private, Key+".private", true); err != nil {
			return nil, nil, err
		}
	}
	if p.loopbackLookup = strings.EqualFold(cfg.Loopback, Lookup); !p.loopbackLookup {
		if p.loopbackAllow, err = parsePolicy(cfg.Loopback, Key+".loopback", true); err != nil {
			return nil, nil, err
		}
	}
	return p, w.list, nil
}

// warnings collects validate's warnings, each naming its field.
type warnings struct{ list []error }

func (w *warnings) add(field, format string, args ...any) {
	w.list = append(w.list, config.FieldErrorf(field, "%s: "+format, append([]any{field}, args...)...))
}

// fail is validate's error on field.
func fail(field, format string, args ...any) error {
	return config.FieldErrorf(field, "%s: "+format, append([]any{field}, args...)...)
}

func checkDatabases(dbs []string, w *warnings) error {
	if len(dbs) == 0 {
		return fail(Key+".databases", "no database: name at least one MaxMind-format .mmdb file")
	}
	seenDB := map[string]int{}
	for i, p := range dbs {
		field := fmt.Sprintf("%s.databases[%d]", Key, i)
		clean, err := CleanPath(p)
		if err != nil {
			return fail(field, "%v", err)
		}
		if j, dup := seenDB[clean]; dup {
			w.add(field, "%s is databases[%d] again: it is read once", short(p), j)
		}
		seenDB[clean] = i
	}
	return nil
}

// countries reads allowCountries and denyCountries into p.
func (p *policy) countries(cfg *Config, w *warnings) error {
	lists := []struct {
		name  string
		codes []string
		set   *countrySet
	}{
		{"allowCountries", cfg.AllowCountries, &p.allowCountry},
		{"denyCountries", cfg.DenyCountries, &p.denyCountry},
	}
	for _, l := range lists {
		for i, s := range l.codes {
			field := fmt.Sprintf("%s.%s[%d]", Key, l.name, i)
			c, ok := parseCountry(s)
			if !ok {
				return fail(field, "%s is not an ISO 3166-1 alpha-2 code (two letters such as FR, US, JP)", short(s))
			}
			if l.set.has(c) {
				w.add(field, "%s is listed twice", short(s))
			}
			l.set.add(c)
		}
	}
	for i, s := range cfg.DenyCountries {
		if c, _ := parseCountry(s); p.allowCountry.has(c) {
			w.add(fmt.Sprintf("%s.denyCountries[%d]", Key, i), "%s is in allowCountries too: it is denied (a deny wins)", short(s))
		}
	}
	return nil
}

// continents reads allowContinents and denyContinents into p.
func (p *policy) continents(cfg *Config, w *warnings) error {
	for li, l := range [][]string{cfg.AllowContinents, cfg.DenyContinents} {
		name, bits := "allowContinents", &p.allowContinent
		if li == 1 {
			name, bits = "denyContinents", &p.denyContinent
		}
		for i, s := range l {
			field := fmt.Sprintf("%s.%s[%d]", Key, name, i)
			b := uint8(0)
			if len(s) == 2 {
				b = continentBit([2]byte{upper(s[0]), upper(s[1])})
			}
			if b == 0 {
				return fail(field, "%s is not a continent code (one of %s)", short(s), strings.Join(continents[:], ", "))
			}
			if *bits&b != 0 {
				w.add(field, "%s is listed twice", short(s))
			}
			*bits |= b
		}
	}
	if both := p.allowContinent & p.denyContinent; both != 0 {
		w.add(Key+".denyContinents", "a continent is in allowContinents too: it is denied (a deny wins)")
	}
	return nil
}

// asns reads allowASNs and denyASNs into p.
func (p *policy) asns(cfg *Config, w *warnings) error {
	for li, l := range [][]string{cfg.AllowASNs, cfg.DenyASNs} {
		name, m := "allowASNs", &p.allowASN
		if li == 1 {
			name, m = "denyASNs", &p.denyASN
		}
		for i, s := range l {
			field := fmt.Sprintf("%s.%s[%d]", Key, name, i)
			n, err := parseASN(s)
			if err != nil {
				return fail(field, "%s %v", short(s), err)
			}
			if *m == nil {
				*m = map[uint32]struct{}{}
			}
			if _, dup := (*m)[n]; dup {
				w.add(field, "%s is listed twice", short(s))
			}
			(*m)[n] = struct{}{}
		}
	}
	for i, s := range cfg.DenyASNs {
		if n, _ := parseASN(s); p.allowASN != nil {
			if _, ok := p.allowASN[n]; ok {
				w.add(fmt.Sprintf("%s.denyASNs[%d]", Key, i), "%s is in allowASNs too: it is denied (a deny wins)", short(s))
			}
		}
	}
	return nil
}

// parsePolicy reads allow|deny (any case); empty is def.
func parsePolicy(s, field string, def bool) (bool, error) {
	switch strings.ToLower(s) {
	case "":
		return def, nil
	case Allow:
		return true, nil
	case Deny:
		return false, nil
	}
	if field != Key+".unknown" {
		return false, config.FieldErrorf(field, "%s: %s is not allow, deny or lookup", field, short(s))
	}
	return false, config.FieldErrorf(field, "%s: %s is not allow or deny", field, short(s))
}

// parseCountry reads an ISO 3166-1 alpha-2 code, in any case.
func parseCountry(s string) ([2]byte, bool) {
	if len(s) != 2 {
		return [2]byte{}, false
	}
	c := [2]byte{upper(s[0]), upper(s[1])}
	return c, isCountry(c)
}

// parseASN reads an autonomous system number: 64512 or AS64512.
func parseASN(s string) (uint32, error) {
	t := s
	if len(t) > 2 && (t[0] == 'A' || t[0] == 'a') && (t[1] == 'S' || t[1] == 's') {
		t = t[2:]
	}
	n, err := strconv.ParseUint(t, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("is not an autonomous system number (1 to 4294967295, written 64512 or AS64512)")
	}
	if n == 0 {
		return 0, fmt.Errorf("is AS 0, which no network originates (RFC 7607)")
	}
	return uint32(n), nil
}

func upper(b byte) byte {
	if b >= 'a' && b <= 'z' {
		return b - 'a' + 'A'
	}
	return b
}

// short quotes a user input for a message, cut to 64 bytes.
func short(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// fieldErr places a database's error on geoIP.databases[i].
func fieldErr(i int, err error) error {
	f := fmt.Sprintf("%s.databases[%d]", Key, i)
	return config.FieldErrorf(f, "%s: %w", f, err)
}
