package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

func (s *syncBuffer) empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len() == 0
}

// exchange writes msg, reads as many bytes back from the echo backend and
// closes the connection.
func exchange(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, len(msg))); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
}

// One JSON line per closed proxied connection, with every field; rejected
// connections are counted, not logged; per-router bytes and durations are
// counted when metrics are on.
func TestAccessLogAndRouterCounters(t *testing.T) {
	be := startBackend(t, "")
	var buf syncBuffer
	al := zerolog.New(&buf)
	s := newServerOpts(t, StateOptions{Observers: ConnObservers{AccessLog: &al, Metrics: true}}, nil, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"one": limitMW(1)}, "one"))
	addr := s.addr("tcp")

	c1, ok := dialFrom(t, "127.0.0.1", addr) // ping: 1 byte each way
	if !ok {
		t.Fatal("first connection not forwarded")
	}
	if _, ok := dialFrom(t, "127.0.0.1", addr); ok {
		t.Fatal("second connection from 127.0.0.1 forwarded with amount 1")
	}
	exchange(t, c1, "hello") // 5 more bytes each way
	c2, ok := dialFrom(t, "127.0.0.2", addr)
	if !ok {
		t.Fatal("127.0.0.2 not forwarded")
	}
	exchange(t, c2, "0123456789")

	waitFor(t, "two access log lines", func() bool { return !buf.empty() && len(buf.lines()) >= 2 })
	waitFor(t, "router counters", func() bool {
		n, _, _ := s.State().RouterCounters("r@file").Duration.Snapshot()
		return n == 2
	})
	lines := buf.lines()
	if len(lines) != 2 {
		t.Fatalf("%d access log lines, want 2 (the rejection must not be logged):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	byClient := map[string]map[string]any{}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("access log line is not JSON: %q", l)
		}
		byClient[m["client_ip"].(string)] = m
	}
	for ip, want := range map[string]float64{"127.0.0.1": 6, "127.0.0.2": 11} {
		m := byClient[ip]
		if m == nil {
			t.Fatalf("no line for %s: %v", ip, lines)
		}
		if m["entrypoint"] != "tcp" || m["router"] != "r@file" || m["service"] != "s@file" || m["server"] != be.addr() || m["end"] != "closed" {
			t.Errorf("%s: fields %v", ip, m)
		}
		if m["bytes_in"] != want || m["bytes_out"] != want {
			t.Errorf("%s: bytes_in %v bytes_out %v, want %v each", ip, m["bytes_in"], m["bytes_out"], want)
		}
		if d, ok := m["duration_ms"].(float64); !ok || d <= 0 || d > 10000 {
			t.Errorf("%s: duration_ms %v", ip, m["duration_ms"])
		}
		if _, ok := m["client_port"].(float64); !ok {
			t.Errorf("%s: no client_port", ip)
		}
	}
	rc := s.State().RouterCounters("r@file")
	if in, out := rc.BytesIn.Load(), rc.BytesOut.Load(); in != 17 || out != 17 {
		t.Errorf("router bytes in %d out %d, want 17 and 17", in, out)
	}
	n, sum, buckets := rc.Duration.Snapshot()
	if n != 2 || sum <= 0 || buckets[DurationBuckets[len(DurationBuckets)-1]] != 2 {
		t.Errorf("duration histogram: count %d sum %v buckets %v", n, sum, buckets)
	}
}

// Without observers a load balancer has none: the fast path stays as it was.
func TestNoObserversByDefault(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), nil))
	c, ok := dialFrom(t, "127.0.0.1", s.addr("tcp"))
	if !ok {
		t.Fatal("not forwarded")
	}
	exchange(t, c, "abc")
	waitFor(t, "router gauge back to 0", func() bool { return s.State().RouterOpen("r@file").Load() == 0 })
	if in := s.State().RouterCounters("r@file").BytesIn.Load(); in != 0 {
		t.Fatalf("bytes counted without metrics: %d", in)
	}
	if got := lbOf(t, s, "s@file").obs; got != nil {
		t.Fatalf("load balancer has observers %+v without any configured", got)
	}
}

// lbOf compiles the running configuration again (same State) and returns
// the load balancer behind the first route of the entry point "tcp", which
// must have no middleware.
func lbOf(t *testing.T, s *Server, _ string) *loadBalancer {
	t.Helper()
	cfg := &config.TCPConfiguration{Routers: map[string]*config.TCPRouter{}, Services: map[string]*config.TCPService{}}
	for n, ri := range s.Runtime().Routers {
		cfg.Routers[n] = ri.TCPRouter
	}
	for n, si := range s.Runtime().Services {
		cfg.Services[n] = si.TCPService
	}
	tables, _ := Compile(cfg, []string{"tcp"}, s.State(), zerolog.Nop())
	h := tables["tcp"].routes[0].handler
	lb, ok := h.(*loadBalancer)
	if !ok {
		t.Fatalf("route handler %T is not a load balancer", h)
	}
	return lb
}

// A backend that resets the connection: the line says end "error".
func TestAccessLogEndError(t *testing.T) {
	be := itest.StartBackend(t, nil, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 1))
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close() // RST
	})
	var buf syncBuffer
	al := zerolog.New(&buf)
	s := newServerOpts(t, StateOptions{Observers: ConnObservers{AccessLog: &al}}, nil, "tcp")
	apply(s, "file", singleRouter(be.Addr(), nil))
	c, err := net.Dial("tcp", s.addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(c) // until the proxy passes the end on
	waitFor(t, "an access log line", func() bool { return !buf.empty() })
	var m map[string]any
	if err := json.Unmarshal([]byte(buf.lines()[0]), &m); err != nil {
		t.Fatal(err)
	}
	if m["end"] != "error" || m["bytes_in"] != 1.0 || m["bytes_out"] != 0.0 {
		t.Fatalf("line %v: want end error, 1 byte in, 0 out", m)
	}
}

// accessLog.fields: Traefik's names (ClientHost, ClientPort, Duration) and
// tollgate's (bytes_in) drop or redact their fields, defaultMode applies to
// the rest; filters.minDuration leaves out the shorter connections.
func TestAccessLogFieldsAndMinDuration(t *testing.T) {
	be := startBackend(t, "")
	var buf syncBuffer
	al := zerolog.New(&buf)
	fields := NewAccessFields("Redact", map[string]string{"ClientHost": "drop", "ClientAddr": "keep", "Duration": "keep", "bytes_in": "KEEP", "RouterName": "keep", "ClientUsername": "drop"})
	s := newServerOpts(t, StateOptions{Observers: ConnObservers{AccessLog: &al, AccessFields: fields}}, nil, "tcp")
	apply(s, "file", singleRouter(be.addr(), nil))
	c, ok := dialFrom(t, "127.0.0.3", s.addr("tcp"))
	if !ok {
		t.Fatal("not forwarded")
	}
	exchange(t, c, "hello")
	waitFor(t, "an access log line", func() bool { return !buf.empty() })
	var m map[string]any
	if err := json.Unmarshal([]byte(buf.lines()[0]), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["client_ip"]; ok || strings.Contains(buf.lines()[0], "127.0.0.3") {
		t.Errorf("ClientHost: drop, but the client's address is written: %v", m)
	}
	if _, ok := m["client_port"].(float64); !ok {
		t.Errorf("ClientAddr: keep (ClientHost dropped alone): client_port %v", m["client_port"])
	}
	if m["router"] != "r@file" || m["bytes_in"] != float64(6) || m["end"] != "closed" {
		t.Errorf("kept fields: %v", m)
	}
	if _, ok := m["duration_ms"].(float64); !ok {
		t.Errorf("Duration: keep: %v", m["duration_ms"])
	}
	for _, k := range []string{"entrypoint", "service", "server", "bytes_out"} {
		if m[k] != "REDACTED" {
			t.Errorf("%s = %v, want REDACTED (defaultMode)", k, m[k])
		}
	}

	// minDuration: a connection closed at once is not logged; one held
	// longer is.
	var buf2 syncBuffer
	al2 := zerolog.New(&buf2)
	s = newServerOpts(t, StateOptions{Observers: ConnObservers{AccessLog: &al2, AccessMinDuration: 300 * time.Millisecond}}, nil, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"x": limitMW(5)}, "x")) // a new load balancer
	short, ok := dialFrom(t, "127.0.0.4", s.addr("tcp"))
	if !ok {
		t.Fatal("not forwarded")
	}
	exchange(t, short, "a")
	long, ok := dialFrom(t, "127.0.0.5", s.addr("tcp"))
	if !ok {
		t.Fatal("not forwarded")
	}
	time.Sleep(400 * time.Millisecond) // the connection's length is what is tested
	exchange(t, long, "b")
	waitFor(t, "the long connection's line", func() bool { return !buf2.empty() })
	waitFor(t, "both connections finished", func() bool { return s.State().RouterOpen("r@file").Load() == 0 })
	if lines := buf2.lines(); len(lines) != 1 || !strings.Contains(lines[0], "127.0.0.5") {
		t.Errorf("minDuration 300ms: lines %q, want the long connection's alone", lines)
	}
}

// With metrics on, a compile makes each router's traffic counters, so that
// /metrics lists it before its first connection ends; with them off (an
// access log alone) it makes none: nothing would read them.
func TestRouterCountersOnlyWithMetrics(t *testing.T) {
	be := startBackend(t, "")
	var buf syncBuffer
	al := zerolog.New(&buf)
	for _, metrics := range []bool{true, false} {
		s := newServerOpts(t, StateOptions{Observers: ConnObservers{AccessLog: &al, Metrics: metrics}}, nil, "tcp")
		apply(s, "file", singleRouter(be.addr(), nil))
		var names []string
		s.State().EachRouterCounters(func(name string, _ *RouterCounters) { names = append(names, name) })
		if want := map[bool]string{true: "[r@file]", false: "[]"}[metrics]; fmt.Sprint(names) != want {
			t.Errorf("metrics %v: router counters %q after a compile", metrics, names)
		}
	}
}
