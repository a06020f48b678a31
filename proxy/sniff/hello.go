package sniff

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"time"
)

// MaxHelloBytes caps what an entry point reads from a client before routing
// it: the whole ClientHello, however many TLS records and TCP segments it
// spans. Browsers send 0.5–2.5 KiB (post-quantum key shares included); 32 KiB
// leaves room for long ALPN and session-ticket extensions while bounding what
// a hostile client can make the proxy buffer. A hello that needs more is
// refused (the connection is closed).
const MaxHelloBytes = 32 << 10

// RecordTypeHandshake is the first byte of a TLS handshake record: a client
// whose first byte is anything else is not speaking TLS.
const RecordTypeHandshake = 0x16

var (
	// errHelloRead is what GetConfigForClient returns to stop crypto/tls once
	// the ClientHello is parsed: the peek only reads (termination, when a router asks for it, comes after routing, on the bytes replayed).
	errHelloRead = errors.New("ClientHello read")
	// ErrHelloTooLarge stops a hello that would exceed the cap ReadHello is given.
	ErrHelloTooLarge = errors.New("ClientHello exceeds the peek limit")
	// errPeekWrite refuses every write crypto/tls attempts (an alert): the
	// client must see nothing from the proxy before the backend answers.
	errPeekWrite = errors.New("peek connection does not write")
)

// IsTLS reports whether peeked, the client's first bytes, start a TLS
// handshake record: on a peeking entry point it tells TLS clients (parsed
// hello) from plain ones (and from silent ones, which sent nothing).
func IsTLS(peeked []byte) bool { return len(peeked) > 0 && peeked[0] == RecordTypeHandshake }

// Hello is what ReadHello learned from a client's first bytes.
type Hello struct {
	TLS    bool     // the first byte starts a TLS handshake record
	SNI    string   // lower-cased server name; empty without SNI or without TLS
	ALPN   []string // offered ALPN protocols, in the client's order
	Peeked []byte   // every byte read, prior bytes first
}

// ReadHello reads from src, after the bytes in prior (which it takes over),
// until it knows whether the client speaks TLS and, if it does, until its
// ClientHello is parsed. It reads at most max bytes in all, and nothing past
// what a single read returns once the hello is complete. The returned Peeked
// bytes are all of prior and everything read, even on error. A server name
// that is not ASCII is an error; one that is comes back lower-cased.
func ReadHello(src io.Reader, prior []byte, max int) (Hello, error) {
	r := helloReader{src: src, buf: prior, max: max}
	if len(r.buf) == 0 {
		r.buf = make([]byte, 0, 2048)
		if err := r.fill(); err != nil {
			return Hello{Peeked: r.buf}, err
		}
	}
	if !IsTLS(r.buf) {
		return Hello{Peeked: r.buf}, nil
	}
	h := Hello{TLS: true}
	var got *tls.ClientHelloInfo
	srv := tls.Server(helloConn{&r}, &tls.Config{
		GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
			got = chi
			return nil, errHelloRead
		},
	})
	err := srv.Handshake()
	h.Peeked = r.buf
	if got == nil {
		if err == nil { // cannot happen: the config has no certificate
			err = errors.New("TLS handshake completed without a ClientHello")
		}
		return h, err
	}
	if !IsASCII(got.ServerName) {
		// RFC 6066 host names are ASCII (IDNs travel as xn-- labels). Refusing
		// the rest keeps the SNI maps and the rule matcher in agreement.
		return h, errors.New("ClientHello server name is not ASCII")
	}
	h.SNI = LowerASCII(got.ServerName)
	h.ALPN = got.SupportedProtos
	return h, nil
}

// helloReader hands crypto/tls the bytes already read, then reads more from
// src into the same buffer, so that everything crypto/tls consumed (and any
// bytes the client sent right behind the hello) stays available to replay.
type helloReader struct {
	src io.Reader
	buf []byte // every byte read so far
	off int    // how much of buf crypto/tls has consumed
	max int
}

// fill reads once from src into buf's spare capacity, growing it as needed
// but never past max.
func (r *helloReader) fill() error {
	if len(r.buf) >= r.max {
		return ErrHelloTooLarge
	}
	if cap(r.buf)-len(r.buf) < 512 {
		n := min(max(2*cap(r.buf), 2048), r.max)
		grown := make([]byte, len(r.buf), n)
		copy(grown, r.buf)
		r.buf = grown
	}
	end := min(cap(r.buf), r.max)
	n, err := r.src.Read(r.buf[len(r.buf):end])
	r.buf = r.buf[:len(r.buf)+n]
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

func (r *helloReader) Read(p []byte) (int, error) {
	if r.off == len(r.buf) {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// helloConn is the net.Conn crypto/tls parses the hello from: reads come from
// a helloReader, writes are refused, deadlines are the caller's business (the
// entry point set one on the socket).
type helloConn struct{ r *helloReader }

var _ net.Conn = helloConn{}

var noAddr net.Addr = &net.TCPAddr{}

func (c helloConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (helloConn) Write([]byte) (int, error)        { return 0, errPeekWrite }
func (helloConn) Close() error                     { return nil }
func (helloConn) LocalAddr() net.Addr              { return noAddr }
func (helloConn) RemoteAddr() net.Addr             { return noAddr }
func (helloConn) SetDeadline(time.Time) error      { return nil }
func (helloConn) SetReadDeadline(time.Time) error  { return nil }
func (helloConn) SetWriteDeadline(time.Time) error { return nil }

// IsASCII reports whether s is ASCII, as RFC 6066 server names are.
func IsASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// LowerASCII lower-cases s, allocating only when s has an upper-case letter:
// a server name as ReadHello reports it, for the certificate and route maps
// keyed by such names.
func LowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
