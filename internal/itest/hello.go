package itest

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// ClientHello returns the bytes a real tls.Client with cfg writes first:
// its ClientHello in one or more TLS records.
func ClientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	cli, srv := net.Pipe()
	defer srv.Close()
	go func() {
		_ = tls.Client(cli, cfg).Handshake()
		_ = cli.Close()
	}()
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	var msg []byte // handshake payload so far
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(srv, hdr[:]); err != nil {
			t.Fatalf("reading the ClientHello record header: %v", err)
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		body := make([]byte, n)
		if _, err := io.ReadFull(srv, body); err != nil {
			t.Fatalf("reading the ClientHello record: %v", err)
		}
		out = append(append(out, hdr[:]...), body...)
		msg = append(msg, body...)
		if len(msg) >= 4 && len(msg) >= 4+int(msg[1])<<16|int(msg[2])<<8|int(msg[3]) {
			return out
		}
	}
}

// Reframe re-splits the handshake payload of TLS records into records of at
// most size bytes each (a legal fragmentation that crypto/tls reassembles).
func Reframe(records []byte, size int) []byte {
	var payload []byte
	vers := records[1:3]
	for len(records) >= 5 {
		n := int(binary.BigEndian.Uint16(records[3:5]))
		payload = append(payload, records[5:5+n]...)
		records = records[5+n:]
	}
	var out []byte
	for len(payload) > 0 {
		n := min(size, len(payload))
		out = append(out, 0x16, vers[0], vers[1], byte(n>>8), byte(n)) // a handshake record
		out = append(out, payload[:n]...)
		payload = payload[n:]
	}
	return out
}

// LongALPN offers n ALPN protocols of 255 bytes: a ClientHello of about
// n*256 bytes.
func LongALPN(n int) func(*tls.Config) {
	return func(c *tls.Config) {
		for i := range n {
			c.NextProtos = append(c.NextProtos, fmt.Sprintf("%03d%s", i, strings.Repeat("p", 252)))
		}
	}
}

// WithSNI is a client configuration for sni that skips verification (the
// hello, not the handshake, is what is wanted), edited by edit.
func WithSNI(sni string, edit func(*tls.Config)) *tls.Config {
	c := &tls.Config{ServerName: sni, InsecureSkipVerify: true}
	edit(c)
	return c
}
