package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// Issue 41.6: a 1 MB rule is quoted into its router's errors up to a bound,
// with its length: the errors in /api/rawdata and the log lines that report
// them stay short. Two rules: a host name that is not one (rule.Parse quotes
// the rule and the argument) and a ClientIP range that is not one (config's
// parser, whose netip errors quote their input whole).
func TestHugeRuleErrorIsBounded(t *testing.T) {
	huge := strings.Repeat("a", 1<<20)
	dyn := filepath.Join(t.TempDir(), "dyn.yml")
	if err := os.WriteFile(dyn, []byte(fmt.Sprintf(`tcp:
  routers:
    host:
      rule: "HostSNI(`+"`%s!`"+`)"
      service: s
      tls:
        passthrough: true
    ip:
      rule: "ClientIP(`+"`%s`"+`)"
      service: s
  services:
    s:
      loadBalancer:
        servers:
          - address: "127.0.0.1:1"
`, huge, huge)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := itest.StartTollgate(t, "--entryPoints.tcp.address="+itest.FreeAddr(t), "--providers.file.filename="+dyn, "--log.level=ERROR")
	itest.Eventually(t, 10*time.Second, func() bool {
		rd := p.Rawdata(t)
		return rd.Routers["host@file"].Status == "disabled" && rd.Routers["ip@file"].Status == "disabled"
	}, "the routers with 1 MB rules were not disabled")
	rd := p.Rawdata(t)
	for _, name := range []string{"host@file", "ip@file"} {
		errs := rd.Routers[name].Err
		if len(errs) == 0 {
			t.Fatalf("%s: no error", name)
		}
		for _, e := range errs {
			if len(e) > 2048 {
				t.Errorf("%s: an error of %d bytes in /api/rawdata, want at most 2 KiB: %.300s…", name, len(e), e)
			}
			if !strings.Contains(e, "bytes, first 256 shown)") {
				t.Errorf("%s: error %q does not say how long the input is", name, e)
			}
		}
	}
	itest.Eventually(t, 5*time.Second, func() bool {
		out := p.Out.String()
		return strings.Contains(out, `"router":"host@file"`) && strings.Contains(out, `"router":"ip@file"`)
	}, "the disabled routers were not logged")
	for _, line := range strings.Split(p.Out.String(), "\n") {
		if len(line) > 4096 {
			t.Errorf("a log line of %d bytes, want at most 4 KiB: %.300s…", len(line), line)
		}
	}
}
