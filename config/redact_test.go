package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"
)

// keyPair is a self-signed certificate and its key, PEM.
func keyPair(t testing.TB) (cert, key []byte, der []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "a.example"},
		DNSNames: []string{"a.example"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err = x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), der
}

// A file's content behind FileContent's line still reads as the key pair
// it is (PEM readers skip the line), and what is shown of it is its path.
func TestFileContentReadsAsPEMAndShowsItsPath(t *testing.T) {
	cert, key, _ := keyPair(t)
	c, k := FileContent("certs/a.pem", cert), FileContent("/etc/k\"ey\n.pem", key)
	if _, err := tls.X509KeyPair([]byte(c), []byte(k)); err != nil {
		t.Fatalf("a key pair read through FileContent: %v", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM([]byte(c)) {
		t.Fatal("a CA read through FileContent is no certificate")
	}
	if got := c.Shown(); got != "certs/a.pem" {
		t.Errorf("shown %q, want the path as written", got)
	}
	if got := k.Source(); got != "/etc/k\"ey\n.pem" {
		t.Errorf("source %q, want the path as written", got)
	}
}

func TestShown(t *testing.T) {
	cert, key, der := keyPair(t)
	sum := sha256.Sum256(der)
	fp := strings.ToUpper(fmt.Sprintf("%x", sum[:2])) // the first two bytes
	for _, tc := range []struct {
		name, in string
		want     *regexp.Regexp
	}{
		{"path", "/etc/certs/a.pem", regexp.MustCompile(`^/etc/certs/a\.pem$`)},
		{"empty", "", regexp.MustCompile(`^$`)},
		{"inline certificate", string(cert), regexp.MustCompile(`^inline PEM: certificate SHA256 ` + fp[:2] + `:` + fp[2:] + `(:[0-9A-F]{2}){30}$`)},
		{"inline chain", string(cert) + string(cert), regexp.MustCompile(`^inline PEM: certificate SHA256 [0-9A-F:]{95}, 1 more certificates$`)},
		{"inline key", string(key), regexp.MustCompile(`^inline PEM: private key REDACTED$`)},
		{"key and certificate", string(key) + string(cert), regexp.MustCompile(`^inline PEM: private key REDACTED, certificate SHA256 [0-9A-F:]{95}$`)},
		{"PEM that does not decode", "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n", regexp.MustCompile(`^inline PEM: no block that decodes$`)},
		{"content that is no path", "secret line 1\nsecret line 2\n", regexp.MustCompile(`^a value of 28 bytes that is neither a path nor PEM$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FileOrContent(tc.in).Shown()
			if !tc.want.MatchString(got) {
				t.Fatalf("shown %q, want %s", got, tc.want)
			}
		})
	}
}

// Every certificate, key and CA of a tls section and of the servers
// transports is shown by path or summary; a private key named where a
// certificate or a CA goes is no exception; the input is not modified.
func TestRedactTLSShowsNoContent(t *testing.T) {
	cert, key, _ := keyPair(t)
	in := &TLSConfiguration{
		Certificates: []*CertAndStores{
			{Certificate: Certificate{CertFile: FileContent("/c/key-as-cert.pem", key), KeyFile: FileContent("/c/k.pem", key)}},
			{Certificate: Certificate{CertFile: FileOrContent(key), KeyFile: FileOrContent(key)}},
		},
		Options: map[string]TLSOptions{"m": {ClientAuth: ClientAuth{CAFiles: []FileOrContent{FileOrContent(key), FileContent("/c/ca.pem", cert)}}}},
		Stores:  map[string]TLSStore{"default": {DefaultCertificate: &Certificate{CertFile: FileOrContent(cert), KeyFile: FileOrContent(key)}}},
	}
	ts := map[string]*TCPServersTransport{"t": {TLS: &TLSClientConfig{RootCAs: []FileOrContent{FileOrContent(key)},
		Certificates: []Certificate{{CertFile: FileOrContent(key), KeyFile: FileContent("/c/k.pem", key)}}}}}
	b, err := json.Marshal([]any{RedactTLS(in), RedactTransports(ts)})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, secret := range []string{"PRIVATE KEY", string(key[30:60]), string(cert[30:60])} {
		if strings.Contains(s, secret) {
			t.Fatalf("shown %s: holds %q", s, secret)
		}
	}
	for _, want := range []string{`"/c/key-as-cert.pem"`, `"/c/k.pem"`, `"/c/ca.pem"`, `"inline PEM: private key REDACTED"`, `"inline PEM: certificate SHA256 `} {
		if !strings.Contains(s, want) {
			t.Errorf("shown %s: no %s", s, want)
		}
	}
	if in.Certificates[0].KeyFile != FileContent("/c/k.pem", key) || in.Options["m"].ClientAuth.CAFiles[0] != FileOrContent(key) ||
		ts["t"].TLS.RootCAs[0] != FileOrContent(key) {
		t.Fatal("redaction modified its input")
	}
}

// A private key block anywhere in text or JSON is replaced, whole, and
// the JSON stays valid: a key in an error message, with or without its END
// line, beside escaped quotes.
func TestRedactPrivateKeys(t *testing.T) {
	_, key, _ := keyPair(t)
	body := string(key[28 : len(key)-26]) // between the BEGIN and END lines
	for _, tc := range []struct {
		name string
		in   any
	}{
		{"key alone", string(key)},
		{"in a message", `cannot read "` + string(key) + `": bad`},
		{"no END line", "value " + string(key[:len(key)-26])},
		{"RSA and EC", strings.ReplaceAll(string(key), "PRIVATE KEY", "RSA PRIVATE KEY") + " and " + strings.ReplaceAll(string(key), "PRIVATE KEY", "EC PRIVATE KEY")},
		{"in a map", map[string]any{"error": []string{"x " + string(key) + " y"}, "other": "kept"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			out := RedactPrivateKeys(b)
			if !json.Valid(out) {
				t.Fatalf("not JSON after redaction: %s", out)
			}
			if strings.Contains(string(out), "PRIVATE KEY") || strings.Contains(string(out), strings.ReplaceAll(body[:20], "\n", `\n`)) {
				t.Fatalf("a key is left: %s", out)
			}
			if !strings.Contains(string(out), "REDACTED private key") {
				t.Fatalf("no redaction mark: %s", out)
			}
			text := RedactPrivateKeys([]byte(fmt.Sprint(tc.in)))
			if strings.Contains(string(text), "PRIVATE KEY") || strings.Contains(string(text), body[:20]) {
				t.Fatalf("a key is left in text: %s", text)
			}
		})
	}
	if got := string(RedactPrivateKeys([]byte(`{"certFile":"-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----"}`))); !strings.Contains(got, "BEGIN CERTIFICATE") {
		t.Fatalf("a certificate was redacted: %s", got)
	}
}

// What a private key redaction leaves of any JSON string is valid JSON
// with no private key block's BEGIN line in it, and text without a key is
// left as it was.
func FuzzRedactPrivateKeys(f *testing.F) {
	f.Add("-----BEGIN PRIVATE KEY-----\nMIGHAgEA\n-----END PRIVATE KEY-----\n")
	f.Add("x -----BEGIN EC PRIVATE KEY-----\\\"q\" -----END EC PRIVATE KEY----- y")
	f.Add(`-----BEGIN RSA PRIVATE KEY-----\`)
	f.Add("plain text")
	begin := regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----`)
	f.Fuzz(func(t *testing.T, s string) {
		b, err := json.Marshal(map[string]string{"k": s, "s": s})
		if err != nil {
			t.Skip()
		}
		out := RedactPrivateKeys(b)
		if !json.Valid(out) {
			t.Fatalf("invalid JSON from %q: %s", b, out)
		}
		if begin.Match(out) {
			t.Fatalf("a key block is left: %s", out)
		}
		text := RedactPrivateKeys([]byte(s))
		if begin.Match(text) {
			t.Fatalf("a key block is left in text: %q", text)
		}
		if !strings.Contains(s, "PRIVATE KEY") && string(text) != s {
			t.Fatalf("text without a key changed: %q -> %q", s, text)
		}
		if _, ok := FileOrContent(s).FilePath(); !ok && FileOrContent(s).Shown() == s && strings.Contains(s, "\n") {
			t.Fatalf("a value of several lines is shown as it is: %q", s)
		}
	})
}
