package config

import (
	"os"
	"path/filepath"
	"testing"

	pfile "github.com/traefik/paerser/file"
)

// A Traefik static configuration's certificatesResolvers decode (the acme
// block is accepted, to be ignored), in YAML and TOML.
func TestCertificatesResolversDecode(t *testing.T) {
	for name, content := range map[string]string{
		"static.yaml": `entryPoints:
  pg:
    address: ":5432"
certificatesResolvers:
  le:
    acme:
      email: ops@example.com
      storage: /data/acme.json
      caServer: https://acme-v02.api.letsencrypt.org/directory
      tlsChallenge: {}
      httpChallenge:
        entryPoint: web
      dnsChallenge:
        provider: cloudflare
        resolvers: ["1.1.1.1:53"]
`,
		"static.toml": `[entryPoints.pg]
address = ":5432"
[certificatesResolvers.le.acme]
email = "ops@example.com"
storage = "acme.json"
[certificatesResolvers.le.acme.tlsChallenge]
`,
	} {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		c := NewCommand()
		if err := pfile.Decode(p, c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := c.CertificatesResolvers["le"]
		if r == nil || r.ACME == nil || r.ACME.Email != "ops@example.com" || r.ACME.TLSChallenge == nil {
			t.Fatalf("%s: decoded %+v", name, r)
		}
	}
}
