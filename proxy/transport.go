package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
)

// Servers transports (README, "Servers transports"): how a load balancer
// dials its servers. A service that names none, when the static
// configuration has no tcpServersTransport, keeps DialTimeout and no
// keepalive probes; one that names a transport (or takes the static one)
// takes Traefik's defaults for what the transport leaves unset.
const (
	// TransportDialTimeout is a transport's dialTimeout when unset (Traefik's).
	TransportDialTimeout = 30 * time.Second
	// TransportKeepAlive is a transport's dialKeepAlive when unset (Traefik's).
	TransportKeepAlive = 15 * time.Second
)

// CheckTransport reports what is wrong with a transport whose keys are
// under prefix (the static tcpServersTransport at start): the checks a
// service naming it would fail with.
func CheckTransport(prefix string, tr *config.TCPServersTransport) error {
	if err := validTransport(tr); err != nil {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	if tr.TLS != nil {
		_, err := newClientTLS(prefix, tr.TLS)
		return err
	}
	return nil
}

// validTransport checks what a transport's values can be on their own.
func validTransport(tr *config.TCPServersTransport) error {
	if tr.DialTimeout < 0 {
		return fmt.Errorf("dialTimeout %s is negative", tr.DialTimeout)
	}
	if pp := tr.ProxyProtocol; pp != nil && pp.Version != 1 && pp.Version != 2 {
		return fmt.Errorf("proxyProtocol.version %d is not supported: use 1 or 2", pp.Version)
	}
	return nil
}

// newClientTLS builds the TLS settings a transport dials servers with.
// Without rootCAs the system's roots verify; certificates are client
// certificates for mutual TLS; peerCertURI requires that URI SAN (the chain
// still verified, the host name not, as in Traefik).
// Errors name the key under prefix (tcp.serversTransports.<name>, or the
// static tcpServersTransport).
func newClientTLS(prefix string, t *config.TLSClientConfig) (*tls.Config, error) {
	field := func(f string) string { return fmt.Sprintf("%s.tls.%s", prefix, f) }
	cfg := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if len(t.RootCAs) > 0 {
		pool := x509.NewCertPool()
		for i, f := range t.RootCAs {
			what := field(fmt.Sprintf("rootCAs[%d]", i))
			b, err := readFileOrContent(what, f)
			if err != nil {
				return nil, err
			}
			if !pool.AppendCertsFromPEM(b) {
				return nil, fmt.Errorf("%s %s: no certificate in it", what, describe(f))
			}
		}
		cfg.RootCAs = pool
	}
	for i, c := range t.Certificates {
		kp, err := loadKeyPair(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field(fmt.Sprintf("certificates[%d]", i)), err)
		}
		cfg.Certificates = append(cfg.Certificates, *kp)
	}
	if uri := t.PeerCertURI; uri != "" {
		insecure, roots := t.InsecureSkipVerify, cfg.RootCAs
		cfg.InsecureSkipVerify = true // verified below, without the host name
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("server sent no certificate")
			}
			leaf := cs.PeerCertificates[0]
			if !insecure {
				inter := x509.NewCertPool()
				for _, c := range cs.PeerCertificates[1:] {
					inter.AddCert(c)
				}
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
					return err
				}
			}
			var uris []string
			for _, u := range leaf.URIs {
				uris = append(uris, u.String())
			}
			if !slices.Contains(uris, uri) {
				return fmt.Errorf("server certificate has no URI SAN %q (peerCertURI); it has %v", uri, uris)
			}
			return nil
		}
	}
	return cfg, nil
}
