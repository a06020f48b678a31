// Package acme obtains and renews the certificates of the routers that name
// a certificatesResolvers.<name>.acme resolver with tlsChallenge (README,
// "ACME"): ACME's TLS-ALPN-01 challenge, answered on the entry points, with
// golang.org/x/crypto/acme/autocert as the client and Traefik's acme.json
// as the storage.
package acme

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"

	"github.com/tollgate-proxy/tollgate/config"
)

// DefaultCAServer is Let's Encrypt's production directory, Traefik's
// default caServer.
const DefaultCAServer = "https://acme-v02.api.letsencrypt.org/directory"

// DefaultStorage is Traefik's default storage file.
const DefaultStorage = "acme.json"

// checkEvery is how often a resolver looks for certificates to renew, on
// top of autocert's own timers (which a restart forgets until the name is
// asked for again).
const checkEvery = 12 * time.Hour

// retryAfter is how soon a failed issuance for a name is tried again
// (each failure counts against the CA's rate limits).
const retryAfter = 10 * time.Minute

// ALPNProto is the protocol a TLS-ALPN-01 validation offers, alone.
const ALPNProto = acme.ALPNProto

// Resolver is one certificatesResolvers.<name>.acme with tlsChallenge.
type Resolver struct {
	name        string
	m           *autocert.Manager
	store       *fileStore
	log         zerolog.Logger
	renewBefore time.Duration
	retryAfter  time.Duration // retryAfter; shorter in tests
	now         func() time.Time
	tlsALPN     bool         // tlsChallenge: TLS-ALPN-01 validations are answered
	httpEP      string       // httpChallenge.entryPoint, "" without
	http        http.Handler // answers HTTP-01 validations, with httpChallenge

	mu      sync.Mutex
	wanted  map[string]bool
	certs   map[string]*tls.Certificate // by name: stored and obtained
	pending map[string]bool             // an issuance is running
	failed  map[string]time.Time        // last failure
	lastErr map[string]string           // its error
	stop    chan struct{}
}

// ErrNoChallenge is Check's error for a resolver with neither tlsChallenge
// nor httpChallenge: it obtains nothing, and its routers are served from
// the TLS store.
var ErrNoChallenge = errors.New("tollgate answers tlsChallenge (TLS-ALPN-01, on an entry point the CA reaches on port 443) and httpChallenge (HTTP-01, on port 80): add one of them")

// Check says what New would refuse in c, and which of its options tollgate
// does not apply (warnings), without reading or writing anything.
// entryPoints are the static configuration's entry points, which
// httpChallenge.entryPoint must name.
func Check(name string, c *config.ACMEResolver, entryPoints []string) (warnings []string, err error) {
	field := "certificatesResolvers." + name + ".acme"
	if c.TLSChallenge == nil && c.HTTPChallenge == nil {
		what := "no challenge"
		if c.DNSChallenge != nil {
			what = "dnsChallenge"
		}
		return nil, fmt.Errorf("%s: %s: %w", field, what, ErrNoChallenge)
	}
	if h := c.HTTPChallenge; h != nil {
		switch {
		case h.EntryPoint == "":
			return nil, fmt.Errorf("%s.httpChallenge.entryPoint is required: the entry point the CA's HTTP-01 validation reaches (port 80)", field)
		case !slices.Contains(entryPoints, h.EntryPoint):
			return nil, fmt.Errorf("%s.httpChallenge.entryPoint %q: no such entry point", field, h.EntryPoint)
		}
		if h.Delay != 0 {
			warnings = append(warnings, field+".httpChallenge.delay is ignored: the CA is told at once")
		}
	}
	if c.DNSChallenge != nil {
		warnings = append(warnings, field+".dnsChallenge is ignored: DNS-01 is not answered")
	}
	if c.PreferredChain != "" {
		warnings = append(warnings, field+".preferredChain is ignored: the CA's default chain is served")
	}
	if c.KeyType != "" && c.KeyType != "EC256" {
		warnings = append(warnings, field+".keyType "+c.KeyType+" is ignored: certificates have ECDSA P-256 keys (RSA 2048 for a client that offers no ECDSA)")
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

func decodeHMAC(s string) ([]byte, error) {
	if b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "=")); err == nil {
		return b, nil
	}
	return base64.StdEncoding.DecodeString(s)
}

// New reads the resolver's storage (its certificates are served at once)
// and prepares its ACME client; nothing is asked of the CA before Want
// names something. Every error names the option.
func New(name string, c *config.ACMEResolver, entryPoints []string, log zerolog.Logger) (*Resolver, error) {
	if _, err := Check(name, c, entryPoints); err != nil {
		return nil, err
	}
	field := "certificatesResolvers." + name + ".acme"
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
	if c.TLSChallenge == nil {
		// autocert tries TLS-ALPN-01 first: offered only HTTP-01, it
		// goes straight to it (onlyHTTP01).
		hc.Transport = onlyHTTP01{hc.Transport}
	}
	key, err := accountKey(store, name, d, c.Email)
	if err != nil {
		return nil, fmt.Errorf("%s.storage %s: account key: %w", field, store.path, err)
	}
	dir := c.CAServer
	if dir == "" {
		dir = DefaultCAServer
	}
	r := &Resolver{
		name: name, store: store, log: log.With().Str("resolver", name).Logger(),
		renewBefore: 30 * 24 * time.Hour, retryAfter: retryAfter, now: time.Now, tlsALPN: c.TLSChallenge != nil,
		wanted: map[string]bool{}, certs: map[string]*tls.Certificate{},
		pending: map[string]bool{}, failed: map[string]time.Time{}, lastErr: map[string]string{}, stop: make(chan struct{}),
	}
	if h := c.CertificatesDuration; h > 0 {
		// Renewed with a third of its life left: 30 days of Let's
		// Encrypt's 90, 8 hours of a day-long certificate.
		r.renewBefore = time.Duration(h) * time.Hour / 3
	}
	r.m = &autocert.Manager{
		Prompt:      autocert.AcceptTOS,
		Cache:       &cache{store: store, resolver: name, put: r.stored},
		HostPolicy:  r.policy,
		RenewBefore: r.renewBefore,
		Email:       c.Email,
		Client:      &acme.Client{Key: key, DirectoryURL: dir, HTTPClient: hc, UserAgent: "tollgate"},
	}
	if e := c.EAB; e != nil {
		k, _ := decodeHMAC(e.HmacEncoded)
		r.m.ExternalAccountBinding = &acme.ExternalAccountBinding{KID: e.Kid, Key: k}
	}
	if h := c.HTTPChallenge; h != nil {
		// Asking autocert for its handler is what turns HTTP-01 on.
		r.httpEP, r.http = h.EntryPoint, r.m.HTTPHandler(http.HandlerFunc(http.NotFound))
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
			if n = strings.ToLower(n); n != strings.ToLower(sc.Domain.Main) && kp.Leaf.VerifyHostname(n) == nil {
				r.index(n, kp)
			}
		}
	}
	go r.watch()
	return r, nil
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

// accountKey is the stored account's key (Traefik's: PKCS #1), or a new
// RSA key, stored.
func accountKey(store *fileStore, resolver string, d *storedData, email string) (*rsa.PrivateKey, error) {
	if a := d.Account; a != nil && len(a.PrivateKey) > 0 {
		return x509.ParsePKCS1PrivateKey(a.PrivateKey)
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	err = store.update(resolver, func(d *storedData) {
		d.Account = &storedAccount{Email: email, PrivateKey: x509.MarshalPKCS1PrivateKey(k), KeyType: "P256"}
	})
	return k, err
}

// policy is autocert's host policy: the names routers want. An HTTP-01
// validation's Host header carries a port when the CA's is not 80.
func (r *Resolver) policy(_ context.Context, host string) error {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if r.Wants(host) {
		return nil
	}
	return fmt.Errorf("no router naming certificate resolver %q serves %s", r.name, host)
}

// index records kp as the certificate of name.
func (r *Resolver) index(name string, kp *tls.Certificate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.certs[name]; old != nil && old.Leaf != nil && kp.Leaf != nil && old.Leaf.NotAfter.After(kp.Leaf.NotAfter) {
		return
	}
	r.certs[name] = kp
}

// stored is told by the cache of every certificate autocert stored.
func (r *Resolver) stored(name string, kp *tls.Certificate) {
	r.index(name, kp)
	r.log.Info().Str("domain", name).Time("notAfter", kp.Leaf.NotAfter).Msg("certificate obtained")
}

// Want sets the names the routers naming this resolver serve (after every
// configuration), and starts an issuance for each that has no certificate
// or one due for renewal.
func (r *Resolver) Want(names []string) {
	r.mu.Lock()
	r.wanted = map[string]bool{}
	for _, n := range names {
		r.wanted[strings.ToLower(n)] = true
	}
	r.mu.Unlock()
	r.refresh()
}

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

// obtain has autocert load, issue or renew name's certificate, as a
// client offering ECDSA asks it to.
func (r *Resolver) obtain(name string) {
	hello := &tls.ClientHelloInfo{
		ServerName:        name,
		SignatureSchemes:  []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256},
		SupportedCurves:   []tls.CurveID{tls.CurveP256},
		CipherSuites:      []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
		SupportedVersions: []uint16{tls.VersionTLS13, tls.VersionTLS12},
	}
	kp, err := r.m.GetCertificate(hello)
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
		r.log.Error().Err(err).Str("domain", name).Msg("certificate not obtained: the router serves the TLS store's certificate for it; tried again in " + r.retryAfter.String())
		time.AfterFunc(r.retryAfter, r.refresh)
		return
	}
	r.index(name, kp)
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
// is valid, or nil.
func (r *Resolver) Certificate(name string) *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	kp := r.certs[strings.ToLower(name)]
	if kp == nil || kp.Leaf == nil || !r.now().Before(kp.Leaf.NotAfter) {
		return nil
	}
	return kp
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
	return r.m.GetCertificate(hello)
}

// HTTPChallenge returns httpChallenge.entryPoint and the handler that
// answers the CA's HTTP-01 validations there (every other request: 404),
// or "" and nil without httpChallenge.
func (r *Resolver) HTTPChallenge() (entryPoint string, h http.Handler) { return r.httpEP, r.http }

// Close stops the renewal checks. Issuances running finish on their own
// (autocert bounds each to 5 minutes); their results are still stored.
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
