package config

// The TLS section and the TCP servers transports, as in Traefik v3's dynamic
// configuration, so that a Traefik user's files, labels and keys decode
// unchanged. These are plain values: reading certificate files, building
// *tls.Config and choosing a certificate by SNI are the proxy's
// (docs/reference/tls.md).

// TLSConfiguration is the dynamic configuration's top-level `tls` section:
// certificates, named option sets and stores. A provider writes it in its
// Dynamic.TLS; the watcher merges every provider's into
// TCPConfiguration.TLS, qualifying option names but `default` (Traefik's
// rule), pooling certificates and merging stores by name.
type TLSConfiguration struct {
	// Certificates are the key pairs SNI chooses from (the file provider's
	// `tls.certificates`; never labels, as in Traefik).
	Certificates []*CertAndStores `json:"certificates,omitempty" toml:"certificates,omitempty" yaml:"certificates,omitempty" label:"-" export:"true"`
	// Options are named handshake settings a router picks with
	// `tls.options`; `default` applies to routers that name none. Not in
	// labels or tags, as in Traefik v3.
	Options map[string]TLSOptions `json:"options,omitempty" toml:"options,omitempty" yaml:"options,omitempty" label:"-" export:"true"`
	// Stores hold the default certificate served when no certificate's
	// names match the SNI; only `default` is used, as in Traefik.
	Stores map[string]TLSStore `json:"stores,omitempty" toml:"stores,omitempty" yaml:"stores,omitempty" export:"true"`
}

// FileOrContent is a path to a PEM file or the PEM itself inline, as
// Traefik accepts for certFile, keyFile, caFiles and rootCAs. Which one it
// is, is decided where the file is read (the proxy), not here.
type FileOrContent string

// Certificate is a key pair.
type Certificate struct {
	CertFile FileOrContent `json:"certFile,omitempty" toml:"certFile,omitempty" yaml:"certFile,omitempty"`
	KeyFile  FileOrContent `json:"keyFile,omitempty" toml:"keyFile,omitempty" yaml:"keyFile,omitempty" loggable:"false"`
}

// CertAndStores is a certificate and the stores it belongs to (none: the
// default store).
type CertAndStores struct {
	Certificate `yaml:",inline" export:"true"`
	Stores      []string `json:"stores,omitempty" toml:"stores,omitempty" yaml:"stores,omitempty" export:"true"`
}

// TLSOptions are the settings of a TLS handshake tollgate terminates.
// Empty fields take Go's crypto/tls defaults, except as docs/reference/tls.md
// says.
type TLSOptions struct {
	MinVersion       string     `json:"minVersion,omitempty" toml:"minVersion,omitempty" yaml:"minVersion,omitempty" export:"true"`
	MaxVersion       string     `json:"maxVersion,omitempty" toml:"maxVersion,omitempty" yaml:"maxVersion,omitempty" export:"true"`
	CipherSuites     []string   `json:"cipherSuites,omitempty" toml:"cipherSuites,omitempty" yaml:"cipherSuites,omitempty" export:"true"`
	CurvePreferences []string   `json:"curvePreferences,omitempty" toml:"curvePreferences,omitempty" yaml:"curvePreferences,omitempty" export:"true"`
	ClientAuth       ClientAuth `json:"clientAuth,omitempty" toml:"clientAuth,omitempty" yaml:"clientAuth,omitempty" export:"true"`
	// SniStrict refuses a handshake whose SNI matches no certificate
	// instead of serving the default certificate.
	SniStrict     bool     `json:"sniStrict,omitempty" toml:"sniStrict,omitempty" yaml:"sniStrict,omitempty" export:"true"`
	ALPNProtocols []string `json:"alpnProtocols,omitempty" toml:"alpnProtocols,omitempty" yaml:"alpnProtocols,omitempty" export:"true"`
	// DisableSessionTickets turns off TLS session resumption by tickets.
	DisableSessionTickets bool `json:"disableSessionTickets,omitempty" toml:"disableSessionTickets,omitempty" yaml:"disableSessionTickets,omitempty" export:"true"`
	// PreferServerCipherSuites is accepted and ignored, as in Traefik v3
	// (Go always chooses the order).
	PreferServerCipherSuites *bool `json:"preferServerCipherSuites,omitempty" toml:"preferServerCipherSuites,omitempty" yaml:"preferServerCipherSuites,omitempty" export:"true"`
}

// ClientAuth is mutual TLS at the edge: the CAs a client certificate must
// chain to and Traefik's clientAuthType (NoClientCert, RequestClientCert,
// RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert).
type ClientAuth struct {
	CAFiles        []FileOrContent `json:"caFiles,omitempty" toml:"caFiles,omitempty" yaml:"caFiles,omitempty"`
	ClientAuthType string          `json:"clientAuthType,omitempty" toml:"clientAuthType,omitempty" yaml:"clientAuthType,omitempty" export:"true"`
}

// TLSStore is a certificate store; only its default certificate is used.
type TLSStore struct {
	// DefaultCertificate is read from files and KV stores only: a label
	// never names a key pair on the proxy's disk.
	DefaultCertificate   *Certificate   `json:"defaultCertificate,omitempty" toml:"defaultCertificate,omitempty" yaml:"defaultCertificate,omitempty" label:"-" export:"true"`
	DefaultGeneratedCert *GeneratedCert `json:"defaultGeneratedCert,omitempty" toml:"defaultGeneratedCert,omitempty" yaml:"defaultGeneratedCert,omitempty" export:"true"`
}

// GeneratedCert asks a certificate resolver for the store's default
// certificate (docs/reference/acme.md).
type GeneratedCert struct {
	Resolver string  `json:"resolver,omitempty" toml:"resolver,omitempty" yaml:"resolver,omitempty" export:"true"`
	Domain   *Domain `json:"domain,omitempty" toml:"domain,omitempty" yaml:"domain,omitempty" export:"true"`
}

// Domain is a main name and its alternative names, for a certificate
// resolver.
type Domain struct {
	Main string   `json:"main,omitempty" toml:"main,omitempty" yaml:"main,omitempty"`
	SANs []string `json:"sans,omitempty" toml:"sans,omitempty" yaml:"sans,omitempty"`
}

// TCPServersTransport is how a service dials its servers (Traefik v3's
// `tcp.serversTransports.<name>`), referenced by
// TCPServersLoadBalancer.ServersTransport. Zero durations take the
// defaults docs/reference/servers-transports.md gives.
type TCPServersTransport struct {
	DialKeepAlive Duration `json:"dialKeepAlive,omitempty" toml:"dialKeepAlive,omitempty" yaml:"dialKeepAlive,omitempty" export:"true"`
	DialTimeout   Duration `json:"dialTimeout,omitempty" toml:"dialTimeout,omitempty" yaml:"dialTimeout,omitempty" export:"true"`
	// ProxyProtocol, when set, sends a PROXY header of that version to
	// each server.
	ProxyProtocol *ProxyProtocol `json:"proxyProtocol,omitempty" toml:"proxyProtocol,omitempty" yaml:"proxyProtocol,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	// TerminationDelay is how long the other direction may go on after one
	// side closed its write half: unset, 100 ms; 0, no time (the connection
	// ends with the first side's end); negative, without limit. A pointer,
	// so that an explicit 0 is told from unset (Traefik's SetDefaults gives
	// the same reading).
	TerminationDelay *Duration `json:"terminationDelay,omitempty" toml:"terminationDelay,omitempty" yaml:"terminationDelay,omitempty" export:"true"`
	// TLS, when set, dials the servers with TLS.
	TLS *TLSClientConfig `json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// TLSClientConfig is TLS from tollgate to a server.
type TLSClientConfig struct {
	ServerName         string          `json:"serverName,omitempty" toml:"serverName,omitempty" yaml:"serverName,omitempty"`
	InsecureSkipVerify bool            `json:"insecureSkipVerify,omitempty" toml:"insecureSkipVerify,omitempty" yaml:"insecureSkipVerify,omitempty" export:"true"`
	RootCAs            []FileOrContent `json:"rootCAs,omitempty" toml:"rootCAs,omitempty" yaml:"rootCAs,omitempty"`
	// Certificates are client certificates for mutual TLS to the server.
	Certificates []Certificate `json:"certificates,omitempty" toml:"certificates,omitempty" yaml:"certificates,omitempty" export:"true"`
	// PeerCertURI, when set, requires the server's certificate to carry
	// this URI SAN.
	PeerCertURI string `json:"peerCertURI,omitempty" toml:"peerCertURI,omitempty" yaml:"peerCertURI,omitempty"`
	// Spiffe is Traefik's SPIFFE verification of the servers. tollgate has
	// no SPIFFE Workload API client: a transport that sets it is disabled,
	// and so are the services that use it (docs/reference/servers-transports.md).
	Spiffe *SpiffeTransport `json:"spiffe,omitempty" toml:"spiffe,omitempty" yaml:"spiffe,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}
