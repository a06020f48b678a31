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
	if rep.TCP.TLS == nil || len(rep.TCP.TLS.Certificates) != 2 || rep.TCP.TLS.Certificates[0].KeyFile != config.Redacted ||
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
