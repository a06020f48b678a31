package tlsconf

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

func entry(t *testing.T, name string, sans ...string) *config.CertAndStores {
	chain, key := itest.SelfSignedPEM(t, name, false, time.Now().Add(time.Hour), sans...)
	return &config.CertAndStores{Certificate: config.Certificate{CertFile: config.FileOrContent(chain), KeyFile: config.FileOrContent(key)}}
}

// A store finds certificates by exact name, then by a wildcard one label
// deep, and disables what a broken certificate would have served.
func TestStoreBySNI(t *testing.T) {
	broken := &config.CertAndStores{Certificate: config.Certificate{CertFile: "/nonexistent/broken.pem", KeyFile: "/nonexistent/broken.key"}}
	s := NewStore(&config.TLSConfiguration{Certificates: []*config.CertAndStores{
		entry(t, "db.example"), entry(t, "*.wild.example"), broken,
	}}, generateDefault)
	for name, want := range map[string]bool{"db.example": true, "x.wild.example": true, "a.b.wild.example": false, "other.example": false} {
		if got := s.Get(name) != nil; got != want {
			t.Errorf("Get(%q) found %v, want %v", name, got, want)
		}
	}
	if !s.Covers("*.wild.example") || s.Covers("*.example") {
		t.Error("Covers: a wildcard name is covered by the same wildcard only")
	}
	if err := s.Need([]string{"db.example"}); err != nil {
		t.Errorf("a router served by a loaded certificate: %v", err)
	}
	if err := s.Need([]string{"unknown.example"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/broken.pem") {
		t.Errorf("a name only a broken certificate might serve: %v, want the broken file named", err)
	}
	if len(s.Infos) != 4 { // three configured, one generated default
		t.Errorf("%d certificates listed, want 4", len(s.Infos))
	}
}

// Every error of an option set names the option and the value.
func TestServerConfigErrors(t *testing.T) {
	s := NewStore(nil, generateDefault)
	admit := func(*tls.ClientHelloInfo) bool { return true }
	for _, tc := range []struct {
		o    config.TLSOptions
		want string
	}{
		{config.TLSOptions{MinVersion: "VersionTLS9"}, `tls.options.o.minVersion "VersionTLS9"`},
		{config.TLSOptions{MinVersion: "VersionTLS13", MaxVersion: "VersionTLS12"}, "tls.options.o.maxVersion"},
		{config.TLSOptions{CipherSuites: []string{"TLS_NONE"}}, `tls.options.o.cipherSuites: "TLS_NONE"`},
		{config.TLSOptions{CurvePreferences: []string{"P999"}}, `tls.options.o.curvePreferences: "P999"`},
	} {
		if _, err := ServerConfig("o", tc.o, s, admit); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.o, err, tc.want)
		}
	}
	cfg, err := ServerConfig("default", config.TLSOptions{}, s, func(*tls.ClientHelloInfo) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.GetCertificate(&tls.ClientHelloInfo{ServerName: "db.example"}); !errors.Is(err, ErrHandshakeRate) {
		t.Errorf("a hello admit refuses: %v, want ErrHandshakeRate", err)
	}
}

func TestClientConfigNamesTheKey(t *testing.T) {
	_, err := ClientConfig("tcp.serversTransports.t", &config.TLSClientConfig{RootCAs: []config.FileOrContent{"/nonexistent/ca.pem"}})
	if err == nil || !strings.Contains(err.Error(), "tcp.serversTransports.t.tls.rootCAs[0]") {
		t.Fatalf("%v, want the key named", err)
	}
}
