package config

// Traefik's static options that tollgate accepts and that change nothing
// here (they configure HTTP or UDP routing), or that it does not do yet:
// their types, so that a Traefik static configuration decodes, in every
// source, under Traefik's names. How each option is taken is decided once,
// in TraefikOptions (traefikopts.go); Validate refuses, and Warnings warns
// about, the ones set that it names.

// HTTPServersTransport is Traefik's serversTransport: how its HTTP services
// dial their servers. TCP services dial with tcpServersTransport.
type HTTPServersTransport struct {
	InsecureSkipVerify  bool                `description:"Accepted for Traefik compatibility: HTTP services' transport (TCP services use tcpServersTransport)." json:"insecureSkipVerify,omitempty" toml:"insecureSkipVerify,omitempty" yaml:"insecureSkipVerify,omitempty" export:"true"`
	RootCAs             []FileOrContent     `description:"Accepted for Traefik compatibility: HTTP services' transport." json:"rootCAs,omitempty" toml:"rootCAs,omitempty" yaml:"rootCAs,omitempty"`
	MaxIdleConnsPerHost int                 `description:"Accepted for Traefik compatibility: HTTP services' transport." json:"maxIdleConnsPerHost,omitempty" toml:"maxIdleConnsPerHost,omitempty" yaml:"maxIdleConnsPerHost,omitempty" export:"true"`
	ForwardingTimeouts  *ForwardingTimeouts `description:"Accepted for Traefik compatibility: HTTP services' timeouts." json:"forwardingTimeouts,omitempty" toml:"forwardingTimeouts,omitempty" yaml:"forwardingTimeouts,omitempty" export:"true"`
	Spiffe              *SpiffeTransport    `description:"Accepted for Traefik compatibility: HTTP services' SPIFFE." json:"spiffe,omitempty" toml:"spiffe,omitempty" yaml:"spiffe,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// ForwardingTimeouts are Traefik's HTTP forwarding timeouts.
type ForwardingTimeouts struct {
	DialTimeout           Duration `description:"Accepted for Traefik compatibility (HTTP)." json:"dialTimeout,omitempty" toml:"dialTimeout,omitempty" yaml:"dialTimeout,omitempty" export:"true"`
	ResponseHeaderTimeout Duration `description:"Accepted for Traefik compatibility (HTTP)." json:"responseHeaderTimeout,omitempty" toml:"responseHeaderTimeout,omitempty" yaml:"responseHeaderTimeout,omitempty" export:"true"`
	IdleConnTimeout       Duration `description:"Accepted for Traefik compatibility (HTTP)." json:"idleConnTimeout,omitempty" toml:"idleConnTimeout,omitempty" yaml:"idleConnTimeout,omitempty" export:"true"`
}

// SpiffeTransport is a transport's SPIFFE identity check.
type SpiffeTransport struct {
	IDs         []string `description:"SPIFFE IDs the servers may present." json:"ids,omitempty" toml:"ids,omitempty" yaml:"ids,omitempty"`
	TrustDomain string   `description:"SPIFFE trust domain of the servers." json:"trustDomain,omitempty" toml:"trustDomain,omitempty" yaml:"trustDomain,omitempty"`
}

// Spiffe is Traefik's spiffe block: where the SPIFFE Workload API is.
type Spiffe struct {
	WorkloadAPIAddr string `description:"Accepted for Traefik compatibility: the SPIFFE Workload API (used by servers transports' spiffe, which tollgate refuses)." json:"workloadAPIAddr,omitempty" toml:"workloadAPIAddr,omitempty" yaml:"workloadAPIAddr,omitempty"`
}

// OCSP is Traefik's ocsp block (OCSP stapling of the certificates served).
type OCSP struct {
	ResponderOverrides map[string]string `description:"Accepted: OCSP responder URLs by certificate responder URL (tollgate staples no OCSP response yet)." json:"responderOverrides,omitempty" toml:"responderOverrides,omitempty" yaml:"responderOverrides,omitempty" export:"true"`
}

// HostResolver is Traefik's hostResolver: CNAME flattening of HTTP hosts.
type HostResolver struct {
	CnameFlattening bool   `description:"Accepted for Traefik compatibility (HTTP hosts)." json:"cnameFlattening,omitempty" toml:"cnameFlattening,omitempty" yaml:"cnameFlattening,omitempty" export:"true"`
	ResolvConfig    string `description:"Accepted for Traefik compatibility (HTTP hosts)." json:"resolvConfig,omitempty" toml:"resolvConfig,omitempty" yaml:"resolvConfig,omitempty" export:"true"`
	ResolvDepth     int    `description:"Accepted for Traefik compatibility (HTTP hosts)." json:"resolvDepth,omitempty" toml:"resolvDepth,omitempty" yaml:"resolvDepth,omitempty" export:"true"`
}

// Experimental is Traefik's experimental block: plugins (HTTP middlewares
// interpreted by Yaegi) and feature gates of providers tollgate does not
// have.
type Experimental struct {
	Plugins                map[string]*PluginDescriptor      `description:"Accepted for Traefik compatibility: plugins are HTTP middlewares." json:"plugins,omitempty" toml:"plugins,omitempty" yaml:"plugins,omitempty" export:"true"`
	LocalPlugins           map[string]*LocalPluginDescriptor `description:"Accepted for Traefik compatibility: plugins are HTTP middlewares." json:"localPlugins,omitempty" toml:"localPlugins,omitempty" yaml:"localPlugins,omitempty" export:"true"`
	AbortOnPluginFailure   bool                              `description:"Accepted for Traefik compatibility (plugins)." json:"abortOnPluginFailure,omitempty" toml:"abortOnPluginFailure,omitempty" yaml:"abortOnPluginFailure,omitempty" export:"true"`
	FastProxy              *FastProxy                        `description:"Accepted for Traefik compatibility: Traefik's HTTP reverse proxy." json:"fastProxy,omitempty" toml:"fastProxy,omitempty" yaml:"fastProxy,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	OTLPLogs               bool                              `description:"OpenTelemetry logs (not yet)." json:"otlplogs,omitempty" toml:"otlplogs,omitempty" yaml:"otlplogs,omitempty" export:"true"`
	Knative                bool                              `description:"Accepted for Traefik compatibility (the Knative provider routes HTTP)." json:"knative,omitempty" toml:"knative,omitempty" yaml:"knative,omitempty" export:"true"`
	KubernetesGateway      bool                              `description:"Accepted for Traefik compatibility (Traefik v3 has the Gateway API provider on without it)." json:"kubernetesGateway,omitempty" toml:"kubernetesGateway,omitempty" yaml:"kubernetesGateway,omitempty" export:"true"`
	KubernetesIngressNGINX bool                              `description:"Accepted for Traefik compatibility (the ingress-nginx provider routes HTTP)." json:"kubernetesIngressNGINX,omitempty" toml:"kubernetesIngressNGINX,omitempty" yaml:"kubernetesIngressNGINX,omitempty" export:"true"`
}

// PluginDescriptor is one of Traefik's plugins, from its catalog.
type PluginDescriptor struct {
	ModuleName string          `description:"Accepted for Traefik compatibility." json:"moduleName,omitempty" toml:"moduleName,omitempty" yaml:"moduleName,omitempty" export:"true"`
	Version    string          `description:"Accepted for Traefik compatibility." json:"version,omitempty" toml:"version,omitempty" yaml:"version,omitempty" export:"true"`
	Hash       string          `description:"Accepted for Traefik compatibility." json:"hash,omitempty" toml:"hash,omitempty" yaml:"hash,omitempty" export:"true"`
	Settings   *PluginSettings `description:"Accepted for Traefik compatibility." json:"settings,omitempty" toml:"settings,omitempty" yaml:"settings,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// LocalPluginDescriptor is one of Traefik's local plugins.
type LocalPluginDescriptor struct {
	ModuleName string          `description:"Accepted for Traefik compatibility." json:"moduleName,omitempty" toml:"moduleName,omitempty" yaml:"moduleName,omitempty" export:"true"`
	Settings   *PluginSettings `description:"Accepted for Traefik compatibility." json:"settings,omitempty" toml:"settings,omitempty" yaml:"settings,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// PluginSettings are a plugin's sandbox settings.
type PluginSettings struct {
	Envs      []string `description:"Accepted for Traefik compatibility." json:"envs,omitempty" toml:"envs,omitempty" yaml:"envs,omitempty" export:"true"`
	Mounts    []string `description:"Accepted for Traefik compatibility." json:"mounts,omitempty" toml:"mounts,omitempty" yaml:"mounts,omitempty" export:"true"`
	UseUnsafe bool     `description:"Accepted for Traefik compatibility." json:"useUnsafe,omitempty" toml:"useUnsafe,omitempty" yaml:"useUnsafe,omitempty" export:"true"`
}

// FastProxy is Traefik's experimental HTTP reverse proxy.
type FastProxy struct {
	Debug bool `description:"Accepted for Traefik compatibility." json:"debug,omitempty" toml:"debug,omitempty" yaml:"debug,omitempty" export:"true"`
}

// EntryPointObservability is Traefik's entryPoints.<name>.observability:
// whether the connections of the entry point are in the access log and the
// per-router metrics (both when unset), and traced (tollgate traces
// nothing yet).
type EntryPointObservability struct {
	AccessLogs     *bool  `description:"Write the entry point's connections to the access log (true when unset)." json:"accessLogs,omitempty" toml:"accessLogs,omitempty" yaml:"accessLogs,omitempty" export:"true"`
	Metrics        *bool  `description:"Count the entry point's connections in the per-router metrics (true when unset)." json:"metrics,omitempty" toml:"metrics,omitempty" yaml:"metrics,omitempty" export:"true"`
	Tracing        bool   `description:"Tracing of the entry point's connections (tollgate traces nothing yet)." json:"tracing,omitempty" toml:"tracing,omitempty" yaml:"tracing,omitempty" export:"true"`
	TraceVerbosity string `description:"Tracing verbosity (tollgate traces nothing yet)." json:"traceVerbosity,omitempty" toml:"traceVerbosity,omitempty" yaml:"traceVerbosity,omitempty" export:"true"`
}

// Observes reports whether the entry point's connections are in the access
// log and in the per-router metrics (observability.accessLogs, .metrics;
// nil or unset is true).
func (o *EntryPointObservability) Observes() (accessLogs, metrics bool) {
	if o == nil {
		return true, true
	}
	return o.AccessLogs == nil || *o.AccessLogs, o.Metrics == nil || *o.Metrics
}

// EncodedCharacters is Traefik's entryPoints.<name>.http.encodedCharacters
// (what encoded characters an HTTP request path may carry).
type EncodedCharacters struct {
	AllowEncodedSlash         bool `description:"Accepted for Traefik compatibility (HTTP)." json:"allowEncodedSlash,omitempty" toml:"allowEncodedSlash,omitempty" yaml:"allowEncodedSlash,omitempty" export:"true"`
	AllowEncodedBackSlash     bool `description:"Accepted for Traefik compatibility (HTTP)." json:"allowEncodedBackSlash,omitempty" toml:"allowEncodedBackSlash,omitempty" yaml:"allowEncodedBackSlash,omitempty" export:"true"`
	AllowEncodedNullCharacter bool `description:"Accepted for Traefik compatibility (HTTP)." json:"allowEncodedNullCharacter,omitempty" toml:"allowEncodedNullCharacter,omitempty" yaml:"allowEncodedNullCharacter,omitempty" export:"true"`
	AllowEncodedSemicolon     bool `description:"Accepted for Traefik compatibility (HTTP)." json:"allowEncodedSemicolon,omitempty" toml:"allowEncodedSemicolon,omitempty" yaml:"allowEncodedSemicolon,omitempty" export:"true"`
	AllowEncodedPercent       bool `description:"Accepted for Traefik compatibility (HTTP)." json:"allowEncodedPercent,omitempty" toml:"allowEncodedPercent,omitempty" yaml:"allowEncodedPercent,omitempty" export:"true"`
	AllowEncodedQuestionMark  bool `description:"Accepted for Traefik compatibility (HTTP)." json:"allowEncodedQuestionMark,omitempty" toml:"allowEncodedQuestionMark,omitempty" yaml:"allowEncodedQuestionMark,omitempty" export:"true"`
	AllowEncodedHash          bool `description:"Accepted for Traefik compatibility (HTTP)." json:"allowEncodedHash,omitempty" toml:"allowEncodedHash,omitempty" yaml:"allowEncodedHash,omitempty" export:"true"`
}

// AccessLogQueryParameters is Traefik's accessLog.fields.queryParameters
// (HTTP query parameters).
type AccessLogQueryParameters struct {
	DefaultMode string `description:"Accepted for Traefik compatibility (HTTP query parameters)." json:"defaultMode,omitempty" toml:"defaultMode,omitempty" yaml:"defaultMode,omitempty" export:"true"`
}

// OTelLog is Traefik's otlp block of log and accessLog: logs sent to an
// OpenTelemetry collector (not yet).
type OTelLog struct {
	ServiceName        string            `description:"OpenTelemetry service name (not yet)." json:"serviceName,omitempty" toml:"serviceName,omitempty" yaml:"serviceName,omitempty" export:"true"`
	ResourceAttributes map[string]string `description:"OpenTelemetry resource attributes (not yet)." json:"resourceAttributes,omitempty" toml:"resourceAttributes,omitempty" yaml:"resourceAttributes,omitempty" export:"true"`
	GRPC               *OTelGRPC         `description:"OpenTelemetry collector over gRPC (not yet)." json:"grpc,omitempty" toml:"grpc,omitempty" yaml:"grpc,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	HTTP               *OTelHTTP         `description:"OpenTelemetry collector over HTTP (not yet)." json:"http,omitempty" toml:"http,omitempty" yaml:"http,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// Tracing is Traefik's tracing block (OpenTelemetry), accepted under its
// names: tollgate traces nothing yet.
type Tracing struct {
	ServiceName             string            `description:"Service name (not yet)." json:"serviceName,omitempty" toml:"serviceName,omitempty" yaml:"serviceName,omitempty" export:"true"`
	ResourceAttributes      map[string]string `description:"Resource attributes (not yet)." json:"resourceAttributes,omitempty" toml:"resourceAttributes,omitempty" yaml:"resourceAttributes,omitempty" export:"true"`
	GlobalAttributes        map[string]string `description:"Deprecated: resourceAttributes (not yet)." json:"globalAttributes,omitempty" toml:"globalAttributes,omitempty" yaml:"globalAttributes,omitempty" export:"true"`
	CapturedRequestHeaders  []string          `description:"HTTP request headers added to spans (not yet)." json:"capturedRequestHeaders,omitempty" toml:"capturedRequestHeaders,omitempty" yaml:"capturedRequestHeaders,omitempty" export:"true"`
	CapturedResponseHeaders []string          `description:"HTTP response headers added to spans (not yet)." json:"capturedResponseHeaders,omitempty" toml:"capturedResponseHeaders,omitempty" yaml:"capturedResponseHeaders,omitempty" export:"true"`
	SafeQueryParams         []string          `description:"Query parameters not redacted (not yet)." json:"safeQueryParams,omitempty" toml:"safeQueryParams,omitempty" yaml:"safeQueryParams,omitempty" export:"true"`
	SampleRate              float64           `description:"Proportion of requests traced, from 0 to 1 (not yet)." json:"sampleRate,omitempty" toml:"sampleRate,omitempty" yaml:"sampleRate,omitempty" export:"true"`
	AddInternals            bool              `description:"Trace internal services (not yet)." json:"addInternals,omitempty" toml:"addInternals,omitempty" yaml:"addInternals,omitempty" export:"true"`
	OTLP                    *OTLPExporter     `description:"OpenTelemetry collector (not yet)." json:"otlp,omitempty" toml:"otlp,omitempty" yaml:"otlp,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// OTLPExporter is where OpenTelemetry data is sent: gRPC or HTTP.
type OTLPExporter struct {
	GRPC *OTelGRPC `description:"Collector over gRPC." json:"grpc,omitempty" toml:"grpc,omitempty" yaml:"grpc,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	HTTP *OTelHTTP `description:"Collector over HTTP." json:"http,omitempty" toml:"http,omitempty" yaml:"http,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// KnativeProvider is Traefik's providers.knative (Knative Serving routes
// HTTP).
type KnativeProvider struct {
	Endpoint           string      `description:"Accepted for Traefik compatibility." json:"endpoint,omitempty" toml:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	Token              string      `description:"Accepted for Traefik compatibility." json:"token,omitempty" toml:"token,omitempty" yaml:"token,omitempty" loggable:"false"`
	CertAuthFilePath   string      `description:"Accepted for Traefik compatibility." json:"certAuthFilePath,omitempty" toml:"certAuthFilePath,omitempty" yaml:"certAuthFilePath,omitempty"`
	Namespaces         []string    `description:"Accepted for Traefik compatibility." json:"namespaces,omitempty" toml:"namespaces,omitempty" yaml:"namespaces,omitempty" export:"true"`
	LabelSelector      string      `description:"Accepted for Traefik compatibility." json:"labelSelector,omitempty" toml:"labelSelector,omitempty" yaml:"labelSelector,omitempty" export:"true"`
	PublicEntrypoints  []string    `description:"Accepted for Traefik compatibility." json:"publicEntrypoints,omitempty" toml:"publicEntrypoints,omitempty" yaml:"publicEntrypoints,omitempty" export:"true"`
	PublicService      *ServiceRef `description:"Accepted for Traefik compatibility." json:"publicService,omitempty" toml:"publicService,omitempty" yaml:"publicService,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	PrivateEntrypoints []string    `description:"Accepted for Traefik compatibility." json:"privateEntrypoints,omitempty" toml:"privateEntrypoints,omitempty" yaml:"privateEntrypoints,omitempty" export:"true"`
	PrivateService     *ServiceRef `description:"Accepted for Traefik compatibility." json:"privateService,omitempty" toml:"privateService,omitempty" yaml:"privateService,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	ThrottleDuration   Duration    `description:"Accepted for Traefik compatibility." json:"throttleDuration,omitempty" toml:"throttleDuration,omitempty" yaml:"throttleDuration,omitempty" export:"true"`
}

// ServiceRef names a Kubernetes Service.
type ServiceRef struct {
	Name      string `description:"Accepted for Traefik compatibility." json:"name,omitempty" toml:"name,omitempty" yaml:"name,omitempty" export:"true"`
	Namespace string `description:"Accepted for Traefik compatibility." json:"namespace,omitempty" toml:"namespace,omitempty" yaml:"namespace,omitempty" export:"true"`
}

// KubernetesIngressNGINXProvider is Traefik's providers.kubernetesIngressNGINX:
// Ingress resources written for ingress-nginx (HTTP routes).
type KubernetesIngressNGINXProvider struct {
	Endpoint                     string           `description:"Accepted for Traefik compatibility." json:"endpoint,omitempty" toml:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	Token                        string           `description:"Accepted for Traefik compatibility." json:"token,omitempty" toml:"token,omitempty" yaml:"token,omitempty" loggable:"false"`
	CertAuthFilePath             string           `description:"Accepted for Traefik compatibility." json:"certAuthFilePath,omitempty" toml:"certAuthFilePath,omitempty" yaml:"certAuthFilePath,omitempty"`
	ThrottleDuration             Duration         `description:"Accepted for Traefik compatibility." json:"throttleDuration,omitempty" toml:"throttleDuration,omitempty" yaml:"throttleDuration,omitempty" export:"true"`
	WatchNamespace               string           `description:"Accepted for Traefik compatibility." json:"watchNamespace,omitempty" toml:"watchNamespace,omitempty" yaml:"watchNamespace,omitempty" export:"true"`
	WatchNamespaceSelector       string           `description:"Accepted for Traefik compatibility." json:"watchNamespaceSelector,omitempty" toml:"watchNamespaceSelector,omitempty" yaml:"watchNamespaceSelector,omitempty" export:"true"`
	IngressClass                 string           `description:"Accepted for Traefik compatibility." json:"ingressClass,omitempty" toml:"ingressClass,omitempty" yaml:"ingressClass,omitempty" export:"true"`
	ControllerClass              string           `description:"Accepted for Traefik compatibility." json:"controllerClass,omitempty" toml:"controllerClass,omitempty" yaml:"controllerClass,omitempty" export:"true"`
	WatchIngressWithoutClass     bool             `description:"Accepted for Traefik compatibility." json:"watchIngressWithoutClass,omitempty" toml:"watchIngressWithoutClass,omitempty" yaml:"watchIngressWithoutClass,omitempty" export:"true"`
	IngressClassByName           bool             `description:"Accepted for Traefik compatibility." json:"ingressClassByName,omitempty" toml:"ingressClassByName,omitempty" yaml:"ingressClassByName,omitempty" export:"true"`
	PublishService               string           `description:"Accepted for Traefik compatibility." json:"publishService,omitempty" toml:"publishService,omitempty" yaml:"publishService,omitempty" export:"true"`
	PublishStatusAddress         []string         `description:"Accepted for Traefik compatibility." json:"publishStatusAddress,omitempty" toml:"publishStatusAddress,omitempty" yaml:"publishStatusAddress,omitempty" export:"true"`
	DefaultBackendService        string           `description:"Accepted for Traefik compatibility." json:"defaultBackendService,omitempty" toml:"defaultBackendService,omitempty" yaml:"defaultBackendService,omitempty" export:"true"`
	DisableSvcExternalName       bool             `description:"Accepted for Traefik compatibility." json:"disableSvcExternalName,omitempty" toml:"disableSvcExternalName,omitempty" yaml:"disableSvcExternalName,omitempty" export:"true"`
	AllowCrossNamespaceResources bool             `description:"Accepted for Traefik compatibility." json:"allowCrossNamespaceResources,omitempty" toml:"allowCrossNamespaceResources,omitempty" yaml:"allowCrossNamespaceResources,omitempty" export:"true"`
	AllowSnippetAnnotations      bool             `description:"Accepted for Traefik compatibility." json:"allowSnippetAnnotations,omitempty" toml:"allowSnippetAnnotations,omitempty" yaml:"allowSnippetAnnotations,omitempty" export:"true"`
	ClientBodyBufferSize         int64            `description:"Accepted for Traefik compatibility." json:"clientBodyBufferSize,omitempty" toml:"clientBodyBufferSize,omitempty" yaml:"clientBodyBufferSize,omitempty" export:"true"`
	CustomHTTPErrors             []string         `description:"Accepted for Traefik compatibility." json:"customHTTPErrors,omitempty" toml:"customHTTPErrors,omitempty" yaml:"customHTTPErrors,omitempty" export:"true"`
	GlobalAllowedResponseHeaders []string         `description:"Accepted for Traefik compatibility." json:"globalAllowedResponseHeaders,omitempty" toml:"globalAllowedResponseHeaders,omitempty" yaml:"globalAllowedResponseHeaders,omitempty" export:"true"`
	GlobalAuthURL                string           `description:"Accepted for Traefik compatibility." json:"globalAuthURL,omitempty" toml:"globalAuthURL,omitempty" yaml:"globalAuthURL,omitempty" export:"true"`
	HTTPEntryPoint               string           `description:"Accepted for Traefik compatibility." json:"httpEntryPoint,omitempty" toml:"httpEntryPoint,omitempty" yaml:"httpEntryPoint,omitempty" export:"true"`
	HTTPSEntryPoint              string           `description:"Accepted for Traefik compatibility." json:"httpsEntryPoint,omitempty" toml:"httpsEntryPoint,omitempty" yaml:"httpsEntryPoint,omitempty" export:"true"`
	IPAllowListStrategy          *NGINXIPStrategy `description:"Accepted for Traefik compatibility." json:"ipAllowListStrategy,omitempty" toml:"ipAllowListStrategy,omitempty" yaml:"ipAllowListStrategy,omitempty" export:"true"`
	ProxyBodySize                int64            `description:"Accepted for Traefik compatibility." json:"proxyBodySize,omitempty" toml:"proxyBodySize,omitempty" yaml:"proxyBodySize,omitempty" export:"true"`
	ProxyBuffering               bool             `description:"Accepted for Traefik compatibility." json:"proxyBuffering,omitempty" toml:"proxyBuffering,omitempty" yaml:"proxyBuffering,omitempty" export:"true"`
	ProxyBufferSize              int64            `description:"Accepted for Traefik compatibility." json:"proxyBufferSize,omitempty" toml:"proxyBufferSize,omitempty" yaml:"proxyBufferSize,omitempty" export:"true"`
	ProxyBuffersNumber           int              `description:"Accepted for Traefik compatibility." json:"proxyBuffersNumber,omitempty" toml:"proxyBuffersNumber,omitempty" yaml:"proxyBuffersNumber,omitempty" export:"true"`
	ProxyConnectTimeout          int              `description:"Accepted for Traefik compatibility." json:"proxyConnectTimeout,omitempty" toml:"proxyConnectTimeout,omitempty" yaml:"proxyConnectTimeout,omitempty" export:"true"`
	ProxyNextUpstream            string           `description:"Accepted for Traefik compatibility." json:"proxyNextUpstream,omitempty" toml:"proxyNextUpstream,omitempty" yaml:"proxyNextUpstream,omitempty" export:"true"`
	ProxyNextUpstreamTimeout     int              `description:"Accepted for Traefik compatibility." json:"proxyNextUpstreamTimeout,omitempty" toml:"proxyNextUpstreamTimeout,omitempty" yaml:"proxyNextUpstreamTimeout,omitempty" export:"true"`
	ProxyNextUpstreamTries       int              `description:"Accepted for Traefik compatibility." json:"proxyNextUpstreamTries,omitempty" toml:"proxyNextUpstreamTries,omitempty" yaml:"proxyNextUpstreamTries,omitempty" export:"true"`
	ProxyReadTimeout             int              `description:"Accepted for Traefik compatibility." json:"proxyReadTimeout,omitempty" toml:"proxyReadTimeout,omitempty" yaml:"proxyReadTimeout,omitempty" export:"true"`
	ProxyRequestBuffering        bool             `description:"Accepted for Traefik compatibility." json:"proxyRequestBuffering,omitempty" toml:"proxyRequestBuffering,omitempty" yaml:"proxyRequestBuffering,omitempty" export:"true"`
	ProxySendTimeout             int              `description:"Accepted for Traefik compatibility." json:"proxySendTimeout,omitempty" toml:"proxySendTimeout,omitempty" yaml:"proxySendTimeout,omitempty" export:"true"`
	StrictValidatePathType       bool             `description:"Accepted for Traefik compatibility." json:"strictValidatePathType,omitempty" toml:"strictValidatePathType,omitempty" yaml:"strictValidatePathType,omitempty" export:"true"`
	UpstreamKeepaliveTimeout     int              `description:"Accepted for Traefik compatibility." json:"upstreamKeepaliveTimeout,omitempty" toml:"upstreamKeepaliveTimeout,omitempty" yaml:"upstreamKeepaliveTimeout,omitempty" export:"true"`
}

// NGINXIPStrategy is ingress-nginx's client IP strategy.
type NGINXIPStrategy struct {
	Depth       int      `description:"Accepted for Traefik compatibility." json:"depth,omitempty" toml:"depth,omitempty" yaml:"depth,omitempty" export:"true"`
	ExcludedIPs []string `description:"Accepted for Traefik compatibility." json:"excludedIPs,omitempty" toml:"excludedIPs,omitempty" yaml:"excludedIPs,omitempty" export:"true"`
	IPv6Subnet  *int     `description:"Accepted for Traefik compatibility." json:"ipv6Subnet,omitempty" toml:"ipv6Subnet,omitempty" yaml:"ipv6Subnet,omitempty" export:"true"`
}
