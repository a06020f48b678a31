package cmdline

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// The demo backend greets, and holds a /hold connection until the client
// closes it (no idle or request timeout cuts it), and stop closes what it
// holds.
func TestDemoBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := ServeDemoBackend(ln)
	defer stop()
	addr := ln.Addr().String()

	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != demoHello {
		t.Fatalf("GET / = %q, want %q", body, demoHello)
	}

	hold := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET /hold HTTP/1.1\r\nHost: demo\r\n\r\n")
		r := bufio.NewReader(c)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for { // headers, then the chunk size line, then the line
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the /hold answer: %v", err)
			}
			if line == demoHeld {
				_, _ = r.ReadString('\n') // the chunk's own end
				return c, r
			}
		}
	}
	c, r := hold()
	// Still open after the client has been idle: the read times out on
	// our side instead of ending.
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := r.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("held connection: read %v, want our own deadline (the backend must not close it)", err)
	}
	c.Close()

	c, r = hold()
	defer c.Close()
	stop()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(r); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("after stop: %v, want the connection closed", err)
	}
}
