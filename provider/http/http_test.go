package http

import (
	"context"
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	nethttp "net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// endpoint is a real HTTP server on loopback that serves a body the test
// sets, or a status, with an ETag when etags is on, and records what it
// was asked.
type endpoint struct {
	mu       sync.Mutex
	body     string
	status   int
	etags    bool
	requests int
	bodies   int // 200 answers with a body
	header   string
	ifNone   []string
}

func (e *endpoint) set(body string, status int) {
	e.mu.Lock()
	e.body, e.status = body, status
	e.mu.Unlock()
}

func (e *endpoint) stats() (requests, bodies int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requests, e.bodies
}

func (e *endpoint) ServeHTTP(w nethttp.ResponseWriter, r *nethttp.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requests++
	e.header = r.Header.Get("X-Token")
	if v := r.Header.Get("If-None-Match"); v != "" {
		e.ifNone = append(e.ifNone, v)
	}
	if e.status != 0 && e.status != nethttp.StatusOK {
		nethttp.Error(w, "broken", e.status)
		return
	}
	if e.etags {
		tag := fmt.Sprintf(`"%x"`, sha256.Sum256([]byte(e.body)))
		if r.Header.Get("If-None-Match") == tag {
			w.WriteHeader(nethttp.StatusNotModified)
			return
		}
		w.Header().Set("ETag", tag)
	}
	e.bodies++
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(e.body))
}

func routes(backend string) string {
	return fmt.Sprintf(`{"tcp":{"routers":{"r":{"rule":"HostSNI(`+"`*`"+`)","service":"s","entryPoints":["db"]}},`+
		`"services":{"s":{"loadBalancer":{"servers":[{"address":%q}]}}}}}`, backend)
}

// run starts the provider against url with a short poll interval and
// returns its messages.
func run(t *testing.T, cfg *config.HTTPProvider) <-chan provider.Message {
	t.Helper()
	p, err := New(cfg, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan provider.Message, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx, out); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return out
}

func cfgFor(url string) *config.HTTPProvider {
	c := &config.HTTPProvider{}
	c.SetDefaults()
	c.Endpoint, c.PollInterval = url, config.Duration(50*time.Millisecond)
	c.Headers = map[string]string{"X-Token": "secret"}
	return c
}

func next(t *testing.T, out <-chan provider.Message, within time.Duration) provider.Message {
	t.Helper()
	select {
	case m := <-out:
		return m
	case <-time.After(within):
		t.Fatalf("no message within %s", within)
		return provider.Message{}
	}
}

// none asserts that no message comes while the endpoint answers at least
// polls more requests.
func none(t *testing.T, out <-chan provider.Message, e *endpoint, polls int) {
	t.Helper()
	before, _ := e.stats()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case m := <-out:
			t.Fatalf("unexpected message: %+v", m)
		case <-time.After(10 * time.Millisecond):
		}
		if n, _ := e.stats(); n >= before+polls {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint was not asked %d more times in 5s", polls)
		}
	}
}

func serverOf(m provider.Message) string {
	if m.Configuration == nil || m.Configuration.TCP == nil || m.Configuration.TCP.Services["s"] == nil {
		return ""
	}
	return m.Configuration.TCP.Services["s"].LoadBalancer.Servers[0].Address
}

// The configuration served is sent (with the headers configured), a change
// is sent within a poll interval or two, and an unchanged body is not sent
// again: with ETags the endpoint is asked with If-None-Match and answers
// 304; without, the body is compared.
func TestPollsAndSendsChanges(t *testing.T) {
	for _, etags := range []bool{true, false} {
		t.Run(fmt.Sprintf("etags=%v", etags), func(t *testing.T) {
			e := &endpoint{etags: etags}
			e.set(routes("127.0.0.1:4000"), 200)
			srv := httptest.NewServer(e)
			defer srv.Close()
			out := run(t, cfgFor(srv.URL))
			m := next(t, out, 5*time.Second)
			if m.Err != nil || serverOf(m) != "127.0.0.1:4000" || m.ProviderName != "http" {
				t.Fatalf("first message %+v, want the configuration served", m)
			}
			if m.Configuration.TCP.Routers["r"].Rule != "HostSNI(`*`)" {
				t.Fatalf("router %+v", m.Configuration.TCP.Routers["r"])
			}
			none(t, out, e, 5)
			_, bodies := e.stats()
			e.mu.Lock()
			header, ifNone := e.header, len(e.ifNone)
			e.mu.Unlock()
			if header != "secret" {
				t.Errorf("header X-Token %q, want the configured one", header)
			}
			if etags && (bodies != 1 || ifNone < 5) {
				t.Errorf("with ETags: %d bodies sent, %d requests with If-None-Match; want 1 and every later one", bodies, ifNone)
			}
			if !etags && bodies < 6 {
				t.Errorf("without ETags: %d bodies, want one per poll", bodies)
			}

			start := time.Now()
			e.set(routes("127.0.0.1:4001"), 200)
			m = next(t, out, 5*time.Second)
			if serverOf(m) != "127.0.0.1:4001" {
				t.Fatalf("after the change: %+v", m)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("the change took %s with a 50ms poll interval", d)
			}
			none(t, out, e, 3)
		})
	}
}

// An outage (an unreachable endpoint, an answer other than 200, a body that
// does not decode) sends one Err, whatever it lasts and however its cause
// changes, and the last good configuration keeps serving (nothing else is
// sent); when the endpoint answers again the configuration is sent, even
// unchanged, so that the error clears. A bad body names the endpoint, the
// line and the key.
func TestOutageSendsOneError(t *testing.T) {
	e := &endpoint{etags: true}
	e.set(routes("127.0.0.1:4000"), 200)
	srv := httptest.NewServer(e)
	defer srv.Close()
	out := run(t, cfgFor(srv.URL))
	if m := next(t, out, 5*time.Second); serverOf(m) != "127.0.0.1:4000" {
		t.Fatalf("first message %+v", m)
	}

	e.set(routes("127.0.0.1:4000"), 500)
	m := next(t, out, 5*time.Second)
	if m.Err == nil || !strings.Contains(m.Err.Error(), "500 Internal Server Error") || !strings.Contains(m.Err.Error(), srv.URL) {
		t.Fatalf("after a 500: %+v, want an error naming the endpoint and the status", m)
	}
	none(t, out, e, 5)
	e.set(`{"tcp": {"routers": {"r": {"rule": 7, "nope": 1}}}}`, 200) // the same outage, another cause
	none(t, out, e, 5)

	e.set(routes("127.0.0.1:4000"), 200) // back, unchanged
	if m := next(t, out, 5*time.Second); m.Err != nil || serverOf(m) != "127.0.0.1:4000" {
		t.Fatalf("back: %+v, want the configuration again", m)
	}

	e.set("tcp:\n  routers:\n    r:\n      rule: \"HostSNI(`*`)\"\n      priority: high\n", 200)
	m = next(t, out, 5*time.Second)
	if m.Err == nil || !strings.Contains(m.Err.Error(), "endpoint "+srv.URL+", line 5: tcp.routers.r.priority") {
		t.Fatalf("bad body: %+v, want an error naming the endpoint, line and key", m)
	}
	none(t, out, e, 5)

	e.set(routes("127.0.0.1:4002"), 200)
	if m := next(t, out, 5*time.Second); serverOf(m) != "127.0.0.1:4002" {
		t.Fatalf("fixed: %+v", m)
	}
	srv.Close() // unreachable
	m = next(t, out, 5*time.Second)
	if m.Err == nil || !strings.Contains(m.Err.Error(), "GET "+srv.URL) {
		t.Fatalf("unreachable: %+v, want an error naming the endpoint", m)
	}
	select {
	case m := <-out:
		t.Fatalf("a second message in the same outage: %+v", m)
	case <-time.After(300 * time.Millisecond): // six polls
	}
}

// Traefik's http and udp sections are warned of (tollgate routes TCP), and
// the body is read as YAML too.
func TestYAMLBodyAndIgnoredSections(t *testing.T) {
	e := &endpoint{}
	e.set("http:\n  routers: {}\ntcp:\n  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: 127.0.0.1:4000\n", 200)
	srv := httptest.NewServer(e)
	defer srv.Close()
	m := next(t, run(t, cfgFor(srv.URL)), 5*time.Second)
	if serverOf(m) != "127.0.0.1:4000" || len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "endpoint "+srv.URL+", line 1: tollgate routes TCP only: the http section is ignored") {
		t.Fatalf("%+v", m)
	}
}

// tls.ca verifies an https endpoint's certificate; without it (and without
// insecureSkipVerify) the system's roots refuse it, an error naming the
// endpoint.
func TestTLSEndpoint(t *testing.T) {
	e := &endpoint{}
	e.set(routes("127.0.0.1:4000"), 200)
	srv := httptest.NewUnstartedServer(e)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused below
	srv.StartTLS()
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	c := cfgFor(srv.URL)
	c.TLS = &config.KVClientTLS{CA: ca}
	if m := next(t, run(t, c), 5*time.Second); serverOf(m) != "127.0.0.1:4000" {
		t.Fatalf("with tls.ca: %+v", m)
	}
	if m := next(t, run(t, cfgFor(srv.URL)), 5*time.Second); m.Err == nil || !strings.Contains(m.Err.Error(), "certificate") {
		t.Fatalf("without tls.ca: %+v, want a certificate error", m)
	}
	c = cfgFor(srv.URL)
	c.TLS = &config.KVClientTLS{InsecureSkipVerify: true}
	if m := next(t, run(t, c), 5*time.Second); serverOf(m) != "127.0.0.1:4000" {
		t.Fatalf("with insecureSkipVerify: %+v", m)
	}
	c.TLS = &config.KVClientTLS{CA: filepath.Join(t.TempDir(), "missing.pem")}
	if _, err := New(c, provider.Options{}); err == nil || !strings.Contains(err.Error(), "providers.http.tls") {
		t.Fatalf("a missing CA file: %v, want an error naming the option", err)
	}
}

// A body over maxResponseBodySize is an error, not a configuration.
func TestMaxResponseBodySize(t *testing.T) {
	e := &endpoint{}
	e.set(routes("127.0.0.1:4000"), 200)
	srv := httptest.NewServer(e)
	defer srv.Close()
	c := cfgFor(srv.URL)
	c.MaxResponseBodySize = 20
	if m := next(t, run(t, c), 5*time.Second); m.Err == nil || !strings.Contains(m.Err.Error(), "over 20 bytes") {
		t.Fatalf("%+v, want an error", m)
	}
}

// FuzzDecode: whatever the endpoint answers, decoding it returns a
// configuration or an error naming the endpoint, never a panic.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(routes("127.0.0.1:1")))
	f.Add([]byte("tcp:\n  routers:\n    r: [1, 2]\n"))
	f.Add([]byte(`{"tcp":{"middlewares":{"m":{"inFlightConn":{"amount":"x"}}}}}`))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decode("http://e", b)
		if err == nil && d == nil {
			t.Fatal("no configuration and no error")
		}
		if err != nil && !strings.HasPrefix(err.Error(), "endpoint http://e") {
			t.Fatalf("error %q does not name the endpoint", err)
		}
		_ = ignored("http://e", b)
	})
}
