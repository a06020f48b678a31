package geoip

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

func TestValidate(t *testing.T) {
	db := []string{"/var/lib/GeoIP/GeoLite2-Country.mmdb"}
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string // of the error; "" for none
		msg   string // in the error
		warns []string
	}{
		{name: "ok", cfg: Config{Databases: db, AllowCountries: []string{"FR", "de", "XK"}}},
		{name: "no database", cfg: Config{AllowCountries: []string{"FR"}}, field: "geoIP.databases", msg: "no database"},
		{name: "empty path", cfg: Config{Databases: []string{" "}, AllowCountries: []string{"FR"}}, field: "geoIP.databases[0]", msg: "empty"},
		{name: "directory", cfg: Config{Databases: []string{"/var/lib/GeoIP/"}, AllowCountries: []string{"FR"}}, field: "geoIP.databases[0]", msg: "names a directory"},
		{name: "nul", cfg: Config{Databases: []string{"a\x00b"}, AllowCountries: []string{"FR"}}, field: "geoIP.databases[0]", msg: "NUL"},
		{name: "no rule", cfg: Config{Databases: db}, field: "geoIP", msg: "no rule"},
		{name: "bad country", cfg: Config{Databases: db, AllowCountries: []string{"FR", "DE", "XX"}},
			field: "geoIP.allowCountries[2]", msg: `geoIP.allowCountries[2]: "XX" is not an ISO 3166-1 alpha-2 code`},
		{name: "three letters", cfg: Config{Databases: db, DenyCountries: []string{"FRA"}}, field: "geoIP.denyCountries[0]", msg: "ISO 3166-1 alpha-2"},
		{name: "bad continent", cfg: Config{Databases: db, AllowContinents: []string{"EU", "EA"}}, field: "geoIP.allowContinents[1]", msg: `"EA" is not a continent code`},
		{name: "bad asn", cfg: Config{Databases: db, DenyASNs: []string{"AS1", "ASX"}}, field: "geoIP.denyASNs[1]", msg: "not an autonomous system number"},
		{name: "asn 0", cfg: Config{Databases: db, DenyASNs: []string{"0"}}, field: "geoIP.denyASNs[0]", msg: "RFC 7607"},
		{name: "asn too big", cfg: Config{Databases: db, AllowASNs: []string{"4294967296"}}, field: "geoIP.allowASNs[0]", msg: "not an autonomous"},
		{name: "bad unknown", cfg: Config{Databases: db, AllowCountries: []string{"FR"}, Unknown: "maybe"}, field: "geoIP.unknown", msg: `"maybe" is not allow or deny`},
		{name: "bad private", cfg: Config{Databases: db, AllowCountries: []string{"FR"}, Private: "open"}, field: "geoIP.private"},
		{name: "bad loopback", cfg: Config{Databases: db, AllowCountries: []string{"FR"}, Loopback: "x"}, field: "geoIP.loopback", msg: `"x" is not allow, deny or lookup`},
		{name: "lookup is not an unknown policy", cfg: Config{Databases: db, AllowCountries: []string{"FR"}, Unknown: "lookup"}, field: "geoIP.unknown"},
		{name: "warnings", cfg: Config{Databases: []string{"/a.mmdb", "/b/../a.mmdb"}, AllowCountries: []string{"FR", "fr"}, DenyCountries: []string{"FR"},
			AllowASNs: []string{"AS64500"}, DenyASNs: []string{"64500"}, AllowContinents: []string{"EU"}, DenyContinents: []string{"eu"}},
			warns: []string{"geoIP.databases[1]", "geoIP.allowCountries[1]", "geoIP.denyCountries[0]", "geoIP.denyContinents", "geoIP.denyASNs[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, warns, err := validate(&tc.cfg)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
			} else {
				if err == nil {
					t.Fatalf("no error, want one on %s", tc.field)
				}
				if got := config.FieldOf(err); got != tc.field {
					t.Errorf("error on %q, want %q: %v", got, tc.field, err)
				}
				if !strings.HasPrefix(err.Error(), tc.field+": ") || !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("error %q does not start with %q and say %q", err, tc.field, tc.msg)
				}
			}
			var got []string
			for _, w := range warns {
				got = append(got, config.FieldOf(w))
				if !strings.HasPrefix(w.Error(), config.FieldOf(w)+": ") {
					t.Errorf("warning %q does not start with its field", w)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.warns, " ") {
				t.Errorf("warnings on %v, want %v (%v)", got, tc.warns, warns)
			}
		})
	}
}

// newMW builds a middleware over databases written to a temporary directory.
func newMW(t *testing.T, cfg Config, dbs ...[]byte) (*Middleware, *Pool, []string) {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, b := range dbs {
		paths = append(paths, writeFile(t, dir, "db"+itoa(uint32(i))+".mmdb", b))
	}
	cfg.Databases = paths
	pool := &Pool{Interval: 10 * time.Millisecond}
	t.Cleanup(pool.Close)
	m, _, err := New("geo@file", &cfg, pool)
	if err != nil {
		t.Fatal(err)
	}
	return m, pool, paths
}

func TestDecide(t *testing.T) {
	country := mmdb(t, "GeoLite2-Country", countryV1...)
	asn := mmdb(t, "GeoLite2-ASN", asnDB...)
	ipinfo := mmdb(t, "ipinfo lite", net4{CIDR: "192.0.2.0/24", Country: "FR", Continent: "EU", ASN: 64500, IPinfo: true})
	type want struct {
		addr   string
		allow  bool
		reason Reason
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		dbs  [][]byte
		want []want
	}{
		{name: "allow countries", cfg: Config{AllowCountries: []string{"FR", "JP", "US"}}, dbs: [][]byte{country}, want: []want{
			{"192.0.2.1", true, ReasonAllowedCountry},
			{"::ffff:192.0.2.1", true, ReasonAllowedCountry}, // IPv4-mapped
			{"198.51.100.7", false, ReasonNotAllowed},
			{"203.0.113.9", true, ReasonAllowedCountry}, // registered_country when country is absent
			{"2001:db8:1::1", true, ReasonAllowedCountry},
			{"2001:db8:2::1", false, ReasonNotAllowed},
			{"8.8.8.8", false, ReasonUnknown}, // unknown: denied by default with an allow list
			{"2001:db8:3::1", false, ReasonUnknown},
			{"127.0.0.1", true, ReasonLoopback},
			{"::1", true, ReasonLoopback},
			{"10.1.2.3", true, ReasonPrivate},
			{"172.16.0.1", true, ReasonPrivate},
			{"192.168.1.1", true, ReasonPrivate},
			{"100.64.0.1", true, ReasonPrivate},
			{"169.254.1.1", true, ReasonPrivate},
			{"fd00::1", true, ReasonPrivate},
			{"fe80::1%eth0", true, ReasonPrivate},
		}},
		{name: "deny countries, unknown allowed by default", cfg: Config{DenyCountries: []string{"RU"}}, dbs: [][]byte{country}, want: []want{
			{"192.0.2.1", true, ReasonNoDeny},
			{"198.51.100.7", false, ReasonDeniedCountry},
			{"8.8.8.8", true, ReasonUnknown},
		}},
		{name: "explicit policies", cfg: Config{AllowCountries: []string{"FR"}, Unknown: "allow", Private: "deny", Loopback: "DENY"}, dbs: [][]byte{country}, want: []want{
			{"8.8.8.8", true, ReasonUnknown},
			{"10.0.0.1", false, ReasonPrivate},
			{"fc00::1", false, ReasonPrivate},
			{"127.0.0.2", false, ReasonLoopback},
			{"::ffff:127.0.0.1", false, ReasonLoopback},
		}},
		{name: "private and loopback looked up", cfg: Config{AllowCountries: []string{"FR"}, Private: "lookup", Loopback: "Lookup"}, dbs: [][]byte{mmdb(t, "Internal-Country",
			net4{CIDR: "127.0.0.0/24", Country: "FR"}, net4{CIDR: "127.0.1.0/24", Country: "RU"}, net4{CIDR: "10.0.0.0/8", Country: "FR"}, net4{CIDR: "::1/128", Country: "FR"})}, want: []want{
			{"127.0.0.2", true, ReasonAllowedCountry},
			{"127.0.1.2", false, ReasonNotAllowed},
			{"127.0.2.2", false, ReasonUnknown},
			{"::ffff:127.0.1.9", false, ReasonNotAllowed},
			{"::1", true, ReasonAllowedCountry},
			{"10.9.9.9", true, ReasonAllowedCountry},
			{"192.168.0.1", false, ReasonUnknown},
		}},
		{name: "continent, a deny wins", cfg: Config{AllowContinents: []string{"EU"}, DenyCountries: []string{"RU"}}, dbs: [][]byte{country}, want: []want{
			{"192.0.2.1", true, ReasonAllowedContinent},
			{"198.51.100.1", false, ReasonDeniedCountry},
			{"2001:db8:2::5", true, ReasonAllowedContinent},
			{"2001:db8:1::5", false, ReasonNotAllowed},
		}},
		{name: "deny continent", cfg: Config{DenyContinents: []string{"NA"}}, dbs: [][]byte{country}, want: []want{
			{"203.0.113.1", false, ReasonDeniedContinent},
			{"192.0.2.1", true, ReasonNoDeny},
		}},
		{name: "country and ASN databases together", cfg: Config{AllowCountries: []string{"US"}, AllowASNs: []string{"AS64500"}, DenyASNs: []string{"64501"}},
			dbs: [][]byte{country, asn}, want: []want{
				{"192.0.2.1", true, ReasonAllowedASN},     // FR, AS64500
				{"192.0.2.200", false, ReasonNotAllowed},  // FR, no AS in the /25's other half
				{"203.0.113.1", false, ReasonDeniedASN},   // US but AS64501 denied: a deny wins
				{"100.0.0.1", false, ReasonNotAllowed},    // AS64502 only
				{"198.51.100.1", false, ReasonNotAllowed}, // RU
			}},
		{name: "ASN rules only, a country-only address is unknown", cfg: Config{DenyASNs: []string{"64502"}, Unknown: "deny"}, dbs: [][]byte{country, asn}, want: []want{
			{"100.0.0.9", false, ReasonDeniedASN},
			{"192.0.2.1", true, ReasonNoDeny},
			{"198.51.100.1", false, ReasonUnknown},
		}},
		{name: "IPinfo layout", cfg: Config{AllowCountries: []string{"FR"}, DenyASNs: []string{"AS1"}}, dbs: [][]byte{ipinfo}, want: []want{
			{"192.0.2.77", true, ReasonAllowedCountry},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _ := newMW(t, tc.cfg, tc.dbs...)
			for _, w := range tc.want {
				d := m.Decide(netip.MustParseAddr(w.addr))
				if d.Allow != w.allow || d.Reason != w.reason {
					t.Errorf("%s: %s (allow %v, %s), want allow %v, %s", w.addr, d, d.Allow, d.Reason, w.allow, w.reason)
				}
			}
		})
	}
}

func TestDecisionSays(t *testing.T) {
	m, _, _ := newMW(t, Config{AllowCountries: []string{"US"}, DenyASNs: []string{"64501"}},
		mmdb(t, "GeoLite2-Country", countryV1...), mmdb(t, "GeoLite2-ASN", asnDB...))
	for addr, want := range map[string]string{
		"203.0.113.5": "denied: AS64501 in geoIP.denyASNs",
		"192.0.2.1":   "denied: not in the allow lists (country FR, continent EU, AS64500)",
		"127.0.0.1":   "allowed: loopback address (geoIP.loopback)",
		"8.8.8.8":     "denied: address unknown to the databases (geoIP.unknown)",
	} {
		if got := m.Decide(netip.MustParseAddr(addr)).String(); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
}

// A database replaced while the middleware serves is used from the pool's
// next look; a corrupt replacement keeps the last good one, with a warning
// in the status; a good one after it applies again.
func TestReplacedDatabase(t *testing.T) {
	m, pool, paths := newMW(t, Config{AllowCountries: []string{"FR"}}, mmdb(t, "GeoLite2-Country", countryV1...))
	fr := netip.MustParseAddr("192.0.2.10")
	if d := m.Decide(fr); !d.Allow {
		t.Fatalf("before the replacement: %s", d)
	}
	db := m.Databases()[0]
	writeFile(t, filepath.Dir(paths[0]), filepath.Base(paths[0]), mmdb(t, "GeoLite2-Country", countryV2...))
	itest.Eventually(t, 5*time.Second, func() bool { return !m.Decide(fr).Allow }, "the replaced database (192.0.2.0/24 now RU) is not used")
	if d := m.Decide(fr); d.Reason != ReasonNotAllowed || d.Country != [2]byte{'R', 'U'} {
		t.Fatalf("after the replacement: %s", d)
	}
	if s := db.Status(); s.Reloads != 1 || s.LastError != "" || s.Networks == 0 {
		t.Fatalf("status after a good replacement: %+v", s)
	}

	// A corrupt replacement: the last good database goes on serving.
	good := mmdb(t, "GeoLite2-Country", countryV1...)
	corrupt := append([]byte(nil), good[:len(good)/2]...)
	writeFile(t, filepath.Dir(paths[0]), filepath.Base(paths[0]), corrupt)
	itest.Eventually(t, 5*time.Second, func() bool { return db.Status().LastError != "" }, "the corrupt replacement is not reported")
	s := db.Status()
	if !strings.Contains(s.LastError, paths[0]) || !strings.Contains(s.LastError, "last good version goes on serving") {
		t.Errorf("the warning does not name the file and say what serves: %q", s.LastError)
	}
	if d := m.Decide(fr); d.Allow || d.Country != [2]byte{'R', 'U'} {
		t.Fatalf("after a corrupt replacement the last good database (RU) should serve: %s", d)
	}
	// Garbage of another kind: not a database at all.
	writeFile(t, filepath.Dir(paths[0]), filepath.Base(paths[0]), []byte("not a database\n"))
	prevAt := s.LastErrorAt
	itest.Eventually(t, 5*time.Second, func() bool { return db.Status().LastErrorAt.After(prevAt) }, "the second broken replacement is not reported")
	if d := m.Decide(fr); d.Allow {
		t.Fatalf("after a second broken replacement: %s", d)
	}

	// A good one again: applies, and the warning is gone.
	writeFile(t, filepath.Dir(paths[0]), filepath.Base(paths[0]), good)
	itest.Eventually(t, 5*time.Second, func() bool { return m.Decide(fr).Allow }, "the good database after the corrupt one is not used")
	if s := db.Status(); s.LastError != "" || s.Reloads != 2 {
		t.Fatalf("status after recovering: %+v", s)
	}

	// A second middleware on the same file shares the Database.
	m2, _, err := New("geo2@file", &Config{Databases: paths, DenyCountries: []string{"FR"}}, pool)
	if err != nil || m2.Databases()[0] != db {
		t.Fatalf("a second middleware on the same file got its own database: %v", err)
	}
}

// A file rewritten in place (truncated, then written in two parts) is not
// used half-written: the last good version serves until the file is whole.
func TestRewrittenInPlace(t *testing.T) {
	m, _, paths := newMW(t, Config{AllowCountries: []string{"FR"}}, mmdb(t, "GeoLite2-Country", countryV1...))
	fr := netip.MustParseAddr("192.0.2.10")
	v2 := mmdb(t, "GeoLite2-Country", countryV2...)
	f, err := os.OpenFile(paths[0], os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(v2[:len(v2)/2]); err != nil {
		t.Fatal(err)
	}
	db := m.Databases()[0]
	// Several looks of the pool go by with the file half-written.
	itest.Eventually(t, 5*time.Second, func() bool { return db.Status().LastError != "" }, "the half-written file is not looked at")
	if d := m.Decide(fr); !d.Allow {
		t.Fatalf("a half-written file was used: %s", d)
	}
	if _, err := f.Write(v2[len(v2)/2:]); err != nil {
		t.Fatal(err)
	}
	itest.Eventually(t, 5*time.Second, func() bool { return !m.Decide(fr).Allow }, "the whole file is not used once written")
}

// A missing or corrupt file at start is an error on its field naming the
// file: the middleware is not built, so its routers fail closed. A file that
// goes missing later leaves the last good version serving.
func TestDatabaseErrorsAtStart(t *testing.T) {
	dir := t.TempDir()
	pool := &Pool{Interval: 10 * time.Millisecond}
	t.Cleanup(pool.Close)
	good := writeFile(t, dir, "good.mmdb", mmdb(t, "GeoLite2-Country", countryV1...))
	corrupt := writeFile(t, dir, "corrupt.mmdb", []byte("\xab\xcd\xefMaxMind.com garbage"))
	empty := writeFile(t, dir, "empty.mmdb", nil)
	missing := filepath.Join(dir, "missing.mmdb")
	for _, tc := range []struct{ path, msg string }{
		{missing, "no such file"},
		{corrupt, "not a valid MaxMind-format database"},
		{empty, "empty"},
		{dir + "/sub", "no such file"},
	} {
		_, _, err := New("geo@file", &Config{Databases: []string{good, tc.path}, AllowCountries: []string{"FR"}}, pool)
		if err == nil {
			t.Fatalf("%s: no error", tc.path)
		}
		if config.FieldOf(err) != "geoIP.databases[1]" || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %q (field %q) should be on geoIP.databases[1], name the file and say %q", tc.path, err, config.FieldOf(err), tc.msg)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "d.mmdb"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Get(filepath.Join(dir, "d.mmdb")); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}

	m, _, err := New("geo@file", &Config{Databases: []string{good}, AllowCountries: []string{"FR"}}, pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(good); err != nil {
		t.Fatal(err)
	}
	db := m.Databases()[0]
	itest.Eventually(t, 5*time.Second, func() bool { return db.Status().LastError != "" }, "a removed file is not reported")
	if d := m.Decide(netip.MustParseAddr("192.0.2.1")); !d.Allow {
		t.Fatalf("the last good version should serve after the file is removed: %s", d)
	}
	if !errors.Is(os.ErrNotExist, os.ErrNotExist) || !strings.Contains(db.Status().LastError, "no such file") {
		t.Errorf("status: %q", db.Status().LastError)
	}
	writeFile(t, dir, "good.mmdb", mmdb(t, "GeoLite2-Country", countryV2...))
	itest.Eventually(t, 5*time.Second, func() bool { return !m.Decide(netip.MustParseAddr("192.0.2.1")).Allow }, "a file put back is not used")
}

// A swept database is no longer watched; a middleware holding it goes on
// with its last version.
func TestPoolSweep(t *testing.T) {
	m, pool, paths := newMW(t, Config{AllowCountries: []string{"FR"}}, mmdb(t, "GeoLite2-Country", countryV1...))
	db := m.Databases()[0]
	pool.Sweep(map[string]bool{})
	n := 0
	pool.Each(func(*Database) { n++ })
	if n != 0 {
		t.Fatalf("%d databases held after a sweep of all", n)
	}
	select {
	case <-db.done:
	default:
		t.Fatal("the swept database's watcher still runs")
	}
	writeFile(t, filepath.Dir(paths[0]), filepath.Base(paths[0]), mmdb(t, "GeoLite2-Country", countryV2...))
	if d := m.Decide(netip.MustParseAddr("192.0.2.1")); !d.Allow {
		t.Fatalf("a swept database changed: %s", d)
	}
	// Get reads it anew.
	d2, err := pool.Get(paths[0])
	if err != nil || d2 == db {
		t.Fatalf("Get after a sweep: %v (same database: %v)", err, d2 == db)
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	m, _, _ := newMW(t, Config{AllowCountries: []string{"US"}, AllowASNs: []string{"64500"}, DenyContinents: []string{"AS"}},
		mmdb(t, "GeoLite2-Country", countryV1...), mmdb(t, "GeoLite2-ASN", asnDB...))
	addrs := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:1::1"), netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("10.0.0.1")}
	if n := testing.AllocsPerRun(1000, func() {
		for _, a := range addrs {
			_ = m.Decide(a)
		}
	}); n != 0 {
		t.Fatalf("Decide allocates %.1f times", n)
	}
}

// bigCountryDB is a Country database of 100,000 /24 networks (GeoLite2
// Country holds about half a million networks, with a tree as deep), spread
// over the assigned countries, plus countryV1.
func bigCountryDB(b *testing.B) []byte {
	b.Helper()
	bigOnce.Do(func() { big = makeBigCountryDB(b) })
	return big
}

// big is bigCountryDB's, written once per test binary (the benchmarks run
// several times).
var (
	bigOnce sync.Once
	big     []byte
)

func makeBigCountryDB(b *testing.B) []byte {
	var nets []net4
	for i := range 100000 {
		c := countryCodes[3*(i%250) : 3*(i%250)+2]
		a := netip.AddrFrom4([4]byte{byte(1 + i%223), byte(i >> 8), byte(i), 0})
		if a.IsPrivate() || a.IsLoopback() || shared.Contains(a) {
			continue
		}
		nets = append(nets, net4{CIDR: netip.PrefixFrom(a, 24).String(), Country: c, Continent: continents[i%len(continents)]})
	}
	return mmdb(b, "GeoLite2-Country", append(nets, countryV1...)...)
}

// BenchmarkDecide is the per-connection cost: ns per decision, with a
// Country database of 100,000 networks and an ASN database, over known,
// unknown and IPv6 addresses.
func BenchmarkDecide(b *testing.B) {
	dir := b.TempDir()
	pool := &Pool{}
	b.Cleanup(pool.Close)
	cfg := Config{
		Databases:      []string{writeFile(b, dir, "c.mmdb", bigCountryDB(b)), writeFile(b, dir, "a.mmdb", mmdb(b, "GeoLite2-ASN", asnDB...))},
		AllowCountries: []string{"FR", "DE", "US"}, DenyASNs: []string{"64501"},
	}
	m, _, err := New("bench@file", &cfg, pool)
	if err != nil {
		b.Fatal(err)
	}
	addrs := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("77.1.2.3"), netip.MustParseAddr("2001:db8:2::1"), netip.MustParseAddr("203.0.113.4")}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			_ = m.Decide(addrs[i&3])
			i++
		}
	})
}

// BenchmarkLoad is what reading a replaced 100,000-network database costs
// (off the accept path: the pool's goroutine).
func BenchmarkLoad(b *testing.B) {
	buf := bigCountryDB(b)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		if _, err := parse(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzValidate: any block decoded from JSON validates or is refused with an
// error on a field; it never panics, and a block that validates only holds
// codes the rules can match.
func FuzzValidate(f *testing.F) {
	f.Add(`{"databases":["/a.mmdb"],"allowCountries":["FR","de"],"denyASNs":["AS1"],"unknown":"deny"}`)
	f.Add(`{"databases":["x"],"allowContinents":["EU"],"private":"deny","loopback":"allow"}`)
	f.Add(`{"databases":["a/../b.mmdb","a/./b.mmdb"],"denyCountries":["XK","XX"],"allowASNs":["4294967295","as0"]}`)
	f.Add(`{"databases":[""],"allowCountries":[""]}`)
	f.Fuzz(func(t *testing.T, s string) {
		var cfg Config
		if json.Unmarshal([]byte(s), &cfg) != nil {
			return
		}
		p, warns, err := validate(&cfg)
		if err != nil {
			if config.FieldOf(err) == "" || !strings.HasPrefix(err.Error(), config.FieldOf(err)+": ") {
				t.Fatalf("error without its field first: %v", err)
			}
			return
		}
		for _, w := range warns {
			if config.FieldOf(w) == "" {
				t.Fatalf("warning without a field: %v", w)
			}
		}
		if !p.useCountry && !p.useContinent && !p.useASN {
			t.Fatal("a block without a rule validated")
		}
		for _, c := range cfg.AllowCountries {
			if cc, ok := parseCountry(c); !ok || !p.allowCountry.has(cc) {
				t.Fatalf("allowCountries %q validated but is not in the set", c)
			}
		}
		if p.hasAllow && cfg.Unknown == "" && p.unknownAllow {
			t.Fatal("unknown defaults to allow with an allow list")
		}
	})
}

// FuzzCleanPath: the database path rule never panics, and a path it takes
// is clean, holds no NUL, and names no directory by its form; opening it
// (in an empty directory) is an error naming it, never a panic.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/var/lib/GeoIP/GeoLite2-Country.mmdb", "db.mmdb", "../x.mmdb", "a//b/./c.mmdb", "/", ".", "..", "a/", "a\x00b", " ", "a/..", "~/x"} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, s string) {
		c, err := CleanPath(s)
		if err != nil {
			return
		}
		if strings.IndexByte(c, 0) >= 0 || c != filepath.Clean(c) || c == "." || c == ".." || c == "/" {
			t.Fatalf("CleanPath(%q) = %q", s, c)
		}
		if filepath.IsAbs(c) {
			return // outside the test's directory
		}
		p := filepath.Join(dir, c)
		if _, _, err := load(p); err == nil {
			t.Fatalf("loading %q from an empty directory succeeded", p)
		}
	})
}

// FuzzParse: any bytes as a database are refused or read, never a panic;
// the seeds are real databases from the writer and their corruptions.
func FuzzParse(f *testing.F) {
	good := mmdb(f, "GeoLite2-Country", countryV1...)
	f.Add(good)
	f.Add(mmdb(f, "GeoLite2-ASN", asnDB...))
	f.Add(good[:len(good)/2])
	f.Add(good[len(good)/2:])
	flipped := append([]byte(nil), good...)
	flipped[10] ^= 0xff
	f.Add(flipped)
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := parse(b)
		if err != nil {
			return
		}
		for _, a := range []string{"192.0.2.1", "2001:db8:1::1", "0.0.0.0", "::"} {
			l.lookup(netip.MustParseAddr(a))
		}
	})
}
