package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"time"
)

// PostgreSQL STARTTLS (README, "TLS termination"). A PostgreSQL client
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
// tollgate's own handshake with it (pgStartTLS), whether the router
// terminates the client's TLS or passes it through, and also for a client
// that started TLS directly with ALPN "postgresql" (PostgreSQL 17's
// sslnegotiation=direct): an SSLRequest is what every PostgreSQL server
// takes.

var (
	pgSSLRequest    = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
	pgGSSENCRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30}
)

type pgKind int

const (
	pgNone   pgKind = iota // buf does not start with a request: the client's own bytes
	pgMore                 // buf is a proper prefix of a request: more bytes are needed
	pgSSL                  // buf starts with an SSLRequest (8 bytes)
	pgGSSENC               // buf starts with a GSSENCRequest (8 bytes)
)

// pgPreamble says how buf, a client's first bytes, starts. It looks at no
// more than 8 bytes; an empty buf needs more.
func pgPreamble(buf []byte) pgKind {
	n := min(len(buf), len(pgSSLRequest))
	ssl := bytes.Equal(buf[:n], pgSSLRequest[:n])
	gss := bytes.Equal(buf[:n], pgGSSENCRequest[:n])
	switch {
	case !ssl && !gss:
		return pgNone
	case n < len(pgSSLRequest):
		return pgMore
	case ssl:
		return pgSSL
	}
	return pgGSSENC
}

// pgStartTLS asks a PostgreSQL server for TLS on b: an SSLRequest, and 'S'
// back within timeout. Any other answer, or none, is an error saying so.
func pgStartTLS(b net.Conn, timeout time.Duration) error {
	_ = b.SetDeadline(time.Now().Add(timeout))
	defer func() { _ = b.SetDeadline(time.Time{}) }()
	if _, err := b.Write(pgSSLRequest); err != nil {
		return fmt.Errorf("PostgreSQL SSLRequest: %w", err)
	}
	var a [1]byte
	if _, err := io.ReadFull(b, a[:]); err != nil {
		return fmt.Errorf("PostgreSQL SSLRequest: no answer: %w", err)
	}
	if a[0] != 'S' {
		return fmt.Errorf("PostgreSQL SSLRequest answered %q: the server does not take TLS", a[0])
	}
	return nil
}
