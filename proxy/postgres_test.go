package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
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
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
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

// needPostgres returns the server binaries' directory, skipping (or
// failing, where integration is required) without them or psql.
func needPostgres(t *testing.T) string {
	t.Helper()
	bin, err := pgBin()
	itest.Need(t, "PostgreSQL", err)
	_, err = exec.LookPath("psql")
	itest.Need(t, "psql (apt-get install postgresql-client)", err)
	return bin
}

// startPostgres runs a real PostgreSQL server named name (its
// cluster_name) on a free loopback port, as the postgres user when this
// runs as root (PostgreSQL refuses root), and returns its address. With
// tlsFiles (a certificate and its key, PEM files), it serves TLS itself
// (ssl=on).
func startPostgres(t *testing.T, bin, name string, tlsFiles ...string) string {
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
	var extra []string
	if len(tlsFiles) == 2 {
		// The server's own copies: its user's, the key readable by it alone.
		for i, name := range []string{"server.crt", "server.key"} {
			b, err := os.ReadFile(tlsFiles[i])
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if cred != nil {
				if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
					t.Fatal(err)
				}
			}
		}
		extra = []string{"-c", "ssl=on", "-c", "ssl_cert_file=" + filepath.Join(dir, "server.crt"), "-c", "ssl_key_file=" + filepath.Join(dir, "server.key")}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	var log bytes.Buffer
	cmd := run(context.Background(), append([]string{"postgres", "-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "cluster_name=" + name, "-c", "fsync=off"}, extra...)...)
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
	bin := needPostgres(t)
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

// Acceptance: psql with sslmode=require through a passthrough router, routed
// by SNI to a real PostgreSQL that serves TLS itself (the server sees an
// encrypted connection); a server without ssl refuses the request it is
// sent in turn, and psql fails rather than reaching it in the clear.
func TestPostgresSTARTTLSPassthroughToPostgres(t *testing.T) {
	bin := needPostgres(t)
	ca := newTestCA(t)
	_, c1, k1 := ca.issue(t, leafOpts{}, "db1.example")
	pg1, pg2 := startPostgres(t, bin, "db1", c1, k1), startPostgres(t, bin, "db2")
	s := newServerWith(t, nil, "pg")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"db1@file": passthrough("HostSNI(`db1.example`)", "pg1@file"),
			"db2@file": passthrough("HostSNI(`db2.example`)", "pg2@file"),
		},
		Services: map[string]*config.TCPService{"pg1@file": lbConfig(pg1), "pg2@file": lbConfig(pg2)},
	}))
	sslOnlyWhereOn(t, s.addr("pg"))
}

// sslOnlyWhereOn: psql with sslmode=require reaches db1.example, whose
// server has ssl on and says so, and not db2.example, whose server has none.
func sslOnlyWhereOn(t *testing.T, addr string) {
	t.Helper()
	got, err := psqlThrough(t, addr, "db1.example")
	if err != nil {
		t.Fatal(err)
	}
	if got != "db1 true" {
		t.Errorf("db1.example: server said %q, want %q (its name; TLS on its side)", got, "db1 true")
	}
	if got, err := psqlThrough(t, addr, "db2.example"); err == nil {
		t.Errorf("psql with sslmode=require reached db2.example, a server without ssl: %q", got)
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
	answer(sniff.GSSENCRequest, 'N')
	answer(sniff.SSLRequest, 'S')
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
	if _, err := raw.Write(sniff.SSLRequest[:5]); err != nil {
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

// pgTLSBackend is a PostgreSQL-like server that terminates TLS itself: it
// takes an optional PROXY v1 line, then wants an SSLRequest and answers it
// with answer; after 'S' it does the TLS handshake with kp and greets with
// banner, then echoes. It reports what preceded the handshake.
type pgTLSBackend struct {
	addr   string
	before chan string // per connection: the PROXY line (if any) and "ssl" or what came instead
}

func startPgTLSBackend(t *testing.T, kp tls.Certificate, answer byte, pp bool, banner string) *pgTLSBackend {
	t.Helper()
	b := &pgTLSBackend{before: make(chan string, 16)}
	b.addr = itest.Listen(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		seen := ""
		if pp {
			line, _ := br.ReadString('\n')
			seen = strings.Fields(line + " ")[0] + " "
		}
		req := make([]byte, len(sniff.SSLRequest))
		if _, err := io.ReadFull(br, req); err != nil || !bytes.Equal(req, sniff.SSLRequest) {
			b.before <- seen + fmt.Sprintf("%x", req)
			return
		}
		b.before <- seen + "ssl"
		if answer == 0 { // never answers
			_, _ = io.Copy(io.Discard, br)
			return
		}
		if _, err := c.Write([]byte{answer}); err != nil || answer != 'S' {
			return
		}
		tc := tls.Server(&bufConn{Conn: c, r: br}, &tls.Config{Certificates: []tls.Certificate{kp}})
		if err := tc.Handshake(); err != nil {
			return
		}
		_, _ = io.WriteString(tc, banner)
		_, _ = io.Copy(tc, tc)
	})
	return b
}

// bufConn reads through r first (bytes already buffered from c).
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// pgDial sends an SSLRequest to addr, wants 'S', and returns the raw
// connection for the TLS handshake.
func pgDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := raw.Write(sniff.SSLRequest); err != nil {
		t.Fatal(err)
	}
	var got [1]byte
	if _, err := io.ReadFull(raw, got[:]); err != nil || got[0] != 'S' {
		t.Fatalf("answer to the SSLRequest = %q, %v; want 'S'", got[:], err)
	}
	return raw
}

// On a passthrough router, a PostgreSQL client's SSLRequest is answered,
// its ClientHello routes it by SNI, and the backend is asked for TLS in
// turn (after the PROXY header, when the service sends one): its 'S' is
// not passed on, and the TLS session is between the client and the
// backend. A backend that answers 'N', or nothing within the dial
// timeout, has the connection closed.
func TestPostgresSTARTTLSPassthrough(t *testing.T) {
	ca := newTestCA(t)
	kp1, _, _ := ca.issue(t, leafOpts{}, "db1.example")
	kp2, _, _ := ca.issue(t, leafOpts{}, "db2.example")
	kp3, _, _ := ca.issue(t, leafOpts{}, "db3.example")
	db1 := startPgTLSBackend(t, kp1, 'S', false, "1")
	db2 := startPgTLSBackend(t, kp2, 'S', true, "2")
	no := startPgTLSBackend(t, kp3, 'N', false, "3")
	mute := startPgTLSBackend(t, kp3, 0, false, "4")
	s := newServerWith(t, nil, "pg")
	pp := lbConfig(db2.addr)
	pp.LoadBalancer.ServersTransport = "pp@file"
	slow := lbConfig(mute.addr)
	slow.LoadBalancer.ServersTransport = "short@file"
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"db1@file":  passthrough("HostSNI(`db1.example`)", "db1@file"),
			"db2@file":  passthrough("HostSNI(`db2.example`)", "db2@file"),
			"no@file":   passthrough("HostSNI(`no.example`)", "no@file"),
			"mute@file": passthrough("HostSNI(`mute.example`)", "mute@file"),
		},
		Services: map[string]*config.TCPService{
			"db1@file": lbConfig(db1.addr), "db2@file": pp,
			"no@file": lbConfig(no.addr), "mute@file": slow,
		},
		ServersTransports: map[string]*config.TCPServersTransport{
			"pp@file":    {ProxyProtocol: &config.ProxyProtocol{Version: 1}},
			"short@file": {DialTimeout: config.Duration(300 * time.Millisecond)},
		},
	}))
	for _, tc := range []struct {
		host, banner, before string
		be                   *pgTLSBackend
	}{{"db1.example", "1", "ssl", db1}, {"db2.example", "2", "PROXY ssl", db2}} {
		c := tls.Client(pgDial(t, s.addr("pg")), &tls.Config{ServerName: tc.host, RootCAs: ca.pool})
		if err := c.Handshake(); err != nil {
			t.Fatalf("%s: handshake with the backend through tollgate: %v", tc.host, err)
		}
		if got := greetTLS(t, c); got != tc.banner {
			t.Errorf("%s: reached %q, want %q", tc.host, got, tc.banner)
		}
		if got := <-tc.be.before; got != tc.before {
			t.Errorf("%s: the backend read %q before its handshake, want %q", tc.host, got, tc.before)
		}
	}
	for _, host := range []string{"no.example", "mute.example"} {
		began := time.Now()
		c := tls.Client(pgDial(t, s.addr("pg")), &tls.Config{ServerName: host, RootCAs: ca.pool})
		if err := c.Handshake(); err == nil {
			t.Fatalf("%s: a handshake completed through a backend that did not agree to TLS", host)
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: the connection was left open: %v", host, err)
		}
		t.Logf("%s: closed after %v", host, time.Since(began).Round(time.Millisecond))
	}
	if got := <-no.before; got != "ssl" {
		t.Errorf("the backend answering 'N' read %q first", got)
	}
}

// Acceptance: psql with sslmode=require through a router that terminates
// TLS, to a real PostgreSQL with ssl on dialled with `tls` by a servers
// transport: tollgate asks that server for TLS with an SSLRequest of its
// own, verifies its certificate, and the server sees an encrypted
// connection. Behind the same transport, a server without ssl refuses the
// request, and nothing reaches it in the clear.
func TestPostgresReencrypts(t *testing.T) {
	bin := needPostgres(t)
	ca := newTestCA(t)
	_, edgeCert, edgeKey := ca.issue(t, leafOpts{}, "db1.example")
	_, srvCert, srvKey := ca.issue(t, leafOpts{}, "pg.internal")
	pg1, pg2 := startPostgres(t, bin, "db1", srvCert, srvKey), startPostgres(t, bin, "db2")
	tr := &config.TCPServersTransport{TLS: &config.TLSClientConfig{ServerName: "pg.internal",
		RootCAs: []config.FileOrContent{config.FileOrContent(ca.caFile(t))}}}
	s := newServerWith(t, nil, "pg")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"db1@file": terminating("HostSNI(`db1.example`)", "pg1@file", ""),
			"db2@file": terminating("HostSNI(`db2.example`)", "pg2@file", ""),
		},
		Services:          map[string]*config.TCPService{"pg1@file": tlsService(pg1, "tr@file"), "pg2@file": tlsService(pg2, "tr@file")},
		ServersTransports: map[string]*config.TCPServersTransport{"tr@file": tr},
		TLS:               &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(edgeCert, edgeKey)}},
	}))
	sslOnlyWhereOn(t, s.addr("pg"))
	if n := s.State().ServiceCounters("pg2@file").TLSErrors.Load(); n != 1 {
		t.Errorf("pg2@file: TLS errors = %d, want 1 (its 'N')", n)
	}
}

// The backend side of re-encryption without a PostgreSQL: the server is
// sent an SSLRequest before tollgate's handshake, and one answering 'N' or
// nothing within the dial timeout is a TLS error; the client is closed.
func TestPostgresReencryptAsksFirst(t *testing.T) {
	ca := newTestCA(t)
	_, edgeCert, edgeKey := ca.issue(t, leafOpts{}, "db.example")
	srvKP, _, _ := ca.issue(t, leafOpts{}, "pg.internal")
	yes := startPgTLSBackend(t, srvKP, 'S', false, "Y")
	no := startPgTLSBackend(t, srvKP, 'N', false, "N")
	mute := startPgTLSBackend(t, srvKP, 0, false, "M")
	caFile := config.FileOrContent(ca.caFile(t))
	tr := func(d time.Duration) *config.TCPServersTransport {
		return &config.TCPServersTransport{DialTimeout: config.Duration(d),
			TLS: &config.TLSClientConfig{ServerName: "pg.internal", RootCAs: []config.FileOrContent{caFile}}}
	}
	eps := []string{"yes", "no", "mute"}
	s := newServerWith(t, nil, eps...)
	routers := map[string]*config.TCPRouter{}
	for _, ep := range eps {
		r := terminating("HostSNI(`db.example`)", ep+"@file", "")
		r.EntryPoints = []string{ep}
		routers[ep+"@file"] = r
	}
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers: routers,
		Services: map[string]*config.TCPService{"yes@file": tlsService(yes.addr, "tr@file"),
			"no@file": tlsService(no.addr, "tr@file"), "mute@file": tlsService(mute.addr, "short@file")},
		ServersTransports: map[string]*config.TCPServersTransport{"tr@file": tr(5 * time.Second), "short@file": tr(300 * time.Millisecond)},
		TLS:               &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(edgeCert, edgeKey)}},
	}))
	c := tls.Client(pgDial(t, s.addr("yes")), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	if got := greetTLS(t, c); got != "Y" {
		t.Errorf("reached %q, want the backend that agreed to TLS", got)
	}
	if got := <-yes.before; got != "ssl" {
		t.Errorf("the backend read %q before its handshake, want %q", got, "ssl")
	}
	for _, ep := range []string{"no", "mute"} {
		c := tls.Client(pgDial(t, s.addr(ep)), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
		if err := c.Handshake(); err != nil {
			t.Fatalf("%s: the client's handshake with tollgate: %v", ep, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: the client read %d bytes, %v; want the connection closed", ep, n, err)
		}
		if n := s.State().ServiceCounters(ep + "@file").TLSErrors.Load(); n != 1 {
			t.Errorf("%s: TLS errors = %d, want 1", ep, n)
		}
	}
}

// A PostgreSQL 17 client that starts TLS directly (no SSLRequest, ALPN
// "postgresql") behind a terminating router, to a server dialled with tls:
// the server is still asked with an SSLRequest, which every PostgreSQL
// takes, before tollgate's handshake with it.
func TestPostgresReencryptDirectTLS(t *testing.T) {
	ca := newTestCA(t)
	_, edgeCert, edgeKey := ca.issue(t, leafOpts{}, "db.example")
	srvKP, _, _ := ca.issue(t, leafOpts{}, "pg.internal")
	be := startPgTLSBackend(t, srvKP, 'S', false, "Y")
	s := newServerWith(t, nil, "pg")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "db@file", "pg@file")},
		Services: map[string]*config.TCPService{"db@file": tlsService(be.addr, "tr@file")},
		ServersTransports: map[string]*config.TCPServersTransport{"tr@file": {TLS: &config.TLSClientConfig{
			ServerName: "pg.internal", RootCAs: []config.FileOrContent{config.FileOrContent(ca.caFile(t))}}}},
		TLS: &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(edgeCert, edgeKey)},
			Options: map[string]config.TLSOptions{"pg@file": {ALPNProtocols: []string{"postgresql"}}}},
	}))
	c, err := tlsDial(t, s.addr("pg"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool, NextProtos: []string{"postgresql"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "postgresql" {
		t.Fatalf("negotiated ALPN %q, want postgresql", p)
	}
	if got := greetTLS(t, c); got != "Y" {
		t.Errorf("reached %q, want the backend", got)
	}
	if got := <-be.before; got != "ssl" {
		t.Errorf("the backend read %q before its handshake, want %q", got, "ssl")
	}
}
