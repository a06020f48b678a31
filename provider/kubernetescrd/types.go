package kubernetescrd

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tollgate-proxy/tollgate/config"
)

// MiddlewareTCP is one traefik.io/v1alpha1 MiddlewareTCP as build reads it.
// Spec decodes straight into tollgate's middleware type: the CRD's field names
// (inFlightConn.amount, ipAllowList.sourceRange and its deprecated name
// ipWhiteList, and rateLimit's average, period, burst from Traefik's HTTP
// Middleware) are Traefik's, as are config's; geoIP and crowdSec (issue 47)
// are tollgate's, with config's names (docs/reference/middlewares/).
type MiddlewareTCP struct {
	Namespace string               `json:"namespace"`
	Name      string               `json:"name"`
	Spec      config.TCPMiddleware `json:"spec"`
}

// IngressRouteTCP is one traefik.io/v1alpha1 IngressRouteTCP as build reads it.
type IngressRouteTCP struct {
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	Spec      IngressRouteTCPSpec `json:"spec"`
}

// IngressRouteTCPSpec is an IngressRouteTCP's spec (Traefik's field names).
type IngressRouteTCPSpec struct {
	// EntryPoints the routes listen on; empty means every entry point.
	EntryPoints []string   `json:"entryPoints,omitempty"`
	Routes      []RouteTCP `json:"routes"`
	// TLS, when set, makes every route a TLS router; only Passthrough is served.
	TLS *TLSTCP `json:"tls,omitempty"`
}

// RouteTCP is one route: a rule, its middlewares and its Kubernetes Services.
type RouteTCP struct {
	Match       string            `json:"match"`
	Priority    int               `json:"priority,omitempty"`
	Syntax      string            `json:"syntax,omitempty"`
	Middlewares []ObjectReference `json:"middlewares,omitempty"`
	Services    []ServiceTCP      `json:"services,omitempty"`
}

// ObjectReference names a MiddlewareTCP; an empty Namespace means the
// route's. A Name containing "@" is a cross-provider reference (`mw@file`)
// used as it is.
type ObjectReference struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// ServiceTCP is a route's Kubernetes Service and port. An empty Namespace
// means the route's.
type ServiceTCP struct {
	Name      string             `json:"name"`
	Namespace string             `json:"namespace,omitempty"`
	Port      intstr.IntOrString `json:"port"`
	// Weight is the share of this Service when a route has several; nil means 1.
	Weight *int `json:"weight,omitempty"`
	// NativeLB sends to the Service's cluster IP and port instead of its endpoints.
	NativeLB         *bool                 `json:"nativeLB,omitempty"`
	ProxyProtocol    *config.ProxyProtocol `json:"proxyProtocol,omitempty"`
	TerminationDelay *int                  `json:"terminationDelay,omitempty"`
	ServersTransport string                `json:"serversTransport,omitempty"`
	TLS              bool                  `json:"tls,omitempty"`
}

// TLSTCP is an IngressRouteTCP's TLS section: passthrough, or termination
// with the certificate of SecretName (a kubernetes.io/tls Secret of the
// route's namespace, added to the default store) and the TLSOption named
// by Options.
type TLSTCP struct {
	Passthrough  bool             `json:"passthrough,omitempty"`
	SecretName   string           `json:"secretName,omitempty"`
	CertResolver string           `json:"certResolver,omitempty"`
	Options      *ObjectReference `json:"options,omitempty"`
	Domains      []config.Domain  `json:"domains,omitempty"`
}

// ServersTransportTCP is one traefik.io/v1alpha1 ServersTransportTCP:
// how a route's service dials its servers (`services[].serversTransport`).
type ServersTransportTCP struct {
	Namespace string                  `json:"namespace"`
	Name      string                  `json:"name"`
	Spec      ServersTransportTCPSpec `json:"spec"`
}

// ServersTransportTCPSpec is Traefik's: durations are Go durations or
// integers of seconds.
type ServersTransportTCPSpec struct {
	DialTimeout      *intstr.IntOrString   `json:"dialTimeout,omitempty"`
	DialKeepAlive    *intstr.IntOrString   `json:"dialKeepAlive,omitempty"`
	TerminationDelay *intstr.IntOrString   `json:"terminationDelay,omitempty"`
	ProxyProtocol    *config.ProxyProtocol `json:"proxyProtocol,omitempty"`
	TLS              *TLSClientConfigTCP   `json:"tls,omitempty"`
}

// TLSClientConfigTCP is a ServersTransportTCP's TLS to the servers; the CAs
// (Secrets or ConfigMaps) and client certificates (Secrets) are of the
// transport's namespace.
type TLSClientConfigTCP struct {
	ServerName         string `json:"serverName,omitempty"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
	// RootCAs are CA Secrets or ConfigMaps (Traefik v3's newer form).
	RootCAs []RootCA `json:"rootCAs,omitempty"`
	// RootCAsSecrets is the older form of RootCAs, deprecated in Traefik.
	RootCAsSecrets      []string `json:"rootCAsSecrets,omitempty"`
	CertificatesSecrets []string `json:"certificatesSecrets,omitempty"`
	PeerCertURI         string   `json:"peerCertURI,omitempty"`
	// Spiffe is Traefik's; tollgate cannot apply it: the transport is
	// disabled, and so are the services that use it (config.TLSClientConfig).
	Spiffe *config.SpiffeTransport `json:"spiffe,omitempty"`
}

// RootCA is a CA by Secret or ConfigMap name.
type RootCA struct {
	Secret    string `json:"secret,omitempty"`
	ConfigMap string `json:"configMap,omitempty"`
}

// TLSOption is one traefik.io/v1alpha1 TLSOption: a named set of handshake
// settings; the client CAs are Secrets of its namespace.
type TLSOption struct {
	Namespace string        `json:"namespace"`
	Name      string        `json:"name"`
	Spec      TLSOptionSpec `json:"spec"`
}

// TLSOptionSpec is Traefik's TLSOption spec.
type TLSOptionSpec struct {
	MinVersion               string        `json:"minVersion,omitempty"`
	MaxVersion               string        `json:"maxVersion,omitempty"`
	CipherSuites             []string      `json:"cipherSuites,omitempty"`
	CurvePreferences         []string      `json:"curvePreferences,omitempty"`
	ClientAuth               ClientAuthCRD `json:"clientAuth,omitempty"`
	SniStrict                bool          `json:"sniStrict,omitempty"`
	ALPNProtocols            []string      `json:"alpnProtocols,omitempty"`
	DisableSessionTickets    bool          `json:"disableSessionTickets,omitempty"`
	PreferServerCipherSuites *bool         `json:"preferServerCipherSuites,omitempty"`
}

// ClientAuthCRD is a TLSOption's mutual TLS: CA Secrets by name.
type ClientAuthCRD struct {
	SecretNames    []string `json:"secretNames,omitempty"`
	ClientAuthType string   `json:"clientAuthType,omitempty"`
}

// TLSStore is one traefik.io/v1alpha1 TLSStore; only the one named
// `default` is used, as in Traefik.
type TLSStore struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Spec      TLSStoreSpec `json:"spec"`
}

// TLSStoreSpec is Traefik's TLSStore spec.
type TLSStoreSpec struct {
	DefaultCertificate   *SecretRef            `json:"defaultCertificate,omitempty"`
	DefaultGeneratedCert *config.GeneratedCert `json:"defaultGeneratedCert,omitempty"`
	Certificates         []SecretRef           `json:"certificates,omitempty"`
}

// SecretRef names a kubernetes.io/tls Secret of the resource's namespace.
type SecretRef struct {
	SecretName string `json:"secretName"`
}

// decodeSpec decodes an unstructured spec (as the API server returns it) into
// dst. Fields tollgate does not know are ignored, as in Traefik; a field of
// the wrong type (possible only when the CRD was applied without its schema)
// is an error that names it.
func decodeSpec(spec any, dst any) error {
	if spec == nil {
		return fmt.Errorf("no spec")
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("decoding spec: %w", err)
	}
	return nil
}
