package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// testCA issues certificates for the tests: a CA whose pool a client trusts.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
	dir  string
	n    atomic.Int64
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tollgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, dir: t.TempDir(),
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leafOpts vary an issued certificate.
type leafOpts struct {
	client   bool      // a client certificate
	notAfter time.Time // zero: a day from now
	uri      string    // a URI SAN
}

// issue returns a key pair for names signed by the CA, with the PEM of
// both written to files in the CA's directory.
func (ca *testCA) issue(t testing.TB, o leafOpts, names ...string) (kp tls.Certificate, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n := ca.n.Add(1)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(n + 1), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if o.client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	if !o.notAfter.IsZero() {
		tmpl.NotAfter = o.notAfter
	}
	if o.uri != "" {
		u, _ := url.Parse(o.uri)
		tmpl.URIs = []*url.URL{u}
	}
	for _, nm := range names {
		if ip := net.ParseIP(nm); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, nm)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	base := filepath.Join(ca.dir, strings.NewReplacer("*", "star", ".", "_").Replace(names[0])+"-"+big.NewInt(n).String())
	certFile, keyFile = base+".crt", base+".key"
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	kp, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return kp, certFile, keyFile
}

func (ca *testCA) caFile(t testing.TB) string {
	p := filepath.Join(ca.dir, "ca.crt")
	if err := os.WriteFile(p, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// terminating is a router that terminates TLS with the named options.
func terminating(rule, svc, options string, mws ...string) *config.TCPRouter {
	return &config.TCPRouter{Rule: rule, Service: svc, Middlewares: mws, TLS: &config.RouterTCPTLSConfig{Options: options}}
}

func certEntry(certFile, keyFile string) *config.CertAndStores {
	return &config.CertAndStores{Certificate: config.Certificate{CertFile: config.FileOrContent(certFile), KeyFile: config.FileOrContent(keyFile)}}
}

// tlsDial completes a handshake with the proxy as serverName and returns
// the connection, or the handshake's error.
func tlsDial(t testing.TB, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		_ = raw.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// greetTLS reads the plain backend's greeting through a terminated
// connection and checks that it echoes.
func greetTLS(t testing.TB, c *tls.Conn) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("greeting through the terminated connection: %v", err)
	}
	greetAgain(t, c)
	return string(b[:])
}

// greetAgain sends a ping through c and reads its echo.
func greetAgain(t testing.TB, c *tls.Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	var echo [4]byte
	if _, err := io.ReadFull(c, echo[:]); err != nil || string(echo[:]) != "ping" {
		t.Fatalf("echo through the terminated connection = %q, %v", echo[:], err)
	}
}

func routerStatus(t testing.TB, rt *Runtime, name string) *RouterInfo {
	t.Helper()
	ri, ok := rt.Routers[name]
	if !ok {
		t.Fatalf("router %s not in the runtime", name)
	}
	return ri
}

func mustEnabled(t testing.TB, rt *Runtime) {
	t.Helper()
	for name, ri := range rt.Routers {
		if ri.Status == StatusDisabled {
			t.Fatalf("router %s: %s %v", name, ri.Status, ri.Err)
		}
	}
	for name, si := range rt.Services {
		if si.Status == StatusDisabled {
			t.Fatalf("service %s: %s %v", name, si.Status, si.Err)
		}
	}
}

// Termination: the certificate is chosen by SNI (exact, then wildcard),
// the backend gets plaintext, an unknown name gets the default certificate.
func TestTLSTerminationBySNI(t *testing.T) {
	ca := newTestCA(t)
	_, dbCert, dbKey := ca.issue(t, leafOpts{}, "db.example")
	_, wCert, wKey := ca.issue(t, leafOpts{}, "*.svc.example")
	_, defCert, defKey := ca.issue(t, leafOpts{}, "default.example")
	a, w := startBackend(t, "A"), startBackend(t, "W")
	s := newServerWith(t, nil, "tls")
	rt := s.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"db@file": terminating("HostSNI(`db.example`)", "a@file", ""),
			"w@file":  terminating("HostSNI(`*.svc.example`) || HostSNI(`other.example`)", "w@file", ""),
		},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr()), "w@file": lbConfig(w.addr())},
		TLS: &config.TLSConfiguration{
			Certificates: []*config.CertAndStores{certEntry(dbCert, dbKey), certEntry(wCert, wKey)},
			Stores:       map[string]config.TLSStore{"default": {DefaultCertificate: &config.Certificate{CertFile: config.FileOrContent(defCert), KeyFile: config.FileOrContent(defKey)}}},
		},
	})
	mustEnabled(t, rt)
	for _, tc := range []struct{ sni, want, certName string }{
		{"db.example", "A", "db.example"},
		{"x.svc.example", "W", "*.svc.example"},
		{"other.example", "W", "default.example"}, // no certificate names it: the default one
	} {
		c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: tc.sni, RootCAs: ca.pool, InsecureSkipVerify: tc.certName != tc.sni && !strings.HasPrefix(tc.certName, "*")})
		if err != nil {
			t.Fatalf("%s: handshake: %v", tc.sni, err)
		}
		if got := c.ConnectionState().PeerCertificates[0].Subject.CommonName; got != tc.certName {
			t.Errorf("%s: served certificate %q, want %q", tc.sni, got, tc.certName)
		}
		if got := greetTLS(t, c); got != tc.want {
			t.Errorf("%s: reached %q, want %q", tc.sni, got, tc.want)
		}
		_ = c.Close()
	}
	if got := s.State().TLSCounters("db@file").Handshakes.Load(); got != 1 {
		t.Errorf("db@file handshakes = %d, want 1", got)
	}
	var infos []string
	for _, ci := range s.Runtime().Certificates {
		infos = append(infos, ci.Subject+":"+strings.Join(ci.UsedBy, ","))
	}
	if want := "CN=db.example:db@file"; !strings.Contains(strings.Join(infos, " "), want) {
		t.Errorf("certificates %v do not show %s", infos, want)
	}
}

// Without a default certificate, an unknown name gets the generated one;
// sniStrict refuses it instead.
func TestTLSGeneratedDefaultAndSNIStrict(t *testing.T) {
	ca := newTestCA(t)
	_, dbCert, dbKey := ca.issue(t, leafOpts{}, "db.example")
	a, b := startBackend(t, "A"), startBackend(t, "B")
	s := newServerWith(t, nil, "lax", "strict")
	rt := s.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"lax@file":    {EntryPoints: []string{"lax"}, Rule: "HostSNI(`*`)", Service: "a@file", TLS: &config.RouterTCPTLSConfig{}},
			"strict@file": {EntryPoints: []string{"strict"}, Rule: "HostSNI(`*`)", Service: "b@file", TLS: &config.RouterTCPTLSConfig{Options: "strict@file"}},
		},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr()), "b@file": lbConfig(b.addr())},
		TLS: &config.TLSConfiguration{
			Certificates: []*config.CertAndStores{certEntry(dbCert, dbKey)},
			Options:      map[string]config.TLSOptions{"strict@file": {SniStrict: true}},
		},
	})
	mustEnabled(t, rt)
	c, err := tlsDial(t, s.addr("lax"), &tls.Config{ServerName: "unknown.example", InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("lax: %v", err)
	}
	if cn := c.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "TOLLGATE DEFAULT CERT" {
		t.Errorf("lax: served %q, want the generated default", cn)
	}
	if got := greetTLS(t, c); got != "A" {
		t.Errorf("lax reached %q", got)
	}
	_ = c.Close()
	if _, err := tlsDial(t, s.addr("strict"), &tls.Config{ServerName: "unknown.example", InsecureSkipVerify: true}); err == nil {
		t.Fatal("strict: handshake for an unknown name succeeded")
	}
	c, err = tlsDial(t, s.addr("strict"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatalf("strict, known name: %v", err)
	}
	if got := greetTLS(t, c); got != "B" {
		t.Errorf("strict reached %q", got)
	}
	_ = c.Close()
	waitFor(t, "the no-certificate failure counted", func() bool {
		return s.State().TLSCounters("strict@file").Failures[reasonIndexNoCert].Load() == 1
	})
}

// mTLS at the edge: RequireAndVerifyClientCert admits a client with a
// certificate from the CA, refuses one without (and one from another CA).
func TestTLSClientAuth(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	_, dbCert, dbKey := ca.issue(t, leafOpts{}, "db.example")
	clientKP, _, _ := ca.issue(t, leafOpts{client: true}, "client")
	strangerKP, _, _ := other.issue(t, leafOpts{client: true}, "stranger")
	a := startBackend(t, "A")
	s := newServerWith(t, nil, "tls")
	rt := s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "a@file", "mtls@file")},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
		TLS: &config.TLSConfiguration{
			Certificates: []*config.CertAndStores{certEntry(dbCert, dbKey)},
			Options: map[string]config.TLSOptions{"mtls@file": {ClientAuth: config.ClientAuth{
				CAFiles: []config.FileOrContent{config.FileOrContent(ca.caFile(t))}, ClientAuthType: "RequireAndVerifyClientCert"}}},
		},
	})
	mustEnabled(t, rt)
	c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool, Certificates: []tls.Certificate{clientKP}})
	if err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if got := greetTLS(t, c); got != "A" {
		t.Errorf("reached %q", got)
	}
	_ = c.Close()
	for name, certs := range map[string][]tls.Certificate{"without": nil, "another CA's": {strangerKP}} {
		// TLS 1.3: the client learns of the refusal on its first read.
		c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool, Certificates: certs})
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = c.Read(make([]byte, 1))
			_ = c.Close()
		}
		if err == nil {
			t.Errorf("%s a client certificate: served", name)
		}
	}
	waitFor(t, "two bad-client-certificate failures", func() bool {
		return s.State().TLSCounters("db@file").Failures[reasonIndexClientCert].Load() == 2
	})
}

// minVersion VersionTLS13 refuses a TLS 1.2 client, counted as such.
func TestTLSMinVersion(t *testing.T) {
	ca := newTestCA(t)
	_, dbCert, dbKey := ca.issue(t, leafOpts{}, "db.example")
	a := startBackend(t, "A")
	s := newServerWith(t, nil, "tls")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "a@file", "modern@file")},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
		TLS: &config.TLSConfiguration{
			Certificates: []*config.CertAndStores{certEntry(dbCert, dbKey)},
			Options:      map[string]config.TLSOptions{"modern@file": {MinVersion: "VersionTLS13", CurvePreferences: []string{"X25519", "CurveP256"}}},
		},
	}))
	if _, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool, MaxVersion: tls.VersionTLS12}); err == nil {
		t.Fatal("a TLS 1.2 client was served")
	}
	c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("version %x", v)
	}
	_ = c.Close()
	waitFor(t, "the protocol-version failure counted", func() bool {
		return s.State().TLSCounters("db@file").Failures[reasonIndexVersion].Load() == 1
	})
}

// Broken TLS settings name what is broken and disable only the routers that
// need it; their clients are closed, never handed to a catch-all.
func TestTLSBrokenSettingsFailClosed(t *testing.T) {
	ca := newTestCA(t)
	_, okCert, okKey := ca.issue(t, leafOpts{}, "ok.example")
	_, badCert, _ := ca.issue(t, leafOpts{}, "bad.example")
	missingKey := filepath.Join(t.TempDir(), "missing.key")
	a, p := startBackend(t, "A"), startBackend(t, "P")
	s := newServerWith(t, nil, "tls")
	rt := s.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"ok@file":      terminating("HostSNI(`ok.example`)", "a@file", ""),
			"bad@file":     terminating("HostSNI(`bad.example`)", "a@file", ""),
			"cipher@file":  terminating("HostSNI(`cipher.example`)", "a@file", "weird@file"),
			"unknown@file": terminating("HostSNI(`unknown.example`)", "a@file", "nosuch@file"),
			"acme@file":    {Rule: "HostSNI(`acme.example`)", Service: "a@file", TLS: &config.RouterTCPTLSConfig{CertResolver: "le"}},
			"all@file":     passthrough("HostSNI(`*`)", "p@file"),
		},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr()), "p@file": lbConfig(p.addr())},
		TLS: &config.TLSConfiguration{
			Certificates: []*config.CertAndStores{certEntry(okCert, okKey), certEntry(badCert, missingKey)},
			Options:      map[string]config.TLSOptions{"weird@file": {CipherSuites: []string{"TLS_NO_SUCH_SUITE"}}},
		},
	})
	for name, want := range map[string]string{
		"bad@file":     missingKey,
		"cipher@file":  `"TLS_NO_SUCH_SUITE" is not a cipher suite`,
		"unknown@file": `TLS options "nosuch@file" do not exist`,
		"acme@file":    `certificate resolver "le" does not exist`,
	} {
		ri := routerStatus(t, rt, name)
		if ri.Status != StatusDisabled || !strings.Contains(strings.Join(ri.Err, "; "), want) {
			t.Errorf("%s: %s %v, want disabled naming %s", name, ri.Status, ri.Err, want)
		}
	}
	if ri := routerStatus(t, rt, "ok@file"); ri.Status != StatusEnabled {
		t.Errorf("ok@file: %s %v", ri.Status, ri.Err)
	}
	c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "ok.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatalf("ok.example: %v", err)
	}
	if got := greetTLS(t, c); got != "A" {
		t.Errorf("ok.example reached %q", got)
	}
	_ = c.Close()
	before := p.accepted()
	for _, sni := range []string{"bad.example", "cipher.example", "unknown.example", "acme.example"} {
		if _, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: sni, InsecureSkipVerify: true}); err == nil {
			t.Errorf("%s: a handshake completed", sni)
		}
	}
	if got := p.accepted(); got != before {
		t.Errorf("the catch-all's backend got %d connections of disabled routers", got-before)
	}
}

// A reload swaps the certificate for new handshakes; a connection
// terminated with the old one goes on.
func TestTLSReloadKeepsLiveConnection(t *testing.T) {
	ca := newTestCA(t)
	_, c1, k1 := ca.issue(t, leafOpts{}, "db.example")
	_, c2, k2 := ca.issue(t, leafOpts{}, "db.example")
	a := startBackend(t, "A")
	s := newServerWith(t, nil, "tls")
	cfg := func(cert, key string) *config.TCPConfiguration {
		return &config.TCPConfiguration{
			Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "a@file", "")},
			Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
			TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(cert, key)}},
		}
	}
	mustEnabled(t, s.Apply(cfg(c1, k1)))
	live, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	serial1 := live.ConnectionState().PeerCertificates[0].SerialNumber
	if got := greetTLS(t, live); got != "A" {
		t.Fatalf("reached %q", got)
	}
	mustEnabled(t, s.Apply(cfg(c2, k2)))
	fresh, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if fresh.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(serial1) == 0 {
		t.Error("a handshake after the reload got the old certificate")
	}
	_ = live.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(live, "more"); err != nil {
		t.Fatal(err)
	}
	var echo [4]byte
	if _, err := io.ReadFull(live, echo[:]); err != nil || string(echo[:]) != "more" {
		t.Fatalf("the live connection after the reload: %q, %v", echo[:], err)
	}
}

// Acceptance: inFlightConn amount 10 and 15 simultaneous TLS clients from
// one IP: exactly 10 complete a handshake and are served; the other 5 are
// refused before any handshake work (the failure counters stay 0, and they
// read the end of the connection without a TLS record from tollgate).
func TestTLSInFlightConnBeforeHandshake(t *testing.T) {
	ca := newTestCA(t)
	_, dbCert, dbKey := ca.issue(t, leafOpts{}, "db.example")
	a := startBackend(t, "A")
	s := newServerWith(t, nil, "tls")
	// Through the watcher's Merge, as the file provider's output: bare
	// names, the tls section at the top level.
	mustEnabled(t, s.Apply(provider.Merge(map[string]*config.Dynamic{"file": {
		TCP: &config.TCPConfiguration{
			Routers:     map[string]*config.TCPRouter{"db": terminating("HostSNI(`db.example`)", "a", "", "limit")},
			Services:    map[string]*config.TCPService{"a": lbConfig(a.addr())},
			Middlewares: map[string]*config.TCPMiddleware{"limit": limitMW(10)},
		},
		TLS: &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(dbCert, dbKey)}},
	}})))
	type outcome struct {
		served  bool
		tlsByte bool // a TLS record came back to a refused client
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
			raw, err := net.DialTimeout("tcp", s.addr("tls"), 2*time.Second)
			if err != nil {
				return
			}
			// A recording conn: everything the proxy sent before the end.
			rec := &recordConn{Conn: raw}
			c := tls.Client(rec, &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if err := c.Handshake(); err != nil {
				results[i] = outcome{tlsByte: len(rec.got()) > 0}
				_ = raw.Close()
				return
			}
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'A' {
				_ = raw.Close()
				return
			}
			results[i] = outcome{served: true, conn: c}
		}()
	}
	close(start)
	wg.Wait()
	served, refused := 0, 0
	for _, r := range results {
		if r.served {
			served++
			defer r.conn.Close()
			continue
		}
		refused++
		if r.tlsByte {
			t.Error("a refused client received TLS bytes from tollgate")
		}
	}
	if served != 10 || refused != 5 {
		t.Fatalf("served %d, refused %d; want 10 and 5", served, refused)
	}
	tc := s.State().TLSCounters("db@file")
	if got := tc.Handshakes.Load(); got != 10 {
		t.Errorf("handshakes completed = %d, want 10", got)
	}
	for i := range tc.Failures {
		if n := tc.Failures[i].Load(); n != 0 {
			t.Errorf("handshake failures %s = %d, want 0", HandshakeReasons[i], n)
		}
	}
}

// recordConn keeps what was read from the peer.
type recordConn struct {
	net.Conn
	mu  sync.Mutex
	buf []byte
}

func (r *recordConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	r.buf = append(r.buf, p[:n]...)
	r.mu.Unlock()
	return n, err
}

func (r *recordConn) got() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf
}

// Shutdown ends a terminated connection at the end of the drain, and the
// limiter slot it held is freed.
func TestTLSShutdownDrainsTerminated(t *testing.T) {
	ca := newTestCA(t)
	_, dbCert, dbKey := ca.issue(t, leafOpts{}, "db.example")
	a := startBackend(t, "A")
	s := newServerWith(t, nil, "tls")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "a@file", "")},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(dbCert, dbKey)}},
	}))
	filed := waitsFiled()
	c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	greetTLS(t, c)
	if n := s.EntryPoint("tls").Open(); n != 1 {
		t.Fatalf("open = %d, want 1", n)
	}
	// Idle: both directions wait with the idle waiter, no goroutine; the
	// drain's end must start them to end the connection.
	waitFor(t, "both directions filed with the idle waiter", func() bool { return waitsFiled()-filed == 2 })
	done := make(chan struct{})
	go func() { s.Shutdown(t.Context()); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return with a terminated connection open")
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after shutdown, the client reads %v, want the end", err)
	}
	if n := s.EntryPoint("tls").Open(); n != 0 {
		t.Errorf("open after shutdown = %d", n)
	}
}

// startTLSEcho is a TLS server with kp that greets with name after the
// handshake, then echoes; clientCAs, when set, requires a client
// certificate from them. It records the client certificates' names.
func startTLSEcho(t testing.TB, name string, kp tls.Certificate, clientCAs *x509.CertPool) (addr string, clients func() []string) {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{kp}}
	if clientCAs != nil {
		cfg.ClientCAs, cfg.ClientAuth = clientCAs, tls.RequireAndVerifyClientCert
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	itest.StartBackend(t, ln, func(c net.Conn) {
		tc := c.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			return
		}
		if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
			mu.Lock()
			seen = append(seen, pc[0].Subject.CommonName)
			mu.Unlock()
		}
		_ = tc.SetDeadline(time.Time{})
		if _, err := io.WriteString(tc, name); err != nil {
			return
		}
		_, _ = io.Copy(tc, tc)
	})
	return ln.Addr().String(), func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

// tlsService is a load balancer whose one server is dialled with TLS by
// the named transport.
func tlsService(addr, transport string) *config.TCPService {
	return &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{
		Servers: []config.TCPServer{{Address: addr, TLS: true}}, ServersTransport: transport}}
}

// Backend TLS: plain clients reach TLS servers through servers
// transports; an expired or wrong-name certificate is refused unless
// insecureSkipVerify; mTLS to the backend; peerCertURI.
func TestServersTransportTLS(t *testing.T) {
	ca := newTestCA(t)
	good, _, _ := ca.issue(t, leafOpts{}, "backend.example")
	expired, _, _ := ca.issue(t, leafOpts{notAfter: time.Now().Add(-time.Hour)}, "backend.example")
	wrongSAN, _, _ := ca.issue(t, leafOpts{}, "elsewhere.example")
	spiffe, _, _ := ca.issue(t, leafOpts{uri: "spiffe://example.org/db"}, "whatever.example")
	_, clientCert, clientKey := ca.issue(t, leafOpts{client: true}, "tollgate-client")
	goodAddr, _ := startTLSEcho(t, "G", good, nil)
	expiredAddr, _ := startTLSEcho(t, "E", expired, nil)
	wrongAddr, _ := startTLSEcho(t, "W", wrongSAN, nil)
	mtlsAddr, mtlsClients := startTLSEcho(t, "M", good, ca.pool)
	spiffeAddr, _ := startTLSEcho(t, "S", spiffe, nil)
	caFile := config.FileOrContent(ca.caFile(t))
	verify := &config.TCPServersTransport{TLS: &config.TLSClientConfig{ServerName: "backend.example", RootCAs: []config.FileOrContent{caFile}}}
	insecure := &config.TCPServersTransport{TLS: &config.TLSClientConfig{InsecureSkipVerify: true}}
	mtls := &config.TCPServersTransport{TLS: &config.TLSClientConfig{ServerName: "backend.example", RootCAs: []config.FileOrContent{caFile},
		Certificates: []config.Certificate{{CertFile: config.FileOrContent(clientCert), KeyFile: config.FileOrContent(clientKey)}}}}
	uriOK := &config.TCPServersTransport{TLS: &config.TLSClientConfig{RootCAs: []config.FileOrContent{caFile}, PeerCertURI: "spiffe://example.org/db"}}
	uriBad := &config.TCPServersTransport{TLS: &config.TLSClientConfig{RootCAs: []config.FileOrContent{caFile}, PeerCertURI: "spiffe://example.org/other"}}
	eps := []string{"good", "expired", "expiredInsecure", "wrong", "wrongInsecure", "mtls", "uriOK", "uriBad"}
	s := newServerWith(t, nil, eps...)
	routers := map[string]*config.TCPRouter{}
	for _, ep := range eps {
		routers[ep+"@file"] = &config.TCPRouter{EntryPoints: []string{ep}, Rule: "HostSNI(`*`)", Service: ep + "@file"}
	}
	rt := s.Apply(&config.TCPConfiguration{
		Routers: routers,
		Services: map[string]*config.TCPService{
			"good@file": tlsService(goodAddr, "verify@file"), "expired@file": tlsService(expiredAddr, "verify@file"),
			"expiredInsecure@file": tlsService(expiredAddr, "insecure@file"), "wrong@file": tlsService(wrongAddr, "verify@file"),
			"wrongInsecure@file": tlsService(wrongAddr, "insecure@file"), "mtls@file": tlsService(mtlsAddr, "mtls@file"),
			"uriOK@file": tlsService(spiffeAddr, "uriok@file"), "uriBad@file": tlsService(spiffeAddr, "uribad@file"),
		},
		ServersTransports: map[string]*config.TCPServersTransport{"verify@file": verify, "insecure@file": insecure, "mtls@file": mtls, "uriok@file": uriOK, "uribad@file": uriBad},
	})
	mustEnabled(t, rt)
	for ep, want := range map[string]string{"good": "G", "expired": "closed", "expiredInsecure": "E", "wrong": "closed",
		"wrongInsecure": "W", "mtls": "M", "uriOK": "S", "uriBad": "closed"} {
		if got := greeting(t, "127.0.0.1", s.addr(ep)); got != want {
			t.Errorf("%s: %q, want %q", ep, got, want)
		}
	}
	if got := mtlsClients(); len(got) != 1 || got[0] != "tollgate-client" {
		t.Errorf("the mTLS backend saw client certificates %v", got)
	}
	for _, svc := range []string{"expired@file", "wrong@file", "uriBad@file"} {
		if n := s.State().ServiceCounters(svc).TLSErrors.Load(); n != 1 {
			t.Errorf("%s: TLS errors = %d, want 1", svc, n)
		}
	}
}

// A service naming a transport that does not exist is disabled, naming it;
// beside a named transport, the deprecated load balancer fields are ignored
// with a warning and the transport's values apply, as in Traefik.
func TestServersTransportResolution(t *testing.T) {
	b := startBackend(t, "B")
	s := newServerWith(t, nil, "ep")
	delay := 50
	rt := s.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{"r@file": {Rule: "HostSNI(`*`)", Service: "ok@file"}, "r2@file": {Rule: "ClientIP(`10.0.0.1`)", Service: "missing@file"}},
		Services: map[string]*config.TCPService{
			"ok@file": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: b.addr()}}, ServersTransport: "tr@file",
				TerminationDelay: &delay, ProxyProtocol: &config.ProxyProtocol{Version: 1}}},
			"missing@file": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: b.addr()}}, ServersTransport: "nosuch@file"}},
		},
		ServersTransports: map[string]*config.TCPServersTransport{"tr@file": {DialTimeout: config.Duration(time.Second), TerminationDelay: durationPtr(time.Second), ProxyProtocol: &config.ProxyProtocol{Version: 2}}},
	})
	si := rt.Services["missing@file"]
	if si.Status != StatusDisabled || !strings.Contains(strings.Join(si.Err, " "), `servers transport "nosuch@file" does not exist`) {
		t.Errorf("missing@file: %s %v", si.Status, si.Err)
	}
	si = rt.Services["ok@file"]
	errs := strings.Join(si.Err, " | ")
	if si.Status != StatusWarning || !strings.Contains(errs, `loadBalancer.terminationDelay is deprecated and ignored: the service names servers transport "tr@file"`) ||
		!strings.Contains(errs, `loadBalancer.proxyProtocol is deprecated and ignored: the service names servers transport "tr@file"`) {
		t.Errorf("ok@file: %s %v", si.Status, si.Err)
	}
	// The transport's values apply: PROXY v2 (binary) reaches the backend.
	c, err := net.Dial("tcp", s.addr("ep"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var banner [1]byte
	if _, err := io.ReadFull(c, banner[:]); err != nil {
		t.Fatal(err)
	}
	// The echo backend echoes the header it got first.
	sig := make([]byte, 12)
	if _, err := io.ReadFull(c, sig); err != nil || string(sig) != "\r\n\r\n\x00\r\nQUIT\n" {
		t.Errorf("backend got %q (%v), want a PROXY v2 signature", sig, err)
	}
}

// A router naming a resolver of the static configuration that obtains
// nothing (no acme tlsChallenge) is served from the store's certificates,
// with a warning saying so.
func TestTLSCertResolverAccepted(t *testing.T) {
	ca := newTestCA(t)
	_, dbCert, dbKey := ca.issue(t, leafOpts{}, "db.example")
	a := startBackend(t, "A")
	s := newServerOpts(t, StateOptions{CertResolvers: map[string]CertResolver{"le": nil}}, nil, "tls")
	rt := s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": {Rule: "HostSNI(`db.example`)", Service: "a@file", TLS: &config.RouterTCPTLSConfig{CertResolver: "le"}}},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(dbCert, dbKey)}},
	})
	ri := routerStatus(t, rt, "db@file")
	if ri.Status != StatusWarning || !strings.Contains(strings.Join(ri.Err, " "), `certificate resolver "le" obtains nothing`) {
		t.Fatalf("db@file: %s %v", ri.Status, ri.Err)
	}
	c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := greetTLS(t, c); got != "A" {
		t.Errorf("reached %q", got)
	}
}

// Inline PEM is accepted where a file is (Traefik's FileOrContent).
func TestTLSInlinePEM(t *testing.T) {
	ca := newTestCA(t)
	_, dbCert, dbKey := ca.issue(t, leafOpts{}, "db.example")
	certPEM, _ := os.ReadFile(dbCert)
	keyPEM, _ := os.ReadFile(dbKey)
	a := startBackend(t, "A")
	s := newServerWith(t, nil, "tls")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "a@file", "")},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(string(certPEM), string(keyPEM))}},
	}))
	c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := greetTLS(t, c); got != "A" {
		t.Errorf("reached %q", got)
	}
}

// A transport's durations reach the load balancer: set, Traefik's defaults
// when unset, an explicit terminationDelay of 0 as 0 (not as unset), and the
// 10 s dial timeout of a service that names none.
func TestServersTransportDurations(t *testing.T) {
	st := NewState(nopLog, StateOptions{})
	defer st.Close()
	svc := func(tr string) *config.TCPService {
		return &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:1"}}, ServersTransport: tr}}
	}
	tables, rt := Compile(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"set@file":   {EntryPoints: []string{"set"}, Rule: "HostSNI(`*`)", Service: "set@file"},
			"unset@file": {EntryPoints: []string{"unset"}, Rule: "HostSNI(`*`)", Service: "unset@file"},
			"none@file":  {EntryPoints: []string{"none"}, Rule: "HostSNI(`*`)", Service: "none@file"},
			"zero@file":  {EntryPoints: []string{"zero"}, Rule: "HostSNI(`*`)", Service: "zero@file"},
		},
		Services: map[string]*config.TCPService{"set@file": svc("fast@file"), "unset@file": svc("plain@file"), "none@file": svc(""), "zero@file": svc("zero@file")},
		ServersTransports: map[string]*config.TCPServersTransport{
			"fast@file":  {DialTimeout: config.Duration(time.Second), DialKeepAlive: config.Duration(-1), TerminationDelay: durationPtr(-1)},
			"plain@file": {},
			"zero@file":  {TerminationDelay: durationPtr(0)},
		},
	}, []string{"set", "unset", "none", "zero"}, st, nopLog)
	mustEnabled(t, rt)
	for ep, want := range map[string][3]time.Duration{
		"set":   {time.Second, -1, -1},
		"unset": {TransportDialTimeout, TransportKeepAlive, 100 * time.Millisecond},
		"none":  {TransportDialTimeout, TransportKeepAlive, 100 * time.Millisecond}, // Traefik's defaults without a transport (was 10 s, no keepalive)
		"zero":  {TransportDialTimeout, TransportKeepAlive, 0},
	} {
		lb := tables[ep].routes[0].handler.(*loadBalancer)
		if got := [3]time.Duration{lb.dialTimeout, lb.keepAlive, lb.delay}; got != want {
			t.Errorf("%s: dialTimeout, keepAlive, delay = %v, want %v", ep, got, want)
		}
	}
}

// The static tcpServersTransport is the transport of the services that
// name none, and default@internal: its durations, with Traefik's defaults
// for what it leaves unset, the deprecated load balancer field over it, and
// its TLS settings for servers marked tls. Without it, default@internal is
// a transport of Traefik's defaults.
func TestStaticDefaultTransport(t *testing.T) {
	svc := func(tr string, delay *int) *config.TCPService {
		return &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:1"}}, ServersTransport: tr, TerminationDelay: delay}}
	}
	five := 5
	cfg := &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"none@file":     {EntryPoints: []string{"none"}, Rule: "HostSNI(`*`)", Service: "none@file"},
			"named@file":    {EntryPoints: []string{"named"}, Rule: "HostSNI(`*`)", Service: "named@file"},
			"internal@file": {EntryPoints: []string{"internal"}, Rule: "HostSNI(`*`)", Service: "internal@file"},
			"lbdelay@file":  {EntryPoints: []string{"lbdelay"}, Rule: "HostSNI(`*`)", Service: "lbdelay@file"},
		},
		Services: map[string]*config.TCPService{"none@file": svc("", nil), "named@file": svc("other@file", nil),
			"internal@file": svc(config.DefaultTransportName, nil), "lbdelay@file": svc("", &five)},
		ServersTransports: map[string]*config.TCPServersTransport{"other@file": {DialTimeout: config.Duration(time.Second)}},
	}
	eps := []string{"none", "named", "internal", "lbdelay"}
	for _, tc := range []struct {
		name   string
		static *config.TCPServersTransport
		want   map[string][3]time.Duration
	}{
		{"with", &config.TCPServersTransport{DialTimeout: config.Duration(3 * time.Second), TerminationDelay: durationPtr(0)}, map[string][3]time.Duration{
			"none":     {3 * time.Second, TransportKeepAlive, 0},
			"named":    {time.Second, TransportKeepAlive, 100 * time.Millisecond},
			"internal": {3 * time.Second, TransportKeepAlive, 0},
			"lbdelay":  {3 * time.Second, TransportKeepAlive, 5 * time.Millisecond},
		}},
		{"without", nil, map[string][3]time.Duration{
			"none":     {TransportDialTimeout, TransportKeepAlive, 100 * time.Millisecond}, // was 10 s, no keepalive
			"named":    {time.Second, TransportKeepAlive, 100 * time.Millisecond},
			"internal": {TransportDialTimeout, TransportKeepAlive, 100 * time.Millisecond},
			"lbdelay":  {TransportDialTimeout, TransportKeepAlive, 5 * time.Millisecond},
		}},
	} {
		st := NewState(nopLog, StateOptions{DefaultTransport: tc.static})
		tables, rt := Compile(cfg, eps, st, nopLog)
		st.Close()
		for _, name := range []string{"none@file", "named@file", "internal@file"} {
			if si := rt.Services[name]; si.Status != StatusEnabled {
				t.Errorf("%s: %s: %s %v", tc.name, name, si.Status, si.Err)
			}
		}
		for ep, want := range tc.want {
			lb := tables[ep].routes[0].handler.(*loadBalancer)
			if got := [3]time.Duration{lb.dialTimeout, lb.keepAlive, lb.delay}; got != want {
				t.Errorf("%s: %s: dialTimeout, keepAlive, delay = %v, want %v", tc.name, ep, got, want)
			}
		}
	}

	// Its TLS settings reach a server marked tls in a service naming no
	// transport: an expired certificate passes with insecureSkipVerify.
	ca := newTestCA(t)
	expired, _, _ := ca.issue(t, leafOpts{notAfter: time.Now().Add(-time.Hour)}, "backend.example")
	addr, _ := startTLSEcho(t, "E", expired, nil)
	for static, want := range map[*config.TCPServersTransport]string{
		nil: "closed",
		{TLS: &config.TLSClientConfig{InsecureSkipVerify: true}}: "E",
	} {
		s := newServerOpts(t, StateOptions{DefaultTransport: static}, nil, "ep")
		mustEnabled(t, s.Apply(&config.TCPConfiguration{
			Routers:  map[string]*config.TCPRouter{"r@file": {Rule: "HostSNI(`*`)", Service: "s@file"}},
			Services: map[string]*config.TCPService{"s@file": tlsService(addr, "")},
		}))
		if got := greeting(t, "127.0.0.1", s.addr("ep")); got != want {
			t.Errorf("static transport %+v: %q, want %q", static, got, want)
		}
	}
}

// A terminated connection is observed as one on a loop: one access-log line
// with its plaintext bytes, and the router's counters.
func TestTLSAccessLogAndCounters(t *testing.T) {
	ca := newTestCA(t)
	_, dbCert, dbKey := ca.issue(t, leafOpts{}, "db.example")
	be := startBackend(t, "")
	var buf syncBuffer
	al := zerolog.New(&buf)
	s := newServerOpts(t, StateOptions{Observers: ConnObservers{AccessLog: &al, Metrics: true}}, nil, "tls")
	mustEnabled(t, s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "a@file", "")},
		Services: map[string]*config.TCPService{"a@file": lbConfig(be.addr())},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(dbCert, dbKey)}},
	}))
	c, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "0123456789"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	waitFor(t, "the access log line", func() bool { return !buf.empty() })
	var m map[string]any
	if err := json.Unmarshal([]byte(buf.lines()[0]), &m); err != nil {
		t.Fatal(err)
	}
	if m["router"] != "db@file" || m["service"] != "a@file" || m["server"] != be.addr() || m["bytes_in"] != 10.0 || m["bytes_out"] != 10.0 || m["entrypoint"] != "tls" {
		t.Errorf("access log line %v", m)
	}
	waitFor(t, "router counters", func() bool {
		n, _, _ := s.State().RouterCounters("db@file").Duration.Snapshot()
		return n == 1 && s.State().RouterCounters("db@file").BytesIn.Load() == 10
	})
	waitFor(t, "the router's open gauge back to 0", func() bool { return s.State().RouterOpen("db@file").Load() == 0 })
}

func durationPtr(d time.Duration) *config.Duration { v := config.Duration(d); return &v }

// entryPoints.<name>.asDefault: a router naming no entry point listens on
// the asDefault ones, else on every one; a router naming one keeps it.
func TestAsDefaultEntryPoints(t *testing.T) {
	cfg := &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"any@file":   {Rule: "HostSNI(`*`)", Service: "s@file"},
			"named@file": {EntryPoints: []string{"a"}, Rule: "ClientIP(`10.0.0.1`)", Service: "s@file"},
		},
		Services: map[string]*config.TCPService{"s@file": lbConfig("127.0.0.1:1")},
	}
	for _, tc := range []struct {
		defaults []string
		want     map[string]int // routes per entry point
	}{
		{nil, map[string]int{"a": 2, "b": 1, "c": 1}},
		{[]string{"b", "c"}, map[string]int{"a": 1, "b": 1, "c": 1}},
		{[]string{"b"}, map[string]int{"a": 1, "b": 1, "c": 0}},
	} {
		st := NewState(nopLog, StateOptions{DefaultEntryPoints: tc.defaults})
		tables, rt := Compile(cfg, []string{"a", "b", "c"}, st, nopLog)
		st.Close()
		mustEnabled(t, rt)
		for ep, n := range tc.want {
			if got := len(tables[ep].routes); got != n {
				t.Errorf("asDefault %v: %s has %d routes, want %d", tc.defaults, ep, got, n)
			}
		}
	}
}

// entryPoints.<name>.reusePort: a second listener on the same address binds
// when both ask for SO_REUSEPORT, and fails when they do not.
func TestReusePort(t *testing.T) {
	addr := itest.FreeAddr(t)
	for _, reuse := range []bool{true, false} {
		cfg := &config.EntryPoint{Address: addr, ReusePort: reuse}
		first, err := NewEntryPoint("a", cfg, nopLog)
		if err != nil {
			t.Fatal(err)
		}
		second, err := NewEntryPoint("b", cfg, nopLog)
		if reuse && err != nil {
			t.Errorf("reusePort: the second listener: %v", err)
		}
		if !reuse && (err == nil || !strings.Contains(err.Error(), "address already in use")) {
			t.Errorf("without reusePort: the second listener: %v, want address already in use", err)
		}
		for _, ep := range []*EntryPoint{first, second} {
			if ep != nil {
				ep.CloseListener()
			}
		}
	}
}

// ruleSyntax (Traefik v3's): v3 and none read the rule; v2 is read in v3
// syntax with a warning, so a v2-only form (several values in HostSNI)
// disables the router; another value disables it naming the key.
func TestRuleSyntax(t *testing.T) {
	cfg := &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"v3@file":      {Rule: "HostSNI(`*`)", RuleSyntax: "v3", Service: "s@file"},
			"v2@file":      {Rule: "ClientIP(`10.0.0.1`)", RuleSyntax: "v2", Service: "s@file"},
			"v2multi@file": {Rule: "HostSNI(`a.example`, `b.example`)", RuleSyntax: "v2", Service: "s@file", TLS: &config.RouterTCPTLSConfig{Passthrough: true}},
			"v4@file":      {Rule: "HostSNI(`*`)", RuleSyntax: "v4", Service: "s@file"},
		},
		Services: map[string]*config.TCPService{"s@file": lbConfig("127.0.0.1:1")},
	}
	st := NewState(nopLog, StateOptions{})
	defer st.Close()
	_, rt := Compile(cfg, []string{"ep"}, st, nopLog)
	for name, want := range map[string]struct{ status, msg string }{
		"v3@file":      {StatusEnabled, ""},
		"v2@file":      {StatusWarning, "ruleSyntax v2 is deprecated"},
		"v2multi@file": {StatusDisabled, "ruleSyntax v2 is deprecated"},
		"v4@file":      {StatusDisabled, `ruleSyntax "v4": use v3 (or v2)`},
	} {
		ri := rt.Routers[name]
		if ri.Status != want.status || !strings.Contains(strings.Join(ri.Err, " | "), want.msg) {
			t.Errorf("%s: %s %v, want %s with %q", name, ri.Status, ri.Err, want.status, want.msg)
		}
	}
}
