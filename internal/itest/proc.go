package itest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is a server process started by a test, stopped by PID.
type Proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	Logs   *Buffer
}

// StartProc runs bin with args; its output goes to p.Logs.
func StartProc(bin string, args ...string) (*Proc, error) { return StartProcEnv(nil, bin, args...) }

// StartProcEnv is StartProc with the environment env (nil: the test's).
func StartProcEnv(env []string, bin string, args ...string) (*Proc, error) {
	p := &Proc{Logs: &Buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.Logs, p.Logs
	// Its own process group, so that a wrapper script's children are
	// signalled with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	return p, nil
}

// Exited is closed when the process has ended.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Kill ends the process (and its group) with SIGKILL, as a crash would, and
// waits for it.
func (p *Proc) Kill() { p.signal(syscall.SIGKILL, 10*time.Second) }

// Stop ends the process with SIGTERM (SIGKILL after 10 s) and waits for it.
func (p *Proc) Stop() {
	if !p.signal(syscall.SIGTERM, 10*time.Second) {
		p.signal(syscall.SIGKILL, 10*time.Second)
	}
}

func (p *Proc) signal(sig syscall.Signal, wait time.Duration) bool {
	select {
	case <-p.exited:
		return true
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.exited:
		return true
	case <-time.After(wait):
		return false
	}
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	// Below the kernel's ephemeral range (32768-60999 by default): a port
	// from it, closed again here, may be taken by any process's next
	// outgoing connection before the test listens on it (seen in CI:
	// "bind: address already in use" on a port FreeAddr gave).
	for range 100 {
		port := freeLow + rand.IntN(freeHigh-freeLow)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("no free port in %d-%d after 100 tries", freeLow, freeHigh-1)
	return 0
}

// The ports FreePort picks from.
const freeLow, freeHigh = 20000, 32768

// RefusedAddr returns a loopback address that refuses connections for the
// rest of the test: a socket is bound there and does not listen, so that
// no other process can listen on the port meanwhile (a port closed again,
// the usual way to get one, may be taken by any listener before the test
// dials it).
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// Ready polls ready every 20 ms until it returns nil, the process exits, or
// within passes.
func Ready(p *Proc, within time.Duration, ready func() error) error {
	deadline := time.Now().Add(within)
	for {
		select {
		case <-p.Exited():
			return fmt.Errorf("exited early:\n%s", p.Logs.String())
		default:
		}
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s (last error: %v):\n%s", within, err, p.Logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PID returns the process's id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Environ is the test's environment without its TOLLGATE_ and TRAEFIK_
// variables (the CI's own, such as TOLLGATE_REQUIRE_INTEGRATION, would be
// named by the binary as options it did not read), followed by extra.
func Environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOLLGATE_") && !strings.HasPrefix(kv, "TRAEFIK_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}
