package itest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// SelfSigned returns a fresh ECDSA P-256 certificate for names (the first is
// also the subject's common name; a name that is an IP address is an IP
// SAN), valid for a day, and a pool that trusts it.
func SelfSigned(t testing.TB, names ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// SelfSignedPEM returns a self-signed certificate for name (and sans),
// valid until notAfter, as PEM: the chain (one certificate) and the key, RSA 2048
// ("RSA PRIVATE KEY", as Traefik's acme.json holds its default keyType's)
// or ECDSA P-256 ("EC PRIVATE KEY").
func SelfSignedPEM(t testing.TB, name string, useRSA bool, notAfter time.Time, sans ...string) (chain, key []byte) {
	t.Helper()
	var priv, pub any
	if useRSA {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		priv, pub = k, &k.PublicKey
		key = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		priv, pub = k, &k.PublicKey
		key = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: append([]string{name}, sans...),
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key
}

// TLSEchoServer listens on a free loopback port with a certificate for
// names; after each handshake it writes banner, then echoes. It returns the
// address and a pool that trusts the certificate; it stops at cleanup.
func TLSEchoServer(t testing.TB, banner string, names ...string) (string, *x509.CertPool) {
	t.Helper()
	cert, pool := SelfSigned(t, names...)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, ln, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, banner); err != nil {
			return
		}
		_, _ = io.Copy(c, c)
	})
	return ln.Addr().String(), pool
}

// Serve accepts on ln until it is closed (at cleanup) and runs handle for
// each connection on a goroutine of its own, closing the connection when
// handle returns. Unlike a Backend, its cleanup does not wait for the
// handlers.
func Serve(t testing.TB, ln net.Listener, handle func(net.Conn)) {
	t.Cleanup(func() { _ = ln.Close() })
	go acceptLoop(ln, nil, nil, handle)
}

// Listen is Serve on a new listener on a free loopback port; it returns
// the address.
func Listen(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, ln, handle)
	return ln.Addr().String()
}

// TLSGreeting completes a TLS handshake for serverName with addr from source
// IP src ("" for any) and returns the server's first byte, or "" with the
// error when the handshake or the read fails.
func TLSGreeting(src, addr, serverName string, roots *x509.CertPool) (string, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer raw.Close()
	c := tls.Client(raw, &tls.Config{ServerName: serverName, RootCAs: roots})
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if err := c.Handshake(); err != nil {
		return "", err
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return "", err
	}
	return string(b[:]), nil
}

// WritePEM writes cert (with its ECDSA key, as SelfSigned makes them) to
// dir as cert.pem and key.pem, for servers and clients that read files, and
// returns their paths.
func WritePEM(t testing.TB, dir string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	kb, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
