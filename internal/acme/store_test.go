package acme

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// traefikFile writes an acme.json as Traefik writes it: resolver "le" with
// an account (PKCS #1 key, a registration) and one RSA certificate, and
// another resolver's entry tollgate must leave as it is.
func traefikFile(t *testing.T, name string, notAfter time.Time) (path string, chain []byte) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	chain, key := itest.SelfSignedPEM(t, name, true, notAfter)
	doc := map[string]any{
		"le": map[string]any{
			"Account": map[string]any{
				"Email":        "ops@example.com",
				"Registration": map[string]any{"body": map[string]any{"status": "valid"}, "uri": "https://ca.example/acme/acct/1"},
				"PrivateKey":   x509.MarshalPKCS1PrivateKey(k),
				"KeyType":      "4096",
			},
			"Certificates": []any{map[string]any{
				"domain": map[string]any{"main": name}, "certificate": chain, "key": key, "Store": "default",
			}},
		},
		"other": map[string]any{"Account": nil, "Certificates": nil, "Extra": "kept"},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "acme.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, chain
}

// A Traefik certificate for a router's tls.domains holds main and sans in
// one: each name it covers is served from it (no issuance for them while it
// is valid), a san it does not cover is not, and its renewal is due for
// each name as for main.
func TestStoredSANsAreServed(t *testing.T) {
	chain, key := itest.SelfSignedPEM(t, "example.com", false, time.Now().Add(60*24*time.Hour), "db.example.com")
	doc := map[string]any{"le": map[string]any{"Certificates": []any{map[string]any{
		"domain": map[string]any{"main": "example.com", "sans": []string{"DB.example.com", "cache.example.com"}}, "certificate": chain, "key": key, "Store": "default"}}}}
	b, _ := json.Marshal(doc)
	c := tlsResolver()
	c.Storage = filepath.Join(t.TempDir(), "acme.json")
	if err := os.WriteFile(c.Storage, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := New("le", c, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	main, san := r.Certificate("example.com"), r.Certificate("db.example.com")
	if main == nil || san != main {
		t.Fatalf("main %v, san %v: want one certificate served for both", main != nil, san != nil)
	}
	if r.Certificate("cache.example.com") != nil {
		t.Error("a san the certificate does not cover is served from it")
	}
	// Wanted: only the name without a certificate is being obtained.
	r.Want([]string{"example.com", "db.example.com"})
	if certs, missing := r.Held(); len(missing) != 0 || len(certs) != 2 {
		t.Errorf("held %d, missing %v: want both names held, nothing obtained", len(certs), missing)
	}
}

func tlsResolver() *config.ACMEResolver {
	return &config.ACMEResolver{TLSChallenge: &config.ACMEChallenge{}, CAServer: "https://127.0.0.1:1/dir"}
}

// A Traefik acme.json is read as it is: its account key is the client's,
// its certificate is served at once (before any issuance), and its
// registration at another CA is not reused. What tollgate writes keeps
// Traefik's format and every other resolver's entry.
func TestTraefikStorageIsReadAndKept(t *testing.T) {
	path, chain := traefikFile(t, "db.example.com", time.Now().Add(60*24*time.Hour))
	c := tlsResolver()
	c.Storage = path
	r, err := New("le", c, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	kp := r.Certificate("DB.example.com")
	if kp == nil {
		t.Fatal("the stored certificate is not served")
	}
	block, _ := pem.Decode(chain)
	if string(kp.Certificate[0]) != string(block.Bytes) {
		t.Fatal("a different certificate is served")
	}
	if r.Certificate("other.example.com") != nil {
		t.Fatal("a certificate is served for a name nothing stored")
	}
	if _, ok := r.user.key.(*rsa.PrivateKey); !ok {
		t.Fatalf("account key %T, want the stored RSA key", r.user.key)
	}
	if r.user.reg != nil {
		t.Fatalf("registration %+v kept for another CA: want a new one at the first issuance, as Traefik", r.user.reg)
	}

	// An ECDSA certificate obtained for the same name replaces the RSA one,
	// in Traefik's format.
	newChain, newKey := itest.SelfSignedPEM(t, "db.example.com", false, time.Now().Add(90*24*time.Hour))
	sc := &storedCert{Domain: storedDomain{Main: "db.example.com"}, Certificate: newChain, Key: newKey, Store: "default"}
	if err := r.save(sc); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("storage mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	var doc map[string]struct {
		Account *struct {
			Email        string
			Registration json.RawMessage
			PrivateKey   []byte
		}
		Certificates []struct {
			Domain      struct{ Main string } `json:"domain"`
			Certificate []byte                `json:"certificate"`
			Key         []byte                `json:"key"`
			Store       string
		}
		Extra string
	}
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	le := doc["le"]
	if le.Account == nil || le.Account.Email != "ops@example.com" || !strings.Contains(string(le.Account.Registration), "acct/1") {
		t.Fatalf("account not kept: %s", b)
	}
	if len(le.Certificates) != 1 || le.Certificates[0].Domain.Main != "db.example.com" || le.Certificates[0].Store != "default" ||
		string(le.Certificates[0].Certificate) != string(newChain) || string(le.Certificates[0].Key) != string(newKey) {
		t.Fatalf("certificates not written as Traefik's: %s", b)
	}
	if doc["other"].Extra != "kept" {
		t.Fatalf("another resolver's entry changed: %s", b)
	}

	// A second resolver on the same file starts without an account: it
	// gets one, stored beside the first's.
	c2 := tlsResolver()
	c2.Storage = path
	r2, err := New("second", c2, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	r2.Close()
	b, _ = os.ReadFile(path)
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["second"].Account == nil || len(doc["second"].Account.PrivateKey) == 0 || len(doc["le"].Certificates) != 1 {
		t.Fatalf("second resolver's account not stored beside the first: %s", b)
	}
}

// A storage file that is not an acme.json stops the start naming it, and is
// left as it was.
func TestBadStorageFailsNamingIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acme.json")
	const junk = "{not json"
	if err := os.WriteFile(path, []byte(junk), 0o600); err != nil {
		t.Fatal(err)
	}
	c := tlsResolver()
	c.Storage = path
	_, err := New("le", c, nil, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "certificatesResolvers.le.acme.storage") || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v, want one naming the option and the file", err)
	}
	if b, _ := os.ReadFile(path); string(b) != junk {
		t.Fatalf("the file was changed to %q", b)
	}

	// A storage that cannot be written (its folder is a file here; tests
	// run as root, for whom modes do not stop a write) stops the start too.
	c.Storage = filepath.Join(path, "acme.json")
	if _, err := New("le", c, nil, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "certificatesResolvers.le.acme.storage") {
		t.Fatalf("unwritable storage: %v, want an error naming the option", err)
	}
}

// Check refuses what cannot work, naming the option, and says what is not
// applied.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    config.ACMEResolver
		err  string
		warn string
	}{
		{name: "http only", c: config.ACMEResolver{HTTPChallenge: &config.ACMEChallenge{EntryPoint: "web"}}},
		{name: "http no entry point", c: config.ACMEResolver{HTTPChallenge: &config.ACMEChallenge{}}, err: "certificatesResolvers.r.acme.httpChallenge.entryPoint is required"},
		{name: "http unknown entry point", c: config.ACMEResolver{HTTPChallenge: &config.ACMEChallenge{EntryPoint: "http"}}, err: `certificatesResolvers.r.acme.httpChallenge.entryPoint "http": no such entry point`},
		{name: "http delay", c: config.ACMEResolver{HTTPChallenge: &config.ACMEChallenge{EntryPoint: "web", Delay: config.Duration(time.Second)}}},
		{name: "dns only", c: config.ACMEResolver{DNSChallenge: &config.ACMEChallenge{Provider: "route53"}}},
		{name: "dns no provider", c: config.ACMEResolver{DNSChallenge: &config.ACMEChallenge{}}, err: "certificatesResolvers.r.acme.dnsChallenge.provider is required"},
		{name: "dns unknown provider", c: config.ACMEResolver{DNSChallenge: &config.ACMEChallenge{Provider: "nope"}}, err: `certificatesResolvers.r.acme.dnsChallenge.provider "nope": no such DNS provider`},
		{name: "dns provider not built", c: config.ACMEResolver{DNSChallenge: &config.ACMEChallenge{Provider: "azuredns"}}, err: `provider "azuredns": lego's azuredns provider is not in this build`},
		{name: "dns bad resolver", c: config.ACMEResolver{DNSChallenge: &config.ACMEChallenge{Provider: "exec", Resolvers: []string{"1.1.1.1:53", "a b"}}}, err: `dnsChallenge.resolvers[1] "a b"`},
		{name: "dns negative delay", c: config.ACMEResolver{DNSChallenge: &config.ACMEChallenge{Provider: "exec", Propagation: &config.ACMEPropagation{DelayBeforeChecks: -1}}}, err: "propagation.delayBeforeChecks -1ns is negative"},
		{name: "dns deprecated", c: config.ACMEResolver{DNSChallenge: &config.ACMEChallenge{Provider: "exec", DelayBeforeCheck: config.Duration(time.Second), DisablePropagationCheck: true}},
			warn: "dnsChallenge.delayBeforeCheck is deprecated (as in Traefik): applied as propagation.delayBeforeChecks; certificatesResolvers.r.acme.dnsChallenge.disablePropagationCheck is deprecated (as in Traefik): applied as propagation.disableChecks"},
		{name: "none", c: config.ACMEResolver{}, err: "no challenge"},
		{name: "http caServer", c: config.ACMEResolver{TLSChallenge: &config.ACMEChallenge{}, CAServer: "http://ca/dir"}, err: "caServer"},
		{name: "eab half", c: config.ACMEResolver{TLSChallenge: &config.ACMEChallenge{}, EAB: &config.ACMEEAB{Kid: "k"}}, err: "eab"},
		{name: "eab bad", c: config.ACMEResolver{TLSChallenge: &config.ACMEChallenge{}, EAB: &config.ACMEEAB{Kid: "k", HmacEncoded: "!!"}}, err: "hmacEncoded"},
		{name: "keyType", c: config.ACMEResolver{TLSChallenge: &config.ACMEChallenge{}, KeyType: "RSA4096"}},
		{name: "keyType bad", c: config.ACMEResolver{TLSChallenge: &config.ACMEChallenge{}, KeyType: "RSA1024"}, err: `keyType "RSA1024": use EC256`},
		{name: "tls and http", c: config.ACMEResolver{TLSChallenge: &config.ACMEChallenge{}, HTTPChallenge: &config.ACMEChallenge{EntryPoint: "web"}}},
		{name: "dns beside, no provider", c: config.ACMEResolver{TLSChallenge: &config.ACMEChallenge{}, DNSChallenge: &config.ACMEChallenge{}}, err: "dnsChallenge.provider is required"},
		{name: "good", c: config.ACMEResolver{TLSChallenge: &config.ACMEChallenge{}, EAB: &config.ACMEEAB{Kid: "k", HmacEncoded: "c2VjcmV0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warnings, err := Check("r", &tc.c, []string{"web", "websecure"})
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
			joined := strings.Join(warnings, "; ")
			if tc.warn == "" && joined != "" || !strings.Contains(joined, tc.warn) {
				t.Fatalf("warnings %q, want %q", joined, tc.warn)
			}
		})
	}
}

// FuzzStorage: whatever the storage file holds, reading it and its
// certificates returns an error or entries, never a panic.
func FuzzStorage(f *testing.F) {
	f.Add([]byte(`{"le":{"Account":{"Email":"a@b","PrivateKey":"AAEC"},"Certificates":[{"domain":{"main":"x.example"},"certificate":"AAEC","key":"AAEC","Store":"default"}]}}`))
	f.Add([]byte(`{"le":null}`))
	f.Add([]byte(`{"le":{"Certificates":[null]}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "acme.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s := &fileStore{path: path}
		d, err := s.load("le")
		if err != nil {
			return
		}
		for _, sc := range d.Certificates {
			if sc != nil {
				_, _ = keyPair(sc)
			}
		}
		_ = storedRegistration(d.Account, "https://x.example/dir")
	})
}

// A failed issuance is tried again after retryAfter, without a new
// configuration, and logged each time naming the domain.
func TestFailedIssuanceIsRetried(t *testing.T) {
	var logs itest.Buffer
	c := tlsResolver() // a CA on a port nothing listens on
	c.Storage = filepath.Join(t.TempDir(), "acme.json")
	r, err := New("le", c, nil, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.retryAfter = 100 * time.Millisecond
	r.Want([]string{"db.example.com"})
	itest.Eventually(t, 10*time.Second, func() bool {
		return strings.Count(logs.String(), `"domain":"db.example.com","message":"certificatesResolvers.le.acme: certificate not obtained`) >= 2
	}, "the failed issuance was not tried again: %s", &logs)
	if certs, missing := r.Held(); len(certs) != 0 || !strings.HasPrefix(missing["db.example.com"], "not obtained: ") {
		t.Errorf("held %v, missing %q: want db.example.com missing with the error", certs, missing)
	}
}

// Writers in several processes (an upgrade's two, or two tollgates on one
// volume) each read, change and write the whole file: under the lock beside
// it, none loses another's entry. Here each writer is its own fileStore,
// as each process has its own.
func TestConcurrentWritersKeepEveryEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acme.json")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &fileStore{path: path}
			for j := range 10 {
				name := fmt.Sprintf("r%d", i)
				if err := s.update(name, func(d *storedData) {
					d.Certificates = append(d.Certificates, &storedCert{Domain: storedDomain{Main: fmt.Sprintf("n%d.example", j)}})
				}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	all, err := (&fileStore{path: path}).readAll()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		d, err := (&fileStore{path: path}).load(fmt.Sprintf("r%d", i))
		if err != nil || len(d.Certificates) != 10 {
			t.Errorf("r%d: %d certificates (%v), want 10; %d entries", i, len(d.Certificates), err, len(all))
		}
	}
}

// A dnsChallenge provider is configured by its environment variables, as
// in Traefik: cloudflare takes Traefik's CF_DNS_API_TOKEN (lego's older
// name), and without any of its variables the resolver is refused, naming
// the option.
func TestDNSProviderFromEnvironment(t *testing.T) {
	for _, v := range []string{"CF_API_EMAIL", "CF_API_KEY", "CF_DNS_API_TOKEN", "CF_ZONE_API_TOKEN",
		"CLOUDFLARE_EMAIL", "CLOUDFLARE_API_KEY", "CLOUDFLARE_DNS_API_TOKEN", "CLOUDFLARE_ZONE_API_TOKEN"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	c := &config.ACMEResolver{DNSChallenge: &config.ACMEChallenge{Provider: "cloudflare"}, Storage: filepath.Join(t.TempDir(), "acme.json")}
	if _, err := New("le", c, nil, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), `certificatesResolvers.le.acme.dnsChallenge.provider "cloudflare"`) {
		t.Fatalf("no credentials: %v, want an error naming the option", err)
	}
	t.Setenv("CF_DNS_API_TOKEN", "token")
	r, err := New("le", c, nil, zerolog.Nop())
	if err != nil {
		t.Fatalf("CF_DNS_API_TOKEN set: %v", err)
	}
	defer r.Close()
	if !r.Wildcards() {
		t.Error("a resolver with dnsChallenge does not obtain wildcards")
	}
}

// Two resolvers whose dnsChallenge.resolvers differ are refused, naming
// both (lego has one DNS client per process); the same list, or none
// beside one, is accepted.
func TestCheckResolvers(t *testing.T) {
	dns := func(rs ...string) *config.ACMEResolver {
		return &config.ACMEResolver{DNSChallenge: &config.ACMEChallenge{Provider: "exec", Resolvers: rs}}
	}
	if err := CheckResolvers(map[string]*config.ACMEResolver{"a": dns("1.1.1.1:53"), "b": dns("1.1.1.1:53"), "c": dns(), "d": tlsResolver()}); err != nil {
		t.Errorf("the same list: %v", err)
	}
	err := CheckResolvers(map[string]*config.ACMEResolver{"a": dns("1.1.1.1:53"), "b": dns("8.8.8.8:53")})
	if err == nil || !strings.Contains(err.Error(), "certificatesResolvers.a.acme.dnsChallenge.resolvers") || !strings.Contains(err.Error(), "certificatesResolvers.b.acme.dnsChallenge.resolvers") {
		t.Errorf("different lists: %v, want an error naming both", err)
	}
}
