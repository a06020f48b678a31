package api

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// GET /api/tls/certificates lists the loaded certificates (names, issuer,
// expiry, routers) and never a key; /metrics counts handshakes by router
// and failures by reason.
func TestTLSCertificatesAndHandshakeMetrics(t *testing.T) {
	kp, _ := itest.SelfSigned(t, "db.example")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "db.crt"), filepath.Join(dir, "db.key")
	kb, err := x509.MarshalPKCS8PrivateKey(kp.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.Certificate[0]}), 0o600)
	_ = os.WriteFile(keyFile, keyPEM, 0o600)
	beAddr := itest.EchoServer(t, "127.0.0.1:0")
	ep := &config.EntryPoint{Address: "127.0.0.1:0"}
	ep.SetDefaults()
	ep.Transport.LifeCycle.GraceTimeOut = 0
	srv, err := proxy.NewServer(map[string]*config.EntryPoint{"tls": ep}, proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	rt := srv.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": {Rule: "HostSNI(`db.example`) || HostSNI(`other.example`)", Service: "s@file", TLS: &config.RouterTCPTLSConfig{Options: "strict@file"}}},
		Services: map[string]*config.TCPService{"s@file": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: beAddr}}}}},
		TLS: &config.TLSConfiguration{
			Certificates: []*config.CertAndStores{{Certificate: config.Certificate{CertFile: config.FileOrContent(certFile), KeyFile: config.FileOrContent(keyFile)}}},
			Options:      map[string]config.TLSOptions{"strict@file": {SniStrict: true}},
		},
	})
	if ri := rt.Routers["db@file"]; ri.Status != proxy.StatusEnabled {
		t.Fatalf("db@file: %s %v", ri.Status, ri.Err)
	}
	w := &provider.Watcher{Apply: func(*config.TCPConfiguration) {}}
	h := httptest.NewServer(Handler(Sources{Server: srv, Watcher: w, Metrics: MetricsHandler(srv, w, nil, nil)}))
	t.Cleanup(h.Close)

	addr := srv.EntryPoint("tls").Addr().String()
	pool := x509.NewCertPool()
	pool.AddCert(kp.Leaf)
	for sni, ok := range map[string]bool{"db.example": true, "other.example": false} {
		raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c := tls.Client(raw, &tls.Config{ServerName: sni, RootCAs: pool, InsecureSkipVerify: !ok})
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := c.Handshake(); (err == nil) != ok {
			t.Errorf("%s: handshake error %v", sni, err)
		}
		_ = raw.Close()
	}

	code, body := get(t, h.URL+"/api/tls/certificates")
	if code != 200 {
		t.Fatalf("GET /api/tls/certificates: %d %s", code, body)
	}
	if strings.Contains(body, "PRIVATE") || strings.Contains(body, string(keyPEM[40:80])) {
		t.Fatal("the certificates endpoint shows key material")
	}
	var certs []proxy.CertificateInfo
	if err := json.Unmarshal([]byte(body), &certs); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, c := range certs {
		if c.Subject == "CN=db.example" {
			found = true
			if len(c.SANs) != 1 || c.SANs[0] != "db.example" || len(c.UsedBy) != 1 || c.UsedBy[0] != "db@file" || c.NotAfter.Before(time.Now()) || c.Source != certFile {
				t.Errorf("db.example certificate shown as %+v", c)
			}
		}
	}
	if !found {
		t.Fatalf("db.example not listed: %s", body)
	}
	tlsLines := func() string {
		_, m := get(t, h.URL+"/metrics")
		var out []string
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, "tollgate_tls_") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	itest.Eventually(t, 5*time.Second, func() bool {
		m := tlsLines()
		return strings.Contains(m, `tollgate_tls_handshakes_total{router="db@file"} 1`) &&
			strings.Contains(m, `tollgate_tls_handshake_failures_total{reason="no_certificate",router="db@file"} 1`)
	}, "handshake metrics")
	// Each certificate's expiry, as Traefik's traefik_tls_certs_not_after.
	prefix := fmt.Sprintf(`tollgate_tls_certs_not_after{cn="db.example",sans="db.example",serial="%s"} `, kp.Leaf.SerialNumber)
	m := tlsLines()
	found = false
	for _, l := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			found = err == nil && int64(f) == kp.Leaf.NotAfter.Unix()
		}
	}
	if !found {
		t.Errorf("no %s%d in\n%s", prefix, kp.Leaf.NotAfter.Unix(), m)
	}
}
