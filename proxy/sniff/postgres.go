package sniff

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"time"
)

// PostgreSQL's preambles (docs/reference/tls.md, "PostgreSQL"). A PostgreSQL
// client that wants TLS first sends an SSLRequest (8 bytes: length 8, code
// 80877103) and waits for one byte, 'S' to go on with a TLS handshake. A
// GSSENCRequest (code 80877104; libpq sends it first when it has Kerberos
// credentials) is answered 'N' by a proxy that routes on the ClientHello,
// after which libpq sends its SSLRequest. What the proxy does with them is
// the proxy's (package proxy, postgres.go).

var (
	// SSLRequest is the 8 bytes of a PostgreSQL client's request for TLS.
	SSLRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
	// GSSENCRequest is the 8 bytes of its request for GSSAPI encryption.
	GSSENCRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30}
)

// PGPreamble is how a client's first bytes start, as PGStart says.
type PGPreamble int

const (
	PGNone   PGPreamble = iota // buf does not start with a request: the client's own bytes
	PGMore                     // buf is a proper prefix of a request: more bytes are needed
	PGSSL                      // buf starts with an SSLRequest (8 bytes)
	PGGSSENC                   // buf starts with a GSSENCRequest (8 bytes)
)

// PGStart says how buf, a client's first bytes, starts. It looks at no
// more than 8 bytes; an empty buf needs more.
func PGStart(buf []byte) PGPreamble {
	n := min(len(buf), len(SSLRequest))
	ssl := bytes.Equal(buf[:n], SSLRequest[:n])
	gss := bytes.Equal(buf[:n], GSSENCRequest[:n])
	switch {
	case !ssl && !gss:
		return PGNone
	case n < len(SSLRequest):
		return PGMore
	case ssl:
		return PGSSL
	}
	return PGGSSENC
}

// PGStartTLS asks a PostgreSQL server for TLS on b: an SSLRequest, and 'S'
// back within timeout. Any other answer, or none, is an error saying so.
func PGStartTLS(b net.Conn, timeout time.Duration) error {
	_ = b.SetDeadline(time.Now().Add(timeout))
	defer func() { _ = b.SetDeadline(time.Time{}) }()
	if _, err := b.Write(SSLRequest); err != nil {
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
