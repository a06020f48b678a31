package proxy

import (
	"crypto/tls"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// acmeTLS1 is the protocol a TLS-ALPN-01 validation offers, alone (RFC 8737).
const acmeTLS1 = "acme-tls/1"

// validation returns the certificate answering a CA's TLS-ALPN-01
// validation of c's name, when a resolver that wants the name is
// validating it now (two may want one name: the one validating answers),
// else nil. Only then is the connection answered before the routers and
// their middlewares, which would refuse the CA's address or send it on; a
// client that merely offers acme-tls/1 goes through them like any other.
func validation(rs []CertResolver, c *tcp.Conn) *tls.Certificate {
	hello := &tls.ClientHelloInfo{ServerName: c.SNI, SupportedProtos: c.ALPN}
	for _, cr := range rs {
		if !cr.Wants(c.SNI) {
			continue
		}
		if kp, err := cr.Challenge(hello); err == nil && kp != nil {
			return kp
		}
	}
	return nil
}

// answerChallenge completes the TLS handshake of a CA's TLS-ALPN-01
// validation with kp, the certificate the resolver made for it, then
// closes the connection: nothing is read from it or sent on. Like a
// terminated connection it leaves its loop for a goroutine.
func (e *EntryPoint) answerChallenge(c *tcp.Conn, kp *tls.Certificate) {
	offLoop(c, func(g *gconn) {
		g.handshakeDeadline()
		conf := &tls.Config{Certificates: []tls.Certificate{*kp}, NextProtos: []string{acmeTLS1}, MinVersion: tls.VersionTLS12}
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
