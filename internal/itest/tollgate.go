package itest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer safe for a child process to write while a test reads.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tollgate is a tollgate process started by a test.
type Tollgate struct {
	// API is the admin API address.
	API string
	// Out collects the process's stdout and stderr.
	Out    *Buffer
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartTollgate runs the tollgate binary with args plus --api.address on a
// free loopback port, waits until /ping answers, and stops it at cleanup
// (SIGTERM, then SIGKILL after 15 s), logging its output if the test failed.
func StartTollgate(t testing.TB, args ...string) *Tollgate {
	t.Helper()
	return StartTollgateEnv(t, nil, args...)
}

// StartTollgateEnv is StartTollgate with the process environment env (nil:
// the test's own).
func StartTollgateEnv(t testing.TB, env []string, args ...string) *Tollgate {
	t.Helper()
	return startTollgate(t, nil, env, args)
}

// StartTollgateNoFile is StartTollgate with the process limited to nofile
// open file descriptors (soft and hard limit: Go raises the soft one to the
// hard one at start), to test what happens when they run out.
func StartTollgateNoFile(t testing.TB, nofile int, args ...string) *Tollgate {
	t.Helper()
	// sh sets both limits with a plain ulimit -n, then execs tollgate in its
	// place: the process Stop signals is tollgate's.
	wrap := []string{"sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile)}
	return startTollgate(t, wrap, nil, args)
}

// StartTollgateFrom is StartTollgate with the binary at bin (a copy of
// Binary that a test may replace, as an upgrade starts the file at the path
// the process was started from).
func StartTollgateFrom(t testing.TB, bin string, args ...string) *Tollgate {
	t.Helper()
	return startTollgateBin(t, bin, nil, nil, args)
}

func startTollgate(t testing.TB, wrap, env, args []string) *Tollgate {
	t.Helper()
	return startTollgateBin(t, Binary(t), wrap, env, args)
}

func startTollgateBin(t testing.TB, bin string, wrap, env, args []string) *Tollgate {
	t.Helper()
	g := &Tollgate{API: FreeAddr(t), Out: &Buffer{}, exited: make(chan struct{})}
	args = append(append([]string(nil), args...), "--api.address="+g.API)
	args = append(args, LogFlags(args)...)
	argv := append(append(append([]string(nil), wrap...), bin), args...)
	g.cmd = exec.Command(argv[0], argv[1:]...)
	g.cmd.Env = env
	g.cmd.Stdout, g.cmd.Stderr = g.Out, g.Out
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.cmd.Wait(); close(g.exited) }()
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("tollgate output:\n%s", g.Out.String())
		}
	})
	Eventually(t, 10*time.Second, func() bool {
		select {
		case <-g.exited:
			t.Fatalf("tollgate exited:\n%s", g.Out.String())
		default:
		}
		resp, err := http.Get("http://" + g.API + "/ping")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "tollgate did not answer /ping")
	return g
}

// LogFlags are the log options a started tollgate is given unless args
// set them: JSON lines at INFO, which the tests read (tollgate's own
// default is Traefik's, text at ERROR).
func LogFlags(args []string) []string {
	var out []string
	for _, opt := range []struct{ flag, value string }{{"--log.level", "INFO"}, {"--log.format", "json"}} {
		given := false
		for _, a := range args {
			name, _, _ := strings.Cut(a, "=")
			if strings.EqualFold(name, opt.flag) {
				given = true
			}
		}
		if !given {
			out = append(out, opt.flag+"="+opt.value)
		}
	}
	return out
}

// Stop sends SIGTERM and waits up to 15 s before killing the process. It is
// safe to call more than once.
func (g *Tollgate) Stop() {
	select {
	case <-g.exited:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(15 * time.Second):
		_ = g.cmd.Process.Kill()
		// A process it started (an upgrade) may still hold the output
		// pipe, and Wait waits for the pipe: bound that wait.
		select {
		case <-g.exited:
		case <-time.After(5 * time.Second):
		}
	}
}

// PID is the process's.
func (g *Tollgate) PID() int { return g.cmd.Process.Pid }

// Signal sends sig to the process.
func (g *Tollgate) Signal(sig syscall.Signal) error { return g.cmd.Process.Signal(sig) }

// Exited is closed when the process has ended.
func (g *Tollgate) Exited() <-chan struct{} { return g.exited }

// GetJSON decodes the JSON the admin API serves at path into v.
func (g *Tollgate) GetJSON(t testing.TB, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + g.API + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}

// EchoServer listens on addr ("" for a free loopback port), echoes every
// connection until cleanup, and returns its address.
func EchoServer(t testing.TB, addr string) string {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("echo server on %s: %v", addr, err)
	}
	Serve(t, ln, func(c net.Conn) { _, _ = io.Copy(c, c) })
	return ln.Addr().String()
}

// Hold opens n connections to addr from source IP src and returns those that
// are forwarded (a byte written comes back from an echo backend within 2 s),
// still open; they are closed at cleanup. Rejected ones are closed; a failed
// dial counts as not forwarded.
func Hold(t testing.TB, n int, src, addr string) []net.Conn {
	t.Helper()
	var held []net.Conn
	for i := 0; i < n; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			continue // refused, or reset before connect returned: not forwarded
		}
		if Echoes(c) {
			held = append(held, c)
			continue
		}
		c.Close()
	}
	t.Cleanup(func() { CloseAll(held) })
	return held
}

// Echoes writes one byte to c and reports whether it comes back within 2 s.
func Echoes(c net.Conn) bool { return Echo(c) == nil }

// Echo is Echoes with the reason it failed.
func Echo(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return err
	}
	if b[0] != 'x' {
		return fmt.Errorf("echoed %q, want %q", b[0], 'x')
	}
	return nil
}

// CloseAll closes every connection in cs.
func CloseAll(cs []net.Conn) {
	for _, c := range cs {
		_ = c.Close()
	}
}
