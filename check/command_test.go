package check

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// tollgate check: JSON on stdout, one located line per problem on stderr,
// exit 1 only when a router would be disabled.
func TestCheckCommand(t *testing.T) {
	bin := itest.Binary(t)
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, append([]string{"check"}, args...)...)
		cmd.Dir = itest.ModuleRoot() // the paths below, as a user in the repository types them
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return itest.ExitCode(err), stdout.String(), stderr.String()
	}
	code, out, errOut := run("testdata/check/hostsni-no-tls.labels")
	if code != 1 || !strings.Contains(errOut, "testdata/check/hostsni-no-tls.labels:2: traefik.tcp.routers.web.rule: error:") {
		t.Fatalf("HostSNI without TLS: exit %d, stderr %s", code, errOut)
	}
	var rep struct {
		TCP      map[string]any   `json:"tcp"`
		Problems []map[string]any `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.TCP == nil || len(rep.Problems) != 1 {
		t.Fatalf("stdout is not the report: %v\n%s", err, out)
	}
	if code, _, errOut := run("testdata/check/amount-zero.yml"); code != 0 || !strings.Contains(errOut, "warning: inFlightConn.amount is 0") {
		t.Fatalf("amount 0 is a warning: exit %d, %s", code, errOut)
	}
	if code, _, errOut := run("--exposedByDefault=false", "docker-compose.yml"); code != 0 || errOut != "" {
		t.Fatalf("the shipped docker-compose.yml: exit %d, %s", code, errOut)
	}
	if code, _, errOut := run(); code != 1 || !strings.Contains(errOut, "no file given") {
		t.Fatalf("no file: exit %d, %s", code, errOut)
	}
	if code, _, errOut := run("--colour", "x.yml"); code != 1 || !strings.Contains(errOut, `unknown flag "--colour"`) {
		t.Fatalf("bad flag: exit %d, %s", code, errOut)
	}
}
