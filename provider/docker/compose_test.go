package docker

import (
	"debug/elf"
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
	if err := itest.DockerCommand("compose", "version").Run(); err == nil {
		return []string{"docker", "compose"}, nil
	}
	return nil, fmt.Errorf("neither docker-compose nor the docker compose plugin is installed")
}

// consulBinary finds the Consul agent (itest.ConsulBinary) for the demo's FROM scratch Consul
// image: $TOLLGATE_CONSUL, the binary scripts/consul.sh caches, or consul on
// PATH; when none is there and integration tests are required, it runs
// scripts/consul.sh (a cold build takes minutes). The binary must be static:
// the image has no dynamic loader.
func consulBinary() (string, error) {
	bin, err := itest.ConsulBinary()
	if err != nil {
		return "", err
	}
	f, err := elf.Open(bin)
	if err != nil {
		return "", fmt.Errorf("consul binary %s: %w", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("consul binary %s is dynamically linked; the FROM scratch image needs a static one (scripts/consul.sh builds it with CGO off)", bin)
		}
	}
	return bin, nil
}

// linkOrCopy hard-links from to to, or copies it when they are on different
// file systems (the Consul agent is about 160 MB).
func linkOrCopy(from, to string) error {
	if err := os.Link(from, to); err == nil {
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
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

// TestComposeDemo brings up the shipped docker-compose.yml (images built
// offline from the static binaries and the Consul agent, as examples/build.sh
// does), checks that each limit bites at its amount — the two Docker-labelled
// backends and the one registered in the Consul agent — and takes it down.
func TestComposeDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("compose demo: slow")
	}
	testStart := time.Now()
	itest.NeedDocker(t)
	compose, err := composeCmd()
	itest.Need(t, "docker compose", err)
	consul, err := consulBinary()
	itest.Need(t, "consul agent binary for the demo's Consul image", err)

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
	copyFile(".dockerignore", ".dockerignore") // the root context must not send the Consul agent
	must(itest.ImageFiles(dir))
	copyFile("examples/echo/Dockerfile", "examples/echo/Dockerfile")
	copyFile("examples/consul/Dockerfile", "examples/consul/Dockerfile")
	copyFile("examples/consul/.dockerignore", "examples/consul/.dockerignore")
	copyFile("examples/consul/config/registered.json", "examples/consul/config/registered.json")
	must(linkOrCopy(consul, filepath.Join(dir, "examples", "consul", "consul")))
	bin, err := os.ReadFile(itest.Binary(t))
	must(err)
	must(os.WriteFile(filepath.Join(dir, "tollgate"), bin, 0o755))
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "examples", "echo", "echo"), "./examples/echo")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building echo: %v\n%s", err, out)
	}

	limited, guarded, registered, apiPort, consulPort := freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)
	project := "tgit" + itest.Uniq()
	run := func(args ...string) string {
		cmd := exec.Command(compose[0], append(append(compose[1:], "-p", project), args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(),
			fmt.Sprintf("TOLLGATE_DEMO_LIMITED_PORT=%d", limited),
			fmt.Sprintf("TOLLGATE_DEMO_GUARDED_PORT=%d", guarded),
			fmt.Sprintf("TOLLGATE_DEMO_REGISTERED_PORT=%d", registered),
			fmt.Sprintf("TOLLGATE_DEMO_API_PORT=%d", apiPort),
			fmt.Sprintf("TOLLGATE_DEMO_CONSUL_PORT=%d", consulPort))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", strings.Join(compose, " "), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cmd := exec.Command(compose[0], append(append(compose[1:], "-p", project), "logs", "--no-color", "tollgate", "consul")...)
			cmd.Dir = dir
			out, _ := cmd.CombinedOutput()
			t.Logf("tollgate and consul logs:\n%s", out)
		}
		down := time.Now()
		cmd := exec.Command(compose[0], append(append(compose[1:], "-p", project), "down", "--rmi", "local", "-v", "--remove-orphans")...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
		t.Logf("compose down: %s", time.Since(down).Round(time.Millisecond))
	})
	t.Logf("binaries ready: %s", time.Since(testStart).Round(time.Millisecond))
	start := time.Now()
	run("up", "-d", "--build")
	t.Logf("compose up --build: %s", time.Since(start).Round(time.Millisecond))

	limitedAddr := fmt.Sprintf("127.0.0.1:%d", limited)
	guardedAddr := fmt.Sprintf("127.0.0.1:%d", guarded)
	registeredAddr := fmt.Sprintf("127.0.0.1:%d", registered)
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
	// The backends pass their health check within a few seconds; the Consul
	// agent elects itself, loads registered.json and runs the TCP check
	// (every 2 s) before the service is healthy in the catalog.
	itest.Eventually(t, 60*time.Second, func() bool {
		return served("limited@docker") && served("guarded@docker") && served("registered@consulcatalog")
	}, "routers limited@docker, guarded@docker and registered@consulcatalog not all enabled; rawdata: %v", rawdata())
	t.Logf("all three routers enabled %s after compose up started", time.Since(start).Round(time.Millisecond))

	// check holds amount connections (each gets the backend's banner), sees
	// the next extra rejected, closes one and sees a new one pass; during
	// holding it calls whileHeld, if set.
	check := func(addr, banner string, amount, extra int, whileHeld func()) {
		t.Helper()
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for i := range amount {
			c, got := itest.DialBanner(t, "", addr)
			held = append(held, c)
			if got != banner {
				t.Fatalf("%s: connection %d of %d got banner %q, want %q", addr, i+1, amount, got, banner)
			}
		}
		for i := range extra {
			c, got := itest.DialBanner(t, "", addr)
			c.Close()
			if got != "" {
				t.Fatalf("%s: connection %d passed with banner %q, want it rejected (amount %d)", addr, amount+i+1, got, amount)
			}
		}
		if whileHeld != nil {
			whileHeld()
		}
		held[0].Close()
		held = held[1:]
		// The released slot is free again once tollgate has seen the close.
		itest.Eventually(t, 2*time.Second, func() bool {
			c, got := itest.DialBanner(t, "", addr)
			if got == banner {
				held = append(held, c)
				return true
			}
			c.Close()
			return false
		}, "%s: no connection passed after one of %d was closed", addr, amount)
	}
	check(limitedAddr, "limited", 3, 1, nil)
	check(guardedAddr, "guarded", 2, 1, nil)
	// Every host connection arrives from the bridge gateway: one client, so 10
	// of 12 are admitted, and the API shows them as one IP at its amount.
	check(registeredAddr, "registered", 10, 2, func() {
		var state map[string]any
		itest.Eventually(t, 2*time.Second, func() bool {
			mws, _ := rawdata()["tcpMiddlewares"].(map[string]any)
			mw, _ := mws["test-inflightconn@consulcatalog"].(map[string]any)
			state, _ = mw["inFlight"].(map[string]any)
			return state != nil && state["inFlight"] == 10.0 && state["distinctIPs"] == 1.0 && state["rejectedTotal"] == 2.0
		}, "test-inflightconn@consulcatalog state %v, want inFlight 10, distinctIPs 1, rejectedTotal 2", state)
	})
	t.Logf("compose demo checked %s after compose up started", time.Since(start).Round(time.Millisecond))
}
