package kvtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// Cert writes a fresh self-signed certificate for 127.0.0.1 and localhost
// (also its own CA, for servers and clients alike) to dir and returns the
// PEM files of the certificate and its key.
func Cert(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// Routed starts tollgate with flags, writes one router with put, and waits
// until it is enabled as r@prov; it returns the tollgate.
func Routed(t *testing.T, prov string, flags []string, put func(k, v string)) *itest.Tollgate {
	t.Helper()
	backend := itest.EchoServer(t, "")
	tg := itest.StartTollgate(t, append([]string{"--entryPoints.db.address=" + itest.FreeAddr(t)}, flags...)...)
	put("traefik/tcp/services/s/loadBalancer/servers/0/address", backend)
	put("traefik/tcp/routers/r/rule", "HostSNI(`*`)")
	itest.Eventually(t, 5*time.Second, func() bool { return tg.Rawdata(t).Routers["r@"+prov].Status == "enabled" },
		"r@%s enabled: %+v", prov, tg.Rawdata(t).Provider(prov))
	return tg
}

// Failing starts tollgate with flags and waits until provider prov reports
// an error that contains want.
func Failing(t *testing.T, prov string, flags []string, want string) {
	t.Helper()
	tg := itest.StartTollgate(t, append([]string{"--entryPoints.db.address=" + itest.FreeAddr(t)}, flags...)...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rp := tg.Rawdata(t).Provider(prov)
		if rp.State == "error" && strings.Contains(rp.LastError, want) {
			t.Logf("%s: %s", prov, rp.LastError)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider %s: state %q, last error %q; want an error with %q", prov, rp.State, rp.LastError, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
