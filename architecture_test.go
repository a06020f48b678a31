package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/tollgate-proxy/tollgate"

// importRules are ARCHITECTURE.md's import rules: for each package (a
// trailing "/" covers the package's subpackages), the tollgate packages it
// may import. A package not listed fails the test until it is given a rule.
var importRules = map[string][]string{
	"":                                 {"check", "config", "internal/cmdline", "internal/process", "internal/upgrade", "proxy/tcp"},
	"internal/process":                 {"api", "config", "internal/acme", "internal/cmdline", "internal/logs", "internal/preflight", "internal/upgrade", "metrics", "middleware", "middleware/inflightconn", "middleware/ratelimit", "middleware/standard", "provider", "provider/", "proxy", "proxy/tcp"},
	"internal/preflight":               {"config", "internal/acme", "internal/cmdline", "metrics", "proxy"},
	"internal/cmdline":                 {"config", "internal/decodeerr"},
	"internal/logs":                    {"config"},
	"config":                           {"internal/quote"},
	"proxy/tcp":                        {},
	"internal/expr":                    {"internal/quote"},
	"internal/itest":                   {},
	"internal/itest/forward":           {},
	"internal/ratelog":                 {},
	"internal/decodeerr":               {"internal/quote"},
	"internal/quote":                   {},
	"internal/acme":                    {"config"},
	"internal/upgrade":                 {"middleware/inflightconn", "middleware/ratelimit"},
	"labels":                           {"config", "internal/decodeerr", "internal/quote"},
	"provider":                         {"config", "internal/quote"},
	"provider/docker":                  {"config", "labels", "provider", "provider/constraints", "provider/internal/"},
	"provider/consulcatalog":           {"config", "labels", "provider", "provider/constraints"},
	"provider/swarm":                   {"config", "labels", "provider", "provider/constraints", "provider/internal/"},
	"provider/internal/":               {},
	"provider/file":                    {"config", "internal/decodeerr", "provider"},
	"provider/http":                    {"config", "provider", "provider/file"},
	"provider/kubernetescrd":           {"config", "provider", "provider/kubernetescrd/internal/"},
	"provider/kubernetescrd/internal/": {"internal/itest"},
	"provider/kv":                      {"config", "internal/decodeerr", "provider"},
	"provider/kv/":                     {"config", "provider", "provider/kv"},
	"provider/kv/internal/":            {"internal/itest"},
	"provider/constraints":             {"internal/expr"},
	"middleware":                       {"config", "internal/ratelog", "proxy/tcp"},
	"middleware/":                      {"config", "internal/ratelog", "middleware", "middleware/internal/", "proxy/tcp"},
	"middleware/standard":              {"middleware/"},
	"middleware/internal/":             {},
	"proxy/sniff":                      {},
	"proxy/tlsconf":                    {"config", "proxy/sniff"},
	"proxy/health":                     {"config"},
	"proxy/accesslog":                  {"proxy/tcp"},
	"proxy/rule":                       {"config", "internal/expr", "internal/quote", "proxy/tcp"},
	"proxy":                            {"config", "internal/quote", "internal/ratelog", "middleware", "middleware/inflightconn", "middleware/ratelimit", "proxy/accesslog", "proxy/health", "proxy/internal/", "proxy/rule", "proxy/sniff", "proxy/tcp", "proxy/tlsconf"},
	"proxy/internal/":                  {},
	"api":                              {"config", "internal/upgrade", "metrics", "middleware", "middleware/crowdsec", "middleware/inflightconn", "middleware/ratelimit", "provider", "proxy", "proxy/tcp", "api/dashboard"},
	"api/dashboard":                    {},
	"metrics":                          {"config", "provider", "proxy"},
	"check":                            {"config", "internal/cmdline", "internal/decodeerr", "internal/preflight", "labels", "middleware", "middleware/inflightconn", "middleware/standard", "provider", "provider/", "proxy"},
	"internal/docs":                    {"config"},
	"examples/echo":                    {},
	"e2e":                              {},
}

// rule returns the rule for pkg: its own, else the longest "dir/" rule
// that covers it.
func rule(pkg string) ([]string, bool) {
	if r, ok := importRules[pkg]; ok {
		return r, true
	}
	best, found := "", false
	for k := range importRules {
		if strings.HasSuffix(k, "/") && strings.HasPrefix(pkg, k) && len(k) > len(best) {
			best, found = k, true
		}
	}
	return importRules[best], found
}

func allowed(rules []string, imp string) bool {
	for _, r := range rules {
		if r == "*" || r == imp || (strings.HasSuffix(r, "/") && strings.HasPrefix(imp, r)) {
			return true
		}
	}
	return false
}

// TestImportRules holds every package to the import rules of
// ARCHITECTURE.md (non-test files; tests may also import internal/itest).
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		rules, ok := rule(pkg)
		if !ok {
			t.Errorf("package %q has no import rule: add it to ARCHITECTURE.md and importRules", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			imp = strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			if imp == "" {
				t.Errorf("%q imports the root package", pkg)
			} else if !allowed(rules, imp) {
				t.Errorf("%q imports %q: not allowed by ARCHITECTURE.md (may import %v)", pkg, imp, rules)
			}
		}
	}
}
