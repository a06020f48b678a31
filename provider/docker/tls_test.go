package docker

import (
	"strings"
	"testing"
)

// Traefik v3 reads TLS stores from labels (traefik.tls.stores...): a
// container with only those labels contributes its store; two containers
// defining one store differently drop it, with a problem naming both.
func TestBuildTLSStoreLabels(t *testing.T) {
	ctr := func(id string, labels map[string]string) Container {
		return Container{ID: id, Name: id, Labels: labels, State: "running", Networks: map[string]string{"bridge": "10.0.0.2"}}
	}
	res := Build([]Container{
		ctr("a", map[string]string{"traefik.tls.stores.default.defaultgeneratedcert.resolver": "le",
			"traefik.tls.stores.default.defaultgeneratedcert.domain.main": "example.com"}),
		ctr("b", map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)", "traefik.tcp.services.s.loadbalancer.server.port": "5432"}),
	}, Options{ExposedByDefault: true})
	if len(res.Problems) != 0 {
		t.Fatalf("problems %q", res.Strings())
	}
	c := res.Configuration
	if c == nil || c.TLS == nil || c.TLS.Stores["default"].DefaultGeneratedCert == nil ||
		c.TLS.Stores["default"].DefaultGeneratedCert.Resolver != "le" || c.TLS.Stores["default"].DefaultGeneratedCert.Domain.Main != "example.com" {
		t.Fatalf("tls %+v", c)
	}
	if c.TCP == nil || c.TCP.Routers["r"] == nil {
		t.Fatalf("tcp %+v", c.TCP)
	}

	res = Build([]Container{
		ctr("a", map[string]string{"traefik.tls.stores.default.defaultgeneratedcert.resolver": "le"}),
		ctr("c", map[string]string{"traefik.tls.stores.default.defaultgeneratedcert.resolver": "other"}),
	}, Options{ExposedByDefault: true})
	if res.Configuration != nil && res.Configuration.TLS != nil {
		t.Fatalf("a store defined differently applies: %+v", res.Configuration.TLS)
	}
	if s := strings.Join(res.Strings(), "\n"); len(res.Problems) != 1 || !strings.Contains(s, `tls store "default" is defined differently by container "a" and container "c"`) {
		t.Fatalf("problems %q", s)
	}
}
