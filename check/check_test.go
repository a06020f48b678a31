package check

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/check")

// goldenDir holds one input per case (dynamic .yml/.toml, .labels, compose
// .yml) and NAME.golden.json: the report and the exit status.
var goldenDir = filepath.Join("..", "testdata", "check")

type golden struct {
	Exit   int     `json:"exit"`
	Report *Report `json:"report"`
}

func TestGolden(t *testing.T) {
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasSuffix(name, ".golden.json") {
			continue
		}
		n++
		t.Run(name, func(t *testing.T) {
			in := filepath.Join(goldenDir, name)
			rep := Files([]string{in}, DefaultOptions())
			g := golden{Report: rep}
			if rep.Failed() {
				g.Exit = 1
			}
			got, err := json.MarshalIndent(g, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join(goldenDir, strings.TrimSuffix(name, filepath.Ext(name))+".golden.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./check -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("report differs from %s:\n%s", path, got)
			}
			// Every problem is placed: a file, and a key or line.
			for _, p := range rep.Problems {
				if p.File == "" || (p.Key == "" && p.Line == 0) {
					t.Errorf("problem without a location: %+v", p)
				}
			}
		})
	}
	if n < 11 {
		t.Fatalf("only %d golden cases found in %s", n, goldenDir)
	}
}

// One assertion per problem class of issue 6, so that a golden file
// rewritten with -update cannot silently lose one.
func TestProblemClasses(t *testing.T) {
	for _, tc := range []struct {
		file, key, message, severity string
		line                         int
		exit                         bool
	}{
		{"unknown-key.yml", "tcp.routers.db.servce", `unknown key "servce"`, SeverityError, 6, true},
		{"bad-value.yml", "tcp.middlewares.limit.inFlightConn.amount", `amount must be an integer, got "ten"`, SeverityError, 5, true},
		{"amount-zero.yml", "tcp.middlewares.nobody.inFlightConn.amount", "amount is 0", SeverityWarning, 11, false},
		{"failuremode-no-store.yml", "tcp.middlewares.limit.inFlightConn.failureMode", "failureMode has no effect without inFlightConn.store", SeverityWarning, 13, false},
		{"hostsni-no-tls.labels", "traefik.tcp.routers.web.rule", "add tls.passthrough=true", SeverityError, 2, true},
		{"missing-refs.toml", "tcp.routers.db.service", `service "postgres@file" does not exist`, SeverityError, 3, true},
		{"missing-refs.toml", "tcp.routers.db.middlewares", `middleware "allow@docker" does not exist`, SeverityError, 4, true},
		{"unknown-key-toml.toml", "tcp.routers.db.servce", `unknown key "servce"`, SeverityError, 4, true},
		{"allowlist-nothing.labels", "traefik.tcp.middlewares.office.ipallowlist.sourcerange", "sourceRange", SeverityError, 3, true},
		{"extensions.yml", "tcp.middlewares.wide.inFlightConn.ipv6Subnet", "ipv6Subnet 200", SeverityError, 17, true},
		{"compose-problems.yml", "traefik.tcp.routers.pg.entrypoint", "unknown key", SeverityError, 7, true},
		{"compose-problems.yml", "traefik.tcp.middlewares.cache-limit.inflightconn.amount", "must not be negative", SeverityError, 12, true},
		{"compose-problems.yml", "traefik.tcp.routers.tls.rule", "add tls.passthrough=true", SeverityError, 16, true},
		{"consul-services.json", "traefik.tcp.middlewares.limit.inflightconn.amout", "unknown key", SeverityError, 22, true},
		{"consul-services.json", "", "port is missing", SeverityError, 25, true},
		{"ratelimit.yml", "tcp.middlewares.nobucket.rateLimit.burst", "burst 0 is less than 1", SeverityWarning, 18, true},
		{"ratelimit.yml", "tcp.middlewares.nolimit.rateLimit", "average is 0: no connection is rate-limited", SeverityWarning, 20, true},
		{"ratelimit.yml", "tcp.middlewares.never.rateLimit.period", "period 0s is not positive", SeverityError, 25, true},
		{"ratelimit-negative.labels", "traefik.tcp.middlewares.rate.ratelimit.average", "average -5 is negative", SeverityError, 3, true},
	} {
		rep := Files([]string{filepath.Join(goldenDir, tc.file)}, DefaultOptions())
		if rep.Failed() != tc.exit {
			t.Errorf("%s: Failed() = %v, want %v", tc.file, rep.Failed(), tc.exit)
		}
		found := false
		for _, p := range rep.Problems {
			if p.Key == tc.key && strings.Contains(p.Message, tc.message) && p.Severity == tc.severity && p.Line == tc.line {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no %s at %s line %d mentioning %q in %+v", tc.file, tc.severity, tc.key, tc.line, tc.message, rep.Problems)
		}
	}
}

func TestComposeServicesAreLocated(t *testing.T) {
	rep := Files([]string{filepath.Join(goldenDir, "compose-problems.yml")}, DefaultOptions())
	services := map[string]bool{}
	for _, p := range rep.Problems {
		services[p.Service] = true
	}
	for _, s := range []string{"typo", "badvalue", "sni", "swarm"} {
		if !services[s] {
			t.Errorf("no problem names compose service %q: %+v", s, rep.Problems)
		}
	}
}

func TestShippedComposePasses(t *testing.T) {
	// As the demo runs it (exposedByDefault=false) and with the defaults.
	for _, opts := range []Options{{ExposedByDefault: false}, DefaultOptions()} {
		rep := Files([]string{filepath.Join("..", "docker-compose.yml")}, opts)
		if rep.Failed() || len(rep.Problems) != 0 {
			t.Fatalf("the shipped docker-compose.yml has problems: %+v", rep.Problems)
		}
		for _, r := range []string{"limited@docker", "guarded@docker"} {
			if rep.Status.Routers[r] != "enabled" {
				t.Errorf("router %s: status %q, want enabled", r, rep.Status.Routers[r])
			}
		}
		if len(rep.TCP.Middlewares) != 3 {
			t.Errorf("middlewares %v, want limit-3, limit-2 and private-only", rep.TCP.Middlewares)
		}
	}
}

func TestCleanComposeMapAndListForms(t *testing.T) {
	rep := Files([]string{filepath.Join(goldenDir, "compose-clean.yml")}, DefaultOptions())
	if rep.Failed() || len(rep.Problems) != 0 {
		t.Fatalf("problems: %+v", rep.Problems)
	}
	// List form, automatic service named <service>-<project>, port from expose.
	if s := rep.TCP.Services["postgres-shop@docker"]; s == nil || s.LoadBalancer.Servers[0].Address != "postgres:5432" {
		t.Errorf("automatic service: %+v", rep.TCP.Services)
	}
	// Map form, label port.
	if s := rep.TCP.Services["cache@docker"]; s == nil || s.LoadBalancer.Servers[0].Address != "redis:6379" {
		t.Errorf("labelled service: %+v", rep.TCP.Services["cache@docker"])
	}
	if m := rep.TCP.Middlewares["pg-limit@docker"]; m == nil || !m.InFlightConn.DryRun || m.InFlightConn.Amount != 10 {
		t.Errorf("dryRun label: %+v", m)
	}
}

// Files from several providers merge as the watcher merges them: a label
// router can use a file middleware with @file.
func TestSeveralFilesCrossProvider(t *testing.T) {
	dir := t.TempDir()
	dyn := filepath.Join(dir, "dynamic.yml")
	lbl := filepath.Join(dir, "db.labels")
	if err := os.WriteFile(dyn, []byte("tcp:\n  middlewares:\n    shared:\n      inFlightConn:\n        amount: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lbl, []byte("traefik.tcp.routers.db.rule=HostSNI(`*`)\ntraefik.tcp.routers.db.middlewares=shared@file\ntraefik.tcp.services.db.loadbalancer.server.port=5432\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Files([]string{dyn, lbl}, DefaultOptions())
	if rep.Failed() || len(rep.Problems) != 0 || rep.Status.Routers["db@docker"] != "enabled" {
		t.Fatalf("report %+v", rep)
	}
	rep = Files([]string{lbl}, DefaultOptions())
	if !rep.Failed() {
		t.Fatal("the label file alone references a missing middleware: want a failure")
	}
	rep = Files([]string{lbl}, Options{EntryPoints: []string{"web"}, ExposedByDefault: false})
	if len(rep.Problems) != 0 || len(rep.TCP.Routers) != 0 {
		t.Fatalf("exposedByDefault=false must skip a container without traefik.enable: %+v", rep)
	}
}

// Consul tags with a custom prefix: problems show the tag key as written.
func TestConsulCustomPrefix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.json")
	def := `{"service": {"name": "db", "port": 5432, "tags": [
  "tollgate.tcp.routers.db.rule=HostSNI(` + "`db.test`" + `)",
  "traefik.tcp.routers.ignored.rule=nonsense"
]}}`
	if err := os.WriteFile(path, []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Files([]string{path}, Options{ExposedByDefault: true, Prefix: "tollgate"})
	if !rep.Failed() || len(rep.Problems) != 1 {
		t.Fatalf("want one router-disabling problem: %+v", rep.Problems)
	}
	p := rep.Problems[0]
	if p.Key != "tollgate.tcp.routers.db.rule" || p.Line != 2 || p.Service != "db" || p.Resource != "db@consulcatalog" {
		t.Fatalf("problem %+v", p)
	}
	if s := rep.TCP.Services["db@consulcatalog"]; s == nil || s.LoadBalancer.Servers[0].Address != "<node address>:5432" {
		t.Fatalf("automatic service %+v", rep.TCP.Services)
	}
	if _, ok := rep.TCP.Routers["ignored@consulcatalog"]; ok {
		t.Fatal("a tag outside the prefix was read")
	}
}

// A directory is read as the file provider's directory mode reads it: its
// dynamic files merged, the first definition of a name kept.
func TestDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yml", "tcp:\n  middlewares:\n    lim:\n      inFlightConn:\n        amount: 3\n")
	write("b.toml", "[tcp.routers.r]\n  rule = \"HostSNI(`*`)\"\n  service = \"s\"\n  middlewares = [\"lim\"]\n[[tcp.services.s.loadBalancer.servers]]\n  address = \"127.0.0.1:1\"\n")
	write("c.yml", "tcp:\n  middlewares:\n    lim:\n      inFlightConn:\n        amount: 4\n")
	write("notes.txt", "not=read")
	rep := Files([]string{dir}, DefaultOptions())
	if rep.Failed() || rep.Status.Routers["r@file"] != "enabled" || rep.TCP.Middlewares["lim@file"].InFlightConn.Amount != 3 {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Message, "defined differently") || rep.Problems[0].File != filepath.Join(dir, "c.yml") {
		t.Fatalf("want one conflict problem in c.yml: %+v", rep.Problems)
	}
}

// Containers defining one name differently: the name is dropped for good (a
// third definition does not bring it back); same-named services merge their
// servers.
func TestComposeConflicts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "docker-compose.yml")
	compose := "name: p\nservices:\n"
	for i, amount := range []string{"1", "2", "1"} {
		compose += fmt.Sprintf("  c%d:\n    labels:\n      traefik.tcp.middlewares.lim.inflightconn.amount: %q\n"+
			"      traefik.tcp.routers.r.rule: \"HostSNI(`*`)\"\n      traefik.tcp.routers.r.service: s\n      traefik.tcp.routers.r.middlewares: lim\n"+
			"      traefik.tcp.services.s.loadbalancer.server.port: \"700%d\"\n", i, amount, i)
	}
	if err := os.WriteFile(path, []byte(compose), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Files([]string{path}, DefaultOptions())
	if _, ok := rep.TCP.Middlewares["lim@docker"]; ok {
		t.Fatalf("conflicting middleware kept: %+v", rep.TCP.Middlewares)
	}
	if s := rep.TCP.Services["s@docker"]; s == nil || len(s.LoadBalancer.Servers) != 3 {
		t.Fatalf("servers not merged: %+v", rep.TCP.Services)
	}
	n := 0
	for _, p := range rep.Problems {
		if strings.Contains(p.Message, `middleware "lim" is defined differently`) {
			n++
			if p.Service != "c1" || p.Line == 0 {
				t.Errorf("conflict not located on the second container: %+v", p)
			}
		}
	}
	if n != 1 || rep.Status.Routers["r@docker"] != "disabled" || !rep.Failed() {
		t.Fatalf("want one conflict and r disabled (missing middleware): %+v %v", rep.Problems, rep.Status.Routers)
	}
}

// tollgate check reports what the file provider would refuse over the
// default limits: here a rule longer than limits.maxRuleLength.
func TestCheckLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "long.yml")
	rule := "HostSNI(`*`)" + strings.Repeat(" || ClientIP(`10.0.0.1`)", 180000)
	content := "tcp:\n  routers:\n    r:\n      rule: \"" + rule + "\"\n      service: s\n  services:\n    s:\n      loadBalancer:\n        servers:\n        - address: 127.0.0.1:1\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Files([]string{path}, DefaultOptions())
	if !rep.Failed() || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Message, "over limits.maxRuleLength (4194304)") {
		t.Fatalf("problems %+v, want one naming limits.maxRuleLength", rep.Problems)
	}
}
