package api

import (
	"cmp"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// Traefik's views of the process, its static configuration and its
// certificates, in Traefik's shapes (docs/reference/api.md): /api/version,
// /api/overview, /api/entrypoints and /api/certificates.

// versionInfo is Traefik's /api/version.
type versionInfo struct {
	Version   string    `json:"Version"`
	Codename  string    `json:"Codename"`
	StartDate time.Time `json:"startDate"`
}

func (s Sources) version(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, versionInfo{Version: cmp.Or(s.Version, "dev"), Codename: "tollgate", StartDate: s.Started})
}

// sectionCount is Traefik's overview count of one kind of resource.
type sectionCount struct {
	Total    int `json:"total"`
	Warnings int `json:"warnings"`
	Errors   int `json:"errors"`
}

func count[V any](m map[string]V, status func(V) string) *sectionCount {
	c := &sectionCount{}
	for _, v := range m {
		c.Total++
		switch status(v) {
		case proxy.StatusWarning:
			c.Warnings++
		case proxy.StatusDisabled:
			c.Errors++
		}
	}
	return c
}

// schemeOverview is Traefik's overview of one protocol.
type schemeOverview struct {
	Routers     *sectionCount `json:"routers,omitempty"`
	Services    *sectionCount `json:"services,omitempty"`
	Middlewares *sectionCount `json:"middlewares,omitempty"`
}

// features is Traefik's overview of the optional features: the tracing and
// metrics backends (their static option's name) and whether there is an
// access log.
type features struct {
	Tracing   string `json:"tracing"`
	Metrics   string `json:"metrics"`
	AccessLog bool   `json:"accessLog"`
}

// overviewInfo is Traefik's /api/overview: HTTP and UDP with zeros (tollgate
// routes TCP), the certificates by status, the features, the providers.
type overviewInfo struct {
	HTTP         schemeOverview `json:"http"`
	TCP          schemeOverview `json:"tcp"`
	UDP          schemeOverview `json:"udp"`
	Certificates *sectionCount  `json:"certificates,omitempty"`
	Features     features       `json:"features"`
	Providers    []string       `json:"providers,omitempty"`
}

func (s Sources) overview(w http.ResponseWriter, _ *http.Request) {
	rt := s.Server.Runtime()
	certs := &sectionCount{}
	for _, c := range s.certificates() {
		certs.Total++
		switch c.Status {
		case certWarning:
			certs.Warnings++
		case certExpired:
			certs.Errors++
		}
	}
	writeJSON(w, http.StatusOK, overviewInfo{
		HTTP: schemeOverview{Routers: &sectionCount{}, Services: &sectionCount{}, Middlewares: &sectionCount{}},
		TCP: schemeOverview{
			Routers:     count(rt.Routers, func(v *proxy.RouterInfo) string { return v.Status }),
			Services:    count(rt.Services, func(v *proxy.ServiceInfo) string { return v.Status }),
			Middlewares: count(rt.Middlewares, func(v *proxy.MiddlewareInfo) string { return v.Status }),
		},
		UDP:          schemeOverview{Routers: &sectionCount{}, Services: &sectionCount{}},
		Certificates: certs,
		Features:     s.features(),
		Providers:    s.providerNames(),
	})
}

// firstSet is the name of v's first field that is a set pointer to a
// struct: how Traefik names the backend of a section (metrics: Prometheus,
// Datadog, StatsD, InfluxDB2, OTLP).
func firstSet(v reflect.Value) string {
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct && !f.IsNil() {
			return v.Type().Field(i).Name
		}
	}
	return ""
}

func (s Sources) features() features {
	var f features
	st := s.Static
	if st == nil {
		return f
	}
	if st.Metrics != nil {
		f.Metrics = firstSet(reflect.ValueOf(st.Metrics).Elem())
	}
	// Traefik's tracing section, when the static configuration has one.
	if t := reflect.ValueOf(st).Elem().FieldByName("Tracing"); t.IsValid() && t.Kind() == reflect.Pointer && !t.IsNil() && t.Elem().Kind() == reflect.Struct {
		f.Tracing = firstSet(t.Elem())
	}
	f.AccessLog = st.AccessLog != nil
	return f
}

// providerNames are the overview's providers as Traefik names them: the
// static option's field name (File, Docker, ConsulCatalog, KubernetesCRD).
// Without the static configuration, the providers the watcher hears from,
// spelled the same way.
func (s Sources) providerNames() []string {
	var out []string
	t := reflect.TypeFor[config.Providers]()
	if s.Static != nil && s.Static.Providers != nil {
		v := reflect.ValueOf(s.Static.Providers).Elem()
		for i := range v.NumField() {
			if f := v.Field(i); f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct && !f.IsNil() {
				out = append(out, t.Field(i).Name)
			}
		}
		return out
	}
	for _, st := range s.Watcher.Statuses() {
		name, _, _ := strings.Cut(st.Name, "-") // consul-<namespace>: Consul
		if f, ok := t.FieldByNameFunc(func(n string) bool { return strings.EqualFold(n, name) }); ok {
			name = f.Name
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// entryPointLive is what tollgate adds to an entry point it serves: its
// counters and the connections not yet routed.
type entryPointLive struct {
	Open         int64  `json:"openConnections"`
	Accepted     uint64 `json:"acceptedTotal"`
	NoRoute      uint64 `json:"noRouteTotal"`
	AcceptErrors uint64 `json:"acceptErrorsTotal"`
	// Unrouted is the connections accepted and not yet routed (reading a
	// PROXY header or a ClientHello), with the clients holding most of them.
	Unrouted proxy.UnroutedState `json:"unrouted"`
}

// entryPointInfo is an entry point as /api/entrypoints shows it: Traefik's
// shape (its static configuration and its name) with the bound address,
// and tollgate's live fields.
type entryPointInfo struct {
	*config.EntryPoint
	Name string `json:"name"`
	// Address is the address bound (Traefik shows the one configured: the
	// same but for port 0 and names).
	Address string `json:"address"`
	*entryPointLive
}

// epTopUnrouted is how many client IPs /api/entrypoints shows per entry point
// by connections waiting to be routed.
const epTopUnrouted = 10

func (s Sources) epInfo(ep *proxy.EntryPoint) entryPointInfo {
	info := entryPointInfo{Name: ep.Name(), Address: ep.Addr().String(), entryPointLive: &entryPointLive{
		Open: ep.Open(), Accepted: ep.Accepted(), NoRoute: ep.NoRoute(), AcceptErrors: ep.AcceptErrors(), Unrouted: ep.Unrouted(epTopUnrouted)}}
	if s.Static != nil {
		if c := s.Static.EntryPoints[ep.Name()]; c != nil {
			cp := *c
			if cp.HTTP == nil {
				cp.HTTP = &config.EntryPointHTTP{} // Traefik's "http": {} of every entry point
			}
			info.EntryPoint = &cp
		}
	}
	return info
}

// entryPoints is Traefik's list, sorted by name, with its page and
// per_page.
func (s Sources) entryPoints(w http.ResponseWriter, r *http.Request) {
	names := s.Server.EntryPointNames()
	b, next, err := pageOf(r.URL.Query(), len(names))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out := []entryPointInfo{}
	for _, name := range names[b[0]:b[1]] {
		out = append(out, s.epInfo(s.Server.EntryPoint(name)))
	}
	w.Header().Set(nextPageHeader, strconv.Itoa(next))
	writeJSON(w, http.StatusOK, out)
}

func (s Sources) entryPoint(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ep := s.Server.EntryPoint(name)
	if ep == nil {
		writeError(w, http.StatusNotFound, "entry point "+strconv.Quote(name)+" not found")
		return
	}
	writeJSON(w, http.StatusOK, s.epInfo(ep))
}

// A certificate's status, as Traefik's: expired, warning within 30 days of
// its end, else enabled.
const (
	certEnabled = "enabled"
	certWarning = "warning"
	certExpired = "expired"

	certWarnBefore = 30 * 24 * time.Hour
)

// certificateInfo is a certificate as Traefik's /api/certificates shows
// it, plus where tollgate uses it.
type certificateInfo struct {
	Name                 string    `json:"name"` // the SHA-256 fingerprint: the detail's key
	SANs                 []string  `json:"sans"`
	NotAfter             time.Time `json:"notAfter"`
	NotBefore            time.Time `json:"notBefore"`
	SerialNumber         string    `json:"serialNumber"`
	CommonName           string    `json:"commonName"`
	IssuerOrg            string    `json:"issuerOrg,omitempty"`
	IssuerCN             string    `json:"issuerCN,omitempty"`
	IssuerCountry        string    `json:"issuerCountry,omitempty"`
	Organization         string    `json:"organization,omitempty"`
	Country              string    `json:"country,omitempty"`
	Version              string    `json:"version"`
	KeyType              string    `json:"keyType"`
	KeySize              int       `json:"keySize,omitempty"`
	SignatureAlgorithm   string    `json:"signatureAlgorithm"`
	CertFingerprint      string    `json:"certFingerprint"`
	PublicKeyFingerprint string    `json:"publicKeyFingerprint"`
	Status               string    `json:"status"`

	// tollgate's: the terminating routers it serves, the resolver that
	// holds it, whether it is the default store's default certificate.
	UsedBy   []string `json:"usedBy,omitempty"`
	Resolver string   `json:"resolver,omitempty"`
	Default  bool     `json:"default,omitempty"`
}

func (c certificateInfo) issuer() string { return cmp.Or(c.IssuerOrg, c.IssuerCN) }

func first(s []string) string {
	if len(s) > 0 {
		return s[0]
	}
	return ""
}

func describeCert(leaf *x509.Certificate, now time.Time) certificateInfo {
	fp := sha256.Sum256(leaf.Raw)
	c := certificateInfo{
		Name: hex.EncodeToString(fp[:]), NotAfter: leaf.NotAfter, NotBefore: leaf.NotBefore,
		SerialNumber: leaf.SerialNumber.String(), CommonName: leaf.Subject.CommonName,
		IssuerOrg: first(leaf.Issuer.Organization), IssuerCN: leaf.Issuer.CommonName, IssuerCountry: first(leaf.Issuer.Country),
		Organization: first(leaf.Subject.Organization), Country: first(leaf.Subject.Country),
		Version: fmt.Sprintf("v%d", leaf.Version), KeyType: "Unknown", SignatureAlgorithm: leaf.SignatureAlgorithm.String(),
		Status: certEnabled,
	}
	c.CertFingerprint = c.Name
	c.SANs = slices.Clone(leaf.DNSNames)
	for _, ip := range leaf.IPAddresses {
		c.SANs = append(c.SANs, ip.String())
	}
	slices.Sort(c.SANs)
	if c.SANs == nil {
		c.SANs = []string{}
	}
	switch k := leaf.PublicKey.(type) {
	case *rsa.PublicKey:
		c.KeyType, c.KeySize = "RSA", k.N.BitLen()
	case *ecdsa.PublicKey:
		c.KeyType, c.KeySize = "ECDSA", k.Curve.Params().BitSize
	case ed25519.PublicKey:
		c.KeyType = "Ed25519"
	}
	if der, err := x509.MarshalPKIXPublicKey(leaf.PublicKey); err == nil {
		pk := sha256.Sum256(der)
		c.PublicKeyFingerprint = hex.EncodeToString(pk[:])
	}
	switch left := leaf.NotAfter.Sub(now); {
	case left < 0:
		c.Status = certExpired
	case left < certWarnBefore:
		c.Status = certWarning
	}
	return c
}

// certificates are the certificates tollgate serves, each once (by
// fingerprint): the default TLS store's, as the last reload loaded them,
// and what the certificate resolvers hold.
func (s Sources) certificates() []certificateInfo {
	var infos []proxy.CertificateInfo
	if rt := s.Server.Runtime(); rt != nil {
		infos = append(infos, rt.Certificates...)
	}
	infos = append(infos, s.Server.ResolverCertificates()...)
	now := time.Now()
	var out []certificateInfo
	at := map[string]int{}
	for _, ci := range infos {
		if ci.Leaf == nil {
			continue
		}
		c := describeCert(ci.Leaf, now)
		i, seen := at[c.Name]
		if !seen {
			i = len(out)
			at[c.Name] = i
			out = append(out, c)
		}
		o := &out[i]
		for _, r := range ci.UsedBy {
			if !slices.Contains(o.UsedBy, r) {
				o.UsedBy = append(o.UsedBy, r)
			}
		}
		o.Resolver = cmp.Or(o.Resolver, ci.Resolver)
		o.Default = o.Default || ci.Default
	}
	for i := range out {
		slices.Sort(out[i].UsedBy)
	}
	return out
}
