package docker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// composeCmd returns the compose command of this machine: docker-compose
// (v1) or the `docker compose` plugin.
func composeCmd() ([]string, error) {
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}, nil
	}
	if err := exec.Command("docker", "compose", "version").Run(); err == nil {
		return []string{"docker", "compose"}, nil
	}
	return nil, fmt.Errorf("neither docker-compose nor the docker compose plugin is installed")
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// dialBanner connects to addr and returns the connection and the banner
// line; an empty banner means tollgate closed the connection (rejected).
func dialBanner(t *testing.T, addr string) (net.Conn, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	_ = c.SetReadDeadline(time.Time{})
	return c, strings.TrimSpace(line)
}

// TestComposeDemo brings up the shipped docker-compose.yml (images built
// offline from the static binaries, as examples/build.sh does), checks that
// each limit bites at its amount, and takes it down.
func TestComposeDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("compose demo: slow")
	}
	needEngine(t)
	compose, err := composeCmd()
	itest.Need(t, "docker compose", err)

	root := itest.ModuleRoot()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(from, to string) {
		b, err := os.ReadFile(filepath.Join(root, from))
		must(err)
		must(os.MkdirAll(filepath.Dir(filepath.Join(dir, to)), 0o755))
		must(os.WriteFile(filepath.Join(dir, to), b, 0o644))
	}
	copyFile("docker-compose.yml", "docker-compose.yml")
	copyFile("Dockerfile", "Dockerfile")
	copyFile("examples/echo/Dockerfile", "examples/echo/Dockerfile")
	bin, err := os.ReadFile(itest.Binary(t))
	must(err)
	must(os.WriteFile(filepath.Join(dir, "tollgate"), bin, 0o755))
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "examples", "echo", "echo"), "./examples/echo")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building echo: %v\n%s", err, out)
	}

	limited, guarded, apiPort := freePort(t), freePort(t), freePort(t)
	project := "tgit" + uniq()
	run := func(args ...string) string {
		cmd := exec.Command(compose[0], append(append(compose[1:], "-p", project), args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(),
			fmt.Sprintf("TOLLGATE_DEMO_LIMITED_PORT=%d", limited),
			fmt.Sprintf("TOLLGATE_DEMO_GUARDED_PORT=%d", guarded),
			fmt.Sprintf("TOLLGATE_DEMO_API_PORT=%d", apiPort))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", strings.Join(compose, " "), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cmd := exec.Command(compose[0], append(append(compose[1:], "-p", project), "logs", "--no-color", "tollgate")...)
			cmd.Dir = dir
			out, _ := cmd.CombinedOutput()
			t.Logf("tollgate logs:\n%s", out)
		}
		cmd := exec.Command(compose[0], append(append(compose[1:], "-p", project), "down", "--rmi", "local", "-v", "--remove-orphans")...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})
	run("up", "-d", "--build")

	limitedAddr := fmt.Sprintf("127.0.0.1:%d", limited)
	guardedAddr := fmt.Sprintf("127.0.0.1:%d", guarded)
	rawdata := func() map[string]any {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/rawdata", apiPort))
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var m map[string]any
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &m)
		return m
	}
	served := func(router string) bool {
		m := rawdata()
		routers, _ := m["tcpRouters"].(map[string]any)
		r, _ := routers[router].(map[string]any)
		return r != nil && r["status"] == "enabled"
	}
	// The backends pass their health check within a few seconds.
	itest.Eventually(t, 30*time.Second, func() bool { return served("limited@docker") && served("guarded@docker") },
		"routers limited@docker and guarded@docker not enabled; rawdata: %v", rawdata())

	check := func(addr, banner string, amount int) {
		t.Helper()
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for i := range amount {
			c, got := dialBanner(t, addr)
			held = append(held, c)
			if got != banner {
				t.Fatalf("%s: connection %d of %d got banner %q, want %q", addr, i+1, amount, got, banner)
			}
		}
		c, got := dialBanner(t, addr)
		c.Close()
		if got != "" {
			t.Fatalf("%s: connection %d passed with banner %q, want it rejected (amount %d)", addr, amount+1, got, amount)
		}
		held[0].Close()
		held = held[1:]
		// The released slot is free again once tollgate has seen the close.
		itest.Eventually(t, 2*time.Second, func() bool {
			c, got := dialBanner(t, addr)
			if got == banner {
				held = append(held, c)
				return true
			}
			c.Close()
			return false
		}, "%s: no connection passed after one of %d was closed", addr, amount)
	}
	check(limitedAddr, "limited", 3)
	check(guardedAddr, "guarded", 2)
}
