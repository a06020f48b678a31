package swarm

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The stack example as its README runs it: `docker stack deploy` of
// examples/swarm/stack.yml (tollgate and the limited echo service, from the
// FROM scratch images), the limit of 10 per client IP through the port
// tollgate publishes in host mode, and `tollgate check` passing the file.
func TestStackExample(t *testing.T) {
	needSwarm(t, false)
	file := filepath.Join(itest.ModuleRoot(), "examples", "swarm", "stack.yml")
	out, err := exec.Command(itest.Binary(t), "check", file).CombinedOutput()
	if err != nil {
		t.Fatalf("tollgate check %s: %v\n%s", file, err, out)
	}

	stack := "tgit" + itest.Uniq()
	ports := freePorts(t, 2)
	port, apiPort := ports[0], ports[1]
	deploy := itest.DockerCommand("stack", "deploy", "--resolve-image", "never", "-c", file, stack)
	deploy.Env = append(os.Environ(),
		"TOLLGATE_IMAGE="+itest.TollgateImage(t), "TOLLGATE_ECHO_IMAGE="+itest.EchoImage(t),
		"TOLLGATE_SWARM_LIMITED_PORT="+port, "TOLLGATE_SWARM_API_PORT="+apiPort)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := itest.DockerCommand("service", "logs", "--raw", stack+"_tollgate").CombinedOutput()
			t.Logf("tollgate logs:\n%s", logs)
		}
		_ = itest.DockerCommand("stack", "rm", stack).Run()
		removeNetwork(t, stack+"_backend") // once the tasks have left it
	})
	if out, err := deploy.CombinedOutput(); err != nil {
		t.Fatalf("docker stack deploy: %v\n%s", err, out)
	}

	api, ep := "127.0.0.1:"+apiPort, "127.0.0.1:"+port
	itest.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get("http://" + api + "/ping")
		if err != nil {
			return false
		}
		resp.Body.Close()
		rd := itest.GetRawdata(t, api)
		return rd.Routers["limited@swarm"].Status == "enabled" && strings.Count(rd.ServersOf("limited@swarm"), ",") == 1
	}, "the stack's router limited@swarm is not served with its two replicas")

	// Every connection from this host comes from one address (the gateway
	// of docker_gwbridge): 10 pass, the 11th is closed, one closed makes room.
	held := itest.HoldBanners(t, 10, "", ep, "limited")
	defer func() { itest.CloseAll(held) }()
	if c, b := itest.DialBanner(t, "", ep); b != "" {
		c.Close()
		t.Fatalf("11th connection got %q, want it rejected", b)
	} else {
		c.Close()
	}
	held[0].Close()
	held = held[1:]
	itest.Eventually(t, 2*time.Second, func() bool {
		c, b := itest.DialBanner(t, "", ep)
		if b == "limited" {
			held = append(held, c)
			return true
		}
		c.Close()
		return false
	}, "not re-admitted after closing one of 10")
	if n := itest.GetRawdata(t, api).Middlewares["test-inflightconn@swarm"].InFlight.InFlight; n != 10 {
		t.Fatalf("inFlight = %d, want 10", n)
	}
}

// freePorts returns n distinct TCP ports that were free on the host a
// moment ago.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", ":0") // held until all are chosen: distinct
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		out = append(out, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	return out
}
