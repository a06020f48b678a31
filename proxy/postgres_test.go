package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// pgBin finds Debian's PostgreSQL server binaries, newest first.
func pgBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no /usr/lib/postgresql/*/bin/postgres (apt-get install postgresql)")
}

// startPostgres runs a real PostgreSQL server named name (its
// cluster_name) on a free loopback port, as the postgres user when this
// runs as root (PostgreSQL refuses root), and returns its address.
func startPostgres(t *testing.T, bin, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tollgate-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Getuid() == 0 {
		u, err := user.Lookup("postgres")
		itest.Need(t, "the postgres user (apt-get install postgresql)", err)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	run := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, args[0]), args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	if out, err := run(context.Background(), "initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	var log bytes.Buffer
	cmd := run(context.Background(), "postgres", "-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "cluster_name="+name, "-c", "fsync=off")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	itest.Eventually(t, 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("postgres %s exited: %s", name, log.String())
		default:
		}
		out, err := exec.Command("psql", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres", "-tAc", "select 1").Output()
		return err == nil && strings.TrimSpace(string(out)) == "1"
	}, "postgres %s did not accept connections", name)
	return addr
}

// psqlThrough asks, with psql over TLS (sslmode=require, SNI host), which
// server answers behind addr.
func psqlThrough(t *testing.T, addr, host string) (string, error) {
	t.Helper()
	h, p, _ := net.SplitHostPort(addr)
	conn := fmt.Sprintf("host=%s hostaddr=%s port=%s sslmode=require user=postgres dbname=postgres connect_timeout=5", host, h, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "psql", conn, "-tAc", "select current_setting('cluster_name') || ' ' || (select ssl::text from pg_stat_ssl where pid = pg_backend_pid())").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql %s: %v: %s", host, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Acceptance: psql with sslmode=require through tollgate, routed by SNI to
// the right one of two real PostgreSQL servers; TLS ends at tollgate (the
// server sees a plaintext connection).
func TestPostgresSTARTTLSBySNI(t *testing.T) {
	bin, err := pgBin()
	itest.Need(t, "PostgreSQL", err)
	_, err = exec.LookPath("psql")
	itest.Need(t, "psql (apt-get install postgresql-client)", err)
	ca := newTestCA(t)
	_, c1, k1 := ca.issue(t, leafOpts{}, "db1.example")
	_, c2, k2 := ca.issue(t, leafOpts{}, "db2.example")
	pg1, pg2 := startPostgres(t, bin, "db1"), startPostgres(t, bin, "db2")
	s := newServerWith(t, nil, "pg")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"db1@file": terminating("HostSNI(`db1.example`)", "pg1@file", ""),
			"db2@file": terminating("HostSNI(`db2.example`)", "pg2@file", ""),
		},
		Services: map[string]*config.TCPService{"pg1@file": lbConfig(pg1), "pg2@file": lbConfig(pg2)},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(c1, k1), certEntry(c2, k2)}},
	}))
	for host, want := range map[string]string{"db1.example": "db1 false", "db2.example": "db2 false"} {
		got, err := psqlThrough(t, s.addr("pg"), host)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: server said %q, want %q (its name; no TLS on its side)", host, got, want)
		}
	}
	if n := s.State().TLSCounters("db1@file").Handshakes.Load(); n != 1 {
		t.Errorf("db1@file handshakes = %d, want 1", n)
	}
	// An unknown name under the default certificate's fallback still routes
	// nowhere: no router, closed.
	if _, err := psqlThrough(t, s.addr("pg"), "db3.example"); err == nil {
		t.Error("psql to db3.example (no router) succeeded")
	}
}

// The SSLRequest arriving a byte at a time, and a GSSENCRequest before it,
// are answered; then the handshake completes.
func TestPostgresPreambleFragmented(t *testing.T) {
	ca := newTestCA(t)
	_, c1, k1 := ca.issue(t, leafOpts{}, "db1.example")
	a := startBackend(t, "A")
	s := newServerWith(t, nil, "pg")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db1@file": terminating("HostSNI(`db1.example`)", "a@file", "")},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(c1, k1)}},
	}))
	raw, err := net.Dial("tcp", s.addr("pg"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	answer := func(req []byte, want byte) {
		for _, b := range req {
			if _, err := raw.Write([]byte{b}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // separate segments
		}
		var got [1]byte
		if _, err := raw.Read(got[:]); err != nil || got[0] != want {
			t.Fatalf("answer to %x = %q, %v; want %q", req, got[:], err, want)
		}
	}
	answer(pgGSSENCRequest, 'N')
	answer(pgSSLRequest, 'S')
	c := tls.Client(raw, &tls.Config{ServerName: "db1.example", RootCAs: ca.pool})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	if got := greetTLS(t, c); got != "A" {
		t.Errorf("reached %q", got)
	}
}

// A client that stops in the middle of an SSLRequest is closed at the read
// timeout without an answer.
func TestPostgresPreambleStalled(t *testing.T) {
	ca := newTestCA(t)
	_, c1, k1 := ca.issue(t, leafOpts{}, "db1.example")
	a := startBackend(t, "A")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.Transport.RespondingTimeouts.ReadTimeout = config.Duration(300 * time.Millisecond)
	}, "pg")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db1@file": terminating("HostSNI(`db1.example`)", "a@file", "")},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(c1, k1)}},
	}))
	raw, err := net.Dial("tcp", s.addr("pg"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write(pgSSLRequest[:5]); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	n, err := raw.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a stalled SSLRequest: read %d, %v; want the connection closed", n, err)
	}
	if a.accepted() != 0 {
		t.Error("the backend was dialled")
	}
}
