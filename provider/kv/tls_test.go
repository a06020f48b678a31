package kv

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Traefik's KV layout for the tls section and the servers transports
// (docs/reference/tls.md): these keys in, this configuration out; a bad key drops
// only its own resource.
func TestBuildTLSAndServersTransports(t *testing.T) {
	pairs := []Pair{
		{"traefik/tls/certificates/0/certFile", "/certs/a.crt"},
		{"traefik/tls/certificates/0/keyFile", "/certs/a.key"},
		{"traefik/tls/certificates/10/certFile", "/certs/c.crt"},
		{"traefik/tls/certificates/10/keyFile", "/certs/c.key"},
		{"traefik/tls/certificates/2/certFile", "/certs/b.crt"},
		{"traefik/tls/certificates/2/keyFile", "/certs/b.key"},
		{"traefik/tls/certificates/2/stores/0", "default"},
		{"traefik/tls/certificates/3/certFiel", "/certs/typo.crt"}, // bad: drops certificate 3 only
		{"traefik/tls/options/default/minVersion", "VersionTLS12"},
		{"traefik/tls/options/mtls/minVersion", "VersionTLS13"},
		{"traefik/tls/options/mtls/cipherSuites/0", "TLS_AES_128_GCM_SHA256"},
		{"traefik/tls/options/mtls/cipherSuites/1", "TLS_AES_256_GCM_SHA384"},
		{"traefik/tls/options/mtls/sniStrict", "true"},
		{"traefik/tls/options/mtls/clientAuth/caFiles/0", "/certs/ca.crt"},
		{"traefik/tls/options/mtls/clientAuth/clientAuthType", "RequireAndVerifyClientCert"},
		{"traefik/tls/options/broken/sniStrict", "maybe"}, // bad: drops options "broken" only
		{"traefik/tls/stores/default/defaultCertificate/certFile", "/certs/d.crt"},
		{"traefik/tls/stores/default/defaultCertificate/keyFile", "/certs/d.key"},
		{"traefik/tcp/serversTransports/pg/dialTimeout", "5s"},
		{"traefik/tcp/serversTransports/pg/dialKeepAlive", "30s"},
		{"traefik/tcp/serversTransports/pg/terminationDelay", "200ms"},
		{"traefik/tcp/serversTransports/pg/proxyProtocol/version", "1"},
		{"traefik/tcp/serversTransports/pg/tls/serverName", "db.internal"},
		{"traefik/tcp/serversTransports/pg/tls/rootCAs/0", "/certs/ca.crt"},
		{"traefik/tcp/serversTransports/pg/tls/certificates/0/certFile", "/certs/client.crt"},
		{"traefik/tcp/serversTransports/pg/tls/certificates/0/keyFile", "/certs/client.key"},
		{"traefik/tcp/serversTransports/pg/tls/peerCertURI", "spiffe://db"},
		{"traefik/tcp/serversTransports/bad/dialTimeout", "soon"}, // bad: drops transport "bad" only
		{"traefik/tcp/services/db/loadBalancer/serversTransport", "pg"},
		{"traefik/tcp/services/db/loadBalancer/terminationDelay", "100"},
		{"traefik/tcp/services/db/loadBalancer/proxyProtocol/version", "2"},
		{"traefik/tcp/services/db/loadBalancer/servers/0/address", "10.0.0.1:5432"},
		{"traefik/tcp/services/db/loadBalancer/servers/0/tls", "true"},
		{"traefik/tcp/routers/db/rule", "HostSNI(`db.example`)"},
		{"traefik/tcp/routers/db/tls/options", "mtls"},
		{"traefik/tcp/routers/db/tls/certResolver", "le"},
		{"traefik/tcp/routers/db/tls/domains/0/main", "db.example"},
		{"traefik/tcp/routers/db/tls/domains/0/sans/0", "a.db.example"},
		{"traefik/tcp/routers/db/tls/domains/0/sans/1", "b.db.example"},
		{"traefik/tls/ocsp/x", "1"}, // unknown: an error that drops nothing
	}
	res := Build(pairs, Options{})
	delay := 100
	want := &config.Dynamic{
		TCP: &config.TCPConfiguration{
			Routers: map[string]*config.TCPRouter{"db": {Rule: "HostSNI(`db.example`)", Service: "db", TLS: &config.RouterTCPTLSConfig{
				Options: "mtls", CertResolver: "le", Domains: []config.Domain{{Main: "db.example", SANs: []string{"a.db.example", "b.db.example"}}}}}},
			Services: map[string]*config.TCPService{"db": {LoadBalancer: &config.TCPServersLoadBalancer{ServersTransport: "pg",
				TerminationDelay: &delay, ProxyProtocol: &config.ProxyProtocol{Version: 2},
				Servers: []config.TCPServer{{Address: "10.0.0.1:5432", TLS: true}}}}},
			Middlewares: map[string]*config.TCPMiddleware{},
			ServersTransports: map[string]*config.TCPServersTransport{"pg": {
				DialTimeout: config.Duration(5 * time.Second), DialKeepAlive: config.Duration(30 * time.Second),
				TerminationDelay: durationPtr(200 * time.Millisecond), ProxyProtocol: &config.ProxyProtocol{Version: 1},
				TLS: &config.TLSClientConfig{ServerName: "db.internal", RootCAs: []config.FileOrContent{"/certs/ca.crt"}, PeerCertURI: "spiffe://db",
					Certificates: []config.Certificate{{CertFile: "/certs/client.crt", KeyFile: "/certs/client.key"}}},
			}},
		},
		TLS: &config.TLSConfiguration{
			Certificates: []*config.CertAndStores{
				{Certificate: config.Certificate{CertFile: "/certs/a.crt", KeyFile: "/certs/a.key"}},
				{Certificate: config.Certificate{CertFile: "/certs/b.crt", KeyFile: "/certs/b.key"}, Stores: []string{"default"}},
				{Certificate: config.Certificate{CertFile: "/certs/c.crt", KeyFile: "/certs/c.key"}},
			},
			Options: map[string]config.TLSOptions{
				"default": {MinVersion: "VersionTLS12"},
				"mtls": {MinVersion: "VersionTLS13", CipherSuites: []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"}, SniStrict: true,
					ClientAuth: config.ClientAuth{CAFiles: []config.FileOrContent{"/certs/ca.crt"}, ClientAuthType: "RequireAndVerifyClientCert"}},
			},
			Stores: map[string]config.TLSStore{"default": {DefaultCertificate: &config.Certificate{CertFile: "/certs/d.crt", KeyFile: "/certs/d.key"}}},
		},
	}
	if !reflect.DeepEqual(res.Configuration, want) {
		t.Errorf("configuration:\n%s\nwant:\n%s", dump(res.Configuration), dump(want))
	}
	wantProblems := []struct {
		key, kind, name, contains string
	}{
		{"traefik/tls/ocsp/x", "", "", `"ocsp" is not one of {options,stores,certificates}`},
		{"traefik/tcp/serversTransports/bad/dialTimeout", provider.KindServersTransport, "bad", `serversTransport "bad" is dropped`},
		{"traefik/tls/options/broken/sniStrict", provider.KindTLSOptions, "broken", `tls options "broken" is dropped`},
		{"traefik/tls/certificates/3/certFiel", provider.KindTLSCertificate, "3", `tls certificate "3" is dropped`},
	}
	if len(res.Problems) != len(wantProblems) {
		t.Fatalf("problems:\n%s\nwant %d", strings.Join(res.Strings(), "\n"), len(wantProblems))
	}
	for i, w := range wantProblems {
		p := res.Problems[i]
		if p.Key != w.key || p.Resource.Kind != w.kind || p.Resource.Name != w.name || !strings.Contains(p.String(), w.contains) {
			t.Errorf("problem %d: %s (%+v), want key %q, %s %q, containing %q", i, p.String(), p.Resource, w.key, w.kind, w.name, w.contains)
		}
	}
}

func durationPtr(d time.Duration) *config.Duration { v := config.Duration(d); return &v }
