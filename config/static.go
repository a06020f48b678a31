package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/quote"
)

// Static is tollgate's static configuration: read once at start from
// --configFile, flags and TOLLGATE_* env vars (paerser), never reloaded.
// Names follow Traefik's static configuration.
type Static struct {
	udpEntryPoints      []string // left out by Validate (UDPEntryPoints)
	traefikWarnings     []string // recorded by Validate (TraefikWarnings)
	traefikWarned       []string // the options they name (TraefikWarned)
	internalEntryPoints []string // made internal by ResolveInternal

	EntryPoints map[string]*EntryPoint `description:"Entry points definition." json:"entryPoints,omitempty" toml:"entryPoints,omitempty" yaml:"entryPoints,omitempty" export:"true"`
	Providers   *Providers             `description:"Providers configuration." json:"providers,omitempty" toml:"providers,omitempty" yaml:"providers,omitempty" export:"true"`
	API         *API                   `description:"Enable the admin API (ping, rawdata, live limiter state)." json:"api,omitempty" toml:"api,omitempty" yaml:"api,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Metrics     *Metrics               `description:"Metrics configuration." json:"metrics,omitempty" toml:"metrics,omitempty" yaml:"metrics,omitempty" export:"true"`
	Log         *Log                   `description:"Log configuration." json:"log,omitempty" toml:"log,omitempty" yaml:"log,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	AccessLog   *AccessLog             `description:"Access log: one JSON line per closed connection." json:"accessLog,omitempty" toml:"accessLog,omitempty" yaml:"accessLog,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Stores      map[string]*Store      `description:"Shared stores that inFlightConn middlewares name (store: <name>) to keep one budget across replicas." json:"stores,omitempty" toml:"stores,omitempty" yaml:"stores,omitempty" export:"true"`
	// CertificatesResolvers are Traefik's certificate resolvers, by name. A
	// router's tls.certResolver must name one; one with an acme challenge
	// (tlsChallenge, httpChallenge, dnsChallenge) obtains its routers'
	// certificates (internal/acme, docs/reference/acme.md); the others obtain
	// nothing, with a warning at start.
	CertificatesResolvers map[string]*CertificateResolver `description:"Certificates resolvers: ACME with tlsChallenge (TLS-ALPN-01), httpChallenge (HTTP-01) or dnsChallenge (DNS-01)." json:"certificatesResolvers,omitempty" toml:"certificatesResolvers,omitempty" yaml:"certificatesResolvers,omitempty" export:"true"`
	// TCPServersTransport is Traefik's default TCP servers transport: the
	// transport of every service that names none, and the one named
	// default@internal (docs/reference/servers-transports.md).
	// Global and Ping are Traefik's, accepted so that a Traefik static
	// configuration starts unchanged (docs/reference/static-configuration.md).
	Global              *Global                    `description:"Traefik's global options (accepted; tollgate never checks for new versions nor sends usage data)." json:"global,omitempty" toml:"global,omitempty" yaml:"global,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Core                *Core                      `description:"Traefik's core options (defaultRuleSyntax)." json:"core,omitempty" toml:"core,omitempty" yaml:"core,omitempty" export:"true"`
	Ping                *Ping                      `description:"Serve /ping: on the traefik entry point (:8080 when none is declared), as Traefik; the admin API answers it too." json:"ping,omitempty" toml:"ping,omitempty" yaml:"ping,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	TCPServersTransport *StaticTCPServersTransport `description:"TCP servers default transport: for the services that name none (default@internal)." json:"tcpServersTransport,omitempty" toml:"tcpServersTransport,omitempty" yaml:"tcpServersTransport,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`

	// Traefik's sections that configure HTTP, or that tollgate does not do
	// yet (traefik.go): accepted under Traefik's names, taken as
	// TraefikOptions says.
	ServersTransport *HTTPServersTransport `description:"Accepted for Traefik compatibility: HTTP services' default transport (TCP services use tcpServersTransport)." json:"serversTransport,omitempty" toml:"serversTransport,omitempty" yaml:"serversTransport,omitempty" export:"true"`
	Tracing          *Tracing              `description:"Tracing (OpenTelemetry): accepted, not yet done." json:"tracing,omitempty" toml:"tracing,omitempty" yaml:"tracing,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	HostResolver     *HostResolver         `description:"Accepted for Traefik compatibility: CNAME flattening of HTTP hosts." json:"hostResolver,omitempty" toml:"hostResolver,omitempty" yaml:"hostResolver,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Experimental     *Experimental         `description:"Accepted for Traefik compatibility: Traefik's experimental features (plugins, fastProxy, provider gates)." json:"experimental,omitempty" toml:"experimental,omitempty" yaml:"experimental,omitempty" export:"true"`
	Spiffe           *Spiffe               `description:"Accepted for Traefik compatibility: the SPIFFE Workload API." json:"spiffe,omitempty" toml:"spiffe,omitempty" yaml:"spiffe,omitempty" export:"true"`
	OCSP             *OCSP                 `description:"OCSP stapling: accepted, not yet done." json:"ocsp,omitempty" toml:"ocsp,omitempty" yaml:"ocsp,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	// Limits bound the dynamic configuration (limits.go).
	Limits *Limits `description:"Bounds of the dynamic configuration: over one, a provider's configuration is refused and its last good one serves." json:"limits,omitempty" toml:"limits,omitempty" yaml:"limits,omitempty" export:"true"`
}

// DefaultTransportName is the name of the static configuration's
// tcpServersTransport, as in Traefik.
const DefaultTransportName = "default@internal"

// StaticTCPServersTransport is Traefik's static tcpServersTransport: its
// keys, and what they mean in a tcp.serversTransports entry.
type StaticTCPServersTransport struct {
	DialKeepAlive    Duration               `description:"Interval between keep-alive probes of the connections to the servers (15s when unset; negative: none)." json:"dialKeepAlive,omitempty" toml:"dialKeepAlive,omitempty" yaml:"dialKeepAlive,omitempty" export:"true"`
	DialTimeout      Duration               `description:"How long a connection to a server may take to be established (30s when unset)." json:"dialTimeout,omitempty" toml:"dialTimeout,omitempty" yaml:"dialTimeout,omitempty" export:"true"`
	TerminationDelay *Duration              `description:"How long the other direction may go on after one side closed its write half (100ms when unset; 0: none; negative: without limit)." json:"terminationDelay,omitempty" toml:"terminationDelay,omitempty" yaml:"terminationDelay,omitempty" export:"true"`
	TLS              *StaticTLSClientConfig `description:"TLS to the servers marked tls." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// StaticTLSClientConfig is the tls block of the static tcpServersTransport.
type StaticTLSClientConfig struct {
	InsecureSkipVerify bool            `description:"Do not verify the servers' certificates." json:"insecureSkipVerify,omitempty" toml:"insecureSkipVerify,omitempty" yaml:"insecureSkipVerify,omitempty" export:"true"`
	RootCAs            []FileOrContent `description:"CA certificates (files or PEM) that verify the servers' certificates, instead of the system's." json:"rootCAs,omitempty" toml:"rootCAs,omitempty" yaml:"rootCAs,omitempty"`
}

// Transport is the static transport as a tcp.serversTransports entry.
func (t *StaticTCPServersTransport) Transport() *TCPServersTransport {
	out := &TCPServersTransport{DialKeepAlive: t.DialKeepAlive, DialTimeout: t.DialTimeout, TerminationDelay: t.TerminationDelay}
	if t.TLS != nil {
		out.TLS = &TLSClientConfig{InsecureSkipVerify: t.TLS.InsecureSkipVerify, RootCAs: t.TLS.RootCAs}
	}
	return out
}

// CertificateResolver is one of Traefik's certificate resolvers: its acme
// block is read by internal/acme.
type CertificateResolver struct {
	ACME      *ACMEResolver `description:"ACME: certificates obtained with the TLS-ALPN-01 (tlsChallenge), HTTP-01 (httpChallenge) or DNS-01 (dnsChallenge) challenge." json:"acme,omitempty" toml:"acme,omitempty" yaml:"acme,omitempty" export:"true"`
	Tailscale *struct{}     `description:"Tailscale (not supported: ignored)." json:"tailscale,omitempty" toml:"tailscale,omitempty" yaml:"tailscale,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// ACMEResolver is Traefik's acme block (docs/reference/acme.md says which options
// apply).
type ACMEResolver struct {
	Email                       string   `description:"Email address used for registration." json:"email,omitempty" toml:"email,omitempty" yaml:"email,omitempty"`
	CAServer                    string   `description:"CA server to use." json:"caServer,omitempty" toml:"caServer,omitempty" yaml:"caServer,omitempty"`
	PreferredChain              string   `description:"Preferred chain to use." json:"preferredChain,omitempty" toml:"preferredChain,omitempty" yaml:"preferredChain,omitempty"`
	Storage                     string   `description:"Storage to use." json:"storage,omitempty" toml:"storage,omitempty" yaml:"storage,omitempty"`
	KeyType                     string   `description:"KeyType used for generating certificate private key." json:"keyType,omitempty" toml:"keyType,omitempty" yaml:"keyType,omitempty"`
	EAB                         *ACMEEAB `description:"External Account Binding to use." json:"eab,omitempty" toml:"eab,omitempty" yaml:"eab,omitempty"`
	CertificatesDuration        int      `description:"Certificates' duration in hours." json:"certificatesDuration,omitempty" toml:"certificatesDuration,omitempty" yaml:"certificatesDuration,omitempty"`
	ClientTimeout               Duration `description:"Timeout for a complete HTTP transaction with the ACME server." json:"clientTimeout,omitempty" toml:"clientTimeout,omitempty" yaml:"clientTimeout,omitempty"`
	ClientResponseHeaderTimeout Duration `description:"Timeout for receiving the response headers from the ACME server." json:"clientResponseHeaderTimeout,omitempty" toml:"clientResponseHeaderTimeout,omitempty" yaml:"clientResponseHeaderTimeout,omitempty"`
	CACertificates              []string `description:"CA certificates used for the ACME server." json:"caCertificates,omitempty" toml:"caCertificates,omitempty" yaml:"caCertificates,omitempty"`
	CASystemCertPool            bool     `description:"Use the system certificate pool too." json:"caSystemCertPool,omitempty" toml:"caSystemCertPool,omitempty" yaml:"caSystemCertPool,omitempty"`
	CAServerName                string   `description:"CA server name." json:"caServerName,omitempty" toml:"caServerName,omitempty" yaml:"caServerName,omitempty"`
	// Profile, EmailAddresses, DisableCommonName and CertificateTimeout
	// are Traefik's; tollgate's ACME client does not use them yet.
	Profile            string         `description:"ACME certificate profile (not yet: the CA's default)." json:"profile,omitempty" toml:"profile,omitempty" yaml:"profile,omitempty"`
	EmailAddresses     []string       `description:"Email addresses in the CSR (not yet)." json:"emailAddresses,omitempty" toml:"emailAddresses,omitempty" yaml:"emailAddresses,omitempty"`
	DisableCommonName  bool           `description:"No common name in the CSR (not yet)." json:"disableCommonName,omitempty" toml:"disableCommonName,omitempty" yaml:"disableCommonName,omitempty"`
	CertificateTimeout Duration       `description:"Bound on the order's finalization (not yet)." json:"certificateTimeout,omitempty" toml:"certificateTimeout,omitempty" yaml:"certificateTimeout,omitempty"`
	DNSChallenge       *ACMEChallenge `description:"DNS-01 challenge." json:"dnsChallenge,omitempty" toml:"dnsChallenge,omitempty" yaml:"dnsChallenge,omitempty" label:"allowEmpty" file:"allowEmpty"`
	HTTPChallenge      *ACMEChallenge `description:"HTTP-01 challenge." json:"httpChallenge,omitempty" toml:"httpChallenge,omitempty" yaml:"httpChallenge,omitempty" label:"allowEmpty" file:"allowEmpty"`
	TLSChallenge       *ACMEChallenge `description:"TLS-ALPN-01 challenge." json:"tlsChallenge,omitempty" toml:"tlsChallenge,omitempty" yaml:"tlsChallenge,omitempty" label:"allowEmpty" file:"allowEmpty"`
}

// ACMEEAB is an ACME External Account Binding.
type ACMEEAB struct {
	Kid         string `description:"Key identifier from External CA." json:"kid,omitempty" toml:"kid,omitempty" yaml:"kid,omitempty"`
	HmacEncoded string `description:"Base64 encoded HMAC key from External CA." json:"hmacEncoded,omitempty" toml:"hmacEncoded,omitempty" yaml:"hmacEncoded,omitempty" loggable:"false"`
}

// ACMEChallenge holds the fields of Traefik's three challenges: EntryPoint
// and Delay are httpChallenge's, the others dnsChallenge's (internal/acme
// reads them).
type ACMEChallenge struct {
	EntryPoint  string           `description:"HTTP challenge entry point." json:"entryPoint,omitempty" toml:"entryPoint,omitempty" yaml:"entryPoint,omitempty"`
	Provider    string           `description:"DNS provider (lego's name: cloudflare, route53, ...), configured by its environment variables." json:"provider,omitempty" toml:"provider,omitempty" yaml:"provider,omitempty"`
	Resolvers   []string         `description:"DNS resolvers (host[:port]) that find the zone and check the TXT record's propagation." json:"resolvers,omitempty" toml:"resolvers,omitempty" yaml:"resolvers,omitempty"`
	Propagation *ACMEPropagation `description:"DNS propagation checks." json:"propagation,omitempty" toml:"propagation,omitempty" yaml:"propagation,omitempty" label:"allowEmpty" file:"allowEmpty"`
	// DelayBeforeCheck and DisablePropagationCheck are Traefik's deprecated
	// spellings of propagation.delayBeforeChecks and
	// propagation.disableChecks, applied as those (with a warning).
	DelayBeforeCheck        Duration `description:"Deprecated: propagation.delayBeforeChecks." json:"delayBeforeCheck,omitempty" toml:"delayBeforeCheck,omitempty" yaml:"delayBeforeCheck,omitempty"`
	DisablePropagationCheck bool     `description:"Deprecated: propagation.disableChecks." json:"disablePropagationCheck,omitempty" toml:"disablePropagationCheck,omitempty" yaml:"disablePropagationCheck,omitempty"`
	Delay                   Duration `description:"Delay between the creation of the HTTP challenge and its validation." json:"delay,omitempty" toml:"delay,omitempty" yaml:"delay,omitempty"`
}

// ACMEPropagation is Traefik's dnsChallenge.propagation: how lego checks
// that the TXT record is visible before it asks the CA to validate.
type ACMEPropagation struct {
	DisableChecks     bool     `description:"Do not check the TXT record's propagation (after delayBeforeChecks, the CA is asked at once)." json:"disableChecks,omitempty" toml:"disableChecks,omitempty" yaml:"disableChecks,omitempty"`
	DisableANSChecks  bool     `description:"Do not check the TXT record on the zone's authoritative name servers." json:"disableANSChecks,omitempty" toml:"disableANSChecks,omitempty" yaml:"disableANSChecks,omitempty"`
	RequireAllRNS     bool     `description:"Require the TXT record on every recursive resolver (resolvers), not only the first that answers." json:"requireAllRNS,omitempty" toml:"requireAllRNS,omitempty" yaml:"requireAllRNS,omitempty"`
	DelayBeforeChecks Duration `description:"Wait this long before checking the TXT record's propagation." json:"delayBeforeChecks,omitempty" toml:"delayBeforeChecks,omitempty" yaml:"delayBeforeChecks,omitempty"`
}

// resolveRedirect reads ep's http.redirections.entryPoint: "to" names an
// entry point, whose port the redirection keeps, or is a port (":443" or
// "443"); the port is left out of the URL when it is the scheme's default.
func (s *Static) resolveRedirect(name string, ep *EntryPoint) error {
	if ep.HTTP == nil || ep.HTTP.Redirections == nil || ep.HTTP.Redirections.EntryPoint == nil {
		return nil
	}
	r := ep.HTTP.Redirections.EntryPoint
	field := "entryPoints." + name + ".http.redirections.entryPoint"
	scheme := strings.ToLower(r.Scheme)
	if scheme == "" {
		scheme = "https"
	}
	if scheme != "https" && scheme != "http" {
		return fmt.Errorf("%s.scheme=%q: use https or http", field, r.Scheme)
	}
	var port string
	if to, ok := s.EntryPoints[r.To]; ok && r.To != "" {
		_, port, _ = net.SplitHostPort(to.Address)
	} else {
		port = strings.TrimPrefix(r.To, ":")
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("%s.to=%q: neither an entry point nor a port", field, r.To)
	}
	if scheme == "https" && n == 443 || scheme == "http" && n == 80 {
		n = 0
	}
	ep.redirect = &Redirect{Scheme: scheme, Port: int(n), Permanent: r.Permanent}
	return nil
}

// splitProtocol cuts Traefik's "/tcp" or "/udp" off an entry point's
// address ("[host]:port[/tcp|/udp]"); without one, the address is TCP.
func splitProtocol(addr string) (string, string) {
	if i := strings.LastIndexByte(addr, '/'); i >= 0 {
		if p := strings.ToLower(addr[i+1:]); p == "tcp" || p == "udp" {
			return addr[:i], p
		}
	}
	return addr, "tcp"
}

// UDPEntryPoints are the entry points whose address ends in "/udp":
// Traefik's UDP entry points, which Validate leaves out (tollgate routes
// TCP only).
func (s *Static) UDPEntryPoints() []string {
	out := slices.Clone(s.udpEntryPoints)
	slices.Sort(out)
	return out
}

// Command is what the command line decodes into: Static plus the location of
// the file that holds it.
type Command struct {
	Static     `export:"true"`
	ConfigFile string `description:"Configuration file to use (TOML or YAML)." json:"configFile,omitempty" toml:"configFile,omitempty" yaml:"configFile,omitempty"`
}

// NewCommand returns a Command with every default set. The admin API is off
// unless --api, --api.address or --metrics.prometheus turns it on, so that
// two tollgates on one host do not fight over 127.0.0.1:8080.
func NewCommand() *Command {
	c := &Command{}
	c.Providers = &Providers{}
	c.Providers.SetDefaults()
	c.Log = &Log{}
	c.Log.SetDefaults()
	return c
}

// EntryPoint is a listening address.
type EntryPoint struct {
	Address       string                `description:"Entry point address ([host]:port)." json:"address,omitempty" toml:"address,omitempty" yaml:"address,omitempty"`
	ProxyProtocol *EntryPointProxyProto `description:"PROXY protocol configuration." json:"proxyProtocol,omitempty" toml:"proxyProtocol,omitempty" yaml:"proxyProtocol,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Transport     *EntryPointsTransport `description:"Configures connection timeouts and the shutdown drain." json:"transport,omitempty" toml:"transport,omitempty" yaml:"transport,omitempty" export:"true"`
	// ReusePort and AsDefault are Traefik's: SO_REUSEPORT on the listening
	// socket (several processes on one port), and whether the routers that
	// name no entry point listen here (docs/reference/static-configuration.md).
	// ForwardedHeaders is accepted for Traefik compatibility: it says whose
	// X-Forwarded-* HTTP headers to believe, and TCP carries none.
	ForwardedHeaders *ForwardedHeaders `description:"Accepted for Traefik compatibility (HTTP X-Forwarded-* headers; TCP has none: see proxyProtocol)." json:"forwardedHeaders,omitempty" toml:"forwardedHeaders,omitempty" yaml:"forwardedHeaders,omitempty" export:"true"`
	ReusePort        bool              `description:"Set SO_REUSEPORT on the listening socket, so that other processes may listen on the same address." json:"reusePort,omitempty" toml:"reusePort,omitempty" yaml:"reusePort,omitempty" export:"true"`
	AsDefault        bool              `description:"Routers that name no entry point listen on the entry points marked asDefault (on every entry point when none is)." json:"asDefault,omitempty" toml:"asDefault,omitempty" yaml:"asDefault,omitempty" export:"true"`
	// AllowACMEByPass is Traefik's: tollgate answers an ACME validation
	// only for a name its own resolver is validating, so every other one
	// already reaches the routers.
	AllowACMEByPass bool `description:"Accepted for Traefik compatibility: ACME validations tollgate is not waiting for always reach the routers." json:"allowACMEByPass,omitempty" toml:"allowACMEByPass,omitempty" yaml:"allowACMEByPass,omitempty" export:"true"`
	// Observability is Traefik's: whether the entry point's connections
	// are in the access log and the per-router metrics.
	Observability *EntryPointObservability `description:"Whether the entry point's connections are in the access log and the per-router metrics (both when unset)." json:"observability,omitempty" toml:"observability,omitempty" yaml:"observability,omitempty" export:"true"`
	// HTTP, HTTP2, HTTP3 and UDP are Traefik's settings for its HTTP
	// routers and UDP: accepted, with a warning at start, so that a
	// Traefik static file starts; TCP routers never used them.
	HTTP  *EntryPointHTTP  `description:"Accepted for Traefik compatibility: HTTP routers' settings (redirections, middlewares, tls); ignored, with a warning." json:"http,omitempty" toml:"http,omitempty" yaml:"http,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	HTTP2 *EntryPointHTTP2 `description:"Accepted for Traefik compatibility: HTTP/2 settings; ignored, with a warning." json:"http2,omitempty" toml:"http2,omitempty" yaml:"http2,omitempty" export:"true"`
	HTTP3 *EntryPointHTTP3 `description:"Accepted for Traefik compatibility: HTTP/3 (QUIC) settings; ignored, with a warning." json:"http3,omitempty" toml:"http3,omitempty" yaml:"http3,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	UDP   *EntryPointUDP   `description:"Accepted for Traefik compatibility: UDP settings; tollgate routes TCP only (warning)." json:"udp,omitempty" toml:"udp,omitempty" yaml:"udp,omitempty" export:"true"`

	redirect *Redirect // http.redirections.entryPoint, resolved by Validate
}

// EntryPointHTTP is Traefik's entryPoints.<name>.http, for its HTTP routers.
type EntryPointHTTP struct {
	Redirections              *HTTPRedirections  `description:"Accepted for Traefik compatibility." json:"redirections,omitempty" toml:"redirections,omitempty" yaml:"redirections,omitempty" export:"true"`
	Middlewares               []string           `description:"Accepted for Traefik compatibility." json:"middlewares,omitempty" toml:"middlewares,omitempty" yaml:"middlewares,omitempty" export:"true"`
	TLS                       *HTTPTLS           `description:"Accepted for Traefik compatibility." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	EncodeQuerySemicolons     bool               `description:"Accepted for Traefik compatibility." json:"encodeQuerySemicolons,omitempty" toml:"encodeQuerySemicolons,omitempty" yaml:"encodeQuerySemicolons,omitempty" export:"true"`
	SanitizePath              *bool              `description:"Accepted for Traefik compatibility." json:"sanitizePath,omitempty" toml:"sanitizePath,omitempty" yaml:"sanitizePath,omitempty" export:"true"`
	MaxHeaderBytes            int                `description:"Accepted for Traefik compatibility." json:"maxHeaderBytes,omitempty" toml:"maxHeaderBytes,omitempty" yaml:"maxHeaderBytes,omitempty" export:"true"`
	EncodedCharacters         *EncodedCharacters `description:"Accepted for Traefik compatibility." json:"encodedCharacters,omitempty" toml:"encodedCharacters,omitempty" yaml:"encodedCharacters,omitempty" export:"true"`
	UnderscoreHeadersStrategy string             `description:"Accepted for Traefik compatibility." json:"underscoreHeadersStrategy,omitempty" toml:"underscoreHeadersStrategy,omitempty" yaml:"underscoreHeadersStrategy,omitempty" export:"true"`
}

// HTTPRedirections is Traefik's entryPoints.<name>.http.redirections.
type HTTPRedirections struct {
	EntryPoint *HTTPRedirectEntryPoint `description:"Accepted for Traefik compatibility." json:"entryPoint,omitempty" toml:"entryPoint,omitempty" yaml:"entryPoint,omitempty" export:"true"`
}

// HTTPRedirectEntryPoint is where Traefik redirects the HTTP requests of
// an entry point; tollgate answers the plain-text requests no TCP router
// takes with it (docs/reference/static-configuration.md).
type HTTPRedirectEntryPoint struct {
	To        string `description:"Redirect plain HTTP requests no TCP router takes to this entry point (its port) or port." json:"to,omitempty" toml:"to,omitempty" yaml:"to,omitempty" export:"true"`
	Scheme    string `description:"Scheme of the redirection (https)." json:"scheme,omitempty" toml:"scheme,omitempty" yaml:"scheme,omitempty" export:"true"`
	Permanent bool   `description:"A permanent redirection (301, 308; true), else a temporary one (302, 307)." json:"permanent,omitempty" toml:"permanent,omitempty" yaml:"permanent,omitempty" export:"true"`
	Priority  int    `description:"Accepted for Traefik compatibility: a TCP router always comes first." json:"priority,omitempty" toml:"priority,omitempty" yaml:"priority,omitempty" export:"true"`
}

// SetDefaults sets Traefik's: https, permanent.
func (r *HTTPRedirectEntryPoint) SetDefaults() {
	r.Scheme = "https"
	r.Permanent = true
}

// Redirect is what Validate made of an entry point's
// http.redirections.entryPoint: the scheme and the port (0: the scheme's
// default) that its plain HTTP requests no TCP router takes are sent to.
type Redirect struct {
	Scheme    string
	Port      int
	Permanent bool
}

// Redirect returns the entry point's HTTP redirection, or nil.
func (e *EntryPoint) Redirect() *Redirect { return e.redirect }

// HTTPTLS is Traefik's default TLS of the HTTP routers of an entry point.
type HTTPTLS struct {
	Options      string   `description:"Accepted for Traefik compatibility." json:"options,omitempty" toml:"options,omitempty" yaml:"options,omitempty" export:"true"`
	CertResolver string   `description:"Accepted for Traefik compatibility (HTTP routers only: a TCP router names its own)." json:"certResolver,omitempty" toml:"certResolver,omitempty" yaml:"certResolver,omitempty" export:"true"`
	Domains      []Domain `description:"Accepted for Traefik compatibility." json:"domains,omitempty" toml:"domains,omitempty" yaml:"domains,omitempty" export:"true"`
}

// EntryPointHTTP2 is Traefik's entryPoints.<name>.http2.
type EntryPointHTTP2 struct {
	MaxConcurrentStreams      int32 `description:"Accepted for Traefik compatibility." json:"maxConcurrentStreams,omitempty" toml:"maxConcurrentStreams,omitempty" yaml:"maxConcurrentStreams,omitempty" export:"true"`
	MaxDecoderHeaderTableSize int32 `description:"Accepted for Traefik compatibility." json:"maxDecoderHeaderTableSize,omitempty" toml:"maxDecoderHeaderTableSize,omitempty" yaml:"maxDecoderHeaderTableSize,omitempty" export:"true"`
	MaxEncoderHeaderTableSize int32 `description:"Accepted for Traefik compatibility." json:"maxEncoderHeaderTableSize,omitempty" toml:"maxEncoderHeaderTableSize,omitempty" yaml:"maxEncoderHeaderTableSize,omitempty" export:"true"`
}

// EntryPointHTTP3 is Traefik's entryPoints.<name>.http3.
type EntryPointHTTP3 struct {
	AdvertisedPort int `description:"Accepted for Traefik compatibility." json:"advertisedPort,omitempty" toml:"advertisedPort,omitempty" yaml:"advertisedPort,omitempty" export:"true"`
}

// EntryPointUDP is Traefik's entryPoints.<name>.udp.
type EntryPointUDP struct {
	Timeout Duration `description:"Accepted for Traefik compatibility." json:"timeout,omitempty" toml:"timeout,omitempty" yaml:"timeout,omitempty" export:"true"`
}

// SetDefaults gives an entry point its default transport.
func (e *EntryPoint) SetDefaults() {
	e.Transport = &EntryPointsTransport{}
	e.Transport.SetDefaults()
}

// ForwardedHeaders is Traefik's entry point forwardedHeaders block, accepted
// and unused.
type ForwardedHeaders struct {
	Insecure               bool     `description:"Accepted for Traefik compatibility." json:"insecure,omitempty" toml:"insecure,omitempty" yaml:"insecure,omitempty" export:"true"`
	TrustedIPs             []string `description:"Accepted for Traefik compatibility." json:"trustedIPs,omitempty" toml:"trustedIPs,omitempty" yaml:"trustedIPs,omitempty"`
	Connection             []string `description:"Accepted for Traefik compatibility." json:"connection,omitempty" toml:"connection,omitempty" yaml:"connection,omitempty"`
	NotAppendXForwardedFor bool     `description:"Accepted for Traefik compatibility." json:"notAppendXForwardedFor,omitempty" toml:"notAppendXForwardedFor,omitempty" yaml:"notAppendXForwardedFor,omitempty" export:"true"`
}

// EntryPointProxyProto says whose PROXY protocol headers are believed.
type EntryPointProxyProto struct {
	Insecure   bool     `description:"Trust PROXY headers from every sender." json:"insecure,omitempty" toml:"insecure,omitempty" yaml:"insecure,omitempty" export:"true"`
	TrustedIPs []string `description:"Trust PROXY headers only from these IPs or CIDRs." json:"trustedIPs,omitempty" toml:"trustedIPs,omitempty" yaml:"trustedIPs,omitempty"`
}

// EntryPointsTransport holds an entry point's timeouts and its bound on
// connections waiting to be routed.
type EntryPointsTransport struct {
	LifeCycle          *LifeCycle          `description:"Timeouts influencing the server life cycle." json:"lifeCycle,omitempty" toml:"lifeCycle,omitempty" yaml:"lifeCycle,omitempty" export:"true"`
	RespondingTimeouts *RespondingTimeouts `description:"Timeouts for incoming connections." json:"respondingTimeouts,omitempty" toml:"respondingTimeouts,omitempty" yaml:"respondingTimeouts,omitempty" export:"true"`
	// MaxUnroutedPerIP bounds, per client IP, the connections accepted but not
	// yet routed: on an entry point that reads before routing (a PROXY header,
	// a TLS ClientHello), a connection waits up to readTimeout before any
	// inFlightConn counts it. The bound is enforced at accept, before a byte is
	// read. Senders in proxyProtocol.trustedIPs are not bound as one client:
	// their connections are counted under the client their header names.
	MaxUnroutedPerIP int `description:"Connections one client IP may have accepted but not yet routed (waiting for its PROXY header or TLS ClientHello); 0 for no bound." json:"maxUnroutedPerIP,omitempty" toml:"maxUnroutedPerIP,omitempty" yaml:"maxUnroutedPerIP,omitempty" export:"true"`
	// MaxUnrouted bounds the entry point's connections accepted but not yet
	// routed from every client together, so that many addresses, each
	// within maxUnroutedPerIP, cannot hold every descriptor of the process.
	// At the bound a new connection that must be read before routing is
	// refused at accept. nil: a quarter of the process's descriptor limit
	// (RLIMIT_NOFILE) when the entry point starts; 0 for no bound.
	MaxUnrouted *int `description:"Connections the entry point may have accepted but not yet routed, from every client together; a new one is refused at the bound. Default: a quarter of the descriptor limit (RLIMIT_NOFILE); 0 for no bound." json:"maxUnrouted,omitempty" toml:"maxUnrouted,omitempty" yaml:"maxUnrouted,omitempty" export:"true"`
	// IPv6Subnet is the prefix, in bits, an IPv6 client is counted under by
	// the entry point's own per-client bounds (maxUnroutedPerIP,
	// tlsHandshakeRate, a capped service's queue shares): a client given a
	// /64 holds 2^64 addresses, and counted by address no per-client bound
	// holds it. 0 or 128 count each address on its own. The inFlightConn and
	// rateLimit middlewares have their own ipv6Subnet.
	IPv6Subnet int `description:"Prefix length (bits) an IPv6 client is counted under by the entry point's per-client bounds (maxUnroutedPerIP, tlsHandshakeRate, queue shares); 0 or 128 for each address on its own." json:"ipv6Subnet,omitempty" toml:"ipv6Subnet,omitempty" yaml:"ipv6Subnet,omitempty" export:"true"`
	// TLSHandshakeRate bounds, per client IP, the full TLS handshakes the
	// entry point's terminating routers compute.
	TLSHandshakeRate *TLSHandshakeRate `description:"Full TLS handshakes one client IP may start on the entry point's terminating routers, as a token bucket." json:"tlsHandshakeRate,omitempty" toml:"tlsHandshakeRate,omitempty" yaml:"tlsHandshakeRate,omitempty" export:"true"`
	// KeepAliveMaxRequests and KeepAliveMaxTime are Traefik's HTTP
	// keep-alive bounds.
	KeepAliveMaxRequests int      `description:"Accepted for Traefik compatibility (HTTP keep-alive)." json:"keepAliveMaxRequests,omitempty" toml:"keepAliveMaxRequests,omitempty" yaml:"keepAliveMaxRequests,omitempty" export:"true"`
	KeepAliveMaxTime     Duration `description:"Accepted for Traefik compatibility (HTTP keep-alive)." json:"keepAliveMaxTime,omitempty" toml:"keepAliveMaxTime,omitempty" yaml:"keepAliveMaxTime,omitempty" export:"true"`
}

// DefaultIPv6Subnet is the prefix an IPv6 client is counted under by an
// entry point's per-client bounds: a /64 is what one subscriber, host or
// VM is given.
const DefaultIPv6Subnet = 64

// TLSHandshakeRate is a token bucket per client IP for the full TLS
// handshakes (those that compute a server key exchange and signature) that
// terminating routers start: Burst at once, refilled with Average per
// Period. A client replaying one captured ClientHello makes the proxy
// compute a full server flight per copy, and inFlightConn bounds
// concurrency, not rate. Resumed TLS 1.3 handshakes are not counted.
type TLSHandshakeRate struct {
	Average int64    `description:"Full TLS handshakes one client IP may start per period; 0 for no bound." json:"average,omitempty" toml:"average,omitempty" yaml:"average,omitempty" export:"true"`
	Period  Duration `description:"The period average is counted over." json:"period,omitempty" toml:"period,omitempty" yaml:"period,omitempty" export:"true"`
	Burst   int64    `description:"Full TLS handshakes one client IP may start at once." json:"burst,omitempty" toml:"burst,omitempty" yaml:"burst,omitempty" export:"true"`
}

// Default full TLS handshakes per client IP: 200 a second, 400 at once (a
// connection pool opening hundreds of connections at its start passes; a
// single client replaying a ClientHello gets a fraction of a core).
const (
	DefaultTLSHandshakeAverage = 200
	DefaultTLSHandshakeBurst   = 400
)

// SetDefaults sets 200 full handshakes a second per client IP, 400 at once.
func (r *TLSHandshakeRate) SetDefaults() {
	r.Average, r.Period, r.Burst = DefaultTLSHandshakeAverage, Duration(time.Second), DefaultTLSHandshakeBurst
}

// DefaultMaxUnroutedPerIP is the default bound on a client IP's connections
// waiting to be routed. A client's hello or header arrives within a round
// trip, so even a busy NAT rarely has more than a few waiting at once; an IP
// holding more is stalling on purpose.
const DefaultMaxUnroutedPerIP = 16

// SetDefaults sets the default life cycle, responding timeouts, bounds on
// unrouted connections and handshake rate, and IPv6 prefix.
func (t *EntryPointsTransport) SetDefaults() {
	t.LifeCycle = &LifeCycle{}
	t.LifeCycle.SetDefaults()
	t.RespondingTimeouts = &RespondingTimeouts{}
	t.RespondingTimeouts.SetDefaults()
	t.MaxUnroutedPerIP = DefaultMaxUnroutedPerIP
	t.IPv6Subnet = DefaultIPv6Subnet
	t.TLSHandshakeRate = &TLSHandshakeRate{}
	t.TLSHandshakeRate.SetDefaults()
}

// LifeCycle bounds the shutdown drain.
type LifeCycle struct {
	// RequestAcceptGraceTimeout is Traefik's: how long the entry point keeps
	// accepting after SIGTERM/SIGINT (while load balancers notice that the
	// health check is gone), before it stops and drains. Not at an upgrade:
	// the new process accepts then.
	RequestAcceptGraceTimeout Duration `description:"How long the entry point keeps accepting after SIGTERM or SIGINT, before it stops accepting and drains (not at an upgrade)." json:"requestAcceptGraceTimeout,omitempty" toml:"requestAcceptGraceTimeout,omitempty" yaml:"requestAcceptGraceTimeout,omitempty" export:"true"`
	GraceTimeOut              Duration `description:"How long live connections may drain after the entry point stops accepting." json:"graceTimeOut,omitempty" toml:"graceTimeOut,omitempty" yaml:"graceTimeOut,omitempty" export:"true"`
}

// SetDefaults sets Traefik's 10 s drain.
func (l *LifeCycle) SetDefaults() { l.GraceTimeOut = Duration(10 * time.Second) }

// RespondingTimeouts bounds what tollgate waits for before routing.
type RespondingTimeouts struct {
	ReadTimeout Duration `description:"Deadline, from accept, for reading a PROXY header and a TLS ClientHello before routing." json:"readTimeout,omitempty" toml:"readTimeout,omitempty" yaml:"readTimeout,omitempty" export:"true"`
	// ServerFirstTimeout is how long a client may stay silent, on an entry
	// point that reads before routing, before it is taken for a client of a
	// server-first protocol (SMTP, MySQL, FTP: the server speaks first) and
	// routed as plain TCP without a PROXY header. 0 waits the whole readTimeout.
	ServerFirstTimeout Duration `description:"How long a silent client waits before it is routed as plain TCP (server-first protocols) on an entry point that reads before routing; 0 waits readTimeout." json:"serverFirstTimeout,omitempty" toml:"serverFirstTimeout,omitempty" yaml:"serverFirstTimeout,omitempty" export:"true"`
	// WriteTimeout and IdleTimeout are accepted for Traefik compatibility:
	// they bound HTTP in Traefik, whose TCP routers clear a connection's
	// deadlines once routed, as tollgate has none after routing.
	WriteTimeout Duration `description:"Accepted for Traefik compatibility (an HTTP timeout; a routed TCP connection has no deadline, as in Traefik)." json:"writeTimeout,omitempty" toml:"writeTimeout,omitempty" yaml:"writeTimeout,omitempty" export:"true"`
	IdleTimeout  Duration `description:"Accepted for Traefik compatibility (an HTTP keep-alive timeout)." json:"idleTimeout,omitempty" toml:"idleTimeout,omitempty" yaml:"idleTimeout,omitempty" export:"true"`
}

// DefaultServerFirstTimeout is how long a silent client waits by default. A
// TLS client sends its ClientHello right after the TCP handshake, so a second
// of silence means a client that waits for the server.
const DefaultServerFirstTimeout = time.Second

// SetDefaults sets a 5 s read deadline and a 1 s server-first wait.
func (r *RespondingTimeouts) SetDefaults() {
	r.ReadTimeout = Duration(5 * time.Second)
	r.ServerFirstTimeout = Duration(DefaultServerFirstTimeout)
}

// Providers lists the configuration sources.
type Providers struct {
	ProvidersThrottleDuration Duration               `description:"Wait at least this long after a provider change before applying the next one from the same provider." json:"providersThrottleDuration,omitempty" toml:"providersThrottleDuration,omitempty" yaml:"providersThrottleDuration,omitempty" export:"true"`
	File                      *FileProvider          `description:"Enable the file provider." json:"file,omitempty" toml:"file,omitempty" yaml:"file,omitempty" export:"true"`
	Docker                    *DockerProvider        `description:"Enable the Docker provider." json:"docker,omitempty" toml:"docker,omitempty" yaml:"docker,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	ConsulCatalog             *ConsulCatalogProvider `description:"Enable the Consul Catalog provider." json:"consulCatalog,omitempty" toml:"consulCatalog,omitempty" yaml:"consulCatalog,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	KubernetesCRD             *KubernetesCRDProvider `description:"Enable the Kubernetes CRD provider (MiddlewareTCP, IngressRouteTCP)." json:"kubernetesCRD,omitempty" toml:"kubernetesCRD,omitempty" yaml:"kubernetesCRD,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Swarm                     *SwarmProvider         `description:"Enable the Docker Swarm provider (labels of Swarm services)." json:"swarm,omitempty" toml:"swarm,omitempty" yaml:"swarm,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	// HTTP is Traefik's HTTP provider: a dynamic configuration polled from
	// an endpoint (provider/http).
	HTTP *HTTPProvider `description:"Enable the HTTP provider: poll an endpoint for a dynamic configuration (JSON or YAML)." json:"http,omitempty" toml:"http,omitempty" yaml:"http,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	// KubernetesIngress is Traefik's provider of HTTP routes (Ingress),
	// which Traefik's Helm chart turns on: accepted with a warning, so that
	// its arguments start tollgate (an Ingress carries no TCP route).
	KubernetesIngress *KubernetesHTTPProvider `description:"Accepted for Traefik compatibility: an Ingress routes HTTP only (warning); tollgate reads IngressRouteTCP (kubernetesCRD)." json:"kubernetesIngress,omitempty" toml:"kubernetesIngress,omitempty" yaml:"kubernetesIngress,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	// KubernetesGateway, Nomad, ECS, Rest and Plugin are Traefik's
	// providers that tollgate does not implement and that can carry TCP
	// routes (TCPRoute and TLSRoute, Nomad and ECS tags, a configuration
	// PUT to the API, a plugin's): Validate refuses them, naming them
	// (RefusedProvider), since starting without them would leave their
	// routes silently unserved.
	KubernetesGateway *KubernetesHTTPProvider            `description:"Refused: tollgate does not read the Gateway API (TCPRoute, TLSRoute); use kubernetesCRD (IngressRouteTCP)." json:"kubernetesGateway,omitempty" toml:"kubernetesGateway,omitempty" yaml:"kubernetesGateway,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Nomad             *RefusedProviderOptions            `description:"Refused: tollgate has no Nomad provider." json:"nomad,omitempty" toml:"nomad,omitempty" yaml:"nomad,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	ECS               *RefusedProviderOptions            `description:"Refused: tollgate has no ECS provider." json:"ecs,omitempty" toml:"ecs,omitempty" yaml:"ecs,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Rest              *RefusedProviderOptions            `description:"Refused: tollgate has no REST provider (a configuration PUT to the API)." json:"rest,omitempty" toml:"rest,omitempty" yaml:"rest,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Plugin            map[string]*RefusedProviderOptions `description:"Refused: tollgate runs no plugin provider." json:"plugin,omitempty" toml:"plugin,omitempty" yaml:"plugin,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	// KubernetesIngressNGINX and Knative are Traefik's providers of HTTP
	// routes too; Precedence orders routers of equal priority by provider.
	KubernetesIngressNGINX *KubernetesIngressNGINXProvider `description:"Accepted for Traefik compatibility: Ingress resources for ingress-nginx route HTTP (warning)." json:"kubernetesIngressNGINX,omitempty" toml:"kubernetesIngressNGINX,omitempty" yaml:"kubernetesIngressNGINX,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Knative                *KnativeProvider                `description:"Accepted for Traefik compatibility: Knative services route HTTP (warning)." json:"knative,omitempty" toml:"knative,omitempty" yaml:"knative,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Precedence             []string                        `description:"Providers in order of precedence: of two routers of equal priority, the one of the provider named first comes first (then by name)." json:"precedence,omitempty" toml:"precedence,omitempty" yaml:"precedence,omitempty" export:"true"`

	// KV stores (provider/kv): Traefik's key layout under a root key.
	Consul    *ConsulKVProvider  `description:"Enable the Consul KV provider." json:"consul,omitempty" toml:"consul,omitempty" yaml:"consul,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Etcd      *EtcdProvider      `description:"Enable the etcd provider." json:"etcd,omitempty" toml:"etcd,omitempty" yaml:"etcd,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Redis     *RedisProvider     `description:"Enable the Redis provider." json:"redis,omitempty" toml:"redis,omitempty" yaml:"redis,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	ZooKeeper *ZooKeeperProvider `description:"Enable the ZooKeeper provider." json:"zooKeeper,omitempty" toml:"zooKeeper,omitempty" yaml:"zooKeeper,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// RefusedProviderOptions stands for the options of a provider tollgate
// refuses: it is set by the provider's key alone; any option under it is
// refused by the command line, naming the provider (RefusedProvider).
type RefusedProviderOptions struct{}

// RefusedProvider returns, when key (dotted, as written, any case) is one
// of Traefik's providers tollgate refuses (TraefikOptions) or an option
// under one, the error that refuses it, naming the provider; else nil.
func RefusedProvider(key string) error {
	parts := strings.Split(key, ".")
	if len(parts) < 2 || !strings.EqualFold(parts[0], "providers") {
		return nil
	}
	r := MatchOption(parts[0] + "." + parts[1])
	if r.Class != Refused || !strings.EqualFold(r.Pattern, parts[0]+"."+parts[1]) {
		return nil
	}
	name := strings.TrimPrefix(r.Pattern, "providers.")
	return fmt.Errorf("providers.%s: Traefik's %s provider is refused: %s (not supported)", name, name, r.Why)
}

// HTTPProvider is Traefik's providers.http: the dynamic configuration (JSON,
// or YAML, as the file provider reads it) polled from Endpoint.
type HTTPProvider struct {
	Endpoint     string            `description:"URL (http or https) that serves the dynamic configuration." json:"endpoint,omitempty" toml:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	PollInterval Duration          `description:"How often the endpoint is asked (5s)." json:"pollInterval,omitempty" toml:"pollInterval,omitempty" yaml:"pollInterval,omitempty" export:"true"`
	PollTimeout  Duration          `description:"How long one request to the endpoint may take (5s)." json:"pollTimeout,omitempty" toml:"pollTimeout,omitempty" yaml:"pollTimeout,omitempty" export:"true"`
	Headers      map[string]string `description:"Headers sent with each request (name: value)." json:"headers,omitempty" toml:"headers,omitempty" yaml:"headers,omitempty" loggable:"false"`
	TLS          *KVClientTLS      `description:"TLS to an https endpoint: ca, cert, key, insecureSkipVerify." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
	// MaxResponseBodySize is Traefik's (-1: no bound of its own);
	// provider/http bounds a body to MaxHTTPBody whatever it says.
	MaxResponseBodySize int64 `description:"Largest answer read, in bytes (-1: up to 64 MiB); a larger one is an error." json:"maxResponseBodySize,omitempty" toml:"maxResponseBodySize,omitempty" yaml:"maxResponseBodySize,omitempty" export:"true"`
}

// MaxHTTPBody is the largest answer the HTTP provider reads, whatever
// maxResponseBodySize says: a configuration of thousands of routers is a
// few MiB.
const MaxHTTPBody = 64 << 20

// SetDefaults sets Traefik's: a request every 5 s, each bounded to 5 s.
func (h *HTTPProvider) SetDefaults() {
	h.PollInterval = Duration(5 * time.Second)
	h.PollTimeout = Duration(5 * time.Second)
	h.MaxResponseBodySize = -1
}

// traefikProviderNames are the names providers.precedence may give, as in
// Traefik (its provider names; a name is also what @<provider> qualifies).
var traefikProviderNames = []string{"kubernetesgateway", "kubernetescrd", "kubernetes", "kubernetesingressnginx",
	"swarm", "docker", "file", "redis", "knative", "consul", "consulcatalog", "nomad", "etcd", "ecs", "http", "zookeeper", "rest"}

// DefaultThrottle is the default providersThrottleDuration: compiling is cheap,
// so a short throttle keeps back-to-back changes fast.
const DefaultThrottle = 50 * time.Millisecond

// SetDefaults sets the default throttle.
func (p *Providers) SetDefaults() { p.ProvidersThrottleDuration = Duration(DefaultThrottle) }

// FileProvider reads a dynamic configuration file or a directory of them.
type FileProvider struct {
	Filename  string `description:"Load dynamic configuration from a file." json:"filename,omitempty" toml:"filename,omitempty" yaml:"filename,omitempty" export:"true"`
	Directory string `description:"Load dynamic configuration from one or more .yml, .yaml or .toml files in a directory." json:"directory,omitempty" toml:"directory,omitempty" yaml:"directory,omitempty" export:"true"`
	Watch     bool   `description:"Watch the file or directory for changes." json:"watch,omitempty" toml:"watch,omitempty" yaml:"watch,omitempty" export:"true"`
	// DebugLogGeneratedTemplate logs what each file renders as a template.
	DebugLogGeneratedTemplate bool `description:"Log what each file renders as a Go template (debug level)." json:"debugLogGeneratedTemplate,omitempty" toml:"debugLogGeneratedTemplate,omitempty" yaml:"debugLogGeneratedTemplate,omitempty" export:"true"`
}

// SetDefaults turns watching on, as in Traefik.
func (f *FileProvider) SetDefaults() { f.Watch = true }

// DockerProvider configures the Docker provider.
type DockerProvider struct {
	Endpoint           string   `description:"Docker server endpoint (unix:// or tcp://); DOCKER_HOST when empty." json:"endpoint,omitempty" toml:"endpoint,omitempty" yaml:"endpoint,omitempty" export:"true"`
	ExposedByDefault   bool     `description:"Expose containers by default (else only those with traefik.enable=true)." json:"exposedByDefault,omitempty" toml:"exposedByDefault,omitempty" yaml:"exposedByDefault,omitempty" export:"true"`
	Network            string   `description:"Default Docker network used to reach containers." json:"network,omitempty" toml:"network,omitempty" yaml:"network,omitempty" export:"true"`
	Watch              bool     `description:"Watch Docker events." json:"watch,omitempty" toml:"watch,omitempty" yaml:"watch,omitempty" export:"true"`
	UseBindPortIP      bool     `description:"Use the host binding IP and port instead of the container's." json:"useBindPortIP,omitempty" toml:"useBindPortIP,omitempty" yaml:"useBindPortIP,omitempty" export:"true"`
	AllowEmptyServices bool     `description:"Keep services whose containers are all unhealthy or stopped (with no servers)." json:"allowEmptyServices,omitempty" toml:"allowEmptyServices,omitempty" yaml:"allowEmptyServices,omitempty" export:"true"`
	Constraints        string   `description:"Constraints expression over container labels (Label, LabelRegex, &&, ||, !)." json:"constraints,omitempty" toml:"constraints,omitempty" yaml:"constraints,omitempty" export:"true"`
	RefreshInterval    Duration `description:"Full resync period, a safety net besides events." json:"refreshInterval,omitempty" toml:"refreshInterval,omitempty" yaml:"refreshInterval,omitempty" export:"true"`
	EngineClient
}

// EngineClient is how the Docker and Swarm providers reach the engine
// besides its endpoint: Traefik's tls, username, password and
// httpClientTimeout, and its defaultRule, accepted.
type EngineClient struct {
	TLS               *KVClientTLS `description:"TLS to the engine (a tcp:// endpoint): ca, cert, key, insecureSkipVerify." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
	Username          string       `description:"HTTP basic authentication user name (an engine behind a proxy)." json:"username,omitempty" toml:"username,omitempty" yaml:"username,omitempty" loggable:"false"`
	Password          string       `description:"HTTP basic authentication password." json:"password,omitempty" toml:"password,omitempty" yaml:"password,omitempty" loggable:"false"`
	HTTPClientTimeout Duration     `description:"Timeout of each request to the engine (not of the event stream); 0 for the default of 10s." json:"httpClientTimeout,omitempty" toml:"httpClientTimeout,omitempty" yaml:"httpClientTimeout,omitempty" export:"true"`
	DefaultRule       string       `description:"Accepted for Traefik compatibility: a default rule applies to HTTP routers only (a TCP router needs its rule label)." json:"defaultRule,omitempty" toml:"defaultRule,omitempty" yaml:"defaultRule,omitempty" export:"true"`
}

// SetDefaults mirrors Traefik's Docker provider defaults.
func (d *DockerProvider) SetDefaults() {
	d.Endpoint = ""
	d.ExposedByDefault = true
	d.Watch = true
	d.RefreshInterval = Duration(30 * time.Second)
}

// SwarmProvider configures the Docker Swarm provider: Traefik v3's
// providers.swarm options. It reads a Swarm manager's services (their
// labels, not their containers'), wakes on the engine's events and polls
// every RefreshSeconds as a safety net.
type SwarmProvider struct {
	Endpoint           string   `description:"Docker server endpoint of a Swarm manager (unix:// or tcp://); DOCKER_HOST when empty." json:"endpoint,omitempty" toml:"endpoint,omitempty" yaml:"endpoint,omitempty" export:"true"`
	ExposedByDefault   bool     `description:"Expose services by default (else only those with traefik.enable=true)." json:"exposedByDefault,omitempty" toml:"exposedByDefault,omitempty" yaml:"exposedByDefault,omitempty" export:"true"`
	Network            string   `description:"Default network used to reach the tasks (its full name: <stack>_<network> for a stack's)." json:"network,omitempty" toml:"network,omitempty" yaml:"network,omitempty" export:"true"`
	Constraints        string   `description:"Constraints expression over service labels (Label, LabelRegex, &&, ||, !)." json:"constraints,omitempty" toml:"constraints,omitempty" yaml:"constraints,omitempty" export:"true"`
	Watch              bool     `description:"Watch the engine's service, node and task container events (else poll every refreshSeconds only)." json:"watch,omitempty" toml:"watch,omitempty" yaml:"watch,omitempty" export:"true"`
	RefreshSeconds     Duration `description:"Full resync period, the safety net besides events; 0 for none." json:"refreshSeconds,omitempty" toml:"refreshSeconds,omitempty" yaml:"refreshSeconds,omitempty" export:"true"`
	AllowEmptyServices bool     `description:"Keep services that have no running task (with no servers)." json:"allowEmptyServices,omitempty" toml:"allowEmptyServices,omitempty" yaml:"allowEmptyServices,omitempty" export:"true"`
	UseBindPortIP      bool     `description:"Accepted for Traefik compatibility: Swarm tasks have no port bindings (Traefik uses their addresses too)." json:"useBindPortIP,omitempty" toml:"useBindPortIP,omitempty" yaml:"useBindPortIP,omitempty" export:"true"`
	EngineClient
}

// SetDefaults mirrors Traefik v3's Swarm provider defaults (refreshSeconds
// 15 s), with the endpoint left to DOCKER_HOST or the default socket.
func (s *SwarmProvider) SetDefaults() {
	s.Endpoint = ""
	s.ExposedByDefault = true
	s.Watch = true
	s.RefreshSeconds = Duration(15 * time.Second)
}

// ConsulCatalogProvider configures the Consul Catalog provider.
type ConsulCatalogProvider struct {
	Endpoint         *ConsulEndpoint `description:"Consul endpoint settings." json:"endpoint,omitempty" toml:"endpoint,omitempty" yaml:"endpoint,omitempty" export:"true"`
	Prefix           string          `description:"Prefix for tags." json:"prefix,omitempty" toml:"prefix,omitempty" yaml:"prefix,omitempty" export:"true"`
	ExposedByDefault bool            `description:"Expose services by default (else only those tagged <prefix>.enable=true)." json:"exposedByDefault,omitempty" toml:"exposedByDefault,omitempty" yaml:"exposedByDefault,omitempty" export:"true"`
	Watch            bool            `description:"Watch the catalog with blocking queries." json:"watch,omitempty" toml:"watch,omitempty" yaml:"watch,omitempty" export:"true"`
	RefreshInterval  Duration        `description:"Period of the full read when watch is off (with watch, blocking queries say when to read)." json:"refreshInterval,omitempty" toml:"refreshInterval,omitempty" yaml:"refreshInterval,omitempty" export:"true"`
	StrictChecks     []string        `description:"Health check states that keep an instance (passing, warning, critical, maintenance)." json:"strictChecks,omitempty" toml:"strictChecks,omitempty" yaml:"strictChecks,omitempty" export:"true"`
	Constraints      string          `description:"Constraints expression over tags (Tag, TagRegex, &&, ||, !)." json:"constraints,omitempty" toml:"constraints,omitempty" yaml:"constraints,omitempty" export:"true"`
	// Stale, Cache and RequireConsistent are Traefik's read modes.
	Stale             bool `description:"Let any server answer reads, not only the leader (Consul's stale mode)." json:"stale,omitempty" toml:"stale,omitempty" yaml:"stale,omitempty" export:"true"`
	Cache             bool `description:"Read through the agent's cache." json:"cache,omitempty" toml:"cache,omitempty" yaml:"cache,omitempty" export:"true"`
	RequireConsistent bool `description:"Reads in Consul's consistent mode." json:"requireConsistent,omitempty" toml:"requireConsistent,omitempty" yaml:"requireConsistent,omitempty" export:"true"`
	// DefaultRule and ServiceName are accepted for Traefik compatibility:
	// the default rule is for HTTP routers, a TCP router needs its rule tag;
	// the service name is Traefik's own, for Consul Connect.
	DefaultRule string `description:"Accepted for Traefik compatibility: a default rule applies to HTTP routers only (a TCP router needs its rule tag)." json:"defaultRule,omitempty" toml:"defaultRule,omitempty" yaml:"defaultRule,omitempty" export:"true"`
	ServiceName string `description:"Accepted for Traefik compatibility (Traefik's own name in Consul, for Connect, which tollgate does not do)." json:"serviceName,omitempty" toml:"serviceName,omitempty" yaml:"serviceName,omitempty" export:"true"`
}

// SetDefaults mirrors Traefik's consulCatalog defaults, but watches by default.
func (c *ConsulCatalogProvider) SetDefaults() {
	c.Endpoint = &ConsulEndpoint{}
	c.Endpoint.SetDefaults()
	c.Prefix = "traefik"
	c.ExposedByDefault = true
	c.Watch = true
	c.RefreshInterval = Duration(15 * time.Second)
	c.StrictChecks = []string{"passing", "warning"}
}

// KubernetesCRDProvider configures the Kubernetes CRD provider. With no
// Endpoint it uses the in-cluster configuration when running in a pod, else
// the kubeconfig named by KUBECONFIG (or ~/.kube/config).
// KubernetesHTTPProvider holds the options of Traefik's kubernetesIngress
// and kubernetesGateway providers, accepted and not used.
type KubernetesHTTPProvider struct {
	Endpoint                     string              `description:"Accepted for Traefik compatibility." json:"endpoint,omitempty" toml:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	Token                        string              `description:"Accepted for Traefik compatibility." json:"token,omitempty" toml:"token,omitempty" yaml:"token,omitempty" loggable:"false"`
	CertAuthFilePath             string              `description:"Accepted for Traefik compatibility." json:"certAuthFilePath,omitempty" toml:"certAuthFilePath,omitempty" yaml:"certAuthFilePath,omitempty"`
	Namespaces                   []string            `description:"Accepted for Traefik compatibility." json:"namespaces,omitempty" toml:"namespaces,omitempty" yaml:"namespaces,omitempty" export:"true"`
	LabelSelector                string              `description:"Accepted for Traefik compatibility." json:"labelSelector,omitempty" toml:"labelSelector,omitempty" yaml:"labelSelector,omitempty" export:"true"`
	IngressClass                 string              `description:"Accepted for Traefik compatibility." json:"ingressClass,omitempty" toml:"ingressClass,omitempty" yaml:"ingressClass,omitempty" export:"true"`
	IngressEndpoint              *KubernetesEndpoint `description:"Accepted for Traefik compatibility." json:"ingressEndpoint,omitempty" toml:"ingressEndpoint,omitempty" yaml:"ingressEndpoint,omitempty" export:"true"`
	StatusAddress                *KubernetesEndpoint `description:"Accepted for Traefik compatibility." json:"statusAddress,omitempty" toml:"statusAddress,omitempty" yaml:"statusAddress,omitempty" export:"true"`
	ThrottleDuration             Duration            `description:"Accepted for Traefik compatibility." json:"throttleDuration,omitempty" toml:"throttleDuration,omitempty" yaml:"throttleDuration,omitempty" export:"true"`
	AllowEmptyServices           bool                `description:"Accepted for Traefik compatibility." json:"allowEmptyServices,omitempty" toml:"allowEmptyServices,omitempty" yaml:"allowEmptyServices,omitempty" export:"true"`
	AllowExternalNameServices    bool                `description:"Accepted for Traefik compatibility." json:"allowExternalNameServices,omitempty" toml:"allowExternalNameServices,omitempty" yaml:"allowExternalNameServices,omitempty" export:"true"`
	DisableIngressClassLookup    bool                `description:"Accepted for Traefik compatibility." json:"disableIngressClassLookup,omitempty" toml:"disableIngressClassLookup,omitempty" yaml:"disableIngressClassLookup,omitempty" export:"true"`
	DisableClusterScopeResources bool                `description:"Accepted for Traefik compatibility." json:"disableClusterScopeResources,omitempty" toml:"disableClusterScopeResources,omitempty" yaml:"disableClusterScopeResources,omitempty" export:"true"`
	NativeLBByDefault            bool                `description:"Accepted for Traefik compatibility." json:"nativeLBByDefault,omitempty" toml:"nativeLBByDefault,omitempty" yaml:"nativeLBByDefault,omitempty" export:"true"`
	StrictPrefixMatching         bool                `description:"Accepted for Traefik compatibility." json:"strictPrefixMatching,omitempty" toml:"strictPrefixMatching,omitempty" yaml:"strictPrefixMatching,omitempty" export:"true"`
	ExperimentalChannel          bool                `description:"Accepted for Traefik compatibility." json:"experimentalChannel,omitempty" toml:"experimentalChannel,omitempty" yaml:"experimentalChannel,omitempty" export:"true"`
	CrossProviderNamespaces      []string            `description:"Accepted for Traefik compatibility." json:"crossProviderNamespaces,omitempty" toml:"crossProviderNamespaces,omitempty" yaml:"crossProviderNamespaces,omitempty" export:"true"`
}

// check names what of providers.http cannot work.
func (h *HTTPProvider) check() error {
	u, err := url.Parse(h.Endpoint)
	switch {
	case h.Endpoint == "":
		return fmt.Errorf("providers.http.endpoint is required: the URL that serves the dynamic configuration")
	case err != nil:
		return fmt.Errorf("providers.http.endpoint=%q: %w", h.Endpoint, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("providers.http.endpoint=%q: not an http or https URL", h.Endpoint)
	case h.PollInterval <= 0:
		return fmt.Errorf("providers.http.pollInterval=%s: must be positive", h.PollInterval)
	case h.PollTimeout < 0:
		return fmt.Errorf("providers.http.pollTimeout=%s: must not be negative", h.PollTimeout)
	case h.MaxResponseBodySize == 0 || h.MaxResponseBodySize < -1:
		return fmt.Errorf("providers.http.maxResponseBodySize=%d: a number of bytes, or -1", h.MaxResponseBodySize)
	}
	return nil
}

// KubernetesEndpoint is where Traefik's Kubernetes HTTP providers publish
// their status.
type KubernetesEndpoint struct {
	IP               string `description:"Accepted for Traefik compatibility." json:"ip,omitempty" toml:"ip,omitempty" yaml:"ip,omitempty" export:"true"`
	Hostname         string `description:"Accepted for Traefik compatibility." json:"hostname,omitempty" toml:"hostname,omitempty" yaml:"hostname,omitempty" export:"true"`
	PublishedService string `description:"Accepted for Traefik compatibility." json:"publishedService,omitempty" toml:"publishedService,omitempty" yaml:"publishedService,omitempty" export:"true"`
	Service          *struct {
		Name      string `description:"Accepted for Traefik compatibility." json:"name,omitempty" toml:"name,omitempty" yaml:"name,omitempty" export:"true"`
		Namespace string `description:"Accepted for Traefik compatibility." json:"namespace,omitempty" toml:"namespace,omitempty" yaml:"namespace,omitempty" export:"true"`
	} `description:"Accepted for Traefik compatibility." json:"service,omitempty" toml:"service,omitempty" yaml:"service,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

type KubernetesCRDProvider struct {
	Endpoint         string   `description:"Kubernetes API server URL; in-cluster or KUBECONFIG when empty." json:"endpoint,omitempty" toml:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	Token            string   `description:"Bearer token for the API server (with endpoint)." json:"token,omitempty" toml:"token,omitempty" yaml:"token,omitempty" loggable:"false"`
	CertAuthFilePath string   `description:"CA certificate file that signs the API server's certificate (with endpoint)." json:"certAuthFilePath,omitempty" toml:"certAuthFilePath,omitempty" yaml:"certAuthFilePath,omitempty"`
	Namespaces       []string `description:"Namespaces to watch; all when empty." json:"namespaces,omitempty" toml:"namespaces,omitempty" yaml:"namespaces,omitempty" export:"true"`
	// AllowCrossNamespace lets a route name middlewares, Services, TLS
	// options and servers transports of other namespaces (Traefik's; off).
	AllowCrossNamespace bool `description:"Let an IngressRouteTCP reference middlewares, Services, TLS options and servers transports of other namespaces." json:"allowCrossNamespace,omitempty" toml:"allowCrossNamespace,omitempty" yaml:"allowCrossNamespace,omitempty" export:"true"`
	// LabelSelector and IngressClass pick the resources that are this
	// instance's, as in Traefik.
	LabelSelector string `description:"Read only the traefik.io resources this Kubernetes label selector selects." json:"labelSelector,omitempty" toml:"labelSelector,omitempty" yaml:"labelSelector,omitempty" export:"true"`
	IngressClass  string `description:"Serve only the IngressRouteTCPs annotated kubernetes.io/ingress.class with this value (when empty: not annotated, or traefik)." json:"ingressClass,omitempty" toml:"ingressClass,omitempty" yaml:"ingressClass,omitempty" export:"true"`
	// ThrottleDuration, AllowEmptyServices, AllowExternalNameServices and
	// NativeLBByDefault are Traefik's; DisableClusterScopeResources is
	// accepted: tollgate reads no cluster-scoped resource.
	ThrottleDuration             Duration `description:"Least time between two configurations sent (changes meanwhile are taken together)." json:"throttleDuration,omitempty" toml:"throttleDuration,omitempty" yaml:"throttleDuration,omitempty" export:"true"`
	AllowEmptyServices           bool     `description:"Keep a Service with no ready endpoint as a service with no server, instead of a problem." json:"allowEmptyServices,omitempty" toml:"allowEmptyServices,omitempty" yaml:"allowEmptyServices,omitempty" export:"true"`
	AllowExternalNameServices    bool     `description:"Route to ExternalName Services (their DNS name), else refused." json:"allowExternalNameServices,omitempty" toml:"allowExternalNameServices,omitempty" yaml:"allowExternalNameServices,omitempty" export:"true"`
	NativeLBByDefault            bool     `description:"Use a Service's cluster IP (nativeLB) unless a route service says otherwise." json:"nativeLBByDefault,omitempty" toml:"nativeLBByDefault,omitempty" yaml:"nativeLBByDefault,omitempty" export:"true"`
	DisableClusterScopeResources bool     `description:"Accepted for Traefik compatibility: tollgate reads no cluster-scoped resource." json:"disableClusterScopeResources,omitempty" toml:"disableClusterScopeResources,omitempty" yaml:"disableClusterScopeResources,omitempty" export:"true"`
}

// SetDefaults watches every namespace through the ambient configuration.
func (k *KubernetesCRDProvider) SetDefaults() {
	k.Endpoint = ""
	k.Token = ""
	k.CertAuthFilePath = ""
	k.Namespaces = nil
}

// ConsulEndpoint is how to reach the Consul agent.
type ConsulEndpoint struct {
	Address    string `description:"Consul HTTP address (CONSUL_HTTP_ADDR when empty, else 127.0.0.1:8500)." json:"address,omitempty" toml:"address,omitempty" yaml:"address,omitempty"`
	Scheme     string `description:"http or https (what the address says, else http; https when tls is set)." json:"scheme,omitempty" toml:"scheme,omitempty" yaml:"scheme,omitempty"`
	Token      string `description:"ACL token (CONSUL_HTTP_TOKEN when empty)." json:"token,omitempty" toml:"token,omitempty" yaml:"token,omitempty" loggable:"false"`
	Datacenter string `description:"Datacenter to read." json:"datacenter,omitempty" toml:"datacenter,omitempty" yaml:"datacenter,omitempty"`
	// TLS and HTTPAuth are Traefik's endpoint.tls and endpoint.httpAuth.
	TLS      *KVClientTLS    `description:"TLS to the agent (https)." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
	HTTPAuth *ConsulHTTPAuth `description:"HTTP basic authentication (a proxy in front of the agent)." json:"httpAuth,omitempty" toml:"httpAuth,omitempty" yaml:"httpAuth,omitempty" export:"true"`
	// EndpointWaitTime bounds each blocking query (the agent's default,
	// 5 minutes, when zero; tollgate's own watch asks for less).
	EndpointWaitTime Duration `description:"How long a blocking query waits for a change." json:"endpointWaitTime,omitempty" toml:"endpointWaitTime,omitempty" yaml:"endpointWaitTime,omitempty" export:"true"`
}

// ConsulHTTPAuth is HTTP basic authentication to the Consul endpoint.
type ConsulHTTPAuth struct {
	Username string `description:"Basic auth user name." json:"username,omitempty" toml:"username,omitempty" yaml:"username,omitempty" loggable:"false"`
	Password string `description:"Basic auth password." json:"password,omitempty" toml:"password,omitempty" yaml:"password,omitempty" loggable:"false"`
}

// SetDefaults leaves the address to the environment or 127.0.0.1:8500.
func (e *ConsulEndpoint) SetDefaults() {}

// API is the admin listener.
type API struct {
	Address string `description:"Admin API listen address." json:"address,omitempty" toml:"address,omitempty" yaml:"address,omitempty"`
	// Insecure is Traefik's api.insecure: the API on the entry point named
	// traefik (its address, and that entry point then proxies nothing), or
	// on :8080, every interface, unless Address is set.
	Insecure bool `description:"Serve the admin API on every interface, as Traefik's api.insecure: on entryPoints.traefik's address when that entry point exists (it then proxies nothing), else :8080; api.address wins." json:"insecure,omitempty" toml:"insecure,omitempty" yaml:"insecure,omitempty" export:"true"`
	// Dashboard serves /dashboard/ on the API's listener (on with the API,
	// as in Traefik): a read-only page of what the API serves. Debug serves
	// Go's profiles and expvar under /debug/, as Traefik's api.debug.
	Dashboard bool `description:"Serve the dashboard at /dashboard/ (under api.basePath) on the API's listener: a read-only view of what the API serves, to which / redirects." json:"dashboard,omitempty" toml:"dashboard,omitempty" yaml:"dashboard,omitempty" export:"true"`
	Debug     bool `description:"Serve Go's profiles (/debug/pprof/) and runtime variables (/debug/vars) on the API's listener, as Traefik's api.debug; the command line is left out." json:"debug,omitempty" toml:"debug,omitempty" yaml:"debug,omitempty" export:"true"`
	// AllowedHosts are the names, besides IP literals, localhost and
	// *.localhost, that a request reaching an admin listener over loopback
	// may give as its Host: any other name is refused, so that a web page
	// on a name rebound to 127.0.0.1 (DNS rebinding) cannot read the API
	// from a browser on this host. A tollgate extension.
	AllowedHosts []string `description:"Host names (besides IP addresses, localhost and *.localhost) that requests to an admin listener over loopback may name: others are refused, against DNS rebinding." json:"allowedHosts,omitempty" toml:"allowedHosts,omitempty" yaml:"allowedHosts,omitempty" export:"true"`
	// UpgradeTokenFile turns on POST /api/upgrade (off without it) and
	// holds the bearer token a request must carry; `tollgate upgrade`
	// reads it from the same option. A tollgate extension.
	UpgradeTokenFile string `description:"Turn on POST /api/upgrade, for requests carrying the bearer token this file holds (tollgate upgrade sends it); without it only SIGUSR2 upgrades." json:"upgradeTokenFile,omitempty" toml:"upgradeTokenFile,omitempty" yaml:"upgradeTokenFile,omitempty"`
	// BasePath is Traefik's: the API under this path (/api/... becomes
	// <basePath>/api/...); /ping and /metrics stay where they are.
	BasePath           string `description:"Serve the API under this path (<basePath>/api/...; /ping and /metrics stay at the root)." json:"basePath,omitempty" toml:"basePath,omitempty" yaml:"basePath,omitempty" export:"true"`
	DashboardName      string `description:"Accepted for Traefik compatibility: the dashboard's heading is tollgate's." json:"dashboardName,omitempty" toml:"dashboardName,omitempty" yaml:"dashboardName,omitempty" export:"true"`
	DisableDashboardAd bool   `description:"Accepted for Traefik compatibility: tollgate's dashboard shows no advertisement." json:"disableDashboardAd,omitempty" toml:"disableDashboardAd,omitempty" yaml:"disableDashboardAd,omitempty" export:"true"`
}

// Bounds of the upgrade token (API.UpgradeTokenFile): long enough not to
// be guessed, short enough to be a token and not some other file.
const (
	minUpgradeToken = 16
	maxUpgradeToken = 4096
)

// UpgradeToken reads the token of api.upgradeTokenFile ("" when the option
// is not set): the file's content without surrounding white space. The
// error names the option; it never holds the file's content.
func (a *API) UpgradeToken() (string, error) {
	if a == nil || a.UpgradeTokenFile == "" {
		return "", nil
	}
	key := fmt.Sprintf("api.upgradeTokenFile=%q", a.UpgradeTokenFile)
	fi, err := os.Stat(a.UpgradeTokenFile)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxUpgradeToken+64 {
		return "", fmt.Errorf("%s: not a token file (a regular file of at most %d bytes)", key, maxUpgradeToken)
	}
	b, err := os.ReadFile(a.UpgradeTokenFile)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case len(tok) < minUpgradeToken:
		return "", fmt.Errorf("%s: the token is %d characters, want at least %d (e.g. head -c 32 /dev/urandom | base64)", key, len(tok), minUpgradeToken)
	case len(tok) > maxUpgradeToken || strings.ContainsAny(tok, " \t\r\n"):
		return "", fmt.Errorf("%s: want one line of at most %d characters without spaces", key, maxUpgradeToken)
	}
	return tok, nil
}

// checkAllowedHost checks an api.allowedHosts entry: a host name or an IP,
// without port or scheme.
func checkAllowedHost(h string) error {
	if h == "" {
		return errors.New("empty")
	}
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return nil
	}
	for _, label := range strings.Split(strings.TrimPrefix(h, "*."), ".") {
		if label == "" || strings.Trim(strings.ToLower(label), "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return errors.New("not a host name (no scheme, port or path: e.g. tollgate.internal)")
		}
	}
	return nil
}

// Global is Traefik's global block. tollgate never checks for a new version
// and never sends usage data, whatever it says.
type Global struct {
	CheckNewVersion        bool `description:"Accepted for Traefik compatibility: tollgate never checks for a new version." json:"checkNewVersion,omitempty" toml:"checkNewVersion,omitempty" yaml:"checkNewVersion,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	SendAnonymousUsage     bool `description:"Accepted for Traefik compatibility: tollgate never sends usage data." json:"sendAnonymousUsage,omitempty" toml:"sendAnonymousUsage,omitempty" yaml:"sendAnonymousUsage,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	NotAppendXForwardedFor bool `description:"Accepted for Traefik compatibility (HTTP X-Forwarded-For)." json:"notAppendXForwardedFor,omitempty" toml:"notAppendXForwardedFor,omitempty" yaml:"notAppendXForwardedFor,omitempty" export:"true"`
}

// Core is Traefik's core block: defaultRuleSyntax, the ruleSyntax of the
// routers that give none. Rules are read in v3 syntax; v2 is accepted with
// a warning at start, as a router's ruleSyntax v2 is.
type Core struct {
	DefaultRuleSyntax string `description:"The rule syntax of routers that give none: v3 (v2 is accepted, and read as v3, with a warning)." json:"defaultRuleSyntax,omitempty" toml:"defaultRuleSyntax,omitempty" yaml:"defaultRuleSyntax,omitempty" export:"true"`
}

// Ping is Traefik's ping block. /ping is served by the admin listener
// whenever it runs, and on the entry point ping.entryPoint names (traefik
// by default) when it exists (ResolveInternal); without one, on the
// traefik entry point's default address, DefaultInternalAddress, as
// Traefik creates it (internal/process's planAdmin).
type Ping struct {
	EntryPoint string `description:"Serve /ping on this entry point's address (it then proxies nothing); default traefik, at :8080 when not declared." json:"entryPoint,omitempty" toml:"entryPoint,omitempty" yaml:"entryPoint,omitempty" export:"true"`
	// ManualRouting is Traefik's: /ping is on no entry point of its own
	// (Traefik leaves it to an HTTP router, which tollgate does not have).
	ManualRouting bool `description:"Serve /ping on no entry point of its own (Traefik leaves it to an HTTP router; the admin API still answers it)." json:"manualRouting,omitempty" toml:"manualRouting,omitempty" yaml:"manualRouting,omitempty" export:"true"`
	// TerminatingStatusCode is Traefik's answer to /ping while it stops;
	// tollgate closes its ping listener then, which health checks take
	// for down as they take the 503.
	TerminatingStatusCode int `description:"Accepted for Traefik compatibility: while stopping, tollgate closes its ping listener (a health check sees it down, as with Traefik's 503)." json:"terminatingStatusCode,omitempty" toml:"terminatingStatusCode,omitempty" yaml:"terminatingStatusCode,omitempty" export:"true"`

	address string // of the entry point ResolveInternal gave it
}

// Address is the address of the entry point /ping is served on
// (ResolveInternal), or "".
func (p *Ping) Address() string { return p.address }

// validBasePath is what api.basePath may be, as in Traefik: an absolute
// URL path of RFC 3986's unreserved characters.
var validBasePath = regexp.MustCompile(`^/[a-zA-Z0-9/_.:~-]*$`)

// DefaultAPIAddress is where the admin API listens unless told otherwise.
const DefaultAPIAddress = "127.0.0.1:8080"

// InsecureAPIEntryPoint is the entry point whose address api.insecure
// serves the API on, as Traefik's internal entry point.
const InsecureAPIEntryPoint = "traefik"

// DefaultInternalAddress is the address of Traefik's internal entry point
// (traefik) when the configuration declares none: every interface, so that
// probes and scrapes from other hosts and containers reach /ping and
// /metrics, as they reach Traefik's.
const DefaultInternalAddress = ":8080"

// SetDefaults sets the admin address and turns the dashboard on, as in
// Traefik.
func (a *API) SetDefaults() { a.Address, a.Dashboard = DefaultAPIAddress, true }

// Log configures tollgate's own log, as Traefik's log block does
// (internal/logs writes it).
type Log struct {
	Level    string `description:"Log level: DEBUG, INFO, WARN or ERROR." json:"level,omitempty" toml:"level,omitempty" yaml:"level,omitempty" export:"true"`
	Format   string `description:"Log format: common (Traefik's text lines) or json." json:"format,omitempty" toml:"format,omitempty" yaml:"format,omitempty" export:"true"`
	FilePath string `description:"Log file (stdout when empty), rotated at maxSize; SIGUSR1 reopens it (after a logrotate move)." json:"filePath,omitempty" toml:"filePath,omitempty" yaml:"filePath,omitempty" export:"true"`
	NoColor  bool   `description:"No colours in the common format (which has none off a terminal, nor in a file, anyway)." json:"noColor,omitempty" toml:"noColor,omitempty" yaml:"noColor,omitempty" export:"true"`
	// MaxSize, MaxAge, MaxBackups and Compress are Traefik's rotation of
	// log.filePath (lumberjack's, as Traefik's).
	MaxSize    int      `description:"Size in megabytes at which the log file is rotated (100 when 0)." json:"maxSize,omitempty" toml:"maxSize,omitempty" yaml:"maxSize,omitempty" export:"true"`
	MaxAge     int      `description:"Days a rotated log file is kept (0: no limit)." json:"maxAge,omitempty" toml:"maxAge,omitempty" yaml:"maxAge,omitempty" export:"true"`
	MaxBackups int      `description:"Rotated log files kept (0: no limit)." json:"maxBackups,omitempty" toml:"maxBackups,omitempty" yaml:"maxBackups,omitempty" export:"true"`
	Compress   bool     `description:"Compress rotated log files with gzip." json:"compress,omitempty" toml:"compress,omitempty" yaml:"compress,omitempty" export:"true"`
	OTLP       *OTelLog `description:"OpenTelemetry logs: accepted, not yet sent." json:"otlp,omitempty" toml:"otlp,omitempty" yaml:"otlp,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// SetDefaults sets Traefik's: the common format at ERROR.
func (l *Log) SetDefaults() {
	l.Level = "ERROR"
	l.Format = "common"
}

// AccessLog writes one JSON line per closed connection.
type AccessLog struct {
	FilePath string `description:"Access log file (stdout when empty)." json:"filePath,omitempty" toml:"filePath,omitempty" yaml:"filePath,omitempty" export:"true"`
	// Format is Traefik's accessLog.format: tollgate writes JSON lines,
	// whatever it says (docs/operations/logs.md, "Access log").
	Format string `description:"Accepted for Traefik compatibility: the lines are JSON whatever the format (common is Traefik's HTTP format)." json:"format,omitempty" toml:"format,omitempty" yaml:"format,omitempty" export:"true"`
	// Fields and Filters are Traefik's, applied to the TCP lines
	// (docs/operations/logs.md, "Access log"); BufferingSize and AddInternals are accepted.
	Fields        *AccessLogFields  `description:"Which fields the lines keep, drop or redact (Traefik's field names or tollgate's)." json:"fields,omitempty" toml:"fields,omitempty" yaml:"fields,omitempty" export:"true"`
	Filters       *AccessLogFilters `description:"Which connections are logged." json:"filters,omitempty" toml:"filters,omitempty" yaml:"filters,omitempty" export:"true"`
	BufferingSize int64             `description:"Accepted for Traefik compatibility: each line is one write." json:"bufferingSize,omitempty" toml:"bufferingSize,omitempty" yaml:"bufferingSize,omitempty" export:"true"`
	AddInternals  bool              `description:"Accepted for Traefik compatibility: internal routers carry no connections." json:"addInternals,omitempty" toml:"addInternals,omitempty" yaml:"addInternals,omitempty" export:"true"`
	DualOutput    bool              `description:"Access log lines beside OpenTelemetry's (not yet: the lines are always written)." json:"dualOutput,omitempty" toml:"dualOutput,omitempty" yaml:"dualOutput,omitempty" export:"true"`
	OTLP          *OTelLog          `description:"OpenTelemetry access logs: accepted, not yet sent." json:"otlp,omitempty" toml:"otlp,omitempty" yaml:"otlp,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// AccessLogFields is Traefik's accessLog.fields: a mode (keep, drop or
// redact) for every field, and one per field named.
type AccessLogFields struct {
	DefaultMode     string                    `description:"Mode of the fields not named: keep, drop or redact." json:"defaultMode,omitempty" toml:"defaultMode,omitempty" yaml:"defaultMode,omitempty" export:"true"`
	Names           map[string]string         `description:"Mode of each field named (ClientHost: drop)." json:"names,omitempty" toml:"names,omitempty" yaml:"names,omitempty" export:"true"`
	Headers         *AccessLogHeaders         `description:"Accepted for Traefik compatibility: HTTP headers (TCP has none)." json:"headers,omitempty" toml:"headers,omitempty" yaml:"headers,omitempty" export:"true"`
	QueryParameters *AccessLogQueryParameters `description:"Accepted for Traefik compatibility: HTTP query parameters (TCP has none)." json:"queryParameters,omitempty" toml:"queryParameters,omitempty" yaml:"queryParameters,omitempty" export:"true"`
}

// Access log field modes (accessLog.fields): a field is written as it is,
// left out, or written as "REDACTED".
const (
	FieldKeep   = "keep"
	FieldDrop   = "drop"
	FieldRedact = "redact"
)

// check refuses a mode other than keep, drop or redact, naming the option:
// a field meant to be dropped (a client's address) is never written by
// mistake.
func (f *AccessLogFields) check() error {
	if m := f.DefaultMode; m != "" && !validMode(m) {
		return fmt.Errorf("accessLog.fields.defaultMode=%q: use keep, drop or redact", m)
	}
	for name, m := range f.Names {
		if !validMode(m) {
			return fmt.Errorf("accessLog.fields.names.%s=%q: use keep, drop or redact", name, m)
		}
	}
	return nil
}

func validMode(m string) bool {
	switch strings.ToLower(m) {
	case FieldKeep, FieldDrop, FieldRedact:
		return true
	}
	return false
}

// AccessLogHeaders is Traefik's accessLog.fields.headers (HTTP headers).
type AccessLogHeaders struct {
	DefaultMode string            `description:"Accepted for Traefik compatibility." json:"defaultMode,omitempty" toml:"defaultMode,omitempty" yaml:"defaultMode,omitempty" export:"true"`
	Names       map[string]string `description:"Accepted for Traefik compatibility." json:"names,omitempty" toml:"names,omitempty" yaml:"names,omitempty" export:"true"`
}

// AccessLogFilters is Traefik's accessLog.filters.
type AccessLogFilters struct {
	StatusCodes   []string `description:"Accepted for Traefik compatibility: HTTP status codes (a TCP connection has none)." json:"statusCodes,omitempty" toml:"statusCodes,omitempty" yaml:"statusCodes,omitempty" export:"true"`
	RetryAttempts bool     `description:"Accepted for Traefik compatibility: HTTP retries." json:"retryAttempts,omitempty" toml:"retryAttempts,omitempty" yaml:"retryAttempts,omitempty" export:"true"`
	MinDuration   Duration `description:"Log only the connections that lasted at least this long." json:"minDuration,omitempty" toml:"minDuration,omitempty" yaml:"minDuration,omitempty" export:"true"`
}

// ResolveInsecureAPI applies Traefik's api.insecure: the API on the entry
// point named traefik, which is then no proxy entry point, else on that
// entry point's default address, :8080; an api.address other than the
// default wins. Validate calls it; so does `tollgate healthcheck`, to ask
// the address the API is on.
func (s *Static) ResolveInsecureAPI() error {
	a := s.API
	if a == nil || !a.Insecure || a.Address != DefaultAPIAddress {
		return nil
	}
	a.Address = ":8080"
	if ep, ok := s.EntryPoints[InsecureAPIEntryPoint]; ok && ep != nil {
		if err := checkAddress(ep.Address); err != nil {
			return fmt.Errorf("entryPoints.%s.address=%q: %w", InsecureAPIEntryPoint, ep.Address, err)
		}
		a.Address = ep.Address
		delete(s.EntryPoints, InsecureAPIEntryPoint)
	}
	return nil
}

// ResolveInternal applies Traefik's metrics.prometheus.entryPoint and
// ping.entryPoint (both traefik by default), after ResolveInsecureAPI: the
// entry point one names, when it exists, is internal, as Traefik's: /metrics
// (with /ping) or /ping alone is served on its address, and it proxies
// nothing. Metrics with an address of their own keep it. Validate calls it;
// so does `tollgate healthcheck`, to ask the address /ping is on
// (PingAddress).
func (s *Static) ResolveInternal() {
	taken := map[string]string{}
	take := func(name string) (string, bool) {
		if name == "" {
			name = InsecureAPIEntryPoint
		}
		if addr, ok := taken[name]; ok {
			return addr, true
		}
		ep, ok := s.EntryPoints[name]
		if !ok || ep == nil {
			return "", false
		}
		addr, _ := splitProtocol(ep.Address)
		taken[name] = addr
		s.internalEntryPoints = append(s.internalEntryPoints, name)
		delete(s.EntryPoints, name)
		return addr, true
	}
	// With manualRouting, Traefik routes neither to an entry point of its
	// own: one declared stays a proxy entry point.
	if m := s.Metrics; m != nil && m.Prometheus != nil && m.Prometheus.Address == "" && !m.Prometheus.ManualRouting {
		if addr, ok := take(m.Prometheus.EntryPoint); ok {
			m.Prometheus.Address = addr
		}
	}
	if p := s.Ping; p != nil && !p.ManualRouting {
		if addr, ok := take(p.EntryPoint); ok {
			p.address = addr
		}
	}
}

// InternalEntryPoints are the entry points ResolveInternal made internal.
func (s *Static) InternalEntryPoints() []string {
	out := slices.Clone(s.internalEntryPoints)
	slices.Sort(out)
	return out
}

// PingAddress is where a running tollgate answers /ping: ping.entryPoint's
// address, else the admin API's, else the metrics listener's, else the
// traefik entry point's default address (--ping alone, as in Traefik).
func (s *Static) PingAddress() string {
	switch {
	case s.Ping != nil && s.Ping.address != "":
		return s.Ping.address
	case s.API != nil && s.API.Address != "":
		return s.API.Address
	case s.Metrics != nil && s.Metrics.Prometheus != nil && s.Metrics.Prometheus.Address != "":
		return s.Metrics.Prometheus.Address // the metrics listener answers /ping too
	}
	return DefaultInternalAddress
}

// Validate checks the static configuration and names the offending key and
// value in its error.
func (s *Static) Validate() error {
	// Traefik's options, as TraefikOptions takes them, before anything
	// below moves one (the traefik entry point becomes internal).
	var err error
	if s.traefikWarnings, s.traefikWarned, err = s.traefikOptions(); err != nil {
		return err
	}
	if err := s.ResolveInsecureAPI(); err != nil {
		return err
	}
	s.ResolveInternal()
	if len(s.EntryPoints) == 0 {
		return fmt.Errorf("no entry point configured: set --entryPoints.<name>.address=[host]:port")
	}
	for name, ep := range s.EntryPoints {
		if ep == nil {
			return fmt.Errorf("entryPoints.%s: empty entry point", name)
		}
		addr, proto := splitProtocol(ep.Address)
		if proto == "udp" {
			// Traefik's UDP entry point: not tollgate's (UDPEntryPoints).
			s.udpEntryPoints = append(s.udpEntryPoints, name)
			delete(s.EntryPoints, name)
			continue
		}
		ep.Address = addr
		if err := checkAddress(ep.Address); err != nil {
			return fmt.Errorf("entryPoints.%s.address=%q: %w", name, ep.Address, err)
		}
		if pp := ep.ProxyProtocol; pp != nil {
			for _, r := range pp.TrustedIPs {
				if _, err := ParsePrefix(r); err != nil {
					return fmt.Errorf("entryPoints.%s.proxyProtocol.trustedIPs: %w", name, err)
				}
			}
		}
		if err := ep.validateTransport(name); err != nil {
			return err
		}
	}
	if len(s.EntryPoints) == 0 {
		return fmt.Errorf("no TCP entry point: entryPoints %s: UDP (an address ending in /udp), and tollgate routes TCP only", strings.Join(s.UDPEntryPoints(), ", "))
	}
	for name, ep := range s.EntryPoints {
		if err := s.resolveRedirect(name, ep); err != nil {
			return err
		}
	}
	if al := s.AccessLog; al != nil && al.Fields != nil {
		if err := al.Fields.check(); err != nil {
			return err
		}
	}
	if err := s.validateProviders(); err != nil {
		return err
	}
	if s.API != nil {
		if s.API.Address == "" {
			s.API.Address = DefaultAPIAddress
		}
		if err := checkAddress(s.API.Address); err != nil {
			return fmt.Errorf("api.address=%q: %w", s.API.Address, err)
		}
		for _, h := range s.API.AllowedHosts {
			if err := checkAllowedHost(h); err != nil {
				return fmt.Errorf("api.allowedHosts: %q: %w", h, err)
			}
		}
		if _, err := s.API.UpgradeToken(); err != nil {
			return err
		}
	}
	if err := s.Metrics.validate(); err != nil {
		return err
	}
	if err := s.validateLog(); err != nil {
		return err
	}
	if a := s.API; a != nil && a.BasePath != "" && !validBasePath.MatchString(a.BasePath) {
		return fmt.Errorf("api.basePath=%q: not an absolute URL path (/ and then letters, digits, /_.:~-)", a.BasePath)
	}
	if c := s.Core; c != nil {
		switch strings.ToLower(c.DefaultRuleSyntax) {
		case "", "v3", "v2":
		default:
			return fmt.Errorf("core.defaultRuleSyntax=%q: use v3 (or v2)", c.DefaultRuleSyntax)
		}
	}
	if al := s.AccessLog; al != nil {
		switch strings.ToLower(al.Format) {
		case "", "json", "common", "genericclf": // Traefik's; the lines are JSON
		default:
			return fmt.Errorf("accessLog.format=%q: use json (Traefik's common and genericCLF are accepted; the lines are JSON)", al.Format)
		}
	}
	return nil
}

// validateTransport fills in an entry point's transport defaults and checks
// its values.
func (ep *EntryPoint) validateTransport(name string) error {
	if ep.Transport == nil {
		ep.Transport = &EntryPointsTransport{}
		ep.Transport.SetDefaults()
	}
	if ep.Transport.LifeCycle == nil {
		ep.Transport.LifeCycle = &LifeCycle{}
		ep.Transport.LifeCycle.SetDefaults()
	}
	if ep.Transport.RespondingTimeouts == nil {
		ep.Transport.RespondingTimeouts = &RespondingTimeouts{}
		ep.Transport.RespondingTimeouts.SetDefaults()
	}
	if ep.Transport.LifeCycle.RequestAcceptGraceTimeout < 0 {
		return fmt.Errorf("entryPoints.%s.transport.lifeCycle.requestAcceptGraceTimeout=%s: must not be negative", name, ep.Transport.LifeCycle.RequestAcceptGraceTimeout)
	}
	if ep.Transport.LifeCycle.GraceTimeOut < 0 {
		return fmt.Errorf("entryPoints.%s.transport.lifeCycle.graceTimeOut=%s: must not be negative", name, ep.Transport.LifeCycle.GraceTimeOut)
	}
	if ep.Transport.RespondingTimeouts.ReadTimeout < 0 {
		return fmt.Errorf("entryPoints.%s.transport.respondingTimeouts.readTimeout=%s: must not be negative", name, ep.Transport.RespondingTimeouts.ReadTimeout)
	}
	if ep.Transport.RespondingTimeouts.ServerFirstTimeout < 0 {
		return fmt.Errorf("entryPoints.%s.transport.respondingTimeouts.serverFirstTimeout=%s: must not be negative", name, ep.Transport.RespondingTimeouts.ServerFirstTimeout)
	}
	if ep.Transport.MaxUnroutedPerIP < 0 {
		return fmt.Errorf("entryPoints.%s.transport.maxUnroutedPerIP=%d: must not be negative (0 for no bound)", name, ep.Transport.MaxUnroutedPerIP)
	}
	if m := ep.Transport.MaxUnrouted; m != nil && *m < 0 {
		return fmt.Errorf("entryPoints.%s.transport.maxUnrouted=%d: must not be negative (0 for no bound; leave it out for a quarter of the descriptor limit)", name, *m)
	}
	if b := ep.Transport.IPv6Subnet; b < 0 || b > 128 {
		return fmt.Errorf("entryPoints.%s.transport.ipv6Subnet=%d: must be a prefix length from 0 to 128 (0 or 128: each address on its own)", name, b)
	}
	if r := ep.Transport.TLSHandshakeRate; r != nil {
		f := "entryPoints." + name + ".transport.tlsHandshakeRate"
		switch {
		case r.Average < 0:
			return fmt.Errorf("%s.average=%d: must not be negative (0 for no bound)", f, r.Average)
		case r.Average > 0 && r.Period <= 0:
			return fmt.Errorf("%s.period=%s: must be longer than 0", f, r.Period)
		case r.Average > 0 && r.Burst < 1:
			return fmt.Errorf("%s.burst=%d: must be at least 1", f, r.Burst)
		}
	}
	return nil
}

// validateProviders fills in the providers' defaults and checks their
// options.
func (s *Static) validateProviders() error {
	if s.Providers == nil {
		s.Providers = &Providers{}
		s.Providers.SetDefaults()
	}
	for i, name := range s.Providers.Precedence {
		name = strings.ToLower(strings.TrimSpace(name))
		if !slices.Contains(traefikProviderNames, name) {
			return fmt.Errorf("providers.precedence=%q: %q is not one of Traefik's provider names (%s)", strings.Join(s.Providers.Precedence, ","), s.Providers.Precedence[i], strings.Join(traefikProviderNames, ", "))
		}
		s.Providers.Precedence[i] = name
	}
	if s.Providers.ProvidersThrottleDuration < 0 {
		return fmt.Errorf("providers.providersThrottleDuration=%s: must not be negative", s.Providers.ProvidersThrottleDuration)
	}
	if h := s.Providers.HTTP; h != nil {
		if err := h.check(); err != nil {
			return err
		}
	}
	if f := s.Providers.File; f != nil {
		switch {
		case f.Filename == "" && f.Directory == "":
			return fmt.Errorf("providers.file: set filename or directory")
		case f.Filename != "" && f.Directory != "":
			return fmt.Errorf("providers.file: set filename or directory, not both (filename=%q, directory=%q)", f.Filename, f.Directory)
		}
		path := f.Filename
		if path == "" {
			path = f.Directory
		}
		if _, err := os.Stat(path); err != nil {
			key := "filename"
			if f.Filename == "" {
				key = "directory"
			}
			return fmt.Errorf("providers.file.%s=%q: %w", key, path, err)
		}
	}
	return nil
}

// validateLog fills in the log's defaults and checks its options.
func (s *Static) validateLog() error {
	if s.Log == nil {
		s.Log = &Log{}
		s.Log.SetDefaults()
	}
	switch strings.ToUpper(s.Log.Level) {
	case "", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "PANIC", "TRACE":
	default:
		return fmt.Errorf("log.level=%q: use DEBUG, INFO, WARN or ERROR", s.Log.Level)
	}
	switch strings.ToLower(s.Log.Format) {
	case "", "json", "console", "common":
	default:
		return fmt.Errorf("log.format=%q: use common (Traefik's text lines) or json", s.Log.Format)
	}
	for _, n := range []struct {
		key string
		v   int
	}{{"maxSize", s.Log.MaxSize}, {"maxAge", s.Log.MaxAge}, {"maxBackups", s.Log.MaxBackups}} {
		if n.v < 0 {
			return fmt.Errorf("log.%s=%d: must not be negative", n.key, n.v)
		}
	}
	return nil
}

// checkAddress accepts "[host]:port" with a numeric port (0 allowed for tests)
// and a literal IP or empty host.
func checkAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not [host]:port: %w", err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err != nil {
			return fmt.Errorf("host %q is not an IP address", host)
		}
	}
	return nil
}

// ParsePrefix parses an IP ("10.0.0.1", "::1") or a CIDR ("10.0.0.0/8") into a
// masked netip.Prefix, unmapping IPv4-mapped IPv6 so that it matches the keys
// the proxy uses. The error names the input. ParsePrefixNote also says when
// the input does not mean what it reads as.
func ParsePrefix(s string) (netip.Prefix, error) {
	p, _, err := ParsePrefixNote(s)
	return p, err
}

// ParsePrefixNote is ParsePrefix plus a note, empty when the input means
// what it says, for inputs that are valid but suspicious (they are kept, and
// the note is shown as a warning):
//
//   - host bits set: "127.0.0.9/8" is 127.0.0.0/8 (nginx: "low address bits
//     are meaningless");
//   - an IPv4-mapped IPv6 range: clients are matched as IPv4 (unmapped), so
//     "::ffff:10.0.0.0/104" is 10.0.0.0/8 and "::ffff:0:0/96" is every IPv4
//     address; a range just around ::ffff:0:0/96 (from /65 to /95) keeps its
//     IPv6 meaning, and its IPv4-mapped part never matches a client.
func ParsePrefixNote(s string) (netip.Prefix, string, error) {
	s = strings.TrimSpace(s)
	if len(s) > quote.Max { // netip's errors quote their input whole
		return netip.Prefix{}, "", fmt.Errorf("parsing IP or CIDR %s: too long for one", quote.Q(s))
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, "", fmt.Errorf("parsing IP %q: %w", s, err)
		}
		note := ""
		if a.Is4In6() {
			note = fmt.Sprintf("%q is an IPv4-mapped IPv6 address: clients are matched as IPv4, so it means %s", s, a.Unmap())
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), note, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, "", fmt.Errorf("parsing CIDR %q: %w", s, err)
	}
	var notes []string
	if m := p.Masked(); m.Addr() != p.Addr() {
		notes = append(notes, fmt.Sprintf("%q has host bits set: it means %s", s, m))
	}
	switch {
	case p.Addr().Is4In6() && p.Bits() >= 96:
		u := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
		what := u.String()
		if u.Bits() == 0 {
			what = "0.0.0.0/0 (every IPv4 address)"
		}
		notes = append(notes, fmt.Sprintf("%q is an IPv4-mapped IPv6 range: clients are matched as IPv4, so it means %s", s, what))
		return u, strings.Join(notes, "; "), nil
	case p.Addr().Is6() && p.Bits() > 64 && p.Bits() < 96 && p.Masked().Contains(netip.MustParseAddr("::ffff:0.0.0.0")):
		notes = append(notes, fmt.Sprintf("%q contains the IPv4-mapped range ::ffff:0:0/96, which never matches: clients are matched as IPv4 (add 0.0.0.0/0 to admit IPv4)", s))
	}
	return p.Masked(), strings.Join(notes, "; "), nil
}

// KV store providers (provider/kv): the dynamic configuration as keys under
// RootKey, in Traefik's layout (traefik/tcp/routers/<name>/rule, ...).

// KVClientTLS is how a KV provider reaches its store over TLS. CA alone
// verifies the store's certificate; Cert and Key add a client certificate.
type KVClientTLS struct {
	CA                 string `description:"PEM file of the CA that signs the store's certificate (the system's when empty)." json:"ca,omitempty" toml:"ca,omitempty" yaml:"ca,omitempty"`
	Cert               string `description:"PEM file of the client certificate (with key)." json:"cert,omitempty" toml:"cert,omitempty" yaml:"cert,omitempty"`
	Key                string `description:"PEM file of the client certificate's private key (with cert)." json:"key,omitempty" toml:"key,omitempty" yaml:"key,omitempty" loggable:"false"`
	InsecureSkipVerify bool   `description:"Do not verify the store's certificate (tests only)." json:"insecureSkipVerify,omitempty" toml:"insecureSkipVerify,omitempty" yaml:"insecureSkipVerify,omitempty" export:"true"`
}

// DefaultKVRootKey is the KV providers' default root key.
const DefaultKVRootKey = "traefik"

// ConsulKVProvider configures the Consul KV provider.
type ConsulKVProvider struct {
	Endpoints  []string     `description:"Consul agent addresses ([scheme://]host:port); the next is tried when one fails." json:"endpoints,omitempty" toml:"endpoints,omitempty" yaml:"endpoints,omitempty" export:"true"`
	RootKey    string       `description:"Root key of the configuration." json:"rootKey,omitempty" toml:"rootKey,omitempty" yaml:"rootKey,omitempty" export:"true"`
	Token      string       `description:"ACL token." json:"token,omitempty" toml:"token,omitempty" yaml:"token,omitempty" loggable:"false"`
	Namespaces []string     `description:"Consul Enterprise namespaces to read, one provider each (names qualified @consul-<namespace>)." json:"namespaces,omitempty" toml:"namespaces,omitempty" yaml:"namespaces,omitempty" export:"true"`
	TLS        *KVClientTLS `description:"TLS to the agent (https)." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
}

// SetDefaults reads 127.0.0.1:8500 under "traefik".
func (c *ConsulKVProvider) SetDefaults() {
	c.Endpoints = []string{"127.0.0.1:8500"}
	c.RootKey = DefaultKVRootKey
}

// EtcdProvider configures the etcd provider.
type EtcdProvider struct {
	Endpoints []string     `description:"etcd client addresses (host:port)." json:"endpoints,omitempty" toml:"endpoints,omitempty" yaml:"endpoints,omitempty" export:"true"`
	RootKey   string       `description:"Root key of the configuration." json:"rootKey,omitempty" toml:"rootKey,omitempty" yaml:"rootKey,omitempty" export:"true"`
	Username  string       `description:"User name (etcd authentication)." json:"username,omitempty" toml:"username,omitempty" yaml:"username,omitempty" loggable:"false"`
	Password  string       `description:"Password (etcd authentication)." json:"password,omitempty" toml:"password,omitempty" yaml:"password,omitempty" loggable:"false"`
	TLS       *KVClientTLS `description:"TLS to etcd." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
}

// SetDefaults reads 127.0.0.1:2379 under "traefik".
func (e *EtcdProvider) SetDefaults() {
	e.Endpoints = []string{"127.0.0.1:2379"}
	e.RootKey = DefaultKVRootKey
}

// RedisProvider configures the Redis provider.
type RedisProvider struct {
	Endpoints []string       `description:"Redis address (host:port; one), or with sentinel the Sentinels' addresses." json:"endpoints,omitempty" toml:"endpoints,omitempty" yaml:"endpoints,omitempty" export:"true"`
	RootKey   string         `description:"Root key of the configuration." json:"rootKey,omitempty" toml:"rootKey,omitempty" yaml:"rootKey,omitempty" export:"true"`
	Username  string         `description:"User name (Redis ACL)." json:"username,omitempty" toml:"username,omitempty" yaml:"username,omitempty" loggable:"false"`
	Password  string         `description:"Password." json:"password,omitempty" toml:"password,omitempty" yaml:"password,omitempty" loggable:"false"`
	DB        int            `description:"Database number." json:"db,omitempty" toml:"db,omitempty" yaml:"db,omitempty" export:"true"`
	TLS       *KVClientTLS   `description:"TLS to Redis (and to the Sentinels)." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
	Sentinel  *RedisSentinel `description:"Find the server through Redis Sentinel: the endpoints are then Sentinels." json:"sentinel,omitempty" toml:"sentinel,omitempty" yaml:"sentinel,omitempty" export:"true"`
}

// RedisSentinel is Traefik's providers.redis.sentinel: which master the
// Sentinels are asked for, how to log in to them, and which of the master
// and its replicas the provider reads. Its values are judged by
// provider/kv/redis's New, the one place they are read.
type RedisSentinel struct {
	MasterName              string `description:"Name of the master the Sentinels monitor (required)." json:"masterName,omitempty" toml:"masterName,omitempty" yaml:"masterName,omitempty" export:"true"`
	Username                string `description:"User name for the Sentinels (ACL)." json:"username,omitempty" toml:"username,omitempty" yaml:"username,omitempty" loggable:"false"`
	Password                string `description:"Password for the Sentinels (their requirepass)." json:"password,omitempty" toml:"password,omitempty" yaml:"password,omitempty" loggable:"false"`
	LatencyStrategy         bool   `description:"Read from the closest of the master and its replicas (not with randomStrategy or replicaStrategy)." json:"latencyStrategy,omitempty" toml:"latencyStrategy,omitempty" yaml:"latencyStrategy,omitempty" export:"true"`
	RandomStrategy          bool   `description:"Read from the master or a replica at random (not with latencyStrategy or replicaStrategy)." json:"randomStrategy,omitempty" toml:"randomStrategy,omitempty" yaml:"randomStrategy,omitempty" export:"true"`
	ReplicaStrategy         bool   `description:"Read from replicas only (not with latencyStrategy or randomStrategy)." json:"replicaStrategy,omitempty" toml:"replicaStrategy,omitempty" yaml:"replicaStrategy,omitempty" export:"true"`
	UseDisconnectedReplicas bool   `description:"With replicaStrategy, read from a replica cut off from its master when no other answers." json:"useDisconnectedReplicas,omitempty" toml:"useDisconnectedReplicas,omitempty" yaml:"useDisconnectedReplicas,omitempty" export:"true"`
}

// SetDefaults reads 127.0.0.1:6379, database 0, under "traefik".
func (r *RedisProvider) SetDefaults() {
	r.Endpoints = []string{"127.0.0.1:6379"}
	r.RootKey = DefaultKVRootKey
}

// ZooKeeperProvider configures the ZooKeeper provider.
type ZooKeeperProvider struct {
	Endpoints []string `description:"ZooKeeper addresses (host:port)." json:"endpoints,omitempty" toml:"endpoints,omitempty" yaml:"endpoints,omitempty" export:"true"`
	RootKey   string   `description:"Root key of the configuration (the znode /<rootKey>)." json:"rootKey,omitempty" toml:"rootKey,omitempty" yaml:"rootKey,omitempty" export:"true"`
	Username  string   `description:"User name (digest authentication)." json:"username,omitempty" toml:"username,omitempty" yaml:"username,omitempty" loggable:"false"`
	Password  string   `description:"Password (digest authentication)." json:"password,omitempty" toml:"password,omitempty" yaml:"password,omitempty" loggable:"false"`
}

// SetDefaults reads 127.0.0.1:2181 under "traefik".
func (z *ZooKeeperProvider) SetDefaults() {
	z.Endpoints = []string{"127.0.0.1:2181"}
	z.RootKey = DefaultKVRootKey
}

// Store is a store shared by several tollgate replicas, named by an
// inFlightConn middleware's store option (docs/operations/replicas.md).
// Exactly one kind is set.
type Store struct {
	Redis *RedisStore `description:"A Redis server, Sentinel set or Cluster." json:"redis,omitempty" toml:"redis,omitempty" yaml:"redis,omitempty" export:"true"`
}

// RedisStore is how to reach a Redis deployment and how long a replica's
// shares live without being refreshed. Its values are judged by
// middleware/inflightconn's store constructor, the one place they are read.
type RedisStore struct {
	Endpoints  []string `description:"Redis addresses (host:port): one server, the Sentinels (with masterName), or Cluster nodes (several, without masterName)." json:"endpoints,omitempty" toml:"endpoints,omitempty" yaml:"endpoints,omitempty" export:"true"`
	Username   string   `description:"User name (Redis ACL)." json:"username,omitempty" toml:"username,omitempty" yaml:"username,omitempty" loggable:"false"`
	Password   string   `description:"Password." json:"password,omitempty" toml:"password,omitempty" yaml:"password,omitempty" loggable:"false"`
	DB         int      `description:"Database number (not with Cluster)." json:"db,omitempty" toml:"db,omitempty" yaml:"db,omitempty" export:"true"`
	MasterName string   `description:"Sentinel: the name of the monitored master; the endpoints are then Sentinels." json:"masterName,omitempty" toml:"masterName,omitempty" yaml:"masterName,omitempty" export:"true"`
	// The Sentinels' own login (their requirepass or ACL user), apart from
	// the servers': empty sends none.
	SentinelUsername string       `description:"Sentinel: user name for the Sentinels (ACL); username stays the servers'." json:"sentinelUsername,omitempty" toml:"sentinelUsername,omitempty" yaml:"sentinelUsername,omitempty" loggable:"false"`
	SentinelPassword string       `description:"Sentinel: password for the Sentinels (their requirepass); password stays the servers'." json:"sentinelPassword,omitempty" toml:"sentinelPassword,omitempty" yaml:"sentinelPassword,omitempty" loggable:"false"`
	TLS              *KVClientTLS `description:"TLS to Redis." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
	// LeaseExpiry is how long a replica's shares outlive its last refresh:
	// the time after which a replica that died is no longer counted.
	LeaseExpiry Duration `description:"How long a replica's counted connections outlive its last refresh (a killed replica's are freed after this)." json:"leaseExpiry,omitempty" toml:"leaseExpiry,omitempty" yaml:"leaseExpiry,omitempty" export:"true"`
	// Timeout bounds each round trip; a slower answer counts as the store
	// being unreachable.
	Timeout Duration `description:"Bound on each round trip to Redis; slower counts as unreachable." json:"timeout,omitempty" toml:"timeout,omitempty" yaml:"timeout,omitempty" export:"true"`
}

// SetDefaults reads 127.0.0.1:6379 with a 10 s lease and a 500 ms timeout.
func (r *RedisStore) SetDefaults() {
	r.Endpoints = []string{"127.0.0.1:6379"}
	r.LeaseExpiry = Duration(10 * time.Second)
	r.Timeout = Duration(500 * time.Millisecond)
}
