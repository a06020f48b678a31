package provider

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/tollgate-proxy/tollgate/config"
)

// TLSConfig builds the client TLS configuration of cfg (nil when cfg is
// nil): the meaning of a provider's tls block (ca, cert, key,
// insecureSkipVerify), for the KV stores and the Consul Catalog endpoint.
// option names the option in errors ("providers.etcd.tls").
func TLSConfig(cfg *config.KVClientTLS, option string) (*tls.Config, error) {
	if cfg == nil {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // an explicit option, for tests
	if cfg.CA != "" {
		pem, err := os.ReadFile(cfg.CA)
		if err != nil {
			return nil, fmt.Errorf("%s.ca=%q: %w", option, cfg.CA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.ca=%q: no PEM certificate in the file", option, cfg.CA)
		}
		tc.RootCAs = pool
	}
	switch {
	case cfg.Cert != "" && cfg.Key != "":
		cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("%s.cert=%q, %s.key=%q: %w", option, cfg.Cert, option, cfg.Key, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	case cfg.Cert != "" || cfg.Key != "":
		return nil, fmt.Errorf("%s: set both cert and key, or neither", option)
	}
	return tc, nil
}
