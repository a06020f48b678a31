// Package acme obtains and renews the certificates of the routers that name
// a certificatesResolvers.<name>.acme resolver: ACME's TLS-ALPN-01
// (tlsChallenge, answered on the entry points), HTTP-01 (httpChallenge,
// answered on its entry point) and DNS-01 (dnsChallenge, a TXT record set
// through one of lego's DNS providers), with go-acme/lego as the client, as
// in Traefik, and Traefik's acme.json as the storage (store.go)
// (docs/reference/acme.md).
package acme

//go:generate go run gen_dnsproviders.go

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	legoacme "github.com/go-acme/lego/v5/acme"
	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge"
	"github.com/go-acme/lego/v5/challenge/dns01"
	"github.com/go-acme/lego/v5/challenge/http01"
	"github.com/go-acme/lego/v5/challenge/tlsalpn01"
	"github.com/go-acme/lego/v5/lego"
	legolog "github.com/go-acme/lego/v5/log"
	"github.com/go-acme/lego/v5/registration"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
)

// DefaultCAServer is Let's Encrypt's production directory, Traefik's
// default caServer.
const DefaultCAServer = lego.DirectoryURLLetsEncrypt

// DefaultStorage is Traefik's default storage file.
const DefaultStorage = "acme.json"

// DefaultKeyType is the key type of the certificates obtained when keyType
// is not set: ECDSA P-256 (Traefik's default is RSA4096, whose handshakes
// cost several times the CPU).
const DefaultKeyType = certcrypto.EC256

// checkEvery is how often a resolver looks for certificates to renew.
const checkEvery = 12 * time.Hour

// retryAfter is how soon a failed issuance for a name is tried again
// (each failure counts against the CA's rate limits).
const retryAfter = 10 * time.Minute

// obtainTimeout bounds one issuance: the order, its validations (a DNS
// record's propagation may take minutes) and the certificate.
const obtainTimeout = 15 * time.Minute

// ALPNProto is the protocol a TLS-ALPN-01 validation offers, alone.
const ALPNProto = tlsalpn01.ACMETLS1Protocol

// Resolver is one certificatesResolvers.<name>.acme.
type Resolver struct {
	name        string
	field       string // certificatesResolvers.<name>.acme, for messages
	store       *fileStore
	log         zerolog.Logger
	renewBefore time.Duration
	retryAfter  time.Duration // retryAfter; shorter in tests
	now         func() time.Time
	tlsALPN     bool         // tlsChallenge: TLS-ALPN-01 validations are answered
	httpEP      string       // httpChallenge.entryPoint, "" without
	http        http.Handler // answers HTTP-01 validations, with httpChallenge

	// What the ACME client is made of (client, at the first issuance).
	cfg     *config.ACMEResolver
	dir     string
	hc      *http.Client
	user    *user
	keyType certcrypto.KeyType
	dns     challenge.Provider // dnsChallenge's provider, nil without
	dnsOpts []dns01.ChallengeOption

	clientMu sync.Mutex
	client   *lego.Client

	mu      sync.Mutex
	wanted  map[string]bool
	certs   map[string]*tls.Certificate // by name ("*.example" for a wildcard): stored and obtained
	pending map[string]bool             // an issuance is running
	failed  map[string]time.Time        // last failure
	lastErr map[string]string           // its error
	alpn    map[string]*tls.Certificate // TLS-ALPN-01 answers, by name, while validating
	tokens  map[string]string           // HTTP-01 key authorizations, by token, while validating
	stop    chan struct{}
}

// ErrNoChallenge is Check's error for a resolver with no challenge: it
// obtains nothing, and its routers are served from the TLS store.
var ErrNoChallenge = errors.New("set tlsChallenge (TLS-ALPN-01, on an entry point the CA reaches on port 443), httpChallenge (HTTP-01, on port 80) or dnsChallenge (DNS-01, through a DNS provider)")

// Check says what New would refuse in c, and which of its options are
// deprecated or not applied (warnings), without reading or writing
// anything. entryPoints are the static configuration's entry points, which
// httpChallenge.entryPoint must name.
func Check(name string, c *config.ACMEResolver, entryPoints []string) (warnings []string, err error) {
	field := "certificatesResolvers." + name + ".acme"
	if c.TLSChallenge == nil && c.HTTPChallenge == nil && c.DNSChallenge == nil {
		return nil, fmt.Errorf("%s: no challenge: %w", field, ErrNoChallenge)
	}
	if h := c.HTTPChallenge; h != nil {
		switch {
		case h.EntryPoint == "":
			return nil, fmt.Errorf("%s.httpChallenge.entryPoint is required: the entry point the CA's HTTP-01 validation reaches (port 80)", field)
		case !slices.Contains(entryPoints, h.EntryPoint):
			return nil, fmt.Errorf("%s.httpChallenge.entryPoint %q: no such entry point", field, h.EntryPoint)
		case h.Delay < 0:
			return nil, fmt.Errorf("%s.httpChallenge.delay %s is negative", field, h.Delay)
		}
	}
	if d := c.DNSChallenge; d != nil {
		w, err := checkDNS(field+".dnsChallenge", d)
		if err != nil {
			return nil, err
		}
		warnings = append(warnings, w...)
	}
	if c.KeyType != "" {
		if _, err := certcrypto.ToKeyType(c.KeyType); err != nil {
			return nil, fmt.Errorf("%s.keyType %q: use EC256, EC384, RSA2048, RSA3072, RSA4096 or RSA8192", field, c.KeyType)
		}
	}
	if c.CertificatesDuration < 0 {
		return nil, fmt.Errorf("%s.certificatesDuration %d is negative", field, c.CertificatesDuration)
	}
	if e := c.EAB; e != nil {
		if e.Kid == "" || e.HmacEncoded == "" {
			return nil, fmt.Errorf("%s.eab: set both kid and hmacEncoded", field)
		}
		if _, err := decodeHMAC(e.HmacEncoded); err != nil {
			return nil, fmt.Errorf("%s.eab.hmacEncoded: not base64: %w", field, err)
		}
	}
	if c.CAServer != "" && !strings.HasPrefix(c.CAServer, "https://") {
		return nil, fmt.Errorf("%s.caServer %q: not an https URL", field, c.CAServer)
	}
	return warnings, nil
}

// checkDNS checks a dnsChallenge (field names it): a provider this build
// has, resolvers that are addresses, delays that are not negative; the
// deprecated options are warned of.
func checkDNS(field string, d *config.ACMEChallenge) (warnings []string, err error) {
	switch {
	case d.Provider == "":
		return nil, fmt.Errorf("%s.provider is required: the DNS provider (lego's name, as in Traefik: cloudflare, route53, ...) that sets the TXT record", field)
	case slices.Contains(dnsUnavailable, d.Provider):
		return nil, fmt.Errorf("%s.provider %q: lego's %s provider is not in this build (its SDK is not available to it)", field, d.Provider, d.Provider)
	case dnsProviders[d.Provider] == nil:
		return nil, fmt.Errorf("%s.provider %q: no such DNS provider (lego's names, as in Traefik: cloudflare, route53, digitalocean, ...)", field, d.Provider)
	}
	for i, r := range d.Resolvers {
		if _, err := resolverAddr(r); err != nil {
			return nil, fmt.Errorf("%s.resolvers[%d] %q: %w", field, i, r, err)
		}
	}
	if d.DelayBeforeCheck < 0 {
		return nil, fmt.Errorf("%s.delayBeforeCheck %s is negative", field, d.DelayBeforeCheck)
	}
	if p := d.Propagation; p != nil && p.DelayBeforeChecks < 0 {
		return nil, fmt.Errorf("%s.propagation.delayBeforeChecks %s is negative", field, p.DelayBeforeChecks)
	}
	if d.DelayBeforeCheck != 0 {
		warnings = append(warnings, field+".delayBeforeCheck is deprecated (as in Traefik): applied as propagation.delayBeforeChecks")
	}
	if d.DisablePropagationCheck {
		warnings = append(warnings, field+".disablePropagationCheck is deprecated (as in Traefik): applied as propagation.disableChecks")
	}
	if d.EntryPoint != "" || d.Delay != 0 {
		warnings = append(warnings, field+": entryPoint and delay are httpChallenge's options, ignored here")
	}
	return warnings, nil
}

// resolverAddr is a resolvers entry as host:port (port 53 when it has
// none), or why it is not one.
func resolverAddr(s string) (string, error) {
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s, nil
	}
	host := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if host == "" || strings.ContainsAny(host, "/ ") {
		return "", errors.New("not a host[:port]")
	}
	return net.JoinHostPort(host, "53"), nil
}

// CheckResolvers refuses dnsChallenge resolvers that name different
// resolvers lists: lego checks a record's propagation through one DNS
// client for the whole process, so a list applies to every resolver with
// dnsChallenge (one without a list uses the one given).
func CheckResolvers(all map[string]*config.ACMEResolver) error {
	var first string
	var firstList []string
	for _, name := range sortedNames(all) {
		c := all[name]
		if c == nil || c.DNSChallenge == nil || len(c.DNSChallenge.Resolvers) == 0 {
			continue
		}
		if firstList == nil {
			first, firstList = name, c.DNSChallenge.Resolvers
			continue
		}
		if !slices.Equal(firstList, c.DNSChallenge.Resolvers) {
			return fmt.Errorf("certificatesResolvers.%s.acme.dnsChallenge.resolvers %q and certificatesResolvers.%s.acme.dnsChallenge.resolvers %q differ: the DNS-01 propagation checks use one list for every resolver; give them the same", first, firstList, name, c.DNSChallenge.Resolvers)
		}
	}
	return nil
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func decodeHMAC(s string) ([]byte, error) {
	if b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "=")); err == nil {
		return b, nil
	}
	return base64.StdEncoding.DecodeString(s)
}

// New reads the resolver's storage (its certificates are served at once),
// stores an account key when it has none, and makes its DNS provider (from
// its environment variables); nothing is asked of the CA before Want names
// something. Every error names the option.
func New(name string, c *config.ACMEResolver, entryPoints []string, log zerolog.Logger) (*Resolver, error) {
	if _, err := Check(name, c, entryPoints); err != nil {
		return nil, err
	}
	field := "certificatesResolvers." + name + ".acme"
	setLegoLog(log)
	path := c.Storage
	if path == "" {
		path = DefaultStorage
	}
	store, err := openStore(path)
	if err != nil {
		return nil, fmt.Errorf("%s.storage %q: %w", field, path, err)
	}
	d, err := store.load(name)
	if err != nil {
		return nil, fmt.Errorf("%s.storage: %w", field, err)
	}
	hc, err := httpClient(field, c)
	if err != nil {
		return nil, err
	}
	key, err := accountKey(store, name, d, c.Email)
	if err != nil {
		return nil, fmt.Errorf("%s.storage %s: account key: %w", field, store.path, err)
	}
	dir := c.CAServer
	if dir == "" {
		dir = DefaultCAServer
	}
	keyType := DefaultKeyType
	if c.KeyType != "" {
		keyType, _ = certcrypto.ToKeyType(c.KeyType) // Check accepted it
	}
	r := &Resolver{
		name: name, field: field, store: store, log: log.With().Str("resolver", name).Logger(),
		renewBefore: 30 * 24 * time.Hour, retryAfter: retryAfter, now: time.Now, tlsALPN: c.TLSChallenge != nil,
		cfg: c, dir: dir, hc: hc, keyType: keyType,
		user:   &user{email: c.Email, key: key, reg: storedRegistration(d.Account, dir)},
		wanted: map[string]bool{}, certs: map[string]*tls.Certificate{},
		pending: map[string]bool{}, failed: map[string]time.Time{}, lastErr: map[string]string{},
		alpn: map[string]*tls.Certificate{}, tokens: map[string]string{}, stop: make(chan struct{}),
	}
	if h := c.CertificatesDuration; h > 0 {
		// Renewed with a third of its life left: 30 days of Let's
		// Encrypt's 90, 8 hours of a day-long certificate.
		r.renewBefore = time.Duration(h) * time.Hour / 3
	}
	if h := c.HTTPChallenge; h != nil {
		r.httpEP, r.http = h.EntryPoint, http.HandlerFunc(r.serveHTTP01)
	}
	if dc := c.DNSChallenge; dc != nil {
		if r.dns, r.dnsOpts, err = dnsChallenge(field+".dnsChallenge", dc); err != nil {
			return nil, err
		}
	}
	for _, sc := range d.Certificates {
		if sc == nil {
			continue
		}
		kp, err := keyPair(sc)
		if err != nil {
			r.log.Warn().Err(err).Str("domain", sc.Domain.Main).Msg("a stored certificate does not load: it is obtained again")
			continue
		}
		// Traefik puts a router's tls.domains main and sans in one
		// certificate: each name it covers is served from it until it is
		// due, then obtained alone.
		r.index(strings.ToLower(sc.Domain.Main), kp)
		for _, n := range sc.Domain.SANs {
			if n = strings.ToLower(n); n != strings.ToLower(sc.Domain.Main) && covers(kp.Leaf, n) {
				r.index(n, kp)
			}
		}
	}
	go r.watch()
	return r, nil
}

// covers reports whether leaf is valid for name, a host name or a wildcard
// ("*.example").
func covers(leaf *x509.Certificate, name string) bool {
	if strings.HasPrefix(name, "*.") {
		return slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return strings.EqualFold(n, name) })
	}
	return leaf.VerifyHostname(name) == nil
}

// dnsChallenge makes dnsChallenge's lego provider, from its environment
// variables as in Traefik (CF_DNS_API_TOKEN for cloudflare, ...), and the
// options of its propagation checks; field names it in errors.
func dnsChallenge(field string, d *config.ACMEChallenge) (challenge.Provider, []dns01.ChallengeOption, error) {
	p, err := dnsProviders[d.Provider]()
	if err != nil {
		return nil, nil, fmt.Errorf("%s.provider %q: %w", field, d.Provider, err)
	}
	if len(d.Resolvers) > 0 {
		var addrs []string
		for _, r := range d.Resolvers {
			a, _ := resolverAddr(r) // Check accepted it
			addrs = append(addrs, a)
		}
		// One client for the process (lego's): CheckResolvers keeps the
		// lists of every resolver the same.
		opts := dns01.NewOptions()
		opts.RecursiveNameservers = addrs
		dns01.SetDefaultClient(dns01.NewClient(opts))
	}
	prop := config.ACMEPropagation{}
	if d.Propagation != nil {
		prop = *d.Propagation
	}
	if prop.DelayBeforeChecks == 0 {
		prop.DelayBeforeChecks = d.DelayBeforeCheck
	}
	prop.DisableChecks = prop.DisableChecks || d.DisablePropagationCheck
	var opts []dns01.ChallengeOption
	if !prop.RequireAllRNS {
		// lego v5 asks every recursive resolver by default; Traefik's
		// requireAllRNS (off by default) is what asks for that.
		opts = append(opts, dns01.DisableRecursiveNSsPropagationRequirement())
	}
	if prop.DisableANSChecks {
		opts = append(opts, dns01.DisableAuthoritativeNssPropagationRequirement())
	}
	if prop.DelayBeforeChecks > 0 || prop.DisableChecks {
		opts = append(opts, dns01.PropagationWait(time.Duration(prop.DelayBeforeChecks), prop.DisableChecks))
	}
	return p, opts, nil
}

// httpClient is the client of the CA's directory: caCertificates (and the
// system's roots with caSystemCertPool, or without caCertificates),
// caServerName, and the two timeouts.
func httpClient(field string, c *config.ACMEResolver) (*http.Client, error) {
	tlsConf := &tls.Config{ServerName: c.CAServerName, MinVersion: tls.VersionTLS12}
	if len(c.CACertificates) > 0 {
		pool := x509.NewCertPool()
		if c.CASystemCertPool {
			if sys, err := x509.SystemCertPool(); err == nil {
				pool = sys
			}
		}
		for i, f := range c.CACertificates {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("%s.caCertificates[%d]: %w", field, i, err)
			}
			if !pool.AppendCertsFromPEM(b) {
				return nil, fmt.Errorf("%s.caCertificates[%d] %s: no certificate in it", field, i, f)
			}
		}
		tlsConf.RootCAs = pool
	}
	timeout := time.Duration(c.ClientTimeout)
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	header := time.Duration(c.ClientResponseHeaderTimeout)
	if header <= 0 {
		header = 30 * time.Second
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConf,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: header,
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

// accountKey is the stored account's key (Traefik's: PKCS #1 for RSA, SEC 1
// for ECDSA), or a new RSA key, stored.
func accountKey(store *fileStore, resolver string, d *storedData, email string) (crypto.Signer, error) {
	if a := d.Account; a != nil && len(a.PrivateKey) > 0 {
		if k, err := x509.ParsePKCS1PrivateKey(a.PrivateKey); err == nil {
			return k, nil
		}
		return x509.ParseECPrivateKey(a.PrivateKey)
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	err = store.update(resolver, func(d *storedData) {
		d.Account = &storedAccount{Email: email, PrivateKey: x509.MarshalPKCS1PrivateKey(k), KeyType: "2048"}
	})
	return k, err
}

// user is the ACME account, as lego asks for it.
type user struct {
	email string
	key   crypto.Signer
	reg   *legoacme.ExtendedAccount // nil until registered
}

var _ registration.User = (*user)(nil)

func (u *user) GetEmail() string                           { return u.email }
func (u *user) GetRegistration() *legoacme.ExtendedAccount { return u.reg }
func (u *user) GetPrivateKey() crypto.Signer               { return u.key }

// storedRegistration is a stored account's registration when it was made
// at the CA of dir (Traefik registers again when caServer changes), else
// nil. Traefik writes it as lego v4's registration.Resource: {"body":
// the account, "uri": its URL}.
func storedRegistration(a *storedAccount, dir string) *legoacme.ExtendedAccount {
	if a == nil || len(a.Registration) == 0 {
		return nil
	}
	var reg struct {
		Body legoacme.Account `json:"body"`
		URI  string           `json:"uri"`
	}
	if json.Unmarshal(a.Registration, &reg) != nil || reg.URI == "" {
		return nil
	}
	u, err1 := url.Parse(reg.URI)
	d, err2 := url.Parse(dir)
	if err1 != nil || err2 != nil || u.Hostname() != d.Hostname() {
		return nil
	}
	return &legoacme.ExtendedAccount{Account: reg.Body, Location: reg.URI}
}

// acmeClient returns the resolver's ACME client, made (and the account
// registered, then stored) at the first call that succeeds.
func (r *Resolver) acmeClient(ctx context.Context) (*lego.Client, error) {
	r.clientMu.Lock()
	defer r.clientMu.Unlock()
	if r.client != nil {
		return r.client, nil
	}
	lc := lego.NewConfig(r.user)
	lc.CADirURL, lc.HTTPClient, lc.UserAgent = r.dir, r.hc, "tollgate"
	client, err := lego.NewClient(lc)
	if err != nil {
		return nil, fmt.Errorf("the CA's directory %s: %w", r.dir, err)
	}
	if r.user.reg == nil {
		var reg *legoacme.ExtendedAccount
		if e := r.cfg.EAB; e != nil {
			reg, err = client.Registration.RegisterWithExternalAccountBinding(ctx, registration.RegisterEABOptions{TermsOfServiceAgreed: true, Kid: e.Kid, HmacEncoded: e.HmacEncoded})
		} else {
			reg, err = client.Registration.Register(ctx, registration.RegisterOptions{TermsOfServiceAgreed: true})
		}
		if err != nil {
			return nil, fmt.Errorf("registering the account: %w", err)
		}
		body, _ := json.Marshal(map[string]any{"body": reg.Account, "uri": reg.Location})
		if err := r.store.update(r.name, func(d *storedData) {
			if d.Account == nil {
				d.Account = &storedAccount{}
			}
			d.Account.Email, d.Account.Registration = r.user.email, body
		}); err != nil {
			return nil, fmt.Errorf("storing the account in %s: %w", r.store.path, err)
		}
		r.user.reg = reg
	}
	if r.tlsALPN {
		_ = client.Challenge.SetTLSALPN01Provider(tlsALPNSolver{r})
	}
	if h := r.cfg.HTTPChallenge; h != nil {
		_ = client.Challenge.SetHTTP01Provider(http01Solver{r}, http01.SetDelay(time.Duration(h.Delay)))
	}
	if r.dns != nil {
		_ = client.Challenge.SetDNS01Provider(r.dns, r.dnsOpts...)
	}
	r.client = client
	return client, nil
}

// tlsALPNSolver answers TLS-ALPN-01 validations on the entry points
// (Challenge) while lego validates.
type tlsALPNSolver struct{ r *Resolver }

func (s tlsALPNSolver) Present(_ context.Context, domain, _, keyAuth string) error {
	kp, err := tlsalpn01.ChallengeCert(domain, keyAuth)
	if err != nil {
		return err
	}
	s.r.mu.Lock()
	s.r.alpn[strings.ToLower(domain)] = kp
	s.r.mu.Unlock()
	return nil
}

func (s tlsALPNSolver) CleanUp(_ context.Context, domain, _, _ string) error {
	s.r.mu.Lock()
	delete(s.r.alpn, strings.ToLower(domain))
	s.r.mu.Unlock()
	return nil
}

// http01Solver answers HTTP-01 validations on httpChallenge.entryPoint
// (serveHTTP01) while lego validates.
type http01Solver struct{ r *Resolver }

func (s http01Solver) Present(_ context.Context, _, token, keyAuth string) error {
	s.r.mu.Lock()
	s.r.tokens[token] = keyAuth
	s.r.mu.Unlock()
	return nil
}

func (s http01Solver) CleanUp(_ context.Context, _, token, _ string) error {
	s.r.mu.Lock()
	delete(s.r.tokens, token)
	s.r.mu.Unlock()
	return nil
}

// serveHTTP01 answers an HTTP-01 validation of a token being validated, for
// a host a router wants; every other request gets 404.
func (r *Resolver) serveHTTP01(w http.ResponseWriter, req *http.Request) {
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	token, ok := strings.CutPrefix(req.URL.Path, http01.PathPrefix)
	r.mu.Lock()
	keyAuth, known := r.tokens[token]
	r.mu.Unlock()
	if !ok || !known || !r.Wants(host) || req.Method != http.MethodGet && req.Method != http.MethodHead {
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(keyAuth))
}

// legoLogOnce routes lego's log (log/slog, one for the process) into
// tollgate's, once: its steps at debug level, its warnings and errors as
// they are.
var legoLogOnce sync.Once

func setLegoLog(log zerolog.Logger) {
	legoLogOnce.Do(func() {
		legolog.SetDefault(slog.New(quieter{zerolog.NewSlogHandler(log.With().Str("component", "lego").Logger())}))
	})
}

// quieter logs lego's info lines (every step of every issuance) at debug
// level.
type quieter struct{ slog.Handler }

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo {
		l = slog.LevelDebug
	}
	return q.Handler.Enabled(ctx, l)
}

func (q quieter) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level == slog.LevelInfo {
		rec.Level = slog.LevelDebug
	}
	return q.Handler.Handle(ctx, rec)
}

func (q quieter) WithAttrs(a []slog.Attr) slog.Handler { return quieter{q.Handler.WithAttrs(a)} }
func (q quieter) WithGroup(n string) slog.Handler      { return quieter{q.Handler.WithGroup(n)} }

// index records kp as the certificate of name.
func (r *Resolver) index(name string, kp *tls.Certificate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.certs[name]; old != nil && old.Leaf != nil && kp.Leaf != nil && old.Leaf.NotAfter.After(kp.Leaf.NotAfter) {
		return
	}
	r.certs[name] = kp
}

// Want sets the names the routers naming this resolver serve (after every
// configuration), and starts an issuance for each that has no certificate
// or one due for renewal. A wildcard ("*.example") needs dnsChallenge.
func (r *Resolver) Want(names []string) {
	r.mu.Lock()
	r.wanted = map[string]bool{}
	for _, n := range names {
		r.wanted[strings.ToLower(n)] = true
	}
	r.mu.Unlock()
	r.refresh()
}

// Wildcards reports whether the resolver obtains wildcard certificates: it
// has dnsChallenge, the one challenge a CA validates them with.
func (r *Resolver) Wildcards() bool { return r.dns != nil }

// refresh starts the issuances due.
func (r *Resolver) refresh() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	names := make([]string, 0, len(r.wanted))
	for n := range r.wanted {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if r.pending[n] {
			continue
		}
		if kp := r.certs[n]; kp != nil && kp.Leaf != nil && now.Add(r.renewBefore).Before(kp.Leaf.NotAfter) {
			continue
		}
		if t, ok := r.failed[n]; ok && now.Sub(t) < r.retryAfter {
			continue
		}
		select {
		case <-r.stop:
			return
		default:
		}
		r.pending[n] = true
		go r.obtain(n)
	}
}

// obtain has the CA issue name's certificate, stores it in Traefik's format
// and serves it.
func (r *Resolver) obtain(name string) {
	kp, err := r.issue(name)
	r.mu.Lock()
	delete(r.pending, name)
	if err != nil {
		r.failed[name], r.lastErr[name] = r.now(), err.Error()
	} else {
		delete(r.failed, name)
		delete(r.lastErr, name)
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Error().Err(err).Str("domain", name).Msg(r.field + ": certificate not obtained: the router serves the TLS store's certificate for it; tried again in " + r.retryAfter.String())
		time.AfterFunc(r.retryAfter, r.refresh)
		return
	}
	r.index(name, kp)
	r.log.Info().Str("domain", name).Time("notAfter", kp.Leaf.NotAfter).Msg("certificate obtained")
}

// issue runs one issuance of name's certificate and stores it.
func (r *Resolver) issue(name string) (*tls.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), obtainTimeout)
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	client, err := r.acmeClient(ctx)
	if err != nil {
		return nil, err
	}
	res, err := client.Certificate.Obtain(ctx, certificate.ObtainRequest{
		Domains: []string{name}, Bundle: true, KeyType: r.keyType, PreferredChain: r.cfg.PreferredChain,
	})
	if err != nil {
		return nil, err
	}
	sc := &storedCert{Domain: storedDomain{Main: name}, Certificate: res.Certificate, Key: res.PrivateKey, Store: "default"}
	kp, err := keyPair(sc)
	if err != nil {
		return nil, fmt.Errorf("the certificate issued does not load: %w", err)
	}
	if err := r.save(sc); err != nil {
		// Served all the same: storing is tried again at the next renewal.
		r.log.Error().Err(err).Str("domain", name).Str("storage", r.store.path).Msg(r.field + ": the certificate obtained is not stored")
	}
	return kp, nil
}

// save stores sc in the resolver's entry, in place of the certificate of
// the same main domain.
func (r *Resolver) save(sc *storedCert) error {
	return r.store.update(r.name, func(d *storedData) {
		for i, old := range d.Certificates {
			if old != nil && old.Domain.Main == sc.Domain.Main {
				d.Certificates[i] = sc
				return
			}
		}
		d.Certificates = append(d.Certificates, sc)
	})
}

// watch looks for renewals due every checkEvery, until Close.
func (r *Resolver) watch() {
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.refresh()
		}
	}
}

// Wants reports whether a router naming this resolver serves name.
func (r *Resolver) Wants(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wanted[strings.ToLower(name)]
}

// Certificate returns the certificate obtained or stored for name while it
// is valid, else the wildcard's that covers it, or nil.
func (r *Resolver) Certificate(name string) *tls.Certificate {
	name = strings.ToLower(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	valid := func(kp *tls.Certificate) bool { return kp != nil && kp.Leaf != nil && r.now().Before(kp.Leaf.NotAfter) }
	if kp := r.certs[name]; valid(kp) {
		return kp
	}
	if i := strings.IndexByte(name, '.'); i > 0 {
		if kp := r.certs["*"+name[i:]]; valid(kp) {
			return kp
		}
	}
	return nil
}

// Held returns the certificates held, by name, and for each wanted name
// without a valid one, why: being obtained, or the last failure.
func (r *Resolver) Held() (map[string]*tls.Certificate, map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	certs, missing := map[string]*tls.Certificate{}, map[string]string{}
	for n, kp := range r.certs {
		if kp.Leaf != nil && now.Before(kp.Leaf.NotAfter) {
			certs[n] = kp
		}
	}
	for n := range r.wanted {
		if _, ok := certs[n]; ok {
			continue
		}
		switch {
		case r.lastErr[n] != "":
			missing[n] = "not obtained: " + r.lastErr[n]
		default:
			missing[n] = "being obtained"
		}
	}
	return certs, missing
}

// Challenge returns the TLS-ALPN-01 certificate of a validation hello (it
// offers ALPNProto alone) for a name being validated, else an error.
func (r *Resolver) Challenge(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if !r.tlsALPN {
		return nil, errors.New("no tlsChallenge")
	}
	if len(hello.SupportedProtos) != 1 || hello.SupportedProtos[0] != ALPNProto {
		return nil, errors.New("not a TLS-ALPN-01 validation")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if kp := r.alpn[strings.ToLower(hello.ServerName)]; kp != nil {
		return kp, nil
	}
	return nil, fmt.Errorf("no TLS-ALPN-01 validation of %q under way", hello.ServerName)
}

// HTTPChallenge returns httpChallenge.entryPoint and the handler that
// answers the CA's HTTP-01 validations there (every other request: 404),
// or "" and nil without httpChallenge.
func (r *Resolver) HTTPChallenge() (entryPoint string, h http.Handler) { return r.httpEP, r.http }

// Close stops the renewal checks and the issuances running (their
// validations end with them).
func (r *Resolver) Close() {
	r.mu.Lock()
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.mu.Unlock()
}

// Name is the resolver's name.
func (r *Resolver) Name() string { return r.name }
