package kubernetescrd

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/provider"
)

// cutter forwards loopback TCP to target until Cut, and again after Restore
// on the same address: an API server outage as the provider sees it, without
// stopping the shared server.
type cutter struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	c := &cutter{target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	c.serve(ln)
	t.Cleanup(c.Cut)
	return c
}

func (c *cutter) serve(ln net.Listener) {
	c.mu.Lock()
	c.ln = ln
	c.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", c.target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

// Cut closes the listener and every forwarded connection.
func (c *cutter) Cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln != nil {
		c.ln.Close()
		c.ln = nil
	}
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// Restore listens on the same address again.
func (c *cutter) Restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.serve(ln)
}

// TestIntegrationOutage cuts the provider off its API server after it has
// synced: it reports the outage (Err) within probeEvery, and once the server
// is reachable again it catches up with a change made meanwhile.
func TestIntegrationOutage(t *testing.T) {
	k := kube(t)
	ns := namespace(t, k, "outage")
	cut := newCutter(t, strings.TrimPrefix(k.URL, "https://"))

	through := *k
	through.URL = "https://" + cut.addr
	msgs := runProvider(t, &through, ns)
	mw := middlewareTCP(ns, "limit", 1)
	create(t, k.Client, mw)
	id := makeID(ns, "limit")
	await(t, msgs, 5*time.Second, "the middleware", func(m provider.Message) bool { return amount(m, id) == 1 })

	cut.Cut()
	start := time.Now()
	deadline := time.After(probeEvery + 5*time.Second)
	for reported := false; !reported; {
		select {
		case m := <-msgs:
			reported = m.Err != nil
		case <-deadline:
			t.Fatalf("outage not reported within %v", probeEvery+5*time.Second)
		}
	}
	t.Logf("outage reported after %v", time.Since(start))

	update(t, k.Client, mw, map[string]any{"spec": map[string]any{"inFlightConn": map[string]any{"amount": int64(2)}}})
	cut.Restore(t)
	start = time.Now()
	await(t, msgs, 30*time.Second, "the change made during the outage", func(m provider.Message) bool { return amount(m, id) == 2 })
	t.Logf("caught up %v after the server came back", time.Since(start))
}
