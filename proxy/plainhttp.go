package proxy

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// answerHTTP serves c, a plain-text connection that no route took, as
// HTTP/1.1, on an entry point where Traefik would have handed it to its
// HTTP routers and one of them answers: an httpChallenge's (rs), whose
// request for /.well-known/acme-challenge/<token> of a name a resolver
// wants is answered by that resolver (the token's key authorization while
// it validates the name), and http.redirections.entryPoint's (e.redirect),
// which redirects every other request; the rest get 404. One request per
// connection, within the entry point's readTimeout (handshakeDefaultTimeout
// without), on a goroutine of the entry point, counted against its client's
// bound on unrouted connections (maxUnroutedPerIP), which nothing else took
// on an entry point that routes without reading.
func (e *EntryPoint) answerHTTP(c *tcp.Conn, rs []CertResolver) {
	k, ok, gently := e.admitUnrouted(c)
	if !ok {
		c.Refuse(c.Gently(gently))
		return
	}
	c.Defer(unroutedSlot{e: e, k: k})
	offLoop(c, func(g *gconn) {
		timeout := e.readTimeout
		if timeout <= 0 {
			timeout = handshakeDefaultTimeout
		}
		l := &oneConn{conn: &replayConn{TCPConn: g.raw, pending: c.Peeked}, served: make(chan struct{})}
		c.Peeked = nil
		srv := &http.Server{
			Handler:           e.httpHandler(rs, c.Client.Addr()),
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

// httpHandler sends a validation request to the resolver that wants its
// host, redirects the others when the entry point redirects, or answers 404.
func (e *EntryPoint) httpHandler(rs []CertResolver, client netip.Addr) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		host := req.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if strings.HasPrefix(req.URL.Path, http01Prefix) {
			for _, r := range rs {
				if !r.Wants(host) {
					continue
				}
				e.log.Debug().Str("domain", host).Str("client_ip", client.String()).Str("path", req.URL.Path).Msg("HTTP-01 validation request")
				_, h := r.HTTPChallenge()
				h.ServeHTTP(w, req)
				return
			}
		}
		if rd := e.redirect; rd != nil && host != "" {
			redirect(w, req, host, rd)
			return
		}
		http.NotFound(w, req)
	})
}

// redirect answers as Traefik's entry point redirection: to the same host
// and path on rd's scheme and port; 301 (permanent) or 302 for a GET, 308
// or 307 for another method.
func redirect(w http.ResponseWriter, req *http.Request, host string, rd *config.Redirect) {
	u := url.URL{Scheme: rd.Scheme, Host: host}
	if strings.Contains(host, ":") { // an IPv6 address
		u.Host = "[" + host + "]"
	}
	if rd.Port != 0 {
		u.Host = net.JoinHostPort(host, strconv.Itoa(rd.Port))
	}
	status := http.StatusFound
	if req.Method != http.MethodGet {
		status = http.StatusTemporaryRedirect
	}
	if rd.Permanent {
		status = http.StatusMovedPermanently
		if req.Method != http.MethodGet {
			status = http.StatusPermanentRedirect
		}
	}
	w.Header().Set("Location", u.String()+req.URL.RequestURI())
	w.WriteHeader(status)
	_, _ = io.WriteString(w, http.StatusText(status))
}

// http01Prefix is the path of HTTP-01 validations (RFC 8555, 8.3).
const http01Prefix = "/.well-known/acme-challenge/"

// unroutedSlot gives back a connection's place under maxUnrouted and
// maxUnroutedPerIP when it ends.
type unroutedSlot struct {
	e *EntryPoint
	k netip.Addr
}

func (u unroutedSlot) Finish(*tcp.Conn) { u.e.releaseUnrouted(u.k) }

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

var noAddr net.Addr = &net.TCPAddr{}
