package kubernetescrd

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tollgate-proxy/tollgate/config"
)

// MiddlewareTCP is one traefik.io/v1alpha1 MiddlewareTCP as build reads it.
// Spec decodes straight into tollgate's middleware type: the CRD's field names
// (inFlightConn.amount, ipAllowList.sourceRange, and rateLimit's average,
// period, burst from Traefik's HTTP Middleware) are Traefik's, as are
// config's.
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

// TLSTCP is an IngressRouteTCP's TLS section.
type TLSTCP struct {
	Passthrough  bool             `json:"passthrough,omitempty"`
	SecretName   string           `json:"secretName,omitempty"`
	CertResolver string           `json:"certResolver,omitempty"`
	Options      *ObjectReference `json:"options,omitempty"`
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
