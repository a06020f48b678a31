package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Before routing, an entry point with PROXY protocol or a TLS route reads what
// the client sends first: the PROXY header, then enough to tell a TLS
// ClientHello from plain TCP. All of it happens under one deadline counted
// from accept (readTimeout), and a client that sends nothing at all within
// serverFirstTimeout is taken for a client of a server-first protocol (the
// server speaks first: SMTP, MySQL) and routed as plain TCP, the way HAProxy
// routes what is left when its inspect-delay expires.

// errSilent is what prereader.Read returns when the client has sent nothing
// by the server-first time: it waits for the server.
var errSilent = errors.New("client sent nothing: waiting for the server to speak first")

// prereader reads a client's first bytes under the pre-routing deadlines. It
// sets a socket deadline only when the one in force must change.
type prereader struct {
	conn     *net.TCPConn
	deadline time.Time // the whole pre-routing phase; zero for none
	silentBy time.Time // no byte yet by then: errSilent; zero to wait for deadline
	set      time.Time // deadline currently set on conn
	armed    bool      // set is in force on conn
	silent   bool      // a read returned errSilent: the client waits for the server
}

// expectFirstByte makes a read that gets no byte by t (bounded by the
// deadline) return errSilent. A zero t waits until the deadline.
func (p *prereader) expectFirstByte(t time.Time) {
	if !t.IsZero() && !p.deadline.IsZero() && t.After(p.deadline) {
		t = p.deadline
	}
	p.silentBy = t
}

func (p *prereader) Read(b []byte) (int, error) {
	want, silent := p.deadline, false
	if !p.silentBy.IsZero() {
		want, silent = p.silentBy, true
	}
	if !p.armed || !want.Equal(p.set) {
		_ = p.conn.SetReadDeadline(want)
		p.set, p.armed = want, true
	}
	n, err := p.conn.Read(b)
	if n > 0 {
		p.silentBy = time.Time{} // the client speaks: from now on only the deadline
		return n, err
	}
	if silent && errors.Is(err, os.ErrDeadlineExceeded) {
		p.silent = true
		return 0, errSilent
	}
	return n, err
}

// done clears the deadline set for pre-routing reads.
func (p *prereader) done() {
	if p.armed && !p.set.IsZero() {
		_ = p.conn.SetReadDeadline(time.Time{})
	}
}

// PROXY protocol framing. go-proxyproto parses a header; reading one off a
// socket is done here, because its reader waits for 12 bytes before it
// decides that bytes such as Redis's "PING\r\n" (6 bytes, starting like a v1
// or v2 signature) are no header, and drops a v1 header that arrives in two
// segments. Here the decision is made as soon as the bytes read so far cannot
// start a signature, and a header is assembled across segments until it is
// complete, under the caller's deadline.

var (
	sigV1 = []byte("PROXY ")
	sigV2 = proxyproto.SIGV2
)

const (
	maxV1Header = 107      // the longest v1 line, CRLF included (the spec's bound)
	v2Fixed     = 16       // signature, version/command, family, length
	maxV2Header = 16 << 10 // a v2 header (with TLVs) longer than this is refused
)

// errBadHeader is wrapped by every framing error.
var errBadHeader = errors.New("bad PROXY protocol header")

// headerEnd reports how buf (a client's first bytes) starts: -1 when it cannot
// start a PROXY header, 0 when more bytes are needed to tell or to complete
// the header, else the header's length. err is set for a header that can
// never be valid (too long).
func headerEnd(buf []byte) (int, error) {
	switch {
	case len(buf) == 0:
		return 0, nil
	case buf[0] == sigV1[0]:
		n := min(len(buf), len(sigV1))
		if !bytes.Equal(buf[:n], sigV1[:n]) {
			return -1, nil
		}
		if n < len(sigV1) {
			return 0, nil
		}
		if i := bytes.Index(buf[:min(len(buf), maxV1Header)], []byte("\r\n")); i >= 0 {
			return i + 2, nil
		}
		if len(buf) >= maxV1Header {
			return 0, fmt.Errorf("%w: version 1 line longer than %d bytes", errBadHeader, maxV1Header)
		}
		return 0, nil
	case buf[0] == sigV2[0]:
		n := min(len(buf), len(sigV2))
		if !bytes.Equal(buf[:n], sigV2[:n]) {
			return -1, nil
		}
		if len(buf) < v2Fixed {
			return 0, nil
		}
		total := v2Fixed + int(binary.BigEndian.Uint16(buf[14:16]))
		if total > maxV2Header {
			return 0, fmt.Errorf("%w: version 2 header of %d bytes exceeds %d", errBadHeader, total, maxV2Header)
		}
		if len(buf) >= total {
			return total, nil
		}
		return 0, nil
	}
	return -1, nil
}

// parseProxyHeader reads an optional PROXY header (v1 or v2) from src, applies
// it to c when trusted, and appends the bytes read past it to c.Peeked. It
// stops reading as soon as the bytes cannot start a header, so a client
// without one is never held for bytes it will not send; a header split over
// several reads is assembled. A client silent from the start (src returns a
// timeout or errSilent with nothing read) has no header. From an untrusted
// sender a header is read and dropped, as with Traefik's IGNORE policy; a
// LOCAL header (the sender's own health check) keeps the socket's addresses.
func parseProxyHeader(src io.Reader, c *tcp.Conn, trusted bool) error {
	buf := make([]byte, 0, 256)
	for {
		end, err := headerEnd(buf)
		if err != nil {
			return err
		}
		if end < 0 {
			c.Peeked = append(c.Peeked, buf...) // no header: all of it is the client's
			return nil
		}
		if end > 0 {
			c.Peeked = append(c.Peeked, buf[end:]...)
			return applyHeader(buf[:end], c, trusted)
		}
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*cap(buf), maxV2Header))
			copy(grown, buf)
			buf = grown
		}
		n, rerr := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n > 0 {
			continue
		}
		if rerr == nil {
			rerr = io.ErrNoProgress
		}
		var ne net.Error
		signed := len(buf) >= len(sigV1) && buf[0] == sigV1[0] || len(buf) >= len(sigV2)
		switch {
		case len(buf) == 0 && (errors.Is(rerr, errSilent) || errors.As(rerr, &ne) && ne.Timeout()):
			return nil // silent: no header, and the caller knows the client waits
		case !signed && (rerr == io.EOF || errors.As(rerr, &ne) && ne.Timeout()):
			// A part of a signature and no more: not a header. The bytes are
			// the client's (a client may send one byte and wait).
			c.Peeked = append(c.Peeked, buf...)
			return nil
		}
		return fmt.Errorf("%w: %d bytes of an unfinished header: %w", errBadHeader, len(buf), rerr)
	}
}

// applyHeader parses one complete header and, from a trusted sender, makes
// its source and destination the connection's client and local addresses.
func applyHeader(hdr []byte, c *tcp.Conn, trusted bool) error {
	h, err := proxyproto.Read(bufio.NewReaderSize(bytes.NewReader(hdr), max(len(hdr), 16)))
	if err != nil {
		return fmt.Errorf("%w: %w", errBadHeader, err)
	}
	if !trusted || h.Command.IsLocal() {
		return nil
	}
	from, ok := h.SourceAddr.(*net.TCPAddr)
	to, ok2 := h.DestinationAddr.(*net.TCPAddr)
	if ok && ok2 { // TCP over IPv4 or IPv6; UDP and UNIX keep the peer
		c.Client = unmapAP(from.AddrPort())
		c.Local = unmapAP(to.AddrPort())
	}
	return nil
}
