package proxy

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// endSnapshot is what a connection's end had done when its access log line
// was written (plan.finish): whether the server's slot was back, and the
// counts c.Finish ends (the router's open connections, the entry point's).
type endSnapshot struct {
	SlotBack   bool
	RouterOpen int64
	EntryOpen  int64
	Service    string
}

// endRecorder is an access log writer that takes an endSnapshot of the
// service each line names, at the moment the line is written.
type endRecorder struct {
	s   *Server
	mu  sync.Mutex
	got []endSnapshot
}

func (r *endRecorder) Write(p []byte) (int, error) {
	var line struct {
		EntryPoint string `json:"entrypoint"`
		Router     string `json:"router"`
		Service    string `json:"service"`
	}
	if err := json.Unmarshal(p, &line); err != nil {
		return 0, err
	}
	st := r.s.State()
	snap := endSnapshot{
		SlotBack:   st.Capacity(line.Service).Servers[0].Open == 0,
		RouterOpen: st.RouterOpen(line.Router).Load(),
		EntryOpen:  r.s.EntryPoint(line.EntryPoint).Open(),
		Service:    line.Service,
	}
	r.mu.Lock()
	r.got = append(r.got, snap)
	r.mu.Unlock()
	return len(p), nil
}

func (r *endRecorder) of(service string) (endSnapshot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.got {
		if s.Service == service {
			return s, true
		}
	}
	return endSnapshot{}, false
}

// Issue 43: both data planes end a proxied connection in one order
// (plan.finish): the server's capped slot is back before the observers
// see the end, and the connection's counts (its router's, its entry
// point's) end after them. A plain connection is carried by its loop; a
// terminated one by goroutines; each goes to a service capped at one.
func TestBothPlanesEndInOneOrder(t *testing.T) {
	ca := newTestCA(t)
	_, crt, key := ca.issue(t, leafOpts{}, "db.example")
	be := startBackend(t, "B")
	rec := &endRecorder{}
	al := zerolog.New(rec)
	s := newServerOpts(t, StateOptions{Observers: ConnObservers{AccessLog: &al}}, nil, "tcp", "tls")
	rec.s = s // what the access log's writer reads, from the first line on
	cfg := cappedConfig(be.addr(), 1, 4, 10*time.Second)
	cfg.Routers["r"].EntryPoints = []string{"tcp"}
	cfg.Services["u"] = &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{
		Servers: []config.TCPServer{{Address: be.addr(), MaxConn: 1}}}}
	cfg.Routers["t"] = terminating("HostSNI(`db.example`)", "u", "")
	cfg.Routers["t"].EntryPoints = []string{"tls"}
	mustEnabled(t, s.Apply(provider.Merge(map[string]*config.Dynamic{"file": {TCP: cfg,
		TLS: &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(crt, key)}}}})))

	plain := dialSrc(t, "127.0.0.1", s.addr("tcp"))
	if !greeted(plain, 2*time.Second) {
		t.Fatal("the loop's connection was not served")
	}
	tc, err := tlsDial(t, s.addr("tls"), &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	if !greeted(tc, 2*time.Second) {
		t.Fatal("the goroutines' connection was not served")
	}
	for _, c := range []net.Conn{plain, tc} {
		_ = c.Close()
	}
	var loop, goroutines endSnapshot
	waitFor(t, "both connections' access log lines", func() bool {
		var ok1, ok2 bool
		loop, ok1 = rec.of("s@file")
		goroutines, ok2 = rec.of("u@file")
		return ok1 && ok2
	})
	want := endSnapshot{SlotBack: true, RouterOpen: 1, EntryOpen: 1}
	loop.Service, goroutines.Service = "", ""
	if loop != want {
		t.Errorf("the loop's connection ended with %+v when observed, want %+v (slot back, counts not yet ended)", loop, want)
	}
	if goroutines != loop {
		t.Errorf("the goroutines' connection ended with %+v when observed, the loop's with %+v: not one order", goroutines, loop)
	}
	waitFor(t, "every count ended", func() bool {
		return s.State().RouterOpen("r@file").Load() == 0 && s.State().RouterOpen("t@file").Load() == 0 &&
			s.EntryPoint("tcp").Open() == 0 && s.EntryPoint("tls").Open() == 0
	})
}

// A queued client that goes away while an access log is on is refused like
// any connection its service never dialled for: no line (refusals are
// counted, never logged there), and the loop goes on serving.
func TestQueuedClientGoneWithAccessLog(t *testing.T) {
	be := startBackend(t, "B")
	var buf syncBuffer
	al := zerolog.New(&buf)
	s := newServerOpts(t, StateOptions{Observers: ConnObservers{AccessLog: &al}}, nil, "tcp")
	apply(s, "file", cappedConfig(be.addr(), 1, 4, 10*time.Second))
	addr := s.addr("tcp")
	cp := func() CapacityState { return *s.State().Capacity("s@file") }
	held := dialSrc(t, "127.0.6.1", addr)
	defer held.Close()
	if !greeted(held, 2*time.Second) {
		t.Fatal("the first connection was not served")
	}
	waiting := dialSrc(t, "127.0.6.2", addr)
	waitFor(t, "the second connection queued", func() bool { return cp().Queued == 1 })
	_ = waiting.Close()
	waitFor(t, "the closed client out of the queue", func() bool { return cp().Queued == 0 })
	if !buf.empty() {
		t.Fatalf("a queued client that left was logged: %q", buf.lines())
	}
	held.Close()
	waitFor(t, "the served connection's line and its slot back", func() bool {
		return !buf.empty() && cp().Servers[0].Open == 0
	})
	next := dialSrc(t, "127.0.6.3", addr)
	defer next.Close()
	if !greeted(next, 2*time.Second) {
		t.Fatal("the loop no longer serves")
	}
}
