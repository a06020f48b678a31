package check

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
)

// tollgate check places the new keys' problems on their file and line like
// the others: a TLS file that cannot be read on the key naming it (YAML and
// TOML), TLS options and servers transports defined differently by two
// files on the second definition; the report shows no private key.
func TestTLSProblemsArePlaced(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "db.key")
	if err := os.WriteFile(key, []byte("-----BEGIN PRIVATE KEY-----\nsecret-key-bytes\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	crt := filepath.Join(dir, "db.crt")
	if err := os.WriteFile(crt, []byte("-----BEGIN CERTIFICATE-----\npublic\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.crt")
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yml", `tls:
  certificates:
    - certFile: `+crt+`
      keyFile: `+key+`
    - certFile: `+missing+`
      keyFile: `+key+`
  options:
    mtls:
      minVersion: VersionTLS13
tcp:
  serversTransports:
    pg:
      dialTimeout: 5s
`)
	b := write("b.toml", `[tls.options.mtls]
minVersion = "VersionTLS12"

[tcp.serversTransports.pg]
dialTimeout = "1s"

[tcp.serversTransports.pg.tls]
rootCAs = ["`+missing+`"]
`)
	rep := Files([]string{a, b}, DefaultOptions())
	type want struct {
		file string
		line int
		key  string
		msg  string
	}
	wants := []want{
		{a, 5, "tls.certificates[1].certFile", `reading "` + missing + `": no such file or directory`},
		{b, 1, "tls.options.mtls", `tls options "mtls" is defined differently in ` + a + ` and ` + b},
		{b, 4, "tcp.serversTransports.pg", `serversTransport "pg" is defined differently in ` + a + ` and ` + b},
		{b, 8, "tcp.serversTransports.pg.tls.rootCAs[0]", `reading "` + missing + `"`},
	}
	for _, w := range wants {
		found := false
		for _, p := range rep.Problems {
			if p.File == w.file && p.Line == w.line && p.Key == w.key && strings.Contains(p.Message, w.msg) {
				found = true
			}
		}
		if !found {
			var all []string
			for _, p := range rep.Problems {
				all = append(all, p.String())
			}
			t.Errorf("no problem at %s:%d on %s saying %q; problems:\n%s", w.file, w.line, w.key, w.msg, strings.Join(all, "\n"))
		}
	}
	if !rep.Failed() {
		t.Error("an unreadable certificate does not fail the check")
	}
	out, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "secret-key-bytes") {
		t.Fatalf("the report shows the private key: %s", out)
	}
	if rep.TCP.TLS == nil || len(rep.TCP.TLS.Certificates) != 2 || rep.TCP.TLS.Certificates[0].KeyFile != config.FileOrContent(key) ||
		rep.TCP.TLS.Options["mtls@file"].MinVersion != "VersionTLS13" || rep.TCP.ServersTransports["pg@file"] == nil {
		t.Fatalf("report's configuration: %+v %+v", rep.TCP.TLS, rep.TCP.ServersTransports)
	}
}

// A label for what labels do not declare is placed on its line, and a
// server.tls label decodes (the container's service dials with TLS).
func TestTLSLabelsArePlaced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db.labels")
	if err := os.WriteFile(path, []byte("traefik.tcp.routers.db.rule=HostSNI(`db.example`)\ntraefik.tcp.routers.db.tls.options=mtls@file\ntraefik.tcp.serverstransports.pg.dialtimeout=1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Files([]string{path}, DefaultOptions())
	found := false
	for _, p := range rep.Problems {
		if p.File == path && p.Line == 3 && p.Key == "traefik.tcp.serverstransports.pg.dialtimeout" && strings.Contains(p.Message, "servers transports are not read from labels") {
			found = true
		}
	}
	if !found {
		t.Fatalf("problems %+v: want one on line 3, the serverstransports label", rep.Problems)
	}
	good := filepath.Join(dir, "ok.labels")
	if err := os.WriteFile(good, []byte("traefik.tcp.routers.db.rule=HostSNI(`db.example`)\ntraefik.tcp.routers.db.tls.options=mtls@file\ntraefik.tcp.services.db.loadbalancer.serverstransport=pg@file\ntraefik.tcp.services.db.loadbalancer.server.tls=true\ntraefik.tcp.services.db.loadbalancer.server.port=5432\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep = Files([]string{good}, DefaultOptions())
	svc := rep.TCP.Services["db@docker"]
	r := rep.TCP.Routers["db@docker"]
	if svc == nil || svc.LoadBalancer.ServersTransport != "pg@file" || len(svc.LoadBalancer.Servers) != 1 || !svc.LoadBalancer.Servers[0].TLS ||
		r == nil || r.TLS == nil || r.TLS.Options != "mtls@file" {
		t.Fatalf("merged %+v %+v", svc, r)
	}
}

// Issue 16's acceptance, through tollgate check's decode, merge and the
// proxy's compile: Traefik v3's own serversTransport labels (its label
// test's Service0 and Service1, with the deprecated terminationDelay and
// proxyProtocol beside the transport) decode and apply with a transport a
// file defines; the deprecated fields warn; a transport that exists nowhere
// disables its service.
func TestTraefikServersTransportLabelsApply(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "transports.yml")
	if err := os.WriteFile(file, []byte("tcp:\n  serversTransports:\n    foo:\n      dialTimeout: 5s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lbls := filepath.Join(dir, "Test.labels")
	if err := os.WriteFile(lbls, []byte(strings.Join([]string{
		"traefik.tcp.routers.Router0.rule=HostSNI(`*`)",
		"traefik.tcp.routers.Router0.service=Service0",
		"traefik.tcp.routers.Router1.rule=HostSNI(`*`)",
		"traefik.tcp.routers.Router1.service=Service1",
		"traefik.tcp.routers.Router1.priority=42",
		"traefik.tcp.routers.Router2.rule=HostSNI(`*`)",
		"traefik.tcp.routers.Router2.service=Service2",
		"traefik.tcp.routers.Router2.priority=43",
		"traefik.tcp.services.Service0.loadbalancer.server.Port=42",
		"traefik.tcp.services.Service0.loadbalancer.serversTransport=foo@file",
		"traefik.tcp.services.Service1.loadbalancer.server.Port=42",
		"traefik.tcp.services.Service1.loadbalancer.TerminationDelay=42",
		"traefik.tcp.services.Service1.loadbalancer.proxyProtocol=true",
		"traefik.tcp.services.Service1.loadbalancer.serversTransport=foo@file",
		"traefik.tcp.services.Service2.loadbalancer.server.Port=42",
		"traefik.tcp.services.Service2.loadbalancer.serversTransport=foo",
	}, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Files([]string{file, lbls}, DefaultOptions())
	lb := func(name string) *config.TCPServersLoadBalancer {
		s := rep.TCP.Services[name]
		if s == nil || s.LoadBalancer == nil {
			t.Fatalf("no service %s in %+v", name, rep.TCP.Services)
		}
		return s.LoadBalancer
	}
	if st := lb("Service0@docker").ServersTransport; st != "foo@file" {
		t.Errorf("Service0 transport %q", st)
	}
	if l := lb("Service1@docker"); l.ServersTransport != "foo@file" || l.TerminationDelay == nil || *l.TerminationDelay != 42 || l.ProxyProtocol == nil || l.ProxyProtocol.Version != 2 {
		t.Errorf("Service1 %+v", l)
	}
	if st := lb("Service2@docker").ServersTransport; st != "foo@docker" {
		t.Errorf("Service2 transport %q, want foo@docker (a bare name is the container's provider's)", st)
	}
	if s := rep.Status.Services["Service0@docker"]; s != "enabled" {
		t.Errorf("Service0 is %q, want enabled with the file's transport", s)
	}
	if s := rep.Status.Services["Service1@docker"]; s != "warning" {
		t.Errorf("Service1 is %q, want warning (deprecated fields beside a transport)", s)
	}
	if s := rep.Status.Services["Service2@docker"]; s != "disabled" {
		t.Errorf("Service2 is %q, want disabled (foo@docker exists nowhere)", s)
	}
	var msgs []string
	for _, p := range rep.Problems {
		msgs = append(msgs, p.String())
	}
	all := strings.Join(msgs, "\n")
	// Each placed on its label's line.
	for _, w := range []struct {
		line     int
		key, msg string
	}{
		{12, "traefik.tcp.services.Service1.loadbalancer.TerminationDelay", "loadBalancer.terminationDelay is deprecated"},
		{13, "traefik.tcp.services.Service1.loadbalancer.proxyProtocol", "loadBalancer.proxyProtocol is deprecated"},
		{16, "traefik.tcp.services.Service2.loadbalancer.serversTransport", `servers transport "foo@docker" does not exist`},
	} {
		found := false
		for _, p := range rep.Problems {
			found = found || p.File == lbls && p.Line == w.line && p.Key == w.key && strings.Contains(p.Message, w.msg)
		}
		if !found {
			t.Errorf("no problem on %s:%d (%s) saying %q; problems:\n%s", lbls, w.line, w.key, w.msg, all)
		}
	}
	t.Logf("problems:\n%s", all)
}

// TLS options named default in two providers (a file and a KV store):
// neither applies, as in the running tollgate, and the problem is placed
// on the file's definition.
func TestDefaultTLSOptionsInTwoProviders(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tls.yml")
	if err := os.WriteFile(file, []byte("tcp:\n  routers:\n    r:\n      rule: HostSNI(`*`)\n      service: s\n  services:\n    s:\n      loadBalancer:\n        servers: [{address: \"127.0.0.1:1\"}]\ntls:\n  options:\n    default:\n      minVersion: VersionTLS12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(dir, "kv.txt")
	if err := os.WriteFile(dump, []byte("traefik/tls/options/default/minVersion VersionTLS13\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Files([]string{file, dump}, DefaultOptions())
	if _, ok := rep.TCP.TLS.Options["default"]; ok {
		t.Error("default options from two providers apply")
	}
	found := false
	for _, p := range rep.Problems {
		found = found || p.File == file && p.Line == 12 && p.Key == "tls.options.default" && strings.Contains(p.Message, `TLS options "default" defined in several providers`) && p.DisablesRouter
	}
	if !found {
		t.Fatalf("problems %+v: want the merge's, on %s:12", rep.Problems, file)
	}
}
