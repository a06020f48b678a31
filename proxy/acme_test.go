package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// fakeResolver is a CertResolver that holds given certificates and a
// challenge certificate (the real one, internal/acme, is tested against a
// real ACME server in the root package).
type fakeResolver struct {
	mu        sync.Mutex
	want      []string
	certs     map[string]*tls.Certificate
	challenge *tls.Certificate
	asked     []string // validation hellos' names
	httpEP    string
	http      http.Handler
}

func (f *fakeResolver) HTTPChallenge() (string, http.Handler) { return f.httpEP, f.http }

func (f *fakeResolver) Want(names []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.want = slices.Clone(names)
}

func (f *fakeResolver) Wanted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.want)
}

func (f *fakeResolver) Wants(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.want, name)
}

func (f *fakeResolver) Certificate(name string) *tls.Certificate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.certs[name]
}

func (f *fakeResolver) Held() (map[string]*tls.Certificate, map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	missing := map[string]string{}
	for _, n := range f.want {
		if f.certs[n] == nil {
			missing[n] = "being obtained"
		}
	}
	return maps.Clone(f.certs), missing
}

func (f *fakeResolver) Challenge(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, hello.ServerName)
	if len(hello.SupportedProtos) != 1 || hello.SupportedProtos[0] != acmeTLS1 || f.challenge == nil {
		return nil, errors.New("not a validation, or none running")
	}
	return f.challenge, nil
}

// A router naming a resolver that obtains certificates: the resolver is
// told the router's names (HostSNI, or tls.domains when given; not a
// wildcard, which gets a warning), the router serves the resolver's
// certificate once it holds one (the store's before), and a CA's
// TLS-ALPN-01 validation for a wanted name is answered with the
// resolver's challenge certificate before the router's ipAllowList, which
// refuses every other client from the same address.
func TestCertResolverObtainsAndIsValidated(t *testing.T) {
	ca := newTestCA(t)
	acmeKP, _, _ := ca.issue(t, leafOpts{}, "db.example", "dbs.example")
	challengeKP, _, _ := ca.issue(t, leafOpts{}, "db.example")
	a := startBackend(t, "A")
	fr := &fakeResolver{certs: map[string]*tls.Certificate{}, challenge: &challengeKP}
	// "aa" wants db.example too, and is asked first: it has no challenge
	// running, so le's answers.
	other := &fakeResolver{certs: map[string]*tls.Certificate{}}
	s := newServerOpts(t, StateOptions{CertResolvers: map[string]CertResolver{"le": fr, "aa": other}}, nil, "tls")
	cfg := &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"db-aa@file": {Rule: "HostSNI(`db.example`)", Service: "a@file", Priority: -1, TLS: &config.RouterTCPTLSConfig{CertResolver: "aa"}},
			"db@file": {Rule: "HostSNI(`db.example`) || HostSNI(`*.wild.example`)", Service: "a@file", Middlewares: []string{"none@file"},
				TLS: &config.RouterTCPTLSConfig{CertResolver: "le"}},
			"dbs@file": {Rule: "HostSNI(`dbs.example`)", Service: "a@file",
				TLS: &config.RouterTCPTLSConfig{CertResolver: "le", Domains: []config.Domain{{Main: "DBS.example", SANs: []string{"alt.example"}}}}},
		},
		Middlewares: map[string]*config.TCPMiddleware{"none@file": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8"}}}},
		Services:    map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
	}
	rt := s.Apply(cfg)
	if got, want := strings.Join(fr.Wanted(), ","), "db.example,dbs.example,alt.example"; got != want {
		t.Errorf("resolver wants %s, want %s", got, want)
	}
	if ri := routerStatus(t, rt, "db@file"); ri.Status != StatusWarning || !strings.Contains(strings.Join(ri.Err, " "), "*.wild.example: a wildcard certificate needs the DNS-01 challenge") {
		t.Errorf("db@file: %s %v, want a warning about the wildcard", ri.Status, ri.Err)
	}
	if ri := routerStatus(t, rt, "dbs@file"); ri.Status != StatusEnabled {
		t.Errorf("dbs@file: %s %v, want enabled", ri.Status, ri.Err)
	}

	// The CA's validation: the challenge certificate, acme-tls/1, then the
	// end; the allow list never saw it.
	c, err := tls.Dial("tcp", s.addr("tls"), &tls.Config{ServerName: "db.example", NextProtos: []string{acmeTLS1}, InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("validation handshake: %v", err)
	}
	st := c.ConnectionState()
	if st.NegotiatedProtocol != acmeTLS1 || !st.PeerCertificates[0].Equal(challengeKP.Leaf) {
		t.Errorf("validation got protocol %q and another certificate", st.NegotiatedProtocol)
	}
	c.Close()
	fr.mu.Lock()
	other.mu.Lock()
	if len(fr.asked) != 1 || fr.asked[0] != "db.example" || len(other.asked) != 1 {
		t.Errorf("resolvers asked for %v and %v, want [db.example] each", fr.asked, other.asked)
	}
	other.mu.Unlock()
	fr.mu.Unlock()
	// A validation for a name no router wants goes through the routers:
	// refused by the allow list, as is a client of db.example.
	if c, err := tls.Dial("tcp", s.addr("tls"), &tls.Config{ServerName: "other.example", NextProtos: []string{acmeTLS1}, InsecureSkipVerify: true}); err == nil {
		c.Close()
		t.Error("a validation for a name nothing wants was answered")
	}
	if c, err := tls.Dial("tcp", s.addr("tls"), &tls.Config{ServerName: "db.example", InsecureSkipVerify: true}); err == nil {
		c.Close()
		t.Error("a client past the allow list: the validation's bypass is not for clients")
	}
	// With no validation running, a hello offering acme-tls/1 for a wanted
	// name is a client like any other: refused by the allow list.
	fr.mu.Lock()
	fr.challenge = nil
	fr.mu.Unlock()
	if c, err := tls.Dial("tcp", s.addr("tls"), &tls.Config{ServerName: "db.example", NextProtos: []string{acmeTLS1}, InsecureSkipVerify: true}); err == nil {
		c.Close()
		t.Error("acme-tls/1 with no validation running passed the allow list")
	}

	// Before the resolver holds a certificate, dbs.example gets the store's
	// (the generated default); then the resolver's.
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	if _, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "dbs.example", RootCAs: roots}); err == nil {
		t.Fatal("verified before the resolver holds a certificate")
	}
	fr.mu.Lock()
	fr.certs["dbs.example"] = &acmeKP
	fr.mu.Unlock()
	c, err = tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "dbs.example", RootCAs: roots})
	if err != nil {
		t.Fatalf("with the resolver's certificate: %v", err)
	}
	defer c.Close()
	if got := greetTLS(t, c); got != "A" {
		t.Errorf("reached %q", got)
	}

	// A configuration without the routers: the resolver wants nothing.
	s.Apply(&config.TCPConfiguration{Services: cfg.Services})
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if len(fr.want) != 0 {
		t.Errorf("resolver still wants %v", fr.want)
	}
}

// The default store's defaultGeneratedCert: its resolver is to obtain
// domain.main (and sans), and a client whose name no certificate serves gets
// that certificate once the resolver holds it (the generated self-signed
// one before). A resolver that does not exist is said in the certificate
// list.
func TestDefaultGeneratedCertFromResolver(t *testing.T) {
	ca := newTestCA(t)
	edgeKP, _, _ := ca.issue(t, leafOpts{}, "edge.example")
	a := startBackend(t, "A")
	fr := &fakeResolver{certs: map[string]*tls.Certificate{}}
	s := newServerOpts(t, StateOptions{CertResolvers: map[string]CertResolver{"le": fr}}, nil, "tls")
	cfg := func(resolver string) *config.TCPConfiguration {
		return &config.TCPConfiguration{
			Routers:  map[string]*config.TCPRouter{"all@file": {Rule: "HostSNI(`*`)", Service: "a@file", TLS: &config.RouterTCPTLSConfig{}}},
			Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
			TLS: &config.TLSConfiguration{Stores: map[string]config.TLSStore{"default": {DefaultGeneratedCert: &config.GeneratedCert{
				Resolver: resolver, Domain: &config.Domain{Main: "Edge.example", SANs: []string{"www.edge.example"}}}}}},
		}
	}
	s.Apply(cfg("le"))
	if got := strings.Join(fr.Wanted(), ","); got != "edge.example,www.edge.example" {
		t.Errorf("resolver wants %s, want edge.example,www.edge.example", got)
	}
	dial := func() *x509.Certificate {
		c, err := tls.Dial("tcp", s.addr("tls"), &tls.Config{ServerName: "any.example", InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0]
	}
	if got := dial(); got.Equal(edgeKP.Leaf) {
		t.Fatal("the resolver's certificate before it holds one")
	}
	fr.mu.Lock()
	fr.certs["edge.example"] = &edgeKP
	fr.mu.Unlock()
	if got := dial(); !got.Equal(edgeKP.Leaf) {
		t.Errorf("default certificate %v, want the resolver's edge.example", got.DNSNames)
	}
	// The API's list: what the resolver holds, and the name it has none for.
	var listed []string
	for _, ci := range s.ResolverCertificates() {
		listed = append(listed, ci.Resolver+" "+strings.Join(ci.SANs, ",")+" "+ci.Error)
	}
	if got := strings.Join(listed, "; "); got != "le edge.example ; le www.edge.example being obtained" {
		t.Errorf("resolver certificates: %q", got)
	}

	rt := s.Apply(cfg("nope"))
	found := false
	for _, ci := range rt.Certificates {
		if ci.Source == "tls.stores.default.defaultGeneratedCert" && strings.Contains(ci.Error, `certificate resolver "nope" does not exist`) {
			found = true
		}
	}
	if !found {
		t.Errorf("an unknown resolver is not said in the certificate list: %+v", rt.Certificates)
	}
}

// On the entry point of an httpChallenge, a plain-text connection no route
// takes is read as HTTP: the resolver that wants the request's host
// answers it (the CA's HTTP-01 validation), any other host gets 404. A
// route that takes every plain connection (HostSNI(*)) comes first, as in
// Traefik, and the HTTP answers count against maxUnroutedPerIP.
func TestHTTP01AnsweredOnUnroutedPlainConnections(t *testing.T) {
	a := startBackend(t, "A")
	var served atomic.Int32
	fr := &fakeResolver{certs: map[string]*tls.Certificate{}, httpEP: "web", http: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path != "/.well-known/acme-challenge/tok" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, "tok.keyauth")
	})}
	s := newServerOpts(t, StateOptions{CertResolvers: map[string]CertResolver{"le": fr}}, func(name string, ep *config.EntryPoint) { ep.Transport.MaxUnroutedPerIP = 2 }, "web", "tls")
	cfg := func(webRule string) *config.TCPConfiguration {
		return &config.TCPConfiguration{
			Routers: map[string]*config.TCPRouter{
				"db@file":  {Rule: "HostSNI(`db.example`)", Service: "a@file", EntryPoints: []string{"tls"}, TLS: &config.RouterTCPTLSConfig{CertResolver: "le"}},
				"web@file": {Rule: webRule, Service: "a@file", EntryPoints: []string{"web"}},
			},
			Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
		}
	}
	s.Apply(cfg("ClientIP(`10.0.0.0/8`)"))
	try := func(host, path string) (int, string, error) {
		c, err := net.DialTimeout("tcp", s.addr("web"), 2*time.Second)
		if err != nil {
			return 0, "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: ca\r\n\r\n", path, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	get := func(host, path string) (int, string) {
		t.Helper()
		// The request before gives its unrouted place back once its
		// goroutine is done, which may be a moment after the client read
		// the answer: with two places, a third request at once is refused.
		itest.Eventually(t, 5*time.Second, func() bool { return s.EntryPoint("web").Unrouted(0).Connections == 0 },
			"the answered requests' unrouted places were not given back")
		code, body, err := try(host, path)
		if err != nil {
			t.Fatalf("GET %s %s: %v", host, path, err)
		}
		return code, body
	}
	if code, body := get("db.example", "/.well-known/acme-challenge/tok"); code != 200 || body != "tok.keyauth" {
		t.Errorf("validation: %d %q, want 200 tok.keyauth", code, body)
	}
	if code, _ := get("db.example:8080", "/.well-known/acme-challenge/tok"); code != 200 {
		t.Errorf("validation with a port in Host: %d, want 200", code)
	}
	if code, _ := get("db.example", "/"); code != 404 {
		t.Errorf("another path: %d, want 404", code)
	}
	if code, _ := get("other.example", "/.well-known/acme-challenge/tok"); code != 404 {
		t.Errorf("a host no router wants: %d, want 404", code)
	}
	if n := served.Load(); n != 2 {
		t.Errorf("the resolver's handler served %d requests, want the 2 validations (not / nor other.example's)", n)
	}

	// Silent connections waiting for their request hold the client's
	// unrouted places: the third is refused. The requests above give their
	// places back once their goroutines are done, which may be a moment
	// after the client read the answer: the silent ones are opened after.
	itest.Eventually(t, 5*time.Second, func() bool { return s.EntryPoint("web").Unrouted(0).Connections == 0 },
		"the answered requests' unrouted places were not given back")
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", s.addr("web"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// Counted once routed: the loops accept in order but route in
	// parallel, so a third connection dialled sooner may be routed first.
	itest.Eventually(t, 5*time.Second, func() bool { return s.EntryPoint("web").Unrouted(0).Connections == 2 },
		"the silent connections do not hold their unrouted places")
	itest.Eventually(t, 5*time.Second, func() bool {
		_, _, err := try("db.example", "/.well-known/acme-challenge/tok")
		return err != nil
	}, "a third unrouted connection from one address was answered with maxUnroutedPerIP=2")
	for _, c := range held {
		c.Close()
	}
	itest.Eventually(t, 5*time.Second, func() bool {
		code, _, err := try("db.example", "/.well-known/acme-challenge/tok")
		return err == nil && code == 200
	}, "the places of closed HTTP connections were not given back")

	// A route taking every plain connection: the entry point is its own.
	s.Apply(cfg("HostSNI(`*`)"))
	c, err := net.Dial("tcp", s.addr("web"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var banner [1]byte
	if _, err := io.ReadFull(c, banner[:]); err != nil || banner[0] != 'A' {
		t.Errorf("HostSNI(*) on the challenge's entry point: read %q, %v; want the backend's A", banner[:], err)
	}
}

// An entry point with http.redirections.entryPoint redirects the plain HTTP
// requests no route takes, as Traefik's entry point redirection: same host
// and path on the target's scheme and port, 301 for a GET and 308 for a
// POST (permanent), 302 and 307 otherwise; an httpChallenge's validation
// for a name its resolver wants comes first.
func TestPlainHTTPRedirection(t *testing.T) {
	a := startBackend(t, "A")
	st := &config.Static{EntryPoints: map[string]*config.EntryPoint{
		"web":    {Address: "127.0.0.1:0", HTTP: &config.EntryPointHTTP{Redirections: &config.HTTPRedirections{EntryPoint: &config.HTTPRedirectEntryPoint{To: "secure", Scheme: "https", Permanent: true}}}},
		"temp":   {Address: "127.0.0.1:0", HTTP: &config.EntryPointHTTP{Redirections: &config.HTTPRedirections{EntryPoint: &config.HTTPRedirectEntryPoint{To: "443", Scheme: "https"}}}},
		"secure": {Address: "127.0.0.1:8443"},
	}}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	eps := map[string]*config.EntryPoint{"web": st.EntryPoints["web"], "temp": st.EntryPoints["temp"]}
	fr := &fakeResolver{certs: map[string]*tls.Certificate{}, httpEP: "web", http: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "keyauth")
	})}
	s, err := NewServer(eps, Options{State: StateOptions{CertResolvers: map[string]CertResolver{"le": fr}}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	s.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"web@file": {Rule: "ClientIP(`10.0.0.0/8`)", Service: "a@file", EntryPoints: []string{"web", "temp"}},
			"db@file":  {Rule: "HostSNI(`db.example`)", Service: "a@file", EntryPoints: []string{"web"}, TLS: &config.RouterTCPTLSConfig{CertResolver: "le"}},
		},
		Services: map[string]*config.TCPService{"a@file": lbConfig(a.addr())},
	})
	ask := func(ep, method, host, target string) (int, string, string) {
		t.Helper()
		c, err := net.DialTimeout("tcp", s.addr(ep), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n", method, target, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s %s%s on %s: %v", method, host, target, ep, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), string(b)
	}
	for _, tc := range []struct {
		ep, method, host, target string
		code                     int
		location, body           string
	}{
		{"web", "GET", "app.example", "/a/b?q=1", 301, "https://app.example:8443/a/b?q=1", "Moved Permanently"},
		{"web", "POST", "app.example:80", "/form", 308, "https://app.example:8443/form", "Permanent Redirect"},
		{"web", "GET", "[::1]", "/", 301, "https://[::1]:8443/", "Moved Permanently"},
		{"temp", "GET", "app.example", "/x", 302, "https://app.example/x", "Found"},
		{"temp", "PUT", "app.example", "/x", 307, "https://app.example/x", "Temporary Redirect"},
		// The validation of a wanted name first; another name's is redirected.
		{"web", "GET", "db.example", "/.well-known/acme-challenge/tok", 200, "", "keyauth"},
		{"web", "GET", "other.example", "/.well-known/acme-challenge/tok", 301, "https://other.example:8443/.well-known/acme-challenge/tok", "Moved Permanently"},
	} {
		code, loc, body := ask(tc.ep, tc.method, tc.host, tc.target)
		if code != tc.code || loc != tc.location || body != tc.body {
			t.Errorf("%s %s%s on %s: %d %q %q, want %d %q %q", tc.method, tc.host, tc.target, tc.ep, code, loc, body, tc.code, tc.location, tc.body)
		}
	}
}
