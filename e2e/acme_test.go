package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	listed, body := a.certificates()
	found := false
	for _, c := range listed {
		found = found || c.Resolver == "le" && slices.Equal(c.SANs, []string{acmeName}) &&
			strings.Contains(c.Issuer, "Pebble Intermediate") && c.NotAfter.Equal(leaf.NotAfter)
	}
	if !found {
		t.Errorf("/api/tls/certificates does not list the certificate obtained: %s", body)
	}
	resp, err := http.Get("http://" + a.api + "/metrics")
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

// A resolver with dnsChallenge alone: lego's httpreq provider (configured
// by its environment variables, as every lego provider is in Traefik) sets
// the TXT record in Pebble's DNS server (pebble-challtestsrv, through a
// relay of the test's that speaks httpreq's API), the propagation is
// checked against that server (dnsChallenge.resolvers, with
// propagation.disableANSChecks: it is no zone's authority), Pebble
// validates over DNS-01, and the router serves the certificate, which
// verifies against Pebble's root. Neither TLS-ALPN-01 nor HTTP-01 is
// tried, and the record is removed after the validation.
func TestACMEDNS01FromPebble(t *testing.T) {
	alpn := countDials(t)
	a := newACMESetupOn(t, alpn.port)
	relay := newTXTRelay(t, a.pebble)
	a.args = slices.DeleteFunc(a.args, func(s string) bool { return strings.HasPrefix(s, "--certificatesResolvers.le.acme.tlsChallenge") })
	a.args = append(a.args, "--certificatesResolvers.le.acme.dnsChallenge.provider=httpreq",
		"--certificatesResolvers.le.acme.dnsChallenge.resolvers="+a.pebble.DNSAddr,
		"--certificatesResolvers.le.acme.dnsChallenge.propagation.disableANSChecks=true",
		"--certificatesResolvers.le.acme.dnsChallenge.propagation.delayBeforeChecks=200ms")
	a.env = []string{"HTTPREQ_ENDPOINT=" + relay.url, "HTTPREQ_POLLING_INTERVAL=1", "HTTPREQ_PROPAGATION_TIMEOUT=30"}
	stop, out := a.start()
	defer stop()
	itest.Eventually(t, 90*time.Second, func() bool { return a.verified() != nil },
		"no certificate from Pebble over DNS-01 that verifies for %s (tollgate's output: %s)", acmeName, out)
	if got, want := relay.presented(), "_acme-challenge."+acmeName+"."; !slices.Contains(got, want) {
		t.Errorf("TXT records set: %q, want %s", got, want)
	}
	itest.Eventually(t, 10*time.Second, func() bool { return relay.cleared() >= 1 }, "the TXT record was never removed")
	if n := alpn.n.Load(); n != 0 {
		t.Errorf("Pebble dialled the TLS-ALPN-01 port %d times: a TLS-ALPN-01 validation was tried", n)
	}

	// A wildcard (tls.domains), which only DNS-01 validates, added to the
	// file: its certificate serves a name under it.
	var dyn string
	for _, arg := range a.args {
		if f, ok := strings.CutPrefix(arg, "--providers.file.filename="); ok {
			dyn = f
		}
	}
	b, err := os.ReadFile(dyn)
	if err != nil {
		t.Fatal(err)
	}
	wild := strings.Replace(string(b), "  middlewares:\n", `    wild:
      rule: "HostSNI(`+"`x.wild.tollgate.test`"+`)"
      service: echo
      tls:
        certResolver: le
        domains:
          - main: "*.wild.tollgate.test"
  middlewares:
`, 1)
	if err := os.WriteFile(dyn, []byte(wild), 0o644); err != nil {
		t.Fatal(err)
	}
	var leaf *x509.Certificate
	itest.Eventually(t, 90*time.Second, func() bool {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", a.ep, &tls.Config{ServerName: "x.wild.tollgate.test", RootCAs: a.roots})
		if err != nil {
			return false
		}
		defer c.Close()
		leaf = c.ConnectionState().PeerCertificates[0]
		return true
	}, "no wildcard certificate from Pebble for x.wild.tollgate.test (output: %s)", out)
	if !slices.Equal(leaf.DNSNames, []string{"*.wild.tollgate.test"}) {
		t.Errorf("x.wild.tollgate.test is served a certificate for %q, want *.wild.tollgate.test", leaf.DNSNames)
	}
	if got := relay.presented(); !slices.Contains(got, "_acme-challenge.wild.tollgate.test.") {
		t.Errorf("TXT records set: %q, want one for the wildcard's domain", got)
	}
}

// A dnsChallenge whose certificate cannot be issued (the DNS provider's API
// fails) is an error naming the resolver, in the log and in
// /api/tls/certificates, and tried again; one whose provider cannot be set
// up (its credentials variable is missing) stops the start naming the
// resolver's option and the variable.
func TestACMEDNS01FailuresNameTheResolver(t *testing.T) {
	a := newACMESetup(t)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "zone is read-only", http.StatusForbidden)
	}))
	defer broken.Close()
	a.args = slices.DeleteFunc(a.args, func(s string) bool { return strings.HasPrefix(s, "--certificatesResolvers.le.acme.tlsChallenge") })
	a.args = append(a.args, "--certificatesResolvers.le.acme.dnsChallenge.provider=httpreq",
		"--certificatesResolvers.le.acme.dnsChallenge.resolvers="+a.pebble.DNSAddr)
	a.env = []string{"HTTPREQ_ENDPOINT=" + broken.URL}
	stop, out := a.start()
	itest.Eventually(t, 60*time.Second, func() bool {
		return strings.Contains(out.String(), `"resolver":"le"`) && strings.Contains(out.String(), "certificatesResolvers.le.acme: certificate not obtained") &&
			strings.Contains(out.String(), "zone is read-only")
	}, "no error naming the resolver and the provider's answer: %s", out)
	listed, body := a.certificates()
	found := false
	for _, c := range listed {
		found = found || c.Resolver == "le" && slices.Equal(c.SANs, []string{acmeName}) && strings.HasPrefix(c.Error, "not obtained: ") && strings.Contains(c.Error, "zone is read-only")
	}
	if !found {
		t.Errorf("/api/tls/certificates does not say why %s has no certificate: %s", acmeName, body)
	}
	stop()

	// cloudflare without its credentials: no start.
	args := slices.DeleteFunc(slices.Clone(a.args), func(s string) bool { return strings.Contains(s, "dnsChallenge.provider=") })
	args = append(args, "--certificatesResolvers.le.acme.dnsChallenge.provider=cloudflare")
	cmd := exec.Command(itest.Binary(t), args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, "CF_") || strings.HasPrefix(v, "CLOUDFLARE_") })
	b, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("tollgate started with cloudflare and no credentials: %s", b)
	}
	if !strings.Contains(string(b), `certificatesResolvers.le.acme.dnsChallenge.provider "cloudflare"`) || !strings.Contains(string(b), "CLOUDFLARE_DNS_API_TOKEN") {
		t.Errorf("the error does not name the option and the variable: %s", b)
	}
}

// dialCounter counts the connections to a loopback port nothing answers.
type dialCounter struct {
	port int
	n    atomic.Int32
}

func countDials(t *testing.T) *dialCounter {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d := &dialCounter{port: l.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			d.n.Add(1)
			c.Close()
		}
	}()
	return d
}

// txtRelay is the DNS API lego's httpreq provider speaks (POST /present
// and /cleanup, {"fqdn", "value"}), relayed to pebble-challtestsrv's
// management interface (/set-txt, /clear-txt {"host", "value"}).
type txtRelay struct {
	url string
	mu  sync.Mutex
	set []string
	clr int
}

func newTXTRelay(t *testing.T, p *itest.Pebble) *txtRelay {
	r := &txtRelay{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var msg struct{ FQDN, Value string }
		if err := json.NewDecoder(req.Body).Decode(&msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		path := map[string]string{"/present": "/set-txt", "/cleanup": "/clear-txt"}[req.URL.Path]
		if path == "" {
			http.NotFound(w, req)
			return
		}
		b, _ := json.Marshal(map[string]string{"host": msg.FQDN, "value": msg.Value})
		resp, err := http.Post(p.ChallengeAPI+path, "application/json", bytes.NewReader(b))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			http.Error(w, "pebble-challtestsrv: "+resp.Status, http.StatusBadGateway)
			return
		}
		r.mu.Lock()
		if path == "/set-txt" {
			r.set = append(r.set, msg.FQDN)
		} else {
			r.clr++
		}
		r.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func (r *txtRelay) presented() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.set)
}

func (r *txtRelay) cleared() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clr
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
	env     []string // added to tollgate's environment
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

// listedCert is an entry of /api/tls/certificates.
type listedCert struct {
	SANs                    []string
	Issuer, Resolver, Error string
	NotAfter                time.Time
}

// certificates asks the running tollgate's API for /api/tls/certificates.
func (a *acmeSetup) certificates() ([]listedCert, []byte) {
	a.t.Helper()
	resp, err := http.Get("http://" + a.api + "/api/tls/certificates")
	if err != nil {
		a.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var listed []listedCert
	if err := json.Unmarshal(body, &listed); err != nil {
		a.t.Fatalf("/api/tls/certificates: %v: %s", err, body)
	}
	return listed, body
}

// start starts tollgate; stop interrupts it and waits.
func (a *acmeSetup) start() (stop func(), out *itest.Buffer) {
	cmd := exec.Command(itest.Binary(a.t), append(a.args, itest.LogFlags(a.args)...)...) // JSON lines, which the tests read
	cmd.Env = append(os.Environ(), a.env...)
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
