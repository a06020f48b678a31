package labels

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
)

// The TCP and TLS part of Traefik v3's own label test
// (pkg/config/label/label_test.go, TestDecodeConfiguration), transcribed:
// these labels in, this configuration out. The servers transport a service
// names, the deprecated terminationDelay and proxyProtocol beside it, a
// router's tls.options and the default store's generated certificate.
func TestTraefikV3DecodeConfigurationTCP(t *testing.T) {
	labels := map[string]string{
		"traefik.tcp.middlewares.Middleware0.ipallowlist.sourcerange":      "foobar, fiibar",
		"traefik.tcp.middlewares.Middleware2.inflightconn.amount":          "42",
		"traefik.tcp.routers.Router0.rule":                                 "foobar",
		"traefik.tcp.routers.Router0.priority":                             "42",
		"traefik.tcp.routers.Router0.entrypoints":                          "foobar, fiibar",
		"traefik.tcp.routers.Router0.service":                              "foobar",
		"traefik.tcp.routers.Router0.tls.passthrough":                      "false",
		"traefik.tcp.routers.Router0.tls.options":                          "foo",
		"traefik.tcp.routers.Router1.rule":                                 "foobar",
		"traefik.tcp.routers.Router1.priority":                             "42",
		"traefik.tcp.routers.Router1.entrypoints":                          "foobar, fiibar",
		"traefik.tcp.routers.Router1.service":                              "foobar",
		"traefik.tcp.routers.Router1.tls.options":                          "foo",
		"traefik.tcp.routers.Router1.tls.passthrough":                      "false",
		"traefik.tcp.services.Service0.loadbalancer.server.Port":           "42",
		"traefik.tcp.services.Service0.loadbalancer.TerminationDelay":      "42",
		"traefik.tcp.services.Service0.loadbalancer.proxyProtocol.version": "42",
		"traefik.tcp.services.Service0.loadbalancer.serversTransport":      "foo",
		"traefik.tcp.services.Service1.loadbalancer.server.Port":           "42",
		"traefik.tcp.services.Service1.loadbalancer.TerminationDelay":      "42",
		"traefik.tcp.services.Service1.loadbalancer.proxyProtocol":         "true",
		"traefik.tcp.services.Service1.loadbalancer.serversTransport":      "foo",
		"traefik.tls.stores.default.defaultgeneratedcert.resolver":         "foobar",
		"traefik.tls.stores.default.defaultgeneratedcert.domain.main":      "foobar",
		"traefik.tls.stores.default.defaultgeneratedcert.domain.sans":      "foobar, fiibar",
		// Not TCP: ignored here, as by tollgate generally.
		"traefik.http.services.Service0.loadbalancer.serversTransport": "foobar",
	}
	d, err := Decode(labels)
	if err != nil {
		t.Fatal(err)
	}
	delay := 42
	router := func() *config.TCPRouter {
		return &config.TCPRouter{EntryPoints: []string{"foobar", "fiibar"}, Service: "foobar", Rule: "foobar", Priority: 42,
			TLS: &config.RouterTCPTLSConfig{Options: "foo"}}
	}
	want := &config.Dynamic{
		TCP: &config.TCPConfiguration{
			Routers: map[string]*config.TCPRouter{"Router0": router(), "Router1": router()},
			Middlewares: map[string]*config.TCPMiddleware{
				"Middleware0": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"foobar", "fiibar"}}},
				"Middleware2": {InFlightConn: &config.TCPInFlightConn{Amount: 42}},
			},
			Services: map[string]*config.TCPService{
				"Service0": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Port: "42"}},
					TerminationDelay: &delay, ProxyProtocol: &config.ProxyProtocol{Version: 42}, ServersTransport: "foo"}},
				"Service1": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Port: "42"}},
					TerminationDelay: &delay, ProxyProtocol: &config.ProxyProtocol{Version: 2}, ServersTransport: "foo"}},
			},
		},
		TLS: &config.TLSConfiguration{Stores: map[string]config.TLSStore{"default": {
			DefaultGeneratedCert: &config.GeneratedCert{Resolver: "foobar", Domain: &config.Domain{Main: "foobar", SANs: []string{"foobar", "fiibar"}}},
		}}},
	}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("decoded\n%#v\n%#v\nwant\n%#v\n%#v", d.TCP, d.TLS, want.TCP, want.TLS)
	}
	if d.TCP.ServersTransports != nil {
		t.Fatalf("labels declared servers transports: %v", d.TCP.ServersTransports)
	}
}

// The router and server TLS labels a Traefik v3 user writes
// (docs/reference/tls.md), one at a time, and the keys labels do not take.
func TestTLSLabels(t *testing.T) {
	tests := []struct {
		name    string
		labels  map[string]string
		want    *config.Dynamic
		wantErr string // the label the error must name, and words of it
	}{{
		name:   "tls=true: termination with the default options",
		labels: map[string]string{"traefik.tcp.routers.r.tls": "true"},
		want:   &config.Dynamic{TCP: &config.TCPConfiguration{Routers: map[string]*config.TCPRouter{"r": {TLS: &config.RouterTCPTLSConfig{}}}}},
	}, {
		name: "certresolver and domains",
		labels: map[string]string{
			"traefik.tcp.routers.r.tls.certresolver":    "le",
			"traefik.tcp.routers.r.tls.domains[0].main": "db.example",
			"traefik.tcp.routers.r.tls.domains[0].sans": "a.db.example,b.db.example",
			"traefik.tcp.routers.r.tls.domains[1].main": "other.example",
			"traefik.tcp.routers.r.tls.options":         "mtls@file",
			"traefik.tcp.routers.r.tls.passthrough":     "false",
			"traefik.tcp.routers.r.rule":                "HostSNI(`db.example`)",
		},
		want: &config.Dynamic{TCP: &config.TCPConfiguration{Routers: map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`db.example`)", TLS: &config.RouterTCPTLSConfig{
			Options: "mtls@file", CertResolver: "le",
			Domains: []config.Domain{{Main: "db.example", SANs: []string{"a.db.example", "b.db.example"}}, {Main: "other.example"}},
		}}}}},
	}, {
		name: "serverstransport and server.tls",
		labels: map[string]string{
			"traefik.tcp.services.s.loadbalancer.serverstransport": "pg@file",
			"traefik.tcp.services.s.loadbalancer.server.tls":       "true",
			"traefik.tcp.services.s.loadbalancer.server.port":      "5432",
		},
		want: &config.Dynamic{TCP: &config.TCPConfiguration{Services: map[string]*config.TCPService{"s": {LoadBalancer: &config.TCPServersLoadBalancer{
			ServersTransport: "pg@file", Servers: []config.TCPServer{{Port: "5432", TLS: true}},
		}}}}},
	}, {
		name:    "servers transports are not declared in labels",
		labels:  map[string]string{"traefik.tcp.serverstransports.t.dialtimeout": "1s"},
		wantErr: "traefik.tcp.serverstransports.t.dialtimeout",
	}, {
		name:    "TLS options are not declared in labels",
		labels:  map[string]string{"traefik.tls.options.mtls.minversion": "VersionTLS13"},
		wantErr: "traefik.tls.options.mtls.minversion",
	}, {
		name:    "certificates are never read from labels",
		labels:  map[string]string{"traefik.tls.certificates[0].certfile": "/etc/ssl/private/key.pem"},
		wantErr: "traefik.tls.certificates[0].certfile",
	}, {
		name:    "nor a store's default certificate",
		labels:  map[string]string{"traefik.tls.stores.default.defaultcertificate.keyfile": "/etc/ssl/private/key.pem"},
		wantErr: "traefik.tls.stores.default.defaultcertificate.keyfile",
	}, {
		name:    "server.tls must be a boolean",
		labels:  map[string]string{"traefik.tcp.services.s.loadbalancer.server.tls": "yes please"},
		wantErr: "traefik.tcp.services.s.loadbalancer.server.tls",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Decode(tt.labels)
			if tt.wantErr != "" {
				var le *Error
				if !errors.As(err, &le) || le.Key != tt.wantErr || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming label %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d, tt.want) {
				t.Fatalf("decoded %#v %#v, want %#v %#v", d.TCP, d.TLS, tt.want.TCP, tt.want.TLS)
			}
		})
	}
}

// A router's ruleSyntax label decodes (Traefik v3's key), as a tag would.
func TestRuleSyntaxLabel(t *testing.T) {
	d, err := Decode(map[string]string{
		"traefik.tcp.routers.r.rule":       "HostSNI(`*`)",
		"traefik.tcp.routers.r.rulesyntax": "v3",
		"traefik.tcp.routers.r.service":    "s",
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := d.TCP.Routers["r"]; r == nil || r.RuleSyntax != "v3" {
		t.Fatalf("router %+v", r)
	}
}
