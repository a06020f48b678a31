package check

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// tollgate check reads a dump of `key value` lines through the KV
// providers' Build: names qualified with --kvProvider, keys under --rootKey,
// problems placed on their line; a dump without problems exits 0.
func TestCheckKVLines(t *testing.T) {
	bin := itest.Binary(t)
	run := func(args ...string) (int, Report, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, append([]string{"check"}, args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code := itest.ExitCode(cmd.Run())
		var rep Report
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("report: %v\n%s", err, stdout.String())
		}
		return code, rep, stderr.String()
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "edge.txt")
	if err := os.WriteFile(good, []byte(`# etcdctl get --prefix edge, as key value lines
edge/tcp/middlewares/test-inflightconn/inFlightConn/amount  10
edge/tcp/routers/my-router/rule                             HostSNI(`+"`*`"+`)
edge/tcp/routers/my-router/middlewares/0                    test-inflightconn
edge/tcp/services/my-service/loadBalancer/servers/0/address 127.0.0.1:4000
traefik/tcp/routers/ignored/rule                            not under the root key
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, rep, errOut := run("--rootKey=edge", "--kvProvider=etcd", good)
	if code != 0 || errOut != "" || rep.Status.Routers["my-router@etcd"] != "enabled" || rep.TCP.Routers["my-router@etcd"].Service != "my-service@etcd" {
		t.Fatalf("exit %d, stderr %q, routers %v", code, errOut, rep.Status.Routers)
	}

	code, _, errOut = run(filepath.Join(goldenDir, "kv-lines.kv"))
	if code != 1 || !strings.Contains(errOut, "kv-lines.kv:7: traefik/tcp/services/my-service/loadBalancer/servers/1/adress: error: unknown key") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	out, err := exec.Command(bin, "check", "--kvProvider=", good).CombinedOutput()
	if itest.ExitCode(err) != 1 || !strings.Contains(string(out), "--kvProvider needs a value") {
		t.Fatalf("empty --kvProvider: %v, %s", err, out)
	}
}
