package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check reads no static configuration, so a router's certResolver is taken
// to exist, with whatever obtains its certificates: no problem, and not an
// error that the resolver is unknown.
func TestCertResolverIsAWarning(t *testing.T) {
	file := filepath.Join(t.TempDir(), "dyn.yml")
	if err := os.WriteFile(file, []byte("tcp:\n  routers:\n    db:\n      rule: \"HostSNI(`db.example`)\"\n      service: db\n      tls:\n        certResolver: le\n  services:\n    db:\n      loadBalancer:\n        servers:\n          - address: \"127.0.0.1:5432\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Files([]string{file}, DefaultOptions())
	if rep.Failed() {
		t.Fatalf("a router naming a certificate resolver fails check: %+v", rep.Problems)
	}
	for _, p := range rep.Problems {
		if strings.Contains(p.Key, "certResolver") {
			t.Fatalf("a problem with the certificate resolver: %+v", p)
		}
	}
}
