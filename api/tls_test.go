package api

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// The servers transports list and detail (Traefik's shape: the transport
// with its name and provider), and no private key in any answer: inline
// PEM is shown as a summary (a certificate's fingerprint, a key REDACTED).
func TestServersTransportsAndRedactedKeys(t *testing.T) {
	kp, _ := itest.SelfSigned(t, "db.example")
	kb, err := x509.MarshalPKCS8PrivateKey(kp.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	key := config.FileOrContent(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}))
	cert := config.FileOrContent(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.Certificate[0]}))
	shownCert := "inline PEM: certificate SHA256 " + config.Fingerprint(kp.Certificate[0])
	ep := &config.EntryPoint{Address: "127.0.0.1:0"}
	ep.SetDefaults()
	static := &config.TCPServersTransport{DialTimeout: config.Duration(7 * time.Second)} // the static tcpServersTransport
	srv, err := proxy.NewServer(map[string]*config.EntryPoint{"tcp": ep}, proxy.Options{State: proxy.StateOptions{DefaultTransport: static}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	applied := make(chan struct{}, 4)
	w := &provider.Watcher{Log: zerolog.Nop(), Apply: func(c *config.TCPConfiguration) { srv.Apply(c); applied <- struct{}{} }}
	in := make(chan provider.Message)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, in)
	in <- provider.Message{ProviderName: "file", Configuration: &config.Dynamic{
		TLS: &config.TLSConfiguration{
			Certificates: []*config.CertAndStores{{Certificate: config.Certificate{CertFile: cert, KeyFile: key}}},
			Stores:       map[string]config.TLSStore{"default": {DefaultCertificate: &config.Certificate{CertFile: cert, KeyFile: key}}},
		},
		TCP: &config.TCPConfiguration{
			Routers: map[string]*config.TCPRouter{"db": {Rule: "HostSNI(`db.example`)", Service: "db",
				TLS: &config.RouterTCPTLSConfig{Options: "mtls", CertResolver: "le", Domains: []config.Domain{{Main: "db.example", SANs: []string{"a.db.example"}}}}}},
			Services: map[string]*config.TCPService{"db": {LoadBalancer: &config.TCPServersLoadBalancer{ServersTransport: "pg",
				Servers: []config.TCPServer{{Address: "127.0.0.1:1", TLS: true}}}}},
			ServersTransports: map[string]*config.TCPServersTransport{
				"pg": {DialTimeout: config.Duration(5 * time.Second), TLS: &config.TLSClientConfig{ServerName: "db.internal",
					Certificates: []config.Certificate{{CertFile: cert, KeyFile: key}}}},
				"plain": {TerminationDelay: durationPtr(time.Second)},
			}},
	}}
	select {
	case <-applied:
	case <-time.After(5 * time.Second):
		t.Fatal("configuration not applied")
	}
	h := httptest.NewServer(Handler(Sources{Server: srv, Watcher: w}))
	defer h.Close()

	for _, path := range []string{"/api/rawdata", "/api/tcp/serversTransports", "/api/tcp/serverstransports/pg@file"} {
		code, body := get(t, h.URL+path)
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		if strings.Contains(body, string(key[30:60])) || strings.Contains(body, "PRIVATE KEY") {
			t.Fatalf("%s shows a private key:\n%s", path, body)
		}
		if !strings.Contains(body, `"keyFile": "inline PEM: private key REDACTED"`) {
			t.Fatalf("%s: no redacted keyFile:\n%s", path, body)
		}
	}
	_, body := get(t, h.URL+"/api/rawdata")
	var raw struct {
		TCPServersTransports map[string]json.RawMessage `json:"tcpServersTransports"`
		TLS                  struct {
			Certificates []struct{ CertFile, KeyFile string }
			Stores       map[string]struct{ DefaultCertificate struct{ KeyFile string } }
		} `json:"tls"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.TLS.Certificates) != 1 || raw.TLS.Certificates[0].CertFile != shownCert || raw.TLS.Certificates[0].KeyFile != "inline PEM: private key REDACTED" ||
		raw.TLS.Stores["default"].DefaultCertificate.KeyFile != "inline PEM: private key REDACTED" || len(raw.TCPServersTransports) != 3 {
		t.Fatalf("rawdata tls %+v, transports %v", raw.TLS, raw.TCPServersTransports)
	}

	_, body = get(t, h.URL+"/api/tcp/serversTransports?sortBy=name&direction=desc")
	var list []struct {
		Name, Provider string
		DialTimeout    string
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	// default@internal is listed as Traefik lists it: the static tcpServersTransport.
	if len(list) != 3 || list[0].Name != "plain@file" || list[1].Name != "pg@file" || list[1].Provider != "file" || list[1].DialTimeout != "5s" ||
		list[2].Name != "default@internal" || list[2].Provider != "internal" || list[2].DialTimeout != "7s" {
		t.Fatalf("list %+v (%s)", list, body)
	}
	if code, _ := get(t, h.URL+"/api/tcp/serversTransports/nope@file"); code != 404 {
		t.Fatalf("unknown transport: %d, want 404", code)
	}
	// A router's TLS settings and a service's transport, qualified.
	_, body = get(t, h.URL+"/api/tcp/routers/db@file")
	var r struct {
		TLS struct {
			Options, CertResolver string
			Domains               []config.Domain
		}
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.TLS.Options != "mtls@file" || r.TLS.CertResolver != "le" || len(r.TLS.Domains) != 1 || r.TLS.Domains[0].SANs[0] != "a.db.example" {
		t.Fatalf("router tls %+v (%v): %s", r.TLS, err, body)
	}
	_, body = get(t, h.URL+"/api/tcp/services/db@file")
	if !strings.Contains(body, `"serversTransport": "pg@file"`) || !strings.Contains(body, `"tls": true`) {
		t.Fatalf("service: %s", body)
	}
	// The watcher's configuration itself keeps the key: redaction copies.
	if k := w.Applied().TLS.Certificates[0].KeyFile; k != key {
		t.Fatalf("redaction modified the applied configuration: %q", k)
	}
}

func durationPtr(d time.Duration) *config.Duration { v := config.Duration(d); return &v }
