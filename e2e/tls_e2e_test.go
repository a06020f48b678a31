package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
)

// Acceptance (issue 16), end to end: the tollgate binary, a file provider
// configuration with tls on HostSNI(`db.example`), a certificate file and
// inFlightConn amount 10. 15 simultaneous TLS clients from one IP: exactly
// 10 complete a handshake and are served; 5 are refused before any
// handshake work: no TLS byte reaches them and the handshake-failure
// counters stay 0.
func TestTLSTerminationInFlightConnEndToEnd(t *testing.T) {
	kp, pool := itest.SelfSigned(t, "db.example")
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, kp)
	backend := itest.EchoServer(t, "")
	dyn := filepath.Join(dir, "dyn.yml")
	if err := os.WriteFile(dyn, []byte(fmt.Sprintf(`tcp:
  routers:
    db:
      rule: "HostSNI(`+"`db.example`"+`)"
      service: db
      middlewares: [ten]
      tls: {}
  middlewares:
    ten:
      inFlightConn:
        amount: 10
  services:
    db:
      loadBalancer:
        servers:
          - address: %q
tls:
  certificates:
    - certFile: %q
      keyFile: %q
`, backend, certFile, keyFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.tls.address="+ep, "--providers.file.filename="+dyn, "--metrics.prometheus", "--log.level=ERROR")
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers["db@file"].Status == "enabled" }, "db@file not enabled")

	type outcome struct {
		served  bool
		tlsSeen bool
		conn    net.Conn
	}
	results := make([]outcome, 15)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.16")}, Timeout: 2 * time.Second}
			raw, err := d.Dial("tcp", ep)
			if err != nil {
				return // reset before connect returned
			}
			rec := &readRecorder{Conn: raw}
			c := tls.Client(rec, &tls.Config{ServerName: "db.example", RootCAs: pool})
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if err := c.Handshake(); err != nil {
				results[i] = outcome{tlsSeen: rec.n > 0}
				_ = raw.Close()
				return
			}
			if _, err := c.Write([]byte("x")); err != nil {
				_ = raw.Close()
				return
			}
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				_ = raw.Close()
				return
			}
			results[i] = outcome{served: true, conn: c}
		}()
	}
	close(start)
	wg.Wait()
	served := 0
	for _, r := range results {
		if r.served {
			served++
			defer r.conn.Close()
		} else if r.tlsSeen {
			t.Error("a refused client received TLS bytes")
		}
	}
	if served != 10 {
		t.Fatalf("%d of 15 served, want exactly 10", served)
	}
	itest.Eventually(t, 5*time.Second, func() bool {
		return metricValue(t, p, `tollgate_tls_handshakes_total{router="db@file"}`) == 10
	}, "10 handshakes counted")
	for _, reason := range []string{"no_certificate", "protocol_version", "no_shared_cipher", "bad_client_certificate", "timeout", "eof", "other"} {
		if v := metricValue(t, p, fmt.Sprintf(`tollgate_tls_handshake_failures_total{reason=%q,router="db@file"}`, reason)); v != 0 {
			t.Errorf("handshake failures %s = %v, want 0", reason, v)
		}
	}
	if v := metricValue(t, p, `tollgate_middleware_connections_total{middleware="ten@file",reason="inflightconn_limit",result="rejected"}`); v != 5 {
		t.Errorf("inFlightConn rejections = %v, want 5", v)
	}
}

// writeCert writes kp's certificate and key as PEM files in dir.
func writeCert(t *testing.T, dir string, kp tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "db.crt"), filepath.Join(dir, "db.key")
	kb, err := x509.MarshalPKCS8PrivateKey(kp.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// tlsEcho dials ep from src, completes a handshake and checks an echo; nil
// when the connection is refused or does not echo.
func tlsEcho(t *testing.T, src, ep string, pool *x509.CertPool) *tls.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	raw, err := d.Dial("tcp", ep)
	if err != nil {
		return nil
	}
	c := tls.Client(raw, &tls.Config{ServerName: "db.example", RootCAs: pool})
	if !tlsEchoes(c) {
		_ = raw.Close()
		return nil
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func tlsEchoes(c *tls.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write([]byte("e")); err != nil {
		return false
	}
	_, err := io.ReadFull(c, make([]byte, 1))
	return err == nil
}

// Upgrading in place with terminated connections open: they go on in the
// old process, count in the new one's limit, release there when they close,
// and the old process exits once they have (nothing hangs).
func TestUpgradeKeepsTerminatedConnections(t *testing.T) {
	kp, pool := itest.SelfSigned(t, "db.example")
	certFile, keyFile := writeCert(t, t.TempDir(), kp)
	be := itest.EchoServer(t, "")
	dyn := itest.WriteFile(t, "dyn.yml", fmt.Sprintf(`tcp:
  routers:
    r:
      rule: "HostSNI(`+"`db.example`"+`)"
      service: s
      middlewares: [lim]
      tls: {}
  middlewares:
    lim:
      inFlightConn:
        amount: 2
  services:
    s:
      loadBalancer:
        servers:
          - address: %q
tls:
  certificates:
    - certFile: %q
      keyFile: %q
`, be, certFile, keyFile))
	ep := itest.FreeAddr(t)
	g := itest.StartTollgate(t, "--entryPoints.db.address="+ep, "--entryPoints.db.transport.lifeCycle.graceTimeOut=30s", "--providers.file.filename="+dyn)
	const ip = "127.0.0.2"
	var old []*tls.Conn
	itest.Eventually(t, 5*time.Second, func() bool {
		if c := tlsEcho(t, ip, ep, pool); c != nil {
			old = append(old, c)
		}
		return len(old) == 2
	}, "two terminated connections through the old process")
	if err := g.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	var v upgrade.View
	itest.Eventually(t, 35*time.Second, func() bool {
		v = processView(t, g.API)
		return v.Generation == 2
	}, "no new process serving after SIGUSR2")
	itest.StopAtCleanup(t, v.PID)
	if c := tlsEcho(t, ip, ep, pool); c != nil {
		t.Fatal("the new process admitted a third connection for a client holding 2 through the old one")
	}
	if c := tlsEcho(t, "127.0.0.3", ep, pool); c == nil {
		t.Fatal("the new process does not terminate for another client")
	}
	for i, c := range old {
		if !tlsEchoes(c) {
			t.Fatalf("terminated connection %d stopped echoing after the upgrade", i)
		}
	}
	_ = old[0].Close()
	itest.Eventually(t, 5*time.Second, func() bool { return clientCount(t, g.API, ip) == 1 }, "the close was not released in the new process")
	if c := tlsEcho(t, ip, ep, pool); c == nil {
		t.Fatal("after a close in the old process the new one did not admit its client again")
	}
	_ = old[1].Close()
	itest.Eventually(t, 10*time.Second, func() bool { return !itest.Running(g.PID()) }, "the old process did not exit once its terminated connections closed")
}

// readRecorder counts the bytes read from the peer.
type readRecorder struct {
	net.Conn
	n int
}

func (r *readRecorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.n += n
	return n, err
}
