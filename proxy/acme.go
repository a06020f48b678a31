package proxy

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"

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
	goServeConn(c, func(g *gconn) {
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

// answerHTTP01 serves c, a plain-text connection that no route took on the
// entry point of an httpChallenge, as HTTP/1.1, as Traefik's HTTP router
// of the challenge would: a request for /.well-known/acme-challenge/<token>
// of a name a resolver wants is answered by that resolver (the token's key
// authorization while it validates the name), every other request with
// 404. One request per connection, within the entry point's readTimeout
// (handshakeDefaultTimeout without), on a goroutine of the entry point,
// counted against its client's bound on unrouted connections
// (maxUnroutedPerIP), which nothing else took on an entry point that
// routes without reading.
func (e *EntryPoint) answerHTTP01(c *tcp.Conn, rs []CertResolver) {
	if e.unrouted != nil {
		k := c.Client.Addr()
		if !e.unrouted.Acquire(k) {
			c.Refuse(tcp.Gently(e.rejectUnrouted(k)))
			return
		}
		c.Defer(unroutedSlot{e: e, k: k})
	}
	goServeConn(c, func(g *gconn) {
		timeout := e.readTimeout
		if timeout <= 0 {
			timeout = handshakeDefaultTimeout
		}
		l := &oneConn{conn: &replayConn{TCPConn: g.raw, pending: c.Peeked}, served: make(chan struct{})}
		c.Peeked = nil
		srv := &http.Server{
			Handler:           e.http01Handler(rs, c.Client.Addr()),
			ReadHeaderTimeout: timeout,
			ReadTimeout:       timeout,
			WriteTimeout:      timeout,
			MaxHeaderBytes:    4 << 10,
			ErrorLog:          log.New(io.Discard, "", 0),
			ConnState: func(_ net.Conn, s http.ConnState) {
				if s == http.StateClosed || s == http.StateHijacked {
					l.Close()
				}
			},
		}
		srv.SetKeepAlivesEnabled(false)
		_ = srv.Serve(l)
		c.Refuse(true)
	})
}

// http01Handler sends a request to the resolver that wants its host, or
// answers 404.
func (e *EntryPoint) http01Handler(rs []CertResolver, client netip.Addr) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		host := req.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		for _, r := range rs {
			if !r.Wants(host) {
				continue
			}
			if strings.HasPrefix(req.URL.Path, http01Prefix) {
				e.log.Debug().Str("domain", host).Str("client_ip", client.String()).Str("path", req.URL.Path).Msg("HTTP-01 validation request")
			}
			_, h := r.HTTPChallenge()
			h.ServeHTTP(w, req)
			return
		}
		http.NotFound(w, req)
	})
}

// http01Prefix is the path of HTTP-01 validations (RFC 8555, 8.3).
const http01Prefix = "/.well-known/acme-challenge/"

// unroutedSlot gives back a connection's place under maxUnroutedPerIP when
// it ends.
type unroutedSlot struct {
	e *EntryPoint
	k netip.Addr
}

func (u unroutedSlot) Finish(*tcp.Conn) { u.e.unrouted.Release(u.k) }

// oneConn is a listener that hands an http.Server one connection, then
// waits until Close (the connection closed) to end its Serve.
type oneConn struct {
	conn   net.Conn
	served chan struct{}
	once   sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	if c := l.conn; c != nil {
		l.conn = nil
		return c, nil
	}
	<-l.served
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.served) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return noAddr }
