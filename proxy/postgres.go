package proxy

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/internal/netpoll"
)

// PostgreSQL STARTTLS (docs/reference/tls.md, "PostgreSQL"). A PostgreSQL client
// that wants TLS first sends an SSLRequest (8 bytes: length 8, code
// 80877103) and waits for one byte, 'S' to go on with a TLS handshake. On
// an entry point where a router has a TLS section, the pre-routing step
// answers it and reads the ClientHello that follows, so that HostSNI
// routing works for `psql "sslmode=require"`; behind a terminating router
// the backend then receives the client's plaintext startup message, as with
// Traefik. A GSSENCRequest (code 80877104; libpq sends it first when it has
// Kerberos credentials) is answered 'N', after which libpq sends its
// SSLRequest.
//
// On a passthrough route the TLS session is the backend's: once connected,
// the loop sends the backend an SSLRequest of its own, and only when the
// backend answers 'S' does the client's ClientHello follow (rconn.pgAsk);
// any other answer, or none within the dial timeout, closes the connection.
// Traefik does the same. A server dialled with `tls` (a servers transport
// re-encrypting to a PostgreSQL with ssl on) is asked the same way before
// tollgate's own handshake with it (sniff.PGStartTLS), whether the router
// terminates the client's TLS or passes it through, and also for a client
// that started TLS directly with ALPN "postgresql" (PostgreSQL 17's
// sslnegotiation=direct): an SSLRequest is what every PostgreSQL server
// takes.

// pgAsk sends the backend the SSLRequest the client sent tollgate and reads
// its one-byte answer: 'S' starts the copy with the client's ClientHello,
// anything else ends the connection (the client, told 'S', waits for a
// ServerHello only the backend can send).
func (rc *rconn) pgAsk() {
	for len(rc.up.pend) > 0 {
		if !rc.up.writable {
			return
		}
		n, err := netpoll.Write(rc.bfd, rc.up.pend)
		if err == unix.EAGAIN {
			rc.up.writable = false
			return
		}
		if err != nil {
			rc.pgRefused("writing the SSLRequest: " + err.Error())
			return
		}
		rc.up.pend = rc.up.pend[n:]
	}
	if !rc.dn.readable {
		return
	}
	var b [1]byte
	n, err := netpoll.Read(rc.bfd, b[:])
	switch {
	case err == unix.EAGAIN:
		rc.dn.readable = false
		return
	case err != nil:
		rc.pgRefused("reading its answer: " + err.Error())
		return
	case n == 0:
		rc.pgRefused("it closed without answering")
		return
	case b[0] != 'S':
		rc.pgRefused(fmt.Sprintf("it answered %q, not 'S' (is ssl on?)", b[0]))
		return
	}
	rc.state = stateProxying
	rc.l.arm(rc, 0)
	// One byte was read of what may be more: read on, the edge is spent.
	rc.up.pend, rc.pgHello, rc.dn.readable = rc.pgHello, nil, true
	rc.pump()
}

// pgRefused logs, at a bounded rate, why a backend did not take PostgreSQL
// TLS, and ends the connection.
func (rc *rconn) pgRefused(why string) {
	lb := rc.p.lb
	if ok, suppressed := lb.counters.dialLog.Allow(ratelog.String(rc.p.srv.address)); ok {
		ev := lb.log.Warn().Str("service", lb.name).Str("server", rc.p.srv.address).Str("router", rc.c.Router).Str("reason", why)
		if suppressed > 0 {
			ev = ev.Uint64("suppressed", suppressed)
		}
		ev.Msg("backend did not agree to PostgreSQL TLS after the client's SSLRequest: connection closed")
	}
	rc.end(true)
}
