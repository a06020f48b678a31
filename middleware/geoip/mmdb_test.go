package geoip

import (
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The test databases are written by the tests with MaxMind's own writer
// (mmdbwriter, through internal/itest), in the layouts real databases use;
// none is downloaded. Addresses are from the documentation ranges
// (RFC 5737, RFC 3849).

// net4 is one network of a test database and what it says
// (internal/itest's, which writes the databases).
type net4 = itest.GeoNet

// mmdb returns a database of the given type holding nets.
func mmdb(t testing.TB, dbType string, nets ...net4) []byte {
	t.Helper()
	return itest.MMDB(t, dbType, nets...)
}

// countryV1 places the documentation ranges: 192.0.2.0/24 in France,
// 198.51.100.0/24 in Russia, 203.0.113.0/24 in the US (registered only),
// 2001:db8:1::/48 in Japan, 2001:db8:2::/48 in Germany.
var countryV1 = []net4{
	{CIDR: "192.0.2.0/24", Country: "FR", Continent: "EU"},
	{CIDR: "198.51.100.0/24", Country: "RU", Continent: "EU"},
	{CIDR: "203.0.113.0/24", Registered: "US", Continent: "NA"},
	{CIDR: "2001:db8:1::/48", Country: "JP", Continent: "AS"},
	{CIDR: "2001:db8:2::/48", Country: "DE", Continent: "EU"},
}

// countryV2 is countryV1 after France's range moved to Russia.
var countryV2 = []net4{
	{CIDR: "192.0.2.0/24", Country: "RU", Continent: "EU"},
	{CIDR: "198.51.100.0/24", Country: "RU", Continent: "EU"},
	{CIDR: "203.0.113.0/24", Registered: "US", Continent: "NA"},
	{CIDR: "2001:db8:1::/48", Country: "JP", Continent: "AS"},
	{CIDR: "2001:db8:2::/48", Country: "DE", Continent: "EU"},
}

// asnDB: 192.0.2.0/25 is AS64500, 203.0.113.0/24 AS64501, and
// 100.0.0.0/24 (known to this database alone) AS64502.
var asnDB = []net4{
	{CIDR: "192.0.2.0/25", ASN: 64500},
	{CIDR: "203.0.113.0/24", ASN: 64501},
	{CIDR: "100.0.0.0/24", ASN: 64502},
}

// writeFile writes b to dir/name through a temporary file and a rename, as
// geoipupdate does, and returns the path.
func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	return itest.WriteRenamed(t, dir, name, b)
}
