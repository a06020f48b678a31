package consulcatalog

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// TestMain: one line among go test's "ok" lines when tests skipped for want
// of a Consul agent.
func TestMain(m *testing.M) { os.Exit(itest.Main(m)) }

// agent is a `consul agent -dev` on loopback ports of its own, stopped by PID
// when the test ends.
type agent struct {
	t         testing.TB
	bin       string
	configDir string
	http      int
	serf      int
	server    int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	logs   *itest.Buffer
}

// startAgent starts an agent (retrying with other ports if one was taken)
// and waits until it has a leader and its node is in the catalog. Files in
// configDir (service definitions) are loaded at every start.
func startAgent(t testing.TB, configDir string) *agent {
	t.Helper()
	bin, err := itest.ConsulBinary()
	itest.Need(t, "consul agent", err)
	var lastErr error
	for range 3 {
		a := &agent{t: t, bin: bin, configDir: configDir, http: freePort(t), serf: freePort(t), server: freePort(t)}
		if lastErr = a.start(); lastErr == nil {
			t.Cleanup(a.stop)
			return a
		}
		a.stop()
	}
	t.Fatalf("starting consul agent: %v", lastErr)
	return nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Addr is the agent's HTTP address.
func (a *agent) Addr() string { return "127.0.0.1:" + strconv.Itoa(a.http) }

// Client is an API client for the agent.
func (a *agent) Client() *api.Client {
	c, err := api.NewClient(&api.Config{Address: a.Addr()})
	if err != nil {
		a.t.Fatal(err)
	}
	return c
}

// start runs the agent on a's ports and waits for it to be ready.
func (a *agent) start() error {
	args := []string{"agent", "-dev", "-node", "tollgate-test",
		"-client", "127.0.0.1", "-bind", "127.0.0.1",
		"-http-port", strconv.Itoa(a.http),
		"-serf-lan-port", strconv.Itoa(a.serf),
		"-server-port", strconv.Itoa(a.server),
		"-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1", "-serf-wan-port", "-1",
		"-log-level", "warn",
	}
	if a.configDir != "" {
		args = append(args, "-config-dir", a.configDir)
	}
	cmd := exec.Command(a.bin, args...)
	logs := &itest.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // exit status 1 after SIGTERM is normal for consul
		close(exited)
	}()
	a.mu.Lock()
	a.cmd, a.exited, a.logs = cmd, exited, logs
	a.mu.Unlock()

	c := a.Client()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("consul agent exited early: %s", logs.String())
		default:
		}
		leader, err := c.Status().Leader()
		if err == nil && leader != "" {
			nodes, _, err := c.Catalog().Nodes(nil)
			if err == nil && len(nodes) > 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consul agent not ready after 15s (last error %v): %s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the agent with SIGKILL, as a crash would, and waits for it.
func (a *agent) kill() {
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		a.t.Errorf("consul agent (pid %d) still running 10s after SIGKILL", cmd.Process.Pid)
	}
}

// restart starts the agent again on the same ports.
func (a *agent) restart() error { return a.start() }

// stop ends the agent with SIGTERM (SIGKILL after 10s) and waits for it.
func (a *agent) stop() {
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}
