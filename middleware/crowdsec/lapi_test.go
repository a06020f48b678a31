package crowdsec

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The tests below run the real CrowdSec Local API, Debian's crowdsec
// package (.ci/run installs it): each starts `crowdsec -no-cs -no-capi`
// (the LAPI alone, no Central API) with a configuration of its own in a
// temporary directory, on a loopback port, with its own SQLite database;
// registers a machine (for cscli) and a bouncer with cscli; adds and
// deletes decisions with `cscli decisions add/delete`; and stops the LAPI by
// its PID.

// lapi is a CrowdSec LAPI a test started (internal/itest's).
type lapi struct{ *itest.LAPI }

// startLAPI starts a LAPI (over TLS with client certificates when p is not
// nil) and a bouncer key for it, and stops it at cleanup.
func startLAPI(t testing.TB, p *pki) *lapi {
	t.Helper()
	var tl *itest.LAPITLS
	if p != nil {
		tl = &itest.LAPITLS{ServerCert: p.serverCert, ServerKey: p.serverKey, CA: p.ca}
	}
	return &lapi{itest.StartLAPI(t, tl)}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// started builds and starts a bouncer on l, stopped at cleanup.
func (l *lapi) started(t testing.TB, cfg Config) *Bouncer {
	t.Helper()
	if cfg.LapiURL == "" {
		cfg.LapiURL = l.URL
	}
	b, _, err := New("cs@test", &cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

func waitReady(t testing.TB, b *Bouncer) {
	t.Helper()
	itest.Eventually(t, 10*time.Second, func() bool { return b.Status().Ready }, "the bouncer never pulled: %+v", b.Status())
}

// within waits for cond, failing after limit, and returns how long it took.
func within(t testing.TB, limit time.Duration, cond func() bool, what string) time.Duration {
	t.Helper()
	start := time.Now()
	itest.Eventually(t, limit, cond, "%s", what)
	return time.Since(start)
}

// slack is what a pull may take beyond its interval on a loaded machine
// (a loopback request, a few ms when idle).
const slack = 1500 * time.Millisecond

func TestLAPIBanAndLift(t *testing.T) {
	l := startLAPI(t, nil)
	keyFile := filepath.Join(t.TempDir(), "key")
	must(t, os.WriteFile(keyFile, []byte(l.Key+"\n"), 0o600))
	const interval = time.Second
	b := l.started(t, Config{APIKeyFile: keyFile, UpdateInterval: dur(interval)})
	waitReady(t, b)

	ip := netip.MustParseAddr("192.0.2.7")
	if !b.Decide(ip).Allow {
		t.Fatal("banned before any decision")
	}
	l.CSCLI("decisions", "add", "--ip", "192.0.2.7", "--duration", "1h", "--reason", "tollgate test")
	took := within(t, interval+slack, func() bool { return !b.Decide(ip).Allow }, "an address banned with cscli is not refused within one interval")
	t.Logf("ban applied %s after cscli returned (interval %s)", took.Round(time.Millisecond), interval)
	if d := b.Decide(netip.MustParseAddr("::ffff:192.0.2.7")); d.Allow || d.Reason != ReasonBanned {
		t.Errorf("the IPv4-mapped form of a banned address: %s", d)
	}
	if !b.Decide(netip.MustParseAddr("192.0.2.8")).Allow {
		t.Error("a neighbour of the banned address is refused")
	}

	l.CSCLI("decisions", "delete", "--ip", "192.0.2.7")
	took = within(t, interval+slack, func() bool { return b.Decide(ip).Allow }, "an address is not admitted within one interval after cscli decisions delete")
	t.Logf("ban lifted %s after cscli returned", took.Round(time.Millisecond))

	// Ranges, both families; a captcha is not a ban.
	l.CSCLI("decisions", "add", "--range", "198.51.100.0/24", "--duration", "1h")
	l.CSCLI("decisions", "add", "--range", "2001:db8:1::/48", "--duration", "1h")
	l.CSCLI("decisions", "add", "--ip", "2001:db8::5", "--duration", "1h")
	l.CSCLI("decisions", "add", "--ip", "203.0.113.9", "--type", "captcha", "--duration", "1h")
	within(t, interval+slack, func() bool { return !b.Decide(netip.MustParseAddr("2001:db8::5")).Allow }, "an IPv6 ban is not applied")
	for addr, want := range map[string]bool{
		"198.51.100.1": false, "198.51.100.254": false, "198.51.101.1": true,
		"2001:db8:1::1": false, "2001:db8:1:ffff::9": false, "2001:db8:2::1": true,
		"2001:db8::5": false, "2001:db8::6": true, "203.0.113.9": true,
	} {
		if d := b.Decide(netip.MustParseAddr(addr)); d.Allow != want {
			t.Errorf("%s: %s, want allow %v", addr, d, want)
		}
	}
	if d := b.Decide(netip.MustParseAddr("198.51.100.77")); d.Ban.String() != "198.51.100.0/24" {
		t.Errorf("the range decision does not cover its addresses by its prefix: %+v", d)
	}
	s := b.Status()
	if s.IPs != 1 || s.Ranges != 2 || s.LastError != "" || s.Pulls < 3 || s.LastPull.IsZero() {
		t.Errorf("status: %+v", s)
	}
	// A ban of a few seconds ends by itself (the LAPI says so too).
	l.CSCLI("decisions", "add", "--ip", "192.0.2.50", "--duration", "3s")
	within(t, interval+slack, func() bool { return !b.Decide(netip.MustParseAddr("192.0.2.50")).Allow }, "a short ban is not applied")
	within(t, 3*time.Second+interval+slack, func() bool { return b.Decide(netip.MustParseAddr("192.0.2.50")).Allow }, "a 3s ban is still in force")

	// The registry keeps a bouncer whose block did not change, and starts a
	// changed one from its predecessor's decisions.
	var reg Registry
	t.Cleanup(reg.Close)
	cfg := Config{LapiURL: l.URL, APIKey: l.Key, UpdateInterval: dur(interval)}
	r1, _, err := reg.Get("cs@file", &cfg, zerolog.Nop())
	must(t, err)
	waitReady(t, r1)
	same := cfg
	if r2, _, _ := reg.Get("cs@file", &same, zerolog.Nop()); r2 != r1 {
		t.Fatal("an unchanged block got a new bouncer")
	}
	changed := cfg
	changed.UpdateInterval = dur(2 * interval)
	r3, _, err := reg.Get("cs@file", &changed, zerolog.Nop())
	must(t, err)
	if r3 == r1 || r3.Interval() != 2*interval {
		t.Fatal("a changed block kept its bouncer")
	}
	if d := r3.Decide(netip.MustParseAddr("198.51.100.1")); d.Allow || d.Reason != ReasonBanned {
		t.Errorf("the new bouncer did not start from its predecessor's decisions: %s", d)
	}
	// Another middleware with the same key would miss changes: a warning.
	other, warns, err := reg.Get("other@file", &cfg, zerolog.Nop())
	must(t, err)
	if len(warns) != 1 || !strings.HasPrefix(warns[0].Error(), "crowdSec.apiKey: ") || !strings.Contains(warns[0].Error(), "cs@file") {
		t.Errorf("two middlewares with one key: warnings %v", warns)
	}
	waitReady(t, other)
	reg.Sweep(map[string]bool{})
	if _, ok := reg.Lookup("cs@file"); ok {
		t.Error("a swept bouncer is still registered")
	}
}

func TestLAPIOutage(t *testing.T) {
	l := startLAPI(t, nil)
	const interval = time.Second
	closed := l.started(t, Config{APIKey: l.Key, UpdateInterval: dur(interval)})
	open := l.started(t, Config{APIKey: l.NewKey("open"), UpdateInterval: dur(interval), FailureMode: "open"})
	waitReady(t, closed)
	waitReady(t, open)
	l.CSCLI("decisions", "add", "--ip", "192.0.2.7", "--duration", "1h")
	l.CSCLI("decisions", "add", "--range", "198.51.100.0/24", "--duration", "1h")
	for _, b := range []*Bouncer{closed, open} {
		within(t, interval+slack, func() bool { return !b.Decide(netip.MustParseAddr("198.51.100.3")).Allow }, "the range ban is not applied")
	}

	l.Stop() // by PID
	for _, b := range []*Bouncer{closed, open} {
		itest.Eventually(t, interval+slack+5*time.Second, func() bool { return b.Status().LastError != "" }, "the outage is not in the status")
		s := b.Status()
		if !s.Ready || s.IPs != 1 || s.Ranges != 1 || s.Failures == 0 {
			t.Errorf("%s: status during the outage: %+v", s.FailureMode, s)
		}
		for addr, want := range map[string]bool{"192.0.2.7": false, "198.51.100.3": false, "192.0.2.8": true} {
			if d := b.Decide(netip.MustParseAddr(addr)); d.Allow != want {
				t.Errorf("%s, LAPI stopped: %s: %s, want allow %v (the last decisions must stay)", s.FailureMode, addr, d, want)
			}
		}
	}

	// Started while the LAPI is down: closed refuses everyone, open admits.
	closedAtStart := l.started(t, Config{APIKey: l.NewKey("closed-at-start"), UpdateInterval: dur(interval)})
	openAtStart := l.started(t, Config{APIKey: l.NewKey("open-at-start"), UpdateInterval: dur(interval), FailureMode: "open"})
	itest.Eventually(t, interval+slack+5*time.Second, func() bool {
		return closedAtStart.Status().Failures > 0 && openAtStart.Status().Failures > 0
	}, "the first pulls did not fail")
	if d := closedAtStart.Decide(netip.MustParseAddr("192.0.2.8")); d.Allow || d.Reason != ReasonNotReady {
		t.Errorf("failureMode closed, LAPI down at start: %s", d)
	}
	if d := openAtStart.Decide(netip.MustParseAddr("192.0.2.7")); !d.Allow || d.Reason != ReasonNotReadyOpen {
		t.Errorf("failureMode open, LAPI down at start: %s", d)
	}
	if s := closedAtStart.Status(); !strings.Contains(s.LastError, l.URL) || s.Ready {
		t.Errorf("status of a bouncer that never reached its LAPI: %+v", s)
	}

	// The LAPI back: every bouncer catches up, and a ban lifted meanwhile
	// is lifted.
	l.Start()
	l.CSCLI("decisions", "delete", "--ip", "192.0.2.7")
	for _, b := range []*Bouncer{closed, open, closedAtStart, openAtStart} {
		within(t, 2*interval+slack+5*time.Second, func() bool {
			return b.Decide(netip.MustParseAddr("192.0.2.7")).Allow && !b.Decide(netip.MustParseAddr("198.51.100.3")).Allow
		}, "after the outage the bouncer does not follow the LAPI")
		if s := b.Status(); s.LastError != "" || !s.Ready {
			t.Errorf("status after the outage: %+v", s)
		}
	}
}

func TestLAPIRefusedKey(t *testing.T) {
	l := startLAPI(t, nil)
	b := l.started(t, Config{APIKey: "not-the-key", UpdateInterval: dur(time.Second)})
	itest.Eventually(t, 10*time.Second, func() bool { return b.Status().LastError != "" }, "a refused key is not reported")
	s := b.Status()
	if !strings.Contains(s.LastError, "403") || !strings.Contains(s.LastError, "credentials") || strings.Contains(s.LastError, "not-the-key") {
		t.Errorf("the error should say 403 and credentials, without the key: %q", s.LastError)
	}
	if d := b.Decide(netip.MustParseAddr("192.0.2.1")); d.Allow {
		t.Errorf("failureMode closed with a refused key admits: %s", d)
	}

	// A key file is read at every pull: a key put right there applies
	// without a reload.
	keyFile := filepath.Join(t.TempDir(), "key")
	must(t, os.WriteFile(keyFile, []byte("not-the-key\n"), 0o600))
	rotated := l.started(t, Config{APIKeyFile: keyFile, UpdateInterval: dur(time.Second)})
	itest.Eventually(t, 10*time.Second, func() bool { return rotated.Status().LastError != "" }, "a refused key from a file is not reported")
	must(t, os.WriteFile(keyFile, []byte(l.Key+"\n"), 0o600))
	waitReady(t, rotated)
	if s := rotated.Status(); s.LastError != "" {
		t.Errorf("after the key file was put right: %+v", s)
	}
}

// TLS: the LAPI's certificate verified against the test's CA, and the
// bouncer authenticated by its client certificate (OU bouncer-ou) instead
// of a key; one with another OU is refused.
func TestLAPIClientCertificate(t *testing.T) {
	itest.NeedCrowdSec(t)
	p := newPKI(t)
	l := startLAPI(t, p)
	b := l.started(t, Config{TLS: &ClientTLS{CA: p.ca, Cert: p.bouncerCert, Key: p.bouncerKey}, UpdateInterval: dur(time.Second)})
	waitReady(t, b)
	l.CSCLI("decisions", "add", "--ip", "192.0.2.7", "--duration", "1h")
	within(t, time.Second+slack, func() bool { return !b.Decide(netip.MustParseAddr("192.0.2.7")).Allow }, "a ban is not applied over TLS")

	wrong := l.started(t, Config{TLS: &ClientTLS{CA: p.ca, Cert: p.otherCert, Key: p.otherKey}, UpdateInterval: dur(time.Second)})
	itest.Eventually(t, 10*time.Second, func() bool { return wrong.Status().LastError != "" }, "a certificate of another OU is not refused")
	if wrong.Decide(netip.MustParseAddr("192.0.2.8")).Allow {
		t.Error("a bouncer whose certificate the LAPI refused admits (failureMode closed)")
	}
	// And a LAPI certificate not from the CA given is not trusted.
	untrusting := l.started(t, Config{APIKey: l.Key, TLS: &ClientTLS{CA: p.otherCA}, UpdateInterval: dur(time.Second)})
	itest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(untrusting.Status().LastError, "certificate") }, "an unknown LAPI certificate is not refused: %+v", untrusting.Status())
}

// pki is the test's certificates, as PEM files.
type pki struct {
	ca, otherCA             string
	serverCert, serverKey   string
	bouncerCert, bouncerKey string
	otherCert, otherKey     string
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, der []byte, typ string) string {
		path := filepath.Join(dir, name)
		must(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return path
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(t, err)
		return k
	}
	keyFile := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalECPrivateKey(k)
		must(t, err)
		return write(name, der, "EC PRIVATE KEY")
	}
	serial := int64(1)
	mk := func(tmpl *x509.Certificate, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) *x509.Certificate {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		must(t, err)
		c, err := x509.ParseCertificate(der)
		must(t, err)
		return c
	}
	p := &pki{}
	caKey := newKey()
	ca := mk(&x509.Certificate{Subject: pkix.Name{CommonName: "tollgate test CA"}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, &caKey.PublicKey, caKey)
	p.ca = write("ca.pem", ca.Raw, "CERTIFICATE")
	otherKey := newKey()
	other := mk(&x509.Certificate{Subject: pkix.Name{CommonName: "another CA"}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, &otherKey.PublicKey, otherKey)
	p.otherCA = write("other-ca.pem", other.Raw, "CERTIFICATE")
	leaf := func(name, cn, ou string, server bool) (string, string) {
		k := newKey()
		tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: cn, OrganizationalUnit: []string{ou}}, KeyUsage: x509.KeyUsageDigitalSignature}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		} else {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		c := mk(tmpl, ca, &k.PublicKey, caKey)
		return write(name+".pem", c.Raw, "CERTIFICATE"), keyFile(name+"-key.pem", k)
	}
	p.serverCert, p.serverKey = leaf("server", "lapi", "lapi-ou", true)
	p.bouncerCert, p.bouncerKey = leaf("bouncer", "tollgate-bouncer", "bouncer-ou", false)
	p.otherCert, p.otherKey = leaf("other", "somebody", "other-ou", false)
	return p
}
