package proxy

import (
	"fmt"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/tlsconf"
)

// Servers transports (docs/reference/servers-transports.md): how a load balancer
// dials its servers. A service takes Traefik's defaults for what its
// transport leaves unset, and all of them when it has none (no transport
// named, no static tcpServersTransport), as Traefik's services take its
// default@internal: a 30 s dial timeout and keepalive probes every 15 s.
const (
	// TransportDialTimeout is the dial timeout when a transport leaves
	// dialTimeout unset, or a service has no transport (Traefik's).
	TransportDialTimeout = 30 * time.Second
	// TransportKeepAlive is the interval of keepalive probes when a
	// transport leaves dialKeepAlive unset, or a service has no transport
	// (Traefik's).
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
		_, err := tlsconf.ClientConfig(prefix, tr.TLS)
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
	if tr.TLS != nil && tr.TLS.Spiffe != nil {
		// Dialling without it would accept servers the transport means to
		// refuse: the transport is not usable at all.
		return config.FieldErrorf("tls.spiffe", "tls.spiffe is not supported: tollgate has no SPIFFE Workload API client to verify servers by SPIFFE ID; verify them with tls.rootCAs and tls.peerCertURI instead")
	}
	return nil
}
