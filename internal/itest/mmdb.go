package itest

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// The tests' geoIP databases are written by the tests with MaxMind's own
// writer (mmdbwriter), in the layouts real databases use; none is
// downloaded. Addresses are best taken from the documentation ranges
// (RFC 5737, RFC 3849), which the writer accepts, as any reserved
// network, with IncludeReservedNetworks.

// GeoNet is one network of a test database and what it says of it.
type GeoNet struct {
	CIDR       string
	Country    string // country.iso_code (MaxMind's layout)
	Registered string // registered_country.iso_code
	Continent  string
	ASN        uint32
	// IPinfo writes IPinfo's flat layout instead (country_code,
	// continent_code, asn "AS64500").
	IPinfo bool
}

func (n GeoNet) value() mmdbtype.DataType {
	m := mmdbtype.Map{}
	asn := "AS" + strconv.FormatUint(uint64(n.ASN), 10)
	if n.IPinfo {
		if n.Country != "" {
			m["country_code"] = mmdbtype.String(n.Country)
			m["country"] = mmdbtype.String("Name of " + n.Country)
		}
		if n.Continent != "" {
			m["continent_code"] = mmdbtype.String(n.Continent)
		}
		if n.ASN != 0 {
			m["asn"] = mmdbtype.String(asn)
		}
		return m
	}
	if n.Country != "" {
		m["country"] = mmdbtype.Map{"iso_code": mmdbtype.String(n.Country), "names": mmdbtype.Map{"en": mmdbtype.String("Name of " + n.Country)}}
	}
	if n.Registered != "" {
		m["registered_country"] = mmdbtype.Map{"iso_code": mmdbtype.String(n.Registered)}
	}
	if n.Continent != "" {
		m["continent"] = mmdbtype.Map{"code": mmdbtype.String(n.Continent)}
	}
	if n.ASN != 0 {
		m["autonomous_system_number"] = mmdbtype.Uint32(n.ASN)
		m["autonomous_system_organization"] = mmdbtype.String("Org " + asn)
	}
	return m
}

// MMDB returns a MaxMind-format database of the given type
// ("GeoLite2-Country", "GeoLite2-ASN", ...) holding nets.
func MMDB(t testing.TB, dbType string, nets ...GeoNet) []byte {
	t.Helper()
	w, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: dbType, IncludeReservedNetworks: true, RecordSize: 24})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		_, ipn, err := net.ParseCIDR(n.CIDR)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Insert(ipn, n.value()); err != nil {
			t.Fatalf("inserting %s: %v", n.CIDR, err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// WriteRenamed writes b to dir/name through a temporary file and a rename,
// as geoipupdate replaces a database, and returns the path.
func WriteRenamed(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		t.Fatal(err)
	}
	return path
}
