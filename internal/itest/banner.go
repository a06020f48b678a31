package itest

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Helpers for the echo backend (examples/echo): one banner line on every
// connection, then echo.

// DialBanner connects from src (empty: any) to addr and reads the banner.
// An empty banner means the connection was closed without one: rejected or
// unrouted (tollgate rejects with a reset, which can already fail the
// connect; c is then a closed placeholder).
func DialBanner(t testing.TB, src, addr string) (net.Conn, string) {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		a, b := net.Pipe()
		b.Close()
		return a, ""
	}
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	_ = c.SetReadDeadline(time.Time{})
	return c, strings.TrimSpace(line)
}

// Banner returns what one fresh connection reads first ("" when refused).
func Banner(t testing.TB, addr string) string {
	t.Helper()
	c, b := DialBanner(t, "", addr)
	c.Close()
	return b
}

// Alive reports whether c still echoes.
func Alive(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "ping\n"
}

// HoldBanners opens n connections from src and requires each to get the
// banner want; it fails t (closing them) otherwise.
func HoldBanners(t testing.TB, n int, src, addr, want string) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for i := range n {
		c, b := DialBanner(t, src, addr)
		cs = append(cs, c)
		if b != want {
			CloseAll(cs)
			t.Fatalf("connection %d from %s: banner %q, want %q", i+1, src, b, want)
		}
	}
	return cs
}
