package check

import (
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// Drift 1 of issue 11: check ignored traefik.consulcatalog.canary. Traefik's
// "two TCP service instances with one canary" (consulcatalog config_test.go):
// the canary instance gets its own automatic service, named after the
// service and a hash of its tags, so it does not join the production one.
func TestConsulCanary(t *testing.T) {
	path := itest.WriteFile(t, "test.json", `{"services": [
  {"id": "1", "name": "Test", "address": "127.0.0.1", "port": 80,
   "tags": ["traefik.tcp.routers.test.rule=HostSNI(`+"`foobar`"+`)"]},
  {"id": "2", "name": "Test", "address": "127.0.0.2", "port": 80,
   "tags": ["traefik.consulcatalog.canary=true", "traefik.tcp.routers.test-canary.rule=HostSNI(`+"`canary.foobar`"+`)"]}
]}`)
	rep := Files([]string{path}, DefaultOptions())
	const canary = "Test-17573747155436217342@consulcatalog" // Traefik's expected name for these tags
	for router, service := range map[string]string{"test@consulcatalog": "Test@consulcatalog", "test-canary@consulcatalog": canary} {
		if r := rep.TCP.Routers[router]; r == nil || r.Service != service {
			t.Errorf("router %s: %+v, want service %s", router, r, service)
		}
	}
	for service, addr := range map[string]string{"Test@consulcatalog": "127.0.0.1:80", canary: "127.0.0.2:80"} {
		s := rep.TCP.Services[service]
		if s == nil || len(s.LoadBalancer.Servers) != 1 || s.LoadBalancer.Servers[0].Address != addr {
			t.Errorf("service %s: %+v, want one server %s", service, s, addr)
		}
	}
}

// Drift 2: check accepted traefik.consulcatalog.connect=true and misspelt
// traefik.consulcatalog.* tags that the provider rejects. Now each skips its
// service with the provider's problem, placed on the tag.
func TestConsulCatalogTags(t *testing.T) {
	path := itest.WriteFile(t, "svc.json", `{"services": [
  {"name": "connect", "port": 5432, "tags": [
    "traefik.tcp.routers.connect.rule=HostSNI(`+"`*`"+`)",
    "traefik.consulcatalog.connect=true"]},
  {"name": "typo", "port": 5433, "tags": [
    "traefik.tcp.routers.typo.rule=HostSNI(`+"`*`"+`)",
    "traefik.consulcatalog.canery=true"]},
  {"name": "fine", "port": 5434, "tags": [
    "traefik.tcp.routers.fine.rule=HostSNI(`+"`*`"+`)",
    "traefik.consulcatalog.connect=false"]}
]}`)
	rep := Files([]string{path}, DefaultOptions())
	if !rep.Failed() || len(rep.TCP.Routers) != 1 || rep.TCP.Routers["fine@consulcatalog"] == nil {
		t.Fatalf("want only fine@consulcatalog routed and a failure: %+v %+v", rep.TCP.Routers, rep.Problems)
	}
	for _, want := range []struct {
		service, key, message string
		line                  int
	}{
		{"connect", "traefik.consulcatalog.connect", "Consul Connect is not supported by tollgate: the service is skipped", 4},
		{"typo", "traefik.consulcatalog.canery", "unknown key (known: traefik.consulcatalog.canary): the service is skipped", 7},
	} {
		found := false
		for _, p := range rep.Problems {
			if p.Service == want.service && p.Key == want.key && p.Line == want.line && p.Message == want.message && p.Severity == SeverityError && p.DisablesRouter {
				found = true
			}
		}
		if !found {
			t.Errorf("no problem %+v in %+v", want, rep.Problems)
		}
	}
}

// Drift 3: a Consul service with router a (no service), router b -> s1 and
// services s1 and s2. The provider used to skip the whole instance while
// check kept b, s1 and s2; both now do what Traefik does: drop a alone.
func TestConsulRouterWithoutServiceIsDroppedAlone(t *testing.T) {
	path := itest.WriteFile(t, "svc.json", `{"service": {"name": "db", "address": "10.0.0.5", "port": 7000, "tags": [
  "traefik.tcp.routers.a.rule=HostSNI(`+"`*`"+`)",
  "traefik.tcp.routers.b.rule=HostSNI(`+"`*`"+`)",
  "traefik.tcp.routers.b.service=s1",
  "traefik.tcp.services.s1.loadbalancer.server.port=1",
  "traefik.tcp.services.s2.loadbalancer.server.port=2"
]}}`)
	rep := Files([]string{path}, DefaultOptions())
	if _, ok := rep.TCP.Routers["a@consulcatalog"]; ok || rep.Status.Routers["b@consulcatalog"] != "enabled" {
		t.Fatalf("want a dropped and b enabled: %+v %+v", rep.TCP.Routers, rep.Status.Routers)
	}
	for name, addr := range map[string]string{"s1@consulcatalog": "10.0.0.5:1", "s2@consulcatalog": "10.0.0.5:2"} {
		if s := rep.TCP.Services[name]; s == nil || s.LoadBalancer.Servers[0].Address != addr || rep.Status.Services[name] != "enabled" {
			t.Errorf("service %s: %+v, want %s enabled", name, s, addr)
		}
	}
	if len(rep.Problems) != 1 {
		t.Fatalf("want one problem: %+v", rep.Problems)
	}
	p := rep.Problems[0]
	if p.Resource != "a@consulcatalog" || p.Key != "traefik.tcp.routers.a.rule" || p.Line != 2 || !p.DisablesRouter ||
		!strings.Contains(p.Message, `router "a" has no service and the instance defines 2 services (s1, s2): dropped`) {
		t.Fatalf("problem %+v", p)
	}
}
