package proxy

import "bytes"

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
// Traefik does the same.

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
