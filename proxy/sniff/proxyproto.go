package sniff

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	proxyproto "github.com/pires/go-proxyproto"
)

// PROXY protocol framing. go-proxyproto parses a header; finding where one
// ends in what a client has sent so far is done here (HeaderEnd), because
// its reader waits for 12 bytes before it decides that bytes such as Redis's
// "PING\r\n" (6 bytes, starting like a v1 or v2 signature) are no header, and
// drops a v1 header that arrives in two segments. Here the decision is made
// as soon as the bytes read so far cannot start a signature, and a header is
// assembled across segments by the caller, under its deadline.

var (
	sigV1 = []byte("PROXY ")
	sigV2 = proxyproto.SIGV2
)

const (
	// MaxV1Header is the longest v1 line, CRLF included (the spec's bound).
	MaxV1Header = 107
	v2Fixed     = 16 // signature, version/command, family, length
	// MaxV2Header bounds a v2 header with its TLVs: a longer one is refused.
	MaxV2Header = 16 << 10
)

// ErrBadHeader is wrapped by every framing and parsing error.
var ErrBadHeader = errors.New("bad PROXY protocol header")

// HeaderEnd reports how buf (a client's first bytes) starts: -1 when it cannot
// start a PROXY header, 0 when more bytes are needed to tell or to complete
// the header, else the header's length. err is set for a header that can
// never be valid (too long).
func HeaderEnd(buf []byte) (int, error) {
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
		if i := bytes.Index(buf[:min(len(buf), MaxV1Header)], []byte("\r\n")); i >= 0 {
			return i + 2, nil
		}
		if len(buf) >= MaxV1Header {
			return 0, fmt.Errorf("%w: version 1 line longer than %d bytes", ErrBadHeader, MaxV1Header)
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
		if total > MaxV2Header {
			return 0, fmt.Errorf("%w: version 2 header of %d bytes exceeds %d", ErrBadHeader, total, MaxV2Header)
		}
		if len(buf) >= total {
			return total, nil
		}
		return 0, nil
	}
	return -1, nil
}

// Signed reports whether buf holds a whole v1 or v2 signature: bytes that
// end there are an unfinished header, not a client's own bytes.
func Signed(buf []byte) bool {
	return len(buf) >= len(sigV1) && buf[0] == sigV1[0] || len(buf) >= len(sigV2)
}

// Header is what a PROXY header says of the connection it fronts: the
// client's address (Source) and the one it connected to (Destination),
// unmapped. Both are invalid for a LOCAL command and for a transport other
// than TCP over IPv4 or IPv6 (UDP, UNIX): the peer stays the client.
type Header struct {
	Source, Destination netip.AddrPort
}

// ParseHeader parses one complete header, hdr[:HeaderEnd(hdr)].
func ParseHeader(hdr []byte) (Header, error) {
	h, err := proxyproto.Read(bufio.NewReaderSize(bytes.NewReader(hdr), max(len(hdr), 16)))
	if err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrBadHeader, err)
	}
	if h.Command.IsLocal() {
		return Header{}, nil
	}
	from, ok := h.SourceAddr.(*net.TCPAddr)
	to, ok2 := h.DestinationAddr.(*net.TCPAddr)
	if !ok || !ok2 {
		return Header{}, nil
	}
	return Header{Source: unmap(from.AddrPort()), Destination: unmap(to.AddrPort())}, nil
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
