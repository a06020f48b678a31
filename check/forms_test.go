package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Traefik v3's deprecated ipWhiteList applies in every configuration form,
// through each provider's own decoding and the proxy's compiler: the
// middleware shows status warning, and the warning, on the key's line, says
// it is deprecated and to use ipAllowList; its router serves.
func TestIPWhiteListEveryForm(t *testing.T) {
	for _, tc := range []struct {
		file, content, middleware, router, key string
		line                                   int
	}{
		{"dyn.yml", "tcp:\n  routers:\n    r:\n      rule: \"HostSNI(`*`)\"\n      service: s\n      middlewares: [old]\n  middlewares:\n    old:\n      ipWhiteList:\n        sourceRange: [\"127.0.0.1\"]\n  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: \"127.0.0.1:1\"\n",
			"old@file", "r@file", "tcp.middlewares.old.ipWhiteList", 9},
		{"dyn.toml", "[tcp.routers.r]\n  rule = \"HostSNI(`*`)\"\n  service = \"s\"\n  middlewares = [\"old\"]\n[tcp.middlewares.old.ipWhiteList]\n  sourceRange = [\"127.0.0.1\"]\n[[tcp.services.s.loadBalancer.servers]]\n  address = \"127.0.0.1:1\"\n",
			"old@file", "r@file", "tcp.middlewares.old.ipWhiteList", 5},
		{"db.labels", "traefik.tcp.routers.r.rule=HostSNI(`*`)\ntraefik.tcp.routers.r.middlewares=old\ntraefik.tcp.middlewares.old.ipwhitelist.sourcerange=127.0.0.1\ntraefik.tcp.services.s.loadbalancer.server.port=5432\n",
			"old@docker", "r@docker", "traefik.tcp.middlewares.old.ipwhitelist.sourcerange", 3},
		{"stack.yml", "services:\n  db:\n    image: postgres\n    deploy:\n      labels:\n        - traefik.tcp.routers.r.rule=HostSNI(`*`)\n        - traefik.tcp.routers.r.middlewares=old\n        - traefik.tcp.middlewares.old.ipwhitelist.sourcerange=127.0.0.1\n        - traefik.tcp.services.s.loadbalancer.server.port=5432\n",
			"old@swarm", "r@swarm", "traefik.tcp.middlewares.old.ipwhitelist.sourcerange", 8},
		{"consul.json", "{\"services\": [{\"name\": \"db\", \"address\": \"10.0.0.7\", \"port\": 5432, \"tags\": [\n  \"traefik.tcp.routers.r.rule=HostSNI(`*`)\",\n  \"traefik.tcp.routers.r.middlewares=old\",\n  \"traefik.tcp.middlewares.old.ipWhiteList.sourceRange=127.0.0.1\"\n]}]}\n",
			"old@consulcatalog", "r@consulcatalog", "traefik.tcp.middlewares.old.ipWhiteList.sourceRange", 4},
		{"dump.kv", "traefik/tcp/routers/r/rule HostSNI(`*`)\ntraefik/tcp/routers/r/service s\ntraefik/tcp/routers/r/middlewares/0 old\ntraefik/tcp/middlewares/old/ipWhiteList/sourceRange/0 127.0.0.1\ntraefik/tcp/services/s/loadBalancer/servers/0/address 127.0.0.1:1\n",
			"old@kv", "r@kv", "traefik/tcp/middlewares/old/ipWhiteList/sourceRange/0", 4},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.file)
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			rep := Files([]string{path}, DefaultOptions())
			if got := rep.Status.Middlewares[tc.middleware]; got != "warning" {
				t.Fatalf("%s: status %q, want warning; problems %+v", tc.middleware, got, rep.Problems)
			}
			if got := rep.Status.Routers[tc.router]; got != "enabled" {
				t.Fatalf("%s: status %q, want enabled; problems %+v", tc.router, got, rep.Problems)
			}
			found := false
			for _, p := range rep.Problems {
				if p.Resource == tc.middleware && p.Severity == SeverityWarning && strings.Contains(p.Message, "deprecated") &&
					strings.Contains(p.Message, "rename it ipAllowList") && p.Key == tc.key && p.Line == tc.line {
					found = true
				}
			}
			if !found || rep.Failed() {
				t.Fatalf("failed %v; want a warning at %s line %d saying deprecated, use ipAllowList: %+v", rep.Failed(), tc.key, tc.line, rep.Problems)
			}
		})
	}
}

// A file with a servers transport tollgate cannot apply (tls.spiffe) and
// an unknown key in one router serves its other routers; the bad resources
// are disabled with errors on the keys that disable them.
func TestUnsupportedKeysDisableOnlyTheirResources(t *testing.T) {
	content := `tcp:
  routers:
    good:
      rule: "HostSNI(` + "`*`" + `)"
      service: plain
    typo:
      rule: "ClientIP(` + "`10.0.0.1`" + `)"
      servce: plain
    mtls:
      rule: "ClientIP(` + "`10.0.0.2`" + `)"
      service: spiffed
  services:
    plain:
      loadBalancer:
        servers:
          - address: "127.0.0.1:1"
    spiffed:
      loadBalancer:
        serversTransport: workload
        servers:
          - address: "127.0.0.1:2"
            tls: true
  serversTransports:
    workload:
      tls:
        spiffe:
          trustDomain: example.org
`
	path := filepath.Join(t.TempDir(), "dyn.yml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Files([]string{path}, DefaultOptions())
	if rep.Status.Routers["good@file"] != "enabled" || rep.Status.Services["plain@file"] != "enabled" {
		t.Fatalf("statuses %+v: want good@file and plain@file enabled", rep.Status)
	}
	if rep.Status.Routers["mtls@file"] != "disabled" || rep.Status.Services["spiffed@file"] != "disabled" {
		t.Fatalf("statuses %+v: want mtls@file and spiffed@file disabled", rep.Status)
	}
	if _, ok := rep.Status.Routers["typo@file"]; ok {
		t.Fatalf("typo@file is in the configuration: %+v", rep.Status)
	}
	for _, want := range []struct {
		key     string
		line    int
		message string
	}{
		{"tcp.routers.typo.servce", 8, `unknown key "servce": router "typo" is dropped`},
		{"tcp.serversTransports.workload.tls.spiffe", 26, "tls.spiffe is not supported"},
		{"tcp.services.spiffed.loadBalancer.serversTransport", 19, `servers transport "workload@file": tls.spiffe is not supported`},
	} {
		found := false
		for _, p := range rep.Problems {
			if p.Key == want.key && p.Line == want.line && p.Severity == SeverityError && strings.Contains(p.Message, want.message) {
				found = true
			}
		}
		if !found {
			t.Errorf("no error at %s line %d saying %q in %+v", want.key, want.line, want.message, rep.Problems)
		}
	}
}
