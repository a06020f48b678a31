package geoip

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// next counts the connections a middleware passes on.
type next struct{ n int }

func (h *next) ServeTCP(*tcp.Conn) { h.n++ }

// build builds the middleware as the proxy does (the kind's constructor,
// which middleware.New calls), with the state of ks.
func build(ks *middleware.Keepers, name string, cfg *Config, offline bool) (tcp.Middleware, *Live, []middleware.Warning, error) {
	b, err := Build(middleware.Spec{Name: name, Log: zerolog.Nop(), Offline: offline, Keepers: ks}, cfg)
	live, _ := b.Live.(*Live)
	return b.Middleware, live, b.Warnings, err
}

func conn(ip string) *tcp.Conn {
	return &tcp.Conn{Client: netip.AddrPortFrom(netip.MustParseAddr(ip), 1)}
}

// Built as the proxy builds it (Build): it decides at accept,
// counts, shows its databases, keeps its counts across builds of a name,
// places its errors and warnings on their keys, and a sweep stops watching
// the files no middleware kept reads.
func TestKeeperBuild(t *testing.T) {
	dir := t.TempDir()
	db := writeFile(t, dir, "country.mmdb", mmdb(t, "GeoLite2-Country", countryV1...))
	ks := middleware.NewKeepers(middleware.Options{})
	t.Cleanup(ks.Close)
	k := Middlewares(ks)
	mw, live, warns, err := build(ks, "geo@file", &Config{Databases: []string{db}, AllowCountries: []string{"FR", "fr"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || warns[0].Field != "geoIP.allowCountries[1]" {
		t.Errorf("warnings %v, want the duplicate on geoIP.allowCountries[1]", warns)
	}
	nx := &next{}
	h := mw(nx)
	for _, ip := range []string{"192.0.2.1", "198.51.100.1", "8.8.8.8", "192.0.2.2"} {
		h.ServeTCP(conn(ip))
	}
	if a, d := live.Counts(); nx.n != 2 || a != 2 || d != 2 || RefusalReason.String() != "geoip" {
		t.Errorf("passed %d, counts %d/%d, reason %s", nx.n, a, d, RefusalReason)
	}
	if dbs := live.Databases(); len(dbs) != 1 || dbs[0].Path != db || dbs[0].Networks == 0 {
		t.Errorf("databases %+v", dbs)
	}
	_, live2, _, err := build(ks, "geo@file", &Config{Databases: []string{db}, DenyCountries: []string{"RU"}}, false)
	if err != nil || live2 != live {
		t.Fatalf("rebuilt: %v, same live state %v", err, live2 == live)
	}
	held := func() int { n := 0; k.pool(zerolog.Nop()).Each(func(*Database) { n++ }); return n }
	k.Sweep(map[string]bool{"geo@file": true})
	if held() != 1 {
		t.Fatal("swept the database of a middleware kept")
	}
	k.Sweep(nil)
	if held() != 0 {
		t.Fatal("kept the database of no middleware")
	}
	if _, _, _, err := build(ks, "bad@file", &Config{Databases: []string{db}, AllowCountries: []string{"FRA"}}, false); config.FieldOf(err) != "geoIP.allowCountries[0]" {
		t.Errorf("error %v on %q", err, config.FieldOf(err))
	}
	missing := filepath.Join(dir, "missing.mmdb")
	if _, _, _, err := build(ks, "missing@file", &Config{Databases: []string{missing}, AllowCountries: []string{"FR"}}, false); config.FieldOf(err) != "geoIP.databases[0]" || !strings.Contains(err.Error(), "missing.mmdb") {
		t.Errorf("missing database: %v on %q", err, config.FieldOf(err))
	}
	// Offline (tollgate check): judged, no database read.
	if _, _, _, err := build(ks, "off@file", &Config{Databases: []string{missing}, DenyCountries: []string{"RU"}}, true); err != nil {
		t.Errorf("offline: %v", err)
	}
}

// The record of recent refusals names a denied value precisely, from
// messages built once.
func TestRefusalMessages(t *testing.T) {
	m := refusalMessages(&Config{DenyCountries: []string{"ru"}, DenyASNs: []string{"AS64500"}, DenyContinents: []string{"an"}})
	for d, want := range map[Decision]string{
		{Reason: ReasonDeniedCountry, Country: [2]byte{'R', 'U'}}:     "denied: country RU in geoIP.denyCountries",
		{Reason: ReasonDeniedASN, ASN: 64500}:                         "denied: AS64500 in geoIP.denyASNs",
		{Reason: ReasonDeniedContinent, Continent: [2]byte{'A', 'N'}}: "denied: continent AN in geoIP.denyContinents",
		{Reason: ReasonNotAllowed, Country: [2]byte{'U', 'S'}}:        "denied: not in the allow lists",
		{Reason: ReasonUnknown}:                                       "denied: address unknown to the databases (geoIP.unknown)",
	} {
		if got := m.of(d); got != want {
			t.Errorf("%+v: %q, want %q", d, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = m.of(Decision{Reason: ReasonDeniedCountry, Country: [2]byte{'R', 'U'}}) }); n != 0 {
		t.Errorf("%v allocations per message", n)
	}
}
