package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// PROXY protocol framing. go-proxyproto parses a header; finding where one
// ends in what a client has sent so far is done here (preroute.step), because
// its reader waits for 12 bytes before it decides that bytes such as Redis's
// "PING\r\n" (6 bytes, starting like a v1 or v2 signature) are no header, and
// drops a v1 header that arrives in two segments. Here the decision is made
// as soon as the bytes read so far cannot start a signature, and a header is
// assembled across segments until it is complete, under the entry point's
// deadline.

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
