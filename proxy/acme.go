package proxy

import (
	"crypto/tls"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// acmeTLS1 is the protocol a TLS-ALPN-01 validation offers, alone (RFC 8737).
const acmeTLS1 = "acme-tls/1"

// answerChallenge completes the TLS handshake of a CA's TLS-ALPN-01
// validation with the certificate one of the resolvers that want the name
// made for it (two resolvers may want one name: the first that has a
// challenge for it answers), then closes the connection: nothing is read
// from it or sent on. Like a terminated connection it leaves its loop for
// a goroutine.
func (e *EntryPoint) answerChallenge(c *tcp.Conn, rs []CertResolver) {
	challenge := func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		var err error
		for _, cr := range rs {
			var kp *tls.Certificate
			if kp, err = cr.Challenge(h); err == nil {
				return kp, nil
			}
		}
		return nil, err
	}
	goServeConn(c, func(g *gconn) {
		g.handshakeDeadline()
		conf := &tls.Config{GetCertificate: challenge, NextProtos: []string{acmeTLS1}, MinVersion: tls.VersionTLS12}
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
