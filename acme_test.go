package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// A router naming an ACME resolver with tlsChallenge gets a certificate
// from a real ACME server (Let's Encrypt's Pebble, which validates with
// TLS-ALPN-01 on tollgate's entry point): the client verifies it against
// Pebble's issuing root and reaches the backend. The certificate is stored
// in Traefik's acme.json format (mode 0600), and a restarted tollgate
// serves it from there on its first handshake, without a new issuance.
func TestACMECertificateFromPebble(t *testing.T) {
	a := newACMESetup(t)
	stop, out := a.start()
	var leaf *x509.Certificate
	itest.Eventually(t, 90*time.Second, func() bool {
		leaf = a.verified()
		return leaf != nil
	}, "no certificate from Pebble that verifies for %s (tollgate's output: %s)", acmeName, out)
	// The API lists it, with its resolver and Pebble's intermediate as
	// the issuer.
	resp, err := http.Get("http://" + a.api + "/api/tls/certificates")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var listed []struct {
		SANs             []string
		Issuer, Resolver string
		NotAfter         time.Time
	}
	if err := json.Unmarshal(body, &listed); err != nil {
		t.Fatalf("/api/tls/certificates: %v: %s", err, body)
	}
	found := false
	for _, c := range listed {
		found = found || c.Resolver == "le" && slices.Equal(c.SANs, []string{acmeName}) &&
			strings.Contains(c.Issuer, "Pebble Intermediate") && c.NotAfter.Equal(leaf.NotAfter)
	}
	if !found {
		t.Errorf("/api/tls/certificates does not list the certificate obtained: %s", body)
	}
	resp, err = http.Get("http://" + a.api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`tollgate_tls_certs_not_after{cn="%s",sans="%s",serial="%s"}`, leaf.Subject.CommonName, acmeName, leaf.SerialNumber); !strings.Contains(string(body), want) {
		t.Errorf("/metrics has no %s", want)
	}
	if !strings.Contains(out.String(), "TLS-ALPN-01 validation answered") || !strings.Contains(out.String(), "certificate obtained") {
		t.Errorf("the log does not show the validation and the issuance: %s", out)
	}
	stop()

	fi, err := os.Stat(a.storage)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("storage %s: %v %v, want mode 0600", a.storage, err, fi)
	}
	b, _ := os.ReadFile(a.storage)
	for _, want := range []string{`"le"`, `"Account"`, `"PrivateKey"`, `"Certificates"`, `"main": "` + acmeName + `"`, `"Store": "default"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("storage lacks %s (Traefik's acme.json format): %s", want, b)
		}
	}

	// Restarted: the stored certificate is served on the first handshake
	// that succeeds, and nothing new is issued.
	stop, out = a.start()
	defer stop()
	var again *x509.Certificate
	itest.Eventually(t, 10*time.Second, func() bool {
		again = a.verified()
		return again != nil
	}, "the restarted tollgate does not serve a certificate that verifies (output: %s)", out)
	if !again.Equal(leaf) {
		t.Errorf("restarted tollgate serves certificate serial %v, want the stored %v", again.SerialNumber, leaf.SerialNumber)
	}
	if strings.Contains(out.String(), "certificate obtained") {
		t.Errorf("a certificate was issued again after the restart: %s", out)
	}
}

// A stored certificate due for renewal (5 days left, as a Traefik
// acme.json may hold) is served at start and replaced by a new one from the
// CA, which is then served and stored.
func TestACMERenewsAStoredCertificate(t *testing.T) {
	a := newACMESetup(t)
	chain, key := itest.SelfSignedPEM(t, acmeName, false, time.Now().Add(5*24*time.Hour))
	doc := map[string]any{"le": map[string]any{"Certificates": []any{map[string]any{
		"domain": map[string]any{"main": acmeName}, "certificate": chain, "key": key, "Store": "default"}}}}
	b, _ := json.Marshal(doc)
	if err := os.WriteFile(a.storage, b, 0o600); err != nil {
		t.Fatal(err)
	}
	stop, out := a.start()
	defer stop()
	itest.Eventually(t, 90*time.Second, func() bool { return a.verified() != nil },
		"the certificate due for renewal was not replaced by one from the CA (output: %s)", out)
	b, _ = os.ReadFile(a.storage)
	if strings.Contains(string(b), base64.StdEncoding.EncodeToString(chain)) {
		t.Errorf("the storage still holds the old certificate: %s", b)
	}
}

// A resolver with httpChallenge alone: Pebble validates over HTTP-01 on the
// entry point it names, which has no router (as Traefik's web entry point
// of a TCP-only setup), and the router on websecure serves the
// certificate. No TLS-ALPN-01 validation is tried first (it would fail
// where port 443 does not reach tollgate, and count against the CA's
// limits): the port Pebble dials for those sees no connection. Other
// requests on the challenge's entry point get 404.
func TestACMEHTTP01FromPebble(t *testing.T) {
	alpn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer alpn.Close()
	var alpnDials atomic.Int32
	go func() {
		for {
			c, err := alpn.Accept()
			if err != nil {
				return
			}
			alpnDials.Add(1)
			c.Close()
		}
	}()
	a := newACMESetupOn(t, alpn.Addr().(*net.TCPAddr).Port)
	web := fmt.Sprintf("127.0.0.1:%d", a.pebble.HTTPPort)
	a.args = slices.DeleteFunc(a.args, func(s string) bool { return strings.HasPrefix(s, "--certificatesResolvers.le.acme.tlsChallenge") })
	a.args = append(a.args, "--entryPoints.web.address="+web, "--certificatesResolvers.le.acme.httpChallenge.entryPoint=web")
	stop, out := a.start()
	defer stop()
	itest.Eventually(t, 90*time.Second, func() bool { return a.verified() != nil },
		"no certificate from Pebble over HTTP-01 that verifies for %s (tollgate's output: %s)", acmeName, out)
	if !strings.Contains(out.String(), `"message":"HTTP-01 validation request"`) || strings.Contains(out.String(), "TLS-ALPN-01 validation") {
		t.Errorf("the log does not show an HTTP-01 validation alone: %s", out)
	}
	if n := alpnDials.Load(); n != 0 {
		t.Errorf("Pebble dialled the TLS-ALPN-01 port %d times: a TLS-ALPN-01 validation was tried", n)
	}
	resp, err := http.Get("http://" + web + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET / on the challenge's entry point: %s, want 404", resp.Status)
	}
}

const acmeName = "db.tollgate.test"

// acmeSetup is Pebble, an echo backend, a dynamic file whose router names
// the resolver le, and tollgate's arguments.
type acmeSetup struct {
	t       *testing.T
	ep      string
	storage string
	args    []string
	roots   *x509.CertPool
	api     string
	pebble  *itest.Pebble
}

func newACMESetup(t *testing.T) *acmeSetup { return newACMESetupOn(t, 0) }

// newACMESetupOn is newACMESetup with Pebble's TLS-ALPN-01 validations sent
// to tlsALPNPort instead of the websecure entry point (0).
func newACMESetupOn(t *testing.T, tlsALPNPort int) *acmeSetup {
	ep := itest.FreeAddr(t)
	if tlsALPNPort == 0 {
		_, port, _ := net.SplitHostPort(ep)
		tlsALPNPort, _ = strconv.Atoi(port)
	}
	p := itest.StartPebble(t, tlsALPNPort)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "pebble-ca.pem")
	if err := os.WriteFile(caFile, p.CACert, 0o644); err != nil {
		t.Fatal(err)
	}
	be := itest.EchoServer(t, "")
	dyn := filepath.Join(dir, "dyn.yml")
	if err := os.WriteFile(dyn, []byte(fmt.Sprintf(`tcp:
  routers:
    db:
      rule: "HostSNI(`+"`%s`"+`)"
      service: echo
      middlewares: [perip]
      tls:
        certResolver: le
  middlewares:
    perip:
      inFlightConn:
        amount: 5
  services:
    echo:
      loadBalancer:
        servers:
          - address: %q
`, acmeName, be)), 0o644); err != nil {
		t.Fatal(err)
	}
	storage := filepath.Join(dir, "acme.json")
	a := &acmeSetup{t: t, ep: ep, storage: storage, roots: p.IssuerPool(t), api: itest.FreeAddr(t), pebble: p}
	a.args = []string{"--entryPoints.websecure.address=" + ep, "--providers.file.filename=" + dyn,
		"--certificatesResolvers.le.acme.email=ops@tollgate.test", "--certificatesResolvers.le.acme.storage=" + storage,
		"--certificatesResolvers.le.acme.caServer=" + p.Directory, "--certificatesResolvers.le.acme.caCertificates=" + caFile,
		"--certificatesResolvers.le.acme.tlsChallenge=true", "--log.level=DEBUG", "--api.address=" + a.api, "--metrics.prometheus=true"}
	return a
}

// verified dials the entry point for acmeName, verifying against Pebble's
// root, and echoes a line through; it returns the leaf, or nil.
func (a *acmeSetup) verified() *x509.Certificate {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", a.ep, &tls.Config{ServerName: acmeName, RootCAs: a.roots})
	if err != nil {
		return nil
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return nil
	}
	b := make([]byte, 5)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping\n" {
		return nil
	}
	return c.ConnectionState().PeerCertificates[0]
}

// start starts tollgate; stop interrupts it and waits.
func (a *acmeSetup) start() (stop func(), out *itest.Buffer) {
	cmd := exec.Command(itest.Binary(a.t), a.args...)
	out = &itest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}, out
}
