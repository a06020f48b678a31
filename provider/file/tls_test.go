package file

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// selfSigned returns a PEM certificate and key for name.
func selfSigned(t *testing.T, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

const tlsYAML = `tls:
  certificates:
    - certFile: %CERTS%/db.crt
      keyFile: %CERTS%/db.key
    - certFile: |
        -----BEGIN CERTIFICATE-----
        inline
        -----END CERTIFICATE-----
      keyFile: %CERTS%/missing.key
      stores: [default]
  options:
    default:
      minVersion: VersionTLS12
    mtls:
      minVersion: VersionTLS13
      cipherSuites: [TLS_AES_128_GCM_SHA256]
      curvePreferences: [X25519, CurveP256]
      sniStrict: true
      alpnProtocols: [postgresql]
      clientAuth:
        caFiles: [%CERTS%/ca.crt]
        clientAuthType: RequireAndVerifyClientCert
  stores:
    default:
      defaultCertificate:
        certFile: %CERTS%/db.crt
        keyFile: %CERTS%/db.key
tcp:
  serversTransports:
    pg:
      dialTimeout: 5s
      dialKeepAlive: 30s
      terminationDelay: 200ms
      proxyProtocol:
        version: 1
      tls:
        serverName: db.internal
        insecureSkipVerify: false
        rootCAs: [%CERTS%/ca.crt]
        peerCertURI: spiffe://db
        certificates:
          - certFile: %CERTS%/client.crt
            keyFile: %CERTS%/client.key
  routers:
    db:
      rule: HostSNI(` + "`db.example`" + `)
      service: db
      tls:
        options: mtls
        domains:
          - main: db.example
            sans: [a.db.example]
  services:
    db:
      loadBalancer:
        serversTransport: pg
        proxyProtocol: {version: 2}
        terminationDelay: 100
        servers:
          - address: 10.0.0.1:5432
            tls: true
`

const tlsTOML = `[[tls.certificates]]
  certFile = "%CERTS%/db.crt"
  keyFile = "%CERTS%/db.key"
[[tls.certificates]]
  certFile = """-----BEGIN CERTIFICATE-----
inline
-----END CERTIFICATE-----
"""
  keyFile = "%CERTS%/missing.key"
  stores = ["default"]
[tls.options.default]
  minVersion = "VersionTLS12"
[tls.options.mtls]
  minVersion = "VersionTLS13"
  cipherSuites = ["TLS_AES_128_GCM_SHA256"]
  curvePreferences = ["X25519", "CurveP256"]
  sniStrict = true
  alpnProtocols = ["postgresql"]
  [tls.options.mtls.clientAuth]
    caFiles = ["%CERTS%/ca.crt"]
    clientAuthType = "RequireAndVerifyClientCert"
[tls.stores.default.defaultCertificate]
  certFile = "%CERTS%/db.crt"
  keyFile = "%CERTS%/db.key"
[tcp.serversTransports.pg]
  dialTimeout = "5s"
  dialKeepAlive = "30s"
  terminationDelay = "200ms"
  [tcp.serversTransports.pg.proxyProtocol]
    version = 1
  [tcp.serversTransports.pg.tls]
    serverName = "db.internal"
    insecureSkipVerify = false
    rootCAs = ["%CERTS%/ca.crt"]
    peerCertURI = "spiffe://db"
    [[tcp.serversTransports.pg.tls.certificates]]
      certFile = "%CERTS%/client.crt"
      keyFile = "%CERTS%/client.key"
[tcp.routers.db]
  rule = "HostSNI(` + "`db.example`" + `)"
  service = "db"
  [tcp.routers.db.tls]
    options = "mtls"
    [[tcp.routers.db.tls.domains]]
      main = "db.example"
      sans = ["a.db.example"]
[tcp.services.db.loadBalancer]
  serversTransport = "pg"
  terminationDelay = 100
  [tcp.services.db.loadBalancer.proxyProtocol]
    version = 2
  [[tcp.services.db.loadBalancer.servers]]
    address = "10.0.0.1:5432"
    tls = true
`

// The tls section and the servers transports decode from YAML and TOML
// alike, and the files they name are read into the configuration; an
// unreadable one stays a path, with a problem naming it and the key.
func TestTLSDecodesAndInlinesFiles(t *testing.T) {
	certs := t.TempDir()
	dbCert, dbKey := selfSigned(t, "db.example")
	caCert, _ := selfSigned(t, "ca")
	clCert, clKey := selfSigned(t, "client")
	writeFile(t, filepath.Join(certs, "db.crt"), dbCert)
	writeFile(t, filepath.Join(certs, "db.key"), dbKey)
	writeFile(t, filepath.Join(certs, "ca.crt"), caCert)
	writeFile(t, filepath.Join(certs, "client.crt"), clCert)
	writeFile(t, filepath.Join(certs, "client.key"), clKey)
	inlinePEM := "-----BEGIN CERTIFICATE-----\ninline\n-----END CERTIFICATE-----\n"
	// A file read is its content behind a line naming the path as written.
	read := func(name string, b []byte) config.FileOrContent {
		return config.FileContent(filepath.Join(certs, name), b)
	}
	delay := 100
	want := &config.Dynamic{
		TLS: &config.TLSConfiguration{
			Certificates: []*config.CertAndStores{
				{Certificate: config.Certificate{CertFile: read("db.crt", dbCert), KeyFile: read("db.key", dbKey)}},
				{Certificate: config.Certificate{CertFile: config.FileOrContent(inlinePEM), KeyFile: config.FileOrContent(certs + "/missing.key")}, Stores: []string{"default"}},
			},
			Options: map[string]config.TLSOptions{
				"default": {MinVersion: "VersionTLS12"},
				"mtls": {MinVersion: "VersionTLS13", CipherSuites: []string{"TLS_AES_128_GCM_SHA256"}, CurvePreferences: []string{"X25519", "CurveP256"},
					SniStrict: true, ALPNProtocols: []string{"postgresql"},
					ClientAuth: config.ClientAuth{CAFiles: []config.FileOrContent{read("ca.crt", caCert)}, ClientAuthType: "RequireAndVerifyClientCert"}},
			},
			Stores: map[string]config.TLSStore{"default": {DefaultCertificate: &config.Certificate{CertFile: read("db.crt", dbCert), KeyFile: read("db.key", dbKey)}}},
		},
		TCP: &config.TCPConfiguration{
			ServersTransports: map[string]*config.TCPServersTransport{"pg": {
				DialTimeout: config.Duration(5 * time.Second), DialKeepAlive: config.Duration(30 * time.Second), TerminationDelay: durationPtr(200 * time.Millisecond),
				ProxyProtocol: &config.ProxyProtocol{Version: 1},
				TLS: &config.TLSClientConfig{ServerName: "db.internal", RootCAs: []config.FileOrContent{read("ca.crt", caCert)}, PeerCertURI: "spiffe://db",
					Certificates: []config.Certificate{{CertFile: read("client.crt", clCert), KeyFile: read("client.key", clKey)}}},
			}},
			Routers: map[string]*config.TCPRouter{"db": {Rule: "HostSNI(`db.example`)", Service: "db",
				TLS: &config.RouterTCPTLSConfig{Options: "mtls", Domains: []config.Domain{{Main: "db.example", SANs: []string{"a.db.example"}}}}}},
			Services: map[string]*config.TCPService{"db": {LoadBalancer: &config.TCPServersLoadBalancer{ServersTransport: "pg",
				ProxyProtocol: &config.ProxyProtocol{Version: 2}, TerminationDelay: &delay,
				Servers: []config.TCPServer{{Address: "10.0.0.1:5432", TLS: true}}}}},
		},
	}
	for ext, content := range map[string]string{".yml": tlsYAML, ".toml": tlsTOML} {
		t.Run(ext, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dyn"+ext)
			writeFile(t, path, []byte(strings.ReplaceAll(content, "%CERTS%", certs)))
			m := mustNew(t, &config.FileProvider{Filename: path}, provider.Options{}).Load()
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			if !reflect.DeepEqual(m.Configuration, want) {
				t.Fatalf("loaded\n%s\nwant\n%s", dump(m.Configuration), dump(want))
			}
			missing := filepath.Join(certs, "missing.key")
			if len(m.Problems) != 1 || !strings.Contains(m.Problems[0], `"`+path+`"`) || !strings.Contains(m.Problems[0], "tls.certificates[1].keyFile") ||
				!strings.Contains(m.Problems[0], `"`+missing+`"`) || !strings.Contains(m.Problems[0], "no such file") {
				t.Fatalf("problems %q: want one naming %s, the key and %s", m.Problems, path, missing)
			}
		})
	}
}

func dump(d *config.Dynamic) string { return jsonOf(d) }

// A certificate rewritten where it is (another directory than the
// configuration's, renamed into place as cert-manager and editors do, or
// written in place) is a new snapshot within a deadline; a file of
// configuration only TLS-related is no "empty" file.
func TestCertificateRewrittenIsANewSnapshot(t *testing.T) {
	certs, confDir := t.TempDir(), t.TempDir()
	crt, key := filepath.Join(certs, "db.crt"), filepath.Join(certs, "db.key")
	c1, k1 := selfSigned(t, "db.example")
	writeFile(t, crt, c1)
	writeFile(t, key, k1)
	path := filepath.Join(confDir, "tls.yml")
	writeFile(t, path, []byte("tls:\n  certificates:\n    - certFile: "+crt+"\n      keyFile: "+key+"\n"))
	p := mustNew(t, &config.FileProvider{Filename: path, Watch: true}, provider.Options{})
	out := make(chan provider.Message, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, out) }()
	certOf := func(m provider.Message) string {
		if m.Err != nil || m.Configuration == nil || m.Configuration.TLS == nil || len(m.Configuration.TLS.Certificates) != 1 {
			return ""
		}
		return string(m.Configuration.TLS.Certificates[0].CertFile)
	}
	waitCert := func(want []byte, why string) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case m := <-out:
				if certOf(m) == string(config.FileContent(crt, want)) {
					return time.Since(start)
				}
			case <-deadline:
				t.Fatalf("%s: no snapshot with the new certificate within 5s", why)
			}
		}
	}
	waitCert(c1, "first load")

	c2, k2 := selfSigned(t, "db.example")
	writeFile(t, crt+".tmp", c2)
	writeFile(t, key+".tmp", k2)
	if err := os.Rename(key+".tmp", key); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(crt+".tmp", crt); err != nil {
		t.Fatal(err)
	}
	took := waitCert(c2, "renamed into place")
	t.Logf("renamed certificate applied after %v", took)

	c3, _ := selfSigned(t, "db.example")
	writeFile(t, crt, c3) // in place: read once closed
	took = waitCert(c3, "written in place")
	t.Logf("certificate written in place applied after %v", took)

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Directory mode: each file's tls section merges into one; options of the
// same name defined differently keep the first, with a conflict naming
// both files; servers transports likewise.
func TestDirectoryMergesTLS(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yml"), []byte("tls:\n  certificates:\n    - certFile: \"-----BEGIN CERTIFICATE-----a\"\n      keyFile: \"-----BEGIN PRIVATE KEY-----a\"\n  options:\n    o:\n      minVersion: VersionTLS12\ntcp:\n  serversTransports:\n    t:\n      dialTimeout: 1s\n"))
	writeFile(t, filepath.Join(dir, "b.toml"), []byte("[[tls.certificates]]\ncertFile = \"-----BEGIN CERTIFICATE-----b\"\nkeyFile = \"-----BEGIN PRIVATE KEY-----b\"\n[tls.options.o]\nminVersion = \"VersionTLS13\"\n[tcp.serversTransports.t]\ndialTimeout = \"2s\"\n"))
	m := mustNew(t, &config.FileProvider{Directory: dir}, provider.Options{}).Load()
	if m.Err != nil {
		t.Fatal(m.Err)
	}
	tl := m.Configuration.TLS
	if len(tl.Certificates) != 2 || tl.Certificates[1].CertFile != "-----BEGIN CERTIFICATE-----b" || tl.Options["o"].MinVersion != "VersionTLS12" {
		t.Fatalf("merged tls %+v", tl)
	}
	if st := m.Configuration.TCP.ServersTransports["t"]; st == nil || st.DialTimeout != config.Duration(time.Second) {
		t.Fatalf("merged transports %+v", m.Configuration.TCP.ServersTransports)
	}
	if len(m.Problems) != 2 || !strings.Contains(m.Problems[0], `serversTransport "t"`) || !strings.Contains(m.Problems[1], `tls options "o"`) ||
		!strings.Contains(m.Problems[1], "a.yml") || !strings.Contains(m.Problems[1], "b.toml") {
		t.Fatalf("problems %q", m.Problems)
	}
}

func jsonOf(v any) string {
	b, _ := json.MarshalIndent(v, "", " ")
	return string(b)
}

// FuzzReadTLSFiles decodes a file and reads the TLS files it names: no
// input panics, the input configuration is never modified, every path it
// reports is absolute, and every error names the key and the file.
func FuzzReadTLSFiles(f *testing.F) {
	f.Add(tlsYAML, ".yml")
	f.Add(tlsTOML, ".toml")
	f.Add("tls:\n  certificates:\n    - {}\n    - certFile: \"\"\n", ".yml")
	f.Add("tls:\n  stores:\n    default:\n      defaultCertificate: {certFile: /nonexistent}\n", ".yml")
	f.Fuzz(func(t *testing.T, content, ext string) {
		if ext != ".yml" && ext != ".toml" {
			ext = ".yml"
		}
		content = strings.ReplaceAll(content, "%CERTS%", "/nonexistent")
		d, err := DecodeContent(content, ext, "fuzz"+ext)
		if err != nil {
			return
		}
		before := jsonOf(d)
		out, paths, errs := ReadTLSFiles(d)
		if out == nil {
			t.Fatal("nil configuration")
		}
		if jsonOf(d) != before {
			t.Fatal("ReadTLSFiles modified its input")
		}
		for _, p := range paths {
			if !filepath.IsAbs(p) {
				t.Fatalf("path %q is not absolute", p)
			}
		}
		for _, e := range errs {
			if e.Path == "" || len(e.Key) == 0 || !strings.Contains(e.Error(), e.KeyString()) {
				t.Fatalf("error %v does not name its key and file", e)
			}
		}
	})
}

// A FIFO, a device or a directory named as a certificate is an error
// naming it, not a read that blocks the provider.
func TestTLSFileThatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "cert.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	d := &config.Dynamic{TLS: &config.TLSConfiguration{Certificates: []*config.CertAndStores{
		{Certificate: config.Certificate{CertFile: config.FileOrContent(fifo), KeyFile: "/dev/zero"}},
		{Certificate: config.Certificate{CertFile: config.FileOrContent(dir), KeyFile: config.FileOrContent(dir)}},
	}}}
	done := make(chan []TLSFileError, 1)
	go func() { _, _, errs := ReadTLSFiles(d); done <- errs }()
	select {
	case errs := <-done:
		if len(errs) != 4 {
			t.Fatalf("errors %v, want one per file", errs)
		}
		for _, e := range errs {
			if !strings.Contains(e.Error(), "not a regular file") {
				t.Errorf("%v: want it to say it is not a regular file", e)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadTLSFiles blocked on a FIFO or a device")
	}
}

// A transport's terminationDelay: 0 decodes as 0, told from an unset one
// (which the proxy reads as 100 ms), in YAML and in TOML.
func TestTransportTerminationDelayZeroIsKept(t *testing.T) {
	for name, content := range map[string]string{
		"t.yml":  "tcp:\n  serversTransports:\n    zero:\n      terminationDelay: 0\n    unset:\n      dialTimeout: 5s\n",
		"t.toml": "[tcp.serversTransports.zero]\n  terminationDelay = \"0s\"\n[tcp.serversTransports.unset]\n  dialTimeout = \"5s\"\n",
	} {
		d, err := DecodeContent(content, filepath.Ext(name), name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		trs := d.TCP.ServersTransports
		if z := trs["zero"]; z == nil || z.TerminationDelay == nil || *z.TerminationDelay != 0 {
			t.Errorf("%s: zero's terminationDelay = %s, want an explicit 0", name, jsonOf(z))
		}
		if u := trs["unset"]; u == nil || u.TerminationDelay != nil {
			t.Errorf("%s: unset's terminationDelay = %s, want none", name, jsonOf(u))
		}
	}
}

func durationPtr(d time.Duration) *config.Duration { v := config.Duration(d); return &v }

// Any readable file can be named as a certificate: one without a PEM block
// (a password file) is not read into the configuration, where the API and
// the log would show it: it stays its path, with a problem naming it and
// not its content. A PEM file is read in behind its path, which is what
// is shown of it (a private key named as certFile too).
func TestTLSFileWithoutPEMStaysItsPath(t *testing.T) {
	dir := t.TempDir()
	secret, keyPath := filepath.Join(dir, "secret.txt"), filepath.Join(dir, "key.pem")
	writeFile(t, secret, []byte("TOPSECRET-password-42\n"))
	_, key := selfSigned(t, "a.example")
	writeFile(t, keyPath, key)
	d := &config.Dynamic{TLS: &config.TLSConfiguration{Certificates: []*config.CertAndStores{
		{Certificate: config.Certificate{CertFile: config.FileOrContent(secret), KeyFile: config.FileOrContent(keyPath)}},
		{Certificate: config.Certificate{CertFile: config.FileOrContent(keyPath), KeyFile: config.FileOrContent(keyPath)}},
	}}}
	out, _, errs := ReadTLSFiles(d)
	c := out.TLS.Certificates
	if c[0].CertFile != config.FileOrContent(secret) {
		t.Fatalf("a file without PEM was read in: %q", c[0].CertFile)
	}
	if len(errs) != 1 || errs[0].KeyString() != "tls.certificates[0].certFile" || !strings.Contains(errs[0].Error(), `"`+secret+`"`) ||
		!strings.Contains(errs[0].Error(), "no PEM block") || strings.Contains(errs[0].Error(), "TOPSECRET") {
		t.Fatalf("problems %v: want one naming %s and saying it holds no PEM, without its content", errs, secret)
	}
	if c[1].CertFile != config.FileContent(keyPath, key) || c[1].CertFile.Shown() != keyPath || c[0].KeyFile.Shown() != keyPath {
		t.Fatalf("a PEM file read in: %q, shown %q; want its content behind its path, shown as the path", c[1].CertFile, c[1].CertFile.Shown())
	}
}
