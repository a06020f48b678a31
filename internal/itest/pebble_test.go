package itest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/acme"
)

// TestPebbleIssuesOverTLSALPN proves StartPebble: an account registered,
// an order for a made-up name, its TLS-ALPN-01 challenge answered by a
// listener on the port Pebble validates, and the certificate issued for it
// verifying against IssuerPool with the chain Pebble gives. It also checks
// what the validator sends (the name as SNI, acme-tls/1 as its only
// protocol), which an ACME client's challenge listener relies on.
func TestPebbleIssuesOverTLSALPN(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	p := StartPebble(t, port)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	accountKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	client := &acme.Client{Key: accountKey, DirectoryURL: p.Directory, HTTPClient: p.HTTPClient()}
	if _, err := client.Register(ctx, &acme.Account{}, acme.AcceptTOS); err != nil {
		t.Fatalf("register: %v", err)
	}

	const domain = "db.tollgate.test"
	start := time.Now()
	order, err := client.AuthorizeOrder(ctx, acme.DomainIDs(domain))
	if err != nil {
		t.Fatalf("order: %v", err)
	}
	if len(order.AuthzURLs) != 1 {
		t.Fatalf("order has %d authorizations, want 1", len(order.AuthzURLs))
	}
	authz, err := client.GetAuthorization(ctx, order.AuthzURLs[0])
	if err != nil {
		t.Fatal(err)
	}
	var chal *acme.Challenge
	for _, c := range authz.Challenges {
		if c.Type == "tls-alpn-01" {
			chal = c
		}
	}
	if chal == nil {
		t.Fatalf("no tls-alpn-01 challenge among %d", len(authz.Challenges))
	}
	chalCert, err := client.TLSALPN01ChallengeCert(chal.Token, domain)
	if err != nil {
		t.Fatal(err)
	}

	// The challenge listener: it records what each validation connection
	// asked for, and presents the challenge certificate only when asked for
	// acme-tls/1, as an ACME client's listener would.
	type hello struct {
		sni    string
		protos []string
	}
	var (
		mu     sync.Mutex
		hellos []hello
	)
	cfg := &tls.Config{
		NextProtos: []string{acme.ALPNProto},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			mu.Lock()
			hellos = append(hellos, hello{h.ServerName, h.SupportedProtos})
			mu.Unlock()
			if !slices.Contains(h.SupportedProtos, acme.ALPNProto) || h.ServerName != domain {
				return nil, errors.New("not a TLS-ALPN-01 validation of " + domain)
			}
			return &chalCert, nil
		},
	}
	Serve(t, tls.NewListener(ln, cfg), func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_ = c.(*tls.Conn).Handshake()
		// The validator closes once it has the certificate.
		_, _ = c.Read(make([]byte, 1))
	})

	if _, err := client.Accept(ctx, chal); err != nil {
		t.Fatalf("accept challenge: %v", err)
	}
	if _, err := client.WaitAuthorization(ctx, authz.URI); err != nil {
		t.Fatalf("authorization: %v", err)
	}
	validated := time.Since(start)

	certKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{domain}}, certKey)
	if err != nil {
		t.Fatal(err)
	}
	order, err = client.WaitOrder(ctx, order.URI)
	if err != nil {
		t.Fatalf("order ready: %v", err)
	}
	// Pebble's answer to the finalize request has no Location header (the
	// order is then "processing"), so the order's own URL, which
	// CreateCertFromOrder polls, comes from the order.
	der, _, err := client.CreateCertFromOrder(ctx, order, csr, true)
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	issued := time.Since(start)

	var chain []*x509.Certificate
	for _, b := range der {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, c)
	}
	if len(chain) < 2 {
		t.Fatalf("Pebble gave %d certificates, want the leaf and its intermediate", len(chain))
	}
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: domain, Roots: p.IssuerPool(t), Intermediates: intermediates}); err != nil {
		t.Fatalf("issued certificate does not verify for %s: %v", domain, err)
	}
	// The leaf alone verifies with the management interface's intermediate.
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: domain, Roots: p.IssuerPool(t), Intermediates: p.Intermediates(t)}); err != nil {
		t.Fatalf("leaf and Intermediates do not verify: %v", err)
	}
	// Nor is it signed by the CA of the directory's HTTPS certificate.
	https := x509.NewCertPool()
	https.AppendCertsFromPEM(p.CACert)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: domain, Roots: https, Intermediates: intermediates}); err == nil {
		t.Error("the issued certificate verifies with CACert: IssuerPool and CACert should differ")
	}

	mu.Lock()
	defer mu.Unlock()
	if len(hellos) == 0 {
		t.Fatal("the challenge listener saw no validation")
	}
	for _, h := range hellos {
		if h.sni != domain || !slices.Equal(h.protos, []string{acme.ALPNProto}) {
			t.Errorf("validation connection asked for SNI %q and protocols %q, want %q and [%s]", h.sni, h.protos, domain, acme.ALPNProto)
		}
	}
	t.Logf("validated in %s (%d connections), issued in %s; the certificate is valid for %s, %s to %s, issued by %q",
		validated.Round(time.Millisecond), len(hellos), issued.Round(time.Millisecond),
		leaf.NotAfter.Sub(leaf.NotBefore).Round(time.Second), leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), leaf.Issuer.CommonName)
	t.Logf("leaf: subject %q, DNS names %v, a chain of %d certificates", leaf.Subject.CommonName, leaf.DNSNames, len(chain))
}
