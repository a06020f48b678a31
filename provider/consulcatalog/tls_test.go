package consulcatalog

import "testing"

// A Consul instance's traefik.tls.stores tags apply, as labels do.
func TestBuildTLSStoreTags(t *testing.T) {
	res := Build([]Instance{{ID: "1", Node: "n1", Name: "certs", Address: "10.0.0.1", Port: 80, Status: "passing",
		Tags: []string{"traefik.tls.stores.default.defaultgeneratedcert.resolver=le"}}},
		Options{Prefix: "traefik", ExposedByDefault: true, StrictChecks: DefaultStrictChecks()})
	if len(res.Problems) != 0 {
		t.Fatalf("problems %q", res.Strings())
	}
	if c := res.Configuration; c == nil || c.TLS == nil || c.TLS.Stores["default"].DefaultGeneratedCert == nil || c.TLS.Stores["default"].DefaultGeneratedCert.Resolver != "le" {
		t.Fatalf("configuration %+v", res.Configuration)
	}
}
