package itest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
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
)

// Helpers for tests against a real ACME server: Let's Encrypt's Pebble, with
// pebble-challtestsrv as the DNS server its validator asks, which answers
// every name with 127.0.0.1. Any name can then be validated by a listener
// of the test's on a loopback port. scripts/pebble.sh installs both.

// PebbleVersion is the Pebble release scripts/pebble.sh installs and caches.
const PebbleVersion = "2.10.3"

// pebbleFiles are what a Pebble folder holds: the two binaries, the
// directory's HTTPS certificate and key, and the CA that signed them.
var pebbleFiles = []string{"pebble", "pebble-challtestsrv", "cert.pem", "key.pem", "pebble.minica.pem"}

// PebbleDir finds the folder scripts/pebble.sh fills: $TOLLGATE_PEBBLE, else
// the script's cache when its install finished. When neither is there and
// integration tests are required, it runs scripts/pebble.sh (about a minute
// cold); otherwise the error says how to get it.
func PebbleDir() (string, error) {
	if dir := os.Getenv("TOLLGATE_PEBBLE"); dir != "" {
		if err := pebbleComplete(dir); err != nil {
			return "", fmt.Errorf("TOLLGATE_PEBBLE=%s: %w", dir, err)
		}
		return dir, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	cached := filepath.Join(cache, "tollgate", "pebble-"+PebbleVersion)
	// The marker the script writes last: without it an install was cut short.
	if _, err := os.Stat(filepath.Join(cached, ".complete")); err == nil && pebbleComplete(cached) == nil {
		return cached, nil
	}
	if !Required() {
		return "", errors.New("no Pebble: run `export TOLLGATE_PEBBLE=$(scripts/pebble.sh)` (installs it once from the Go module proxy, about a minute)")
	}
	out, err := exec.Command(filepath.Join(ModuleRoot(), "scripts", "pebble.sh")).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("scripts/pebble.sh: %w\n%s", err, ee.Stderr)
		}
		return "", fmt.Errorf("scripts/pebble.sh: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if err := pebbleComplete(dir); err != nil {
		return "", fmt.Errorf("scripts/pebble.sh printed %s: %w", dir, err)
	}
	return dir, nil
}

// pebbleComplete reports which file a Pebble folder lacks, if any.
func pebbleComplete(dir string) error {
	for _, f := range pebbleFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("no %s (scripts/pebble.sh makes a complete folder)", f)
		}
	}
	return nil
}

// Pebble is an ACME server (Pebble) a test started, with its own DNS server,
// both on loopback ports of their own; they are stopped at cleanup.
//
// Every name resolves to 127.0.0.1 (and has no IPv6 address), so Pebble's
// validator dials 127.0.0.1:TLSALPNPort for a TLS-ALPN-01 challenge and
// 127.0.0.1:HTTPPort for an HTTP-01 one, whatever the name. A name needs
// only to be well formed: there is no public suffix list and no blocked
// name. Each new order needs its challenge answered (no authorization is
// reused), nonces are never refused at random, and the validator does not
// wait before it dials.
type Pebble struct {
	// Directory is the https URL of the ACME directory.
	Directory string
	// CACert is the PEM of the CA that signs the directory's HTTPS
	// certificate (Pebble's test/certs/pebble.minica.pem). It is not the CA
	// that issues the certificates ordered: see IssuerPool.
	CACert []byte
	// TLSALPNPort is the port the validator dials for TLS-ALPN-01, as
	// given to StartPebble.
	TLSALPNPort int
	// HTTPPort is the port the validator dials for HTTP-01: free when
	// Pebble started, and nothing listens on it unless the test does.
	HTTPPort int
	// DNSAddr is pebble-challtestsrv's DNS server (UDP and TCP), which
	// Pebble's validator asks: the resolver a DNS-01 client checks its TXT
	// record's propagation with.
	DNSAddr string
	// ChallengeAPI is the http URL of pebble-challtestsrv's management
	// interface: POST /set-txt {"host": "_acme-challenge.<name>.",
	// "value": ...} adds the TXT record a DNS-01 validation reads,
	// /clear-txt {"host"} removes it.
	ChallengeAPI string
	// mgmt is the https URL of the management interface (the current
	// issuing root and intermediate), served with the same certificate as
	// Directory.
	mgmt   string
	client *http.Client
}

// StartPebble starts pebble-challtestsrv (the DNS server) and pebble, whose
// validator checks TLS-ALPN-01 challenges on 127.0.0.1:tlsALPNPort, and
// waits until the directory answers over HTTPS. Without Pebble it skips t
// (fails it when integration tests are required). Both processes are stopped
// at cleanup, and their output is logged when t failed.
func StartPebble(t testing.TB, tlsALPNPort int) *Pebble {
	t.Helper()
	dir, err := PebbleDir()
	Need(t, "Pebble (an ACME test server)", err)
	caPEM, err := os.ReadFile(filepath.Join(dir, "pebble.minica.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s/pebble.minica.pem holds no certificate", dir)
	}
	// The directory's certificate ships with Pebble's module and expires: a
	// later release has a renewed one. Said plainly here rather than as a
	// verification error on every request.
	if notAfter, err := pemNotAfter(filepath.Join(dir, "cert.pem")); err != nil {
		t.Fatal(err)
	} else if time.Now().After(notAfter) {
		t.Fatalf("Pebble's HTTPS certificate %s/cert.pem expired on %s: move scripts/pebble.sh and itest.PebbleVersion to a later Pebble release", dir, notAfter.Format(time.DateOnly))
	}

	p := &Pebble{
		CACert:      caPEM,
		TLSALPNPort: tlsALPNPort,
		HTTPPort:    FreePort(t),
		client: &http.Client{
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
			Timeout:   30 * time.Second,
		},
	}
	t.Cleanup(p.client.CloseIdleConnections)

	// The DNS server. Pebble asks it over TCP, AAAA before A, and dials the
	// first address it gets, so it must give no IPv6 address: the test's
	// listener is on 127.0.0.1. Its challenge listeners (HTTP-01, HTTPS,
	// TLS-ALPN-01, DNS over HTTPS) are off: they would take fixed ports,
	// TLS-ALPN-01's being 5001, and the test answers the challenges itself.
	dnsAddr := freeDNSAddr(t)
	challMgmt := FreeAddr(t)
	p.DNSAddr, p.ChallengeAPI = dnsAddr, "http://"+challMgmt
	challtest, err := StartProc(filepath.Join(dir, "pebble-challtestsrv"),
		"-dnsserver", dnsAddr,
		"-management", challMgmt,
		"-http01=", "-https01=", "-tlsalpn01=", "-doh=",
		"-defaultIPv4", "127.0.0.1", "-defaultIPv6=")
	if err != nil {
		t.Fatal(err)
	}
	stopAndLog(t, "pebble-challtestsrv", challtest)
	if err := Ready(challtest, 15*time.Second, func() error { return resolvesToLoopback(dnsAddr) }); err != nil {
		t.Fatalf("pebble-challtestsrv: %v", err)
	}

	listen, mgmt := FreeAddr(t), FreeAddr(t)
	var cfg struct {
		Pebble map[string]any `json:"pebble"`
	}
	cfg.Pebble = map[string]any{
		"listenAddress":                  listen,
		"managementListenAddress":        mgmt,
		"certificate":                    filepath.Join(dir, "cert.pem"),
		"privateKey":                     filepath.Join(dir, "key.pem"),
		"httpPort":                       p.HTTPPort,
		"tlsPort":                        tlsALPNPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		// ECDSA root and intermediate keys, as Pebble's own test
		// configuration: quicker to make than RSA ones.
		"keyAlgorithm": "ecdsa",
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "pebble-config.json")
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Pebble reads some of its behaviour from the environment. By default
	// its validator sleeps up to 5 s before each of its three dials, 5% of
	// good nonces are refused and half of the new orders reuse an earlier
	// authorization (no challenge to answer). Each variable is set, the
	// others to their defaults, so that none in the test's environment
	// changes Pebble (PEBBLE_VA_ALWAYS_VALID=1 would skip validation).
	env := append(os.Environ(),
		"PEBBLE_VA_NOSLEEP=1",
		"PEBBLE_VA_ALWAYS_VALID=0",
		"PEBBLE_WFE_NONCEREJECT=0",
		"PEBBLE_AUTHZREUSE=0",
		"PEBBLE_ALTERNATE_ROOTS=0",
		"PEBBLE_CHAIN_LENGTH=1",
	)
	pebble, err := StartProcEnv(env, filepath.Join(dir, "pebble"), "-config", conf, "-dnsserver", dnsAddr)
	if err != nil {
		t.Fatal(err)
	}
	stopAndLog(t, "pebble", pebble)
	p.Directory = "https://" + listen + "/dir"
	p.mgmt = "https://" + mgmt
	// The management interface starts before the directory; both must answer.
	ready := func() error {
		var dir struct{ NewNonce string }
		if err := p.getJSON(p.Directory, &dir); err != nil {
			return err
		}
		if dir.NewNonce == "" {
			return errors.New("the directory names no newNonce")
		}
		_, err := p.get(p.mgmt + "/roots/0")
		return err
	}
	if err := Ready(pebble, 30*time.Second, ready); err != nil {
		t.Fatalf("pebble: %v", err)
	}
	return p
}

// HTTPClient returns a client that trusts CACert, for the directory and the
// ACME requests.
func (p *Pebble) HTTPClient() *http.Client { return p.client }

// IssuerPool returns the root that issues this Pebble's certificates (made
// at its start), fetched from its management interface: the pool to verify
// an issued certificate with. The chain a server presents must then include
// the intermediate, as Pebble's certificate URL gives it; Intermediates
// holds it for a test that has the leaf alone.
func (p *Pebble) IssuerPool(t testing.TB) *x509.CertPool {
	t.Helper()
	return p.pool(t, "/roots/0")
}

// Intermediates returns the intermediate that signs this Pebble's
// certificates, fetched from its management interface.
func (p *Pebble) Intermediates(t testing.TB) *x509.CertPool {
	t.Helper()
	return p.pool(t, "/intermediates/0")
}

func (p *Pebble) pool(t testing.TB, path string) *x509.CertPool {
	t.Helper()
	b, err := p.get(p.mgmt + path)
	if err != nil {
		t.Fatalf("pebble management %s: %v", path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("pebble management %s: no certificate in %q", path, b)
	}
	return pool
}

func (p *Pebble) get(url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b, nil
}

func (p *Pebble) getJSON(url string, v any) error {
	b, err := p.get(url)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// stopAndLog stops proc at cleanup, by the PID it started with, and logs
// its output when t failed.
func stopAndLog(t testing.TB, name string, proc *Proc) {
	t.Cleanup(func() {
		proc.Stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, proc.Logs.String())
		}
	})
}

// freeDNSAddr returns a loopback address whose port was free a moment ago
// for both UDP and TCP, as a DNS server listens on both.
func freeDNSAddr(t testing.TB) string {
	t.Helper()
	for range 20 {
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := u.LocalAddr().String()
		l, err := net.Listen("tcp", addr)
		u.Close()
		if err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatal("no loopback port free for both UDP and TCP in 20 tries")
	return ""
}

// resolvesToLoopback asks the DNS server at addr, over TCP as Pebble does,
// for a name's addresses and wants 127.0.0.1 alone.
func resolvesToLoopback(addr string) error {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := r.LookupIPAddr(ctx, "ready.pebble.test.")
	if err != nil {
		return err
	}
	if len(ips) != 1 || !ips[0].IP.Equal(net.IPv4(127, 0, 0, 1)) {
		return fmt.Errorf("ready.pebble.test resolves to %v, want 127.0.0.1 alone", ips)
	}
	return nil
}

// pemNotAfter is the end of validity of the first certificate in a PEM file.
func pemNotAfter(file string) (time.Time, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return time.Time{}, fmt.Errorf("%s holds no PEM block", file)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", file, err)
	}
	return c.NotAfter, nil
}
