package cmdline

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// tollgate healthcheck: 0 against a running admin API (flag or TOLLGATE_
// variable), 1 when nothing answers.
func TestHealthcheckCommand(t *testing.T) {
	p := itest.StartTollgate(t, "--entryPoints.tcp.address="+itest.FreeAddr(t))
	bin := itest.Binary(t)

	out, err := exec.Command(bin, "healthcheck", "--api.address="+p.API).CombinedOutput()
	if itest.ExitCode(err) != 0 || !strings.Contains(string(out), "OK") {
		t.Fatalf("healthcheck against a running tollgate: exit %d, %s", itest.ExitCode(err), out)
	}
	_, port, _ := net.SplitHostPort(p.API)
	cmd := exec.Command(bin, "healthcheck")
	cmd.Env = append(os.Environ(), "TOLLGATE_API_ADDRESS=:"+port) // a listen address: empty host means loopback
	if out, err := cmd.CombinedOutput(); itest.ExitCode(err) != 0 {
		t.Fatalf("healthcheck with TOLLGATE_API_ADDRESS: exit %d, %s", itest.ExitCode(err), out)
	}
	dead := itest.FreeAddr(t)
	out, err = exec.Command(bin, "healthcheck", "--api.address="+dead).CombinedOutput()
	if itest.ExitCode(err) != 1 || !strings.Contains(string(out), dead) {
		t.Fatalf("healthcheck against nothing: exit %d, %s (want 1 naming %s)", itest.ExitCode(err), out, dead)
	}
}

// Bad flags are one line naming the flag and the value; paerser's wrapper
// is cut from other errors.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--entryPoints.db.adress=:5432"}, `flag --entryPoints.db.adress=":5432": unknown option "adress" (see tollgate --help)`},
		{[]string{"--configFile=/nonexistent/x.toml"}, `--configFile="/nonexistent/x.toml": stat /nonexistent/x.toml: no such file or directory`},
		{[]string{"db.address=:1"}, `unexpected argument "db.address=:1": give values with '=', as in --entryPoints.db.address=:5432`},
		{[]string{"--help", "--nonsense"}, ""},
	} {
		got := ""
		if err := ValidateFlags(tc.args); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%v: error %q, want %q", tc.args, got, tc.want)
		}
	}
	if got := ErrorLine(errorString("command tollgate error: failed to decode configuration from flags: bad\n  value")); got != "bad value" {
		t.Errorf("ErrorLine = %q", got)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// With Traefik's api.insecure, `tollgate upgrade` and `tollgate healthcheck`
// ask the address the API is on: the traefik entry point's.
func TestCommandsFollowAPIInsecure(t *testing.T) {
	bin := itest.Binary(t)
	dead := itest.FreeAddr(t) // nothing listens: the error names where it asked
	for _, sub := range []string{"upgrade", "healthcheck"} {
		out, err := exec.Command(bin, sub, "--api.insecure=true", "--entryPoints.traefik.address="+dead).CombinedOutput()
		if itest.ExitCode(err) != 1 || !strings.Contains(string(out), dead) {
			t.Errorf("%s with api.insecure: exit %d, %s (want 1 naming %s)", sub, itest.ExitCode(err), out, dead)
		}
	}
}
