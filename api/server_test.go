package api

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// startAdmin serves h with limits l on a free loopback port.
func startAdmin(t *testing.T, h http.Handler, l limits) string {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := limit(raw, l)
	srv := newServer(h, l)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte("OK"))
	})
}

// closedWithin reports whether the server closes c within d (a read returns
// EOF or a reset rather than timing out), and after how long.
func closedWithin(c net.Conn, d time.Duration) (bool, time.Duration) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout()), time.Since(start)
}

// trickle writes s one byte every gap until the connection fails or stop.
func trickle(c net.Conn, s string, gap time.Duration, stop <-chan struct{}) {
	for i := 0; i < len(s); i++ {
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(gap):
		}
	}
}

// Issue 10.5: a client that trickles its request headers, or its body, is
// cut off by the admin server's timeouts; an idle keep-alive connection is
// closed.
func TestAdminServerTimeouts(t *testing.T) {
	l := limits{readHeader: 300 * time.Millisecond, read: 600 * time.Millisecond, write: time.Second, idle: 400 * time.Millisecond, conns: 8, perClient: 8}
	addr := startAdmin(t, okHandler(), l)
	for _, tc := range []struct {
		name, request string
		within        time.Duration
	}{
		{"trickled headers", "GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 100), l.readHeader},
		{"trickled body", "POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("b", 100), l.read},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		if tc.name == "trickled body" {
			head, _, _ := strings.Cut(tc.request, "\r\n\r\n")
			_, _ = io.WriteString(c, head+"\r\n\r\n")
			go trickle(c, strings.Repeat("b", 100), 50*time.Millisecond, stop)
		} else {
			go trickle(c, tc.request, 50*time.Millisecond, stop)
		}
		closed, after := closedWithin(c, 5*time.Second)
		close(stop)
		c.Close()
		if !closed || after > tc.within+time.Second {
			t.Fatalf("%s: closed %v after %v, want closed within about %v", tc.name, closed, after, tc.within)
		}
	}
	// An idle keep-alive connection is closed after the idle timeout.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /ping: %v %v", resp, err)
	}
	resp.Body.Close()
	if closed, after := closedWithin(c, 5*time.Second); !closed || after > l.idle+time.Second {
		t.Fatalf("idle keep-alive: closed %v after %v, want within about %v", closed, after, l.idle)
	}
	if s := NewServer(okHandler()); s.ReadHeaderTimeout != readHeaderTimeout || s.ReadTimeout != readTimeout || s.WriteTimeout != writeTimeout || s.IdleTimeout != idleTimeout {
		t.Fatalf("NewServer does not use the admin limits: %+v", s)
	}
}

// Issue 10.5: the admin listener serves a bounded number of connections at
// once; one more waits until a slot is free.
func TestAdminListenerBoundsConnections(t *testing.T) {
	l := limits{readHeader: 5 * time.Second, read: 5 * time.Second, write: 5 * time.Second, idle: 5 * time.Second, conns: 3, perClient: 3}
	addr := startAdmin(t, okHandler(), l)
	var held []net.Conn
	for i := 0; i < l.conns; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	client := &http.Client{Timeout: 500 * time.Millisecond}
	if resp, err := client.Get("http://" + addr + "/ping"); err == nil {
		resp.Body.Close()
		t.Fatalf("a request was served while %d idle connections held every slot", l.conns)
	}
	held[0].Close()
	held = held[1:]
	client.Timeout = 3 * time.Second
	resp, err := client.Get("http://" + addr + "/ping")
	if err != nil {
		t.Fatalf("after a slot was freed: %v", err)
	}
	resp.Body.Close()
}

// Issue 10.5: --metrics.prometheus without --api serves /metrics and /ping,
// nothing of the configuration.
func TestMetricsOnlyServesNoAPI(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("tollgate_x 1\n")) })
	wantStatuses(t, startAdmin(t, MetricsOnly(metrics), adminLimits),
		map[string]int{"/metrics": 200, "/ping": 200, "/api/rawdata": 404, "/api/tcp/middlewares/m@file/clients": 404, "/api/entrypoints": 404})
}

// --ping alone (Traefik's) serves /ping and nothing else.
func TestPingOnlyServesNoAPI(t *testing.T) {
	wantStatuses(t, startAdmin(t, PingOnly(), adminLimits), map[string]int{"/ping": 200, "/metrics": 404, "/api/rawdata": 404})
}

// wantStatuses GETs each path on addr and checks its status.
func wantStatuses(t *testing.T, addr string, want map[string]int) {
	t.Helper()
	for path, code := range want {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, code)
		}
	}
}

// LocalOnly serves its handler to loopback clients, and its open paths to
// anyone; other clients get 404.
func TestLocalOnly(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "inner "+r.URL.Path) })
	h := LocalOnly(inner, "/ping", "/metrics")
	for _, tc := range []struct {
		remote, path string
		code         int
	}{
		{"127.0.0.1:5000", "/api/rawdata", 200},
		{"[::1]:5000", "/api/rawdata", 200},
		{"[::ffff:127.0.0.1]:5000", "/api/rawdata", 200},
		{"10.0.0.5:5000", "/api/rawdata", 404},
		{"10.0.0.5:5000", "/ping", 200},
		{"10.0.0.5:5000", "/metrics", 200},
		{"10.0.0.5:5000", "/ping/", 404},
		{"garbage", "/api/rawdata", 404},
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		r.RemoteAddr = tc.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.code {
			t.Errorf("%s from %s: %d, want %d (%s)", tc.path, tc.remote, w.Code, tc.code, w.Body)
		}
	}
}

// dialFrom connects to addr from the loopback address src.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	return d.Dial("tcp", addr)
}

// Issue 41.3: 80 slow partial requests from one address take its 8 slots
// and no more (the others are closed at once): /ping from another address
// is answered at once, with the global bound (64) kept.
func TestAdminListenerBoundsEachClient(t *testing.T) {
	l := adminLimits
	l.readHeader = time.Minute // the partial requests outlive the test
	addr := startAdmin(t, PingOnly(), l)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; i < 80; i++ {
		c, err := dialFrom("127.0.0.2", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
		held = append(held, c)
	}
	open := 0
	for _, c := range held {
		if closed, _ := closedWithin(c, 100*time.Millisecond); !closed {
			open++
		}
	}
	if open != MaxConnsPerClient {
		t.Fatalf("%d of 80 partial requests from one address held open, want %d", open, MaxConnsPerClient)
	}
	start := time.Now()
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + "/ping")
	if err != nil {
		t.Fatalf("/ping from 127.0.0.1 while 127.0.0.2 holds its slots: %v", err)
	}
	resp.Body.Close()
	t.Logf("/ping answered in %v", time.Since(start))
}

// Issue 41.3: a request over loopback that names a Host that is not an IP
// literal, localhost or an allowed name is refused: DNS rebinding. Over
// another address, the Host is not looked at.
func TestGuardHost(t *testing.T) {
	h := GuardHost(okHandler(), []string{"tollgate.internal", "*.corp.example"})
	loop, lan := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080}
	for _, tc := range []struct {
		local net.Addr
		host  string
		code  int
	}{
		{loop, "evil.example", 403},
		{loop, "evil.example:8080", 403},
		{loop, "127.0.0.1.evil.example", 403},
		{loop, "localhost.evil.example", 403},
		{loop, "127.0.0.1:8080", 200},
		{loop, "127.0.0.1", 200},
		{loop, "[::1]:8080", 200},
		{loop, "localhost:8080", 200},
		{loop, "LOCALHOST.", 200},
		{loop, "tollgate.localhost:8080", 200},
		{loop, "tollgate.internal:8080", 200},
		{loop, "TOLLGATE.INTERNAL", 200},
		{loop, "a.corp.example", 200},
		{loop, "corp.example", 403},
		{loop, "", 200},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 8080}, "evil.example", 403},
		{lan, "evil.example", 200},
	} {
		r := httptest.NewRequest("GET", "/api/rawdata", nil)
		r.Host = tc.host
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, tc.local))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.code {
			t.Errorf("Host %q on %v: %d, want %d (%s)", tc.host, tc.local, w.Code, tc.code, w.Body)
		}
		if w.Code == 403 && !strings.Contains(w.Body.String(), "api.allowedHosts") {
			t.Errorf("refusal does not say how to allow a name: %s", w.Body)
		}
	}
}
