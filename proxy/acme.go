package proxy

import (
	"crypto/tls"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// acmeTLS1 is the protocol a TLS-ALPN-01 validation offers, alone (RFC 8737).
const acmeTLS1 = "acme-tls/1"

// answerChallenge completes the TLS handshake of a CA's TLS-ALPN-01
// validation with the certificate cr made for it, then closes the
// connection: nothing is read from it or sent on. Like a terminated
// connection it leaves its loop for a goroutine.
func (e *EntryPoint) answerChallenge(c *tcp.Conn, cr CertResolver) {
	goServeConn(c, func(g *gconn) {
		g.handshakeDeadline()
		conf := &tls.Config{GetCertificate: cr.Challenge, NextProtos: []string{acmeTLS1}, MinVersion: tls.VersionTLS12}
		tc := tls.Server(&replayConn{TCPConn: g.raw, pending: c.Peeked}, conf)
		c.Peeked = nil
		if err := tc.Handshake(); err != nil {
			e.log.Info().Err(err).Str("domain", c.SNI).Str("client_ip", c.Client.Addr().String()).Msg("TLS-ALPN-01 validation: handshake failed")
		} else {
			e.log.Debug().Str("domain", c.SNI).Str("client_ip", c.Client.Addr().String()).Msg("TLS-ALPN-01 validation answered")
		}
		c.Refuse(true)
	})
}
