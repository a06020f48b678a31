package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate-proxy/tollgate/proxy/tlsconf"
)

// CertificateInfo is a loaded certificate as the API shows it: never its key
// (tlsconf.CertificateInfo).
type CertificateInfo = tlsconf.CertificateInfo

// fullHandshake decides, for the connection whose ClientHello chi is, a
// full handshake about to be computed: false when its client key's bucket
// of the entry point's tlsHandshakeRate is empty. It runs where the
// certificate is picked, before any key exchange or signature: in TLS 1.3
// only for a full handshake (a resumed one, with a PSK, picks none), in TLS
// 1.2 for every handshake (it picks the certificate before it knows whether
// the session resumes). Only terminating routers' connections are counted
// (their replayConn knows its gconn).
func fullHandshake(chi *tls.ClientHelloInfo) bool {
	rc, ok := chi.Conn.(*replayConn)
	if !ok || rc.g == nil || rc.g.ep.handshakes == nil {
		return true
	}
	e := rc.g.ep
	admit, _ := e.handshakes.Allow(e.clientKey(rc.g.c.Client.Addr()))
	return admit
}

// Handshake failure reasons, the label of tollgate_tls_handshake_failures_total.
const (
	ReasonNoCertificate     = "no_certificate"
	ReasonProtocolVersion   = "protocol_version"
	ReasonNoSharedCipher    = "no_shared_cipher"
	ReasonBadClientCert     = "bad_client_certificate"
	ReasonTimeout           = "timeout"
	ReasonEOF               = "eof"
	ReasonOther             = "other"
	ReasonRateLimited       = "rate_limited"
	numHandshakeReasons     = 8
	reasonIndexRate         = 7
	reasonIndexNoCert       = 0
	reasonIndexOther        = 6
	reasonIndexTimeout      = 4
	reasonIndexEOF          = 5
	reasonIndexVersion      = 1
	reasonIndexCipher       = 2
	reasonIndexClientCert   = 3
	handshakeDefaultTimeout = 10 * time.Second
)

// HandshakeReasons lists the reasons in their index order.
var HandshakeReasons = [numHandshakeReasons]string{ReasonNoCertificate, ReasonProtocolVersion, ReasonNoSharedCipher, ReasonBadClientCert, ReasonTimeout, ReasonEOF, ReasonOther, ReasonRateLimited}

// classifyHandshake says why a server handshake failed.
func classifyHandshake(err error) int {
	var ne net.Error
	switch {
	case errors.Is(err, tlsconf.ErrNoCertificate):
		return reasonIndexNoCert
	case errors.Is(err, tlsconf.ErrHandshakeRate):
		return reasonIndexRate
	case errors.As(err, &ne) && ne.Timeout():
		return reasonIndexTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return reasonIndexEOF
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "protocol version"), strings.Contains(msg, "unsupported versions"):
		return reasonIndexVersion
	case strings.Contains(msg, "cipher suite"), strings.Contains(msg, "curve"):
		return reasonIndexCipher
	case strings.Contains(msg, "certificate"):
		return reasonIndexClientCert
	case strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"):
		return reasonIndexEOF
	}
	return reasonIndexOther
}

// TLSCounters counts a terminating router's handshakes; kept by name in
// State, so it survives reloads.
type TLSCounters struct {
	Handshakes atomic.Uint64                      // completed
	Failures   [numHandshakeReasons]atomic.Uint64 // by HandshakeReasons index
}
