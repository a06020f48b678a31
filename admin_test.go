package main

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/api"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
)

// A connection the admin server accepted before stop (a handover, a
// shutdown) is answered, even when its request arrives after stop; a
// connection made after it finds no listener; and shutdown then returns.
func TestAdminStopAnswersAcceptedConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := api.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("answered")) }))
	accepted := make(chan struct{}, 1)
	hs.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			accepted <- struct{}{}
		}
	}
	as := admins{{key: "api.address", what: "admin API", gate: upgrade.NewGate(ln.(*net.TCPListener)), hs: hs}}
	serveAdmin(as, nil, zerolog.Nop())

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not accept within 5s")
	}
	as.stop()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("GET /api/process HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a request on a connection accepted before stop got no answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Errorf("answer after stop: %d, close %v; want 200 and the connection closed after it", resp.StatusCode, resp.Close)
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a connection after stop: %v, want refused (no process holds the socket)", err)
	}
	done := make(chan struct{})
	go func() { as.shutdown(time.Second); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("shutdown did not return within 5s")
	}
}
