package proxy

import (
	"crypto/tls"
	"io"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// handshakeFrom completes a TLS handshake from source IP src with cfg and
// reads the backend's banner; it reports whether it got it and whether the
// session was resumed.
func handshakeFrom(t *testing.T, src, addr string, cfg *tls.Config) (served, resumed bool) {
	t.Helper()
	raw := dialSrc(t, src, addr)
	defer raw.Close()
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		return false, false
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'B' {
		return false, false
	}
	// A ping and its echo: by then the client has read the server's
	// session tickets, which come right after the handshake.
	greetAgain(t, c)
	return true, c.ConnectionState().DidResume
}

// Issue 41.6: full TLS handshakes on terminating routers are bounded per
// client IP (entryPoints.<n>.transport.tlsHandshakeRate): a client that
// keeps asking for full handshakes past its bucket is refused before any
// key exchange, counted as a handshake failure "rate_limited", while
// another IP is served and a TLS 1.3 resumption (no certificate, no
// signature) is not counted.
func TestTLSHandshakeRatePerClient(t *testing.T) {
	ca := newTestCA(t)
	_, crt, key := ca.issue(t, leafOpts{}, "db.example")
	be := startBackend(t, "B")
	s := newServerWith(t, func(_ string, ep *config.EntryPoint) {
		ep.Transport.TLSHandshakeRate = &config.TLSHandshakeRate{Average: 1, Period: config.Duration(time.Hour), Burst: 3}
	}, "tls")
	cfg := singleRouter(be.addr(), nil)
	cfg.Routers["r"] = terminating("HostSNI(`db.example`)", "s", "")
	mustEnabled(t, s.Apply(provider.Merge(map[string]*config.Dynamic{"file": {TCP: cfg,
		TLS: &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(crt, key)}}}})))
	addr := s.addr("tls")
	full := func() *tls.Config { return &tls.Config{ServerName: "db.example", RootCAs: ca.pool} }
	resuming := full()
	resuming.ClientSessionCache = tls.NewLRUClientSessionCache(4)

	for i := 0; i < 3; i++ {
		c := full()
		if i == 0 {
			c = resuming // the first full handshake leaves a ticket in the cache
		}
		if ok, _ := handshakeFrom(t, "127.0.42.1", addr, c); !ok {
			t.Fatalf("full handshake %d of a burst of 3 refused", i+1)
		}
	}
	if ok, _ := handshakeFrom(t, "127.0.42.1", addr, full()); ok {
		t.Fatal("a 4th full handshake from one client within the period was served, want it refused")
	}
	// The server counts the failure once its side of the handshake returns,
	// which may be after the client read the alert.
	waitFor(t, "the refused handshake counted rate_limited", func() bool {
		return s.State().TLSCounters("r@file").Failures[reasonIndexRate].Load() == 1
	})
	if ok, _ := handshakeFrom(t, "127.0.42.2", addr, full()); !ok {
		t.Fatal("another client's full handshake was refused")
	}
	ok, resumed := handshakeFrom(t, "127.0.42.1", addr, resuming)
	if !ok || !resumed {
		t.Fatalf("a TLS 1.3 resumption from the client over its rate: served %v, resumed %v; want a resumed handshake, not counted", ok, resumed)
	}
}

// By default an entry point bounds full handshakes at 200 a second per
// client, 400 at once.
func TestTLSHandshakeRateDefault(t *testing.T) {
	s := newServerWith(t, nil, "tls")
	l := s.EntryPoint("tls").handshakes
	if l == nil {
		t.Fatal("no handshake rate by default")
	}
	if r := l.Rule(); r.Average != config.DefaultTLSHandshakeAverage || r.Period != time.Second || r.Burst != config.DefaultTLSHandshakeBurst {
		t.Fatalf("default handshake rate %+v, want 200 a second, 400 at once", r)
	}
	s = newServerWith(t, func(_ string, ep *config.EntryPoint) { ep.Transport.TLSHandshakeRate.Average = 0 }, "tls")
	if s.EntryPoint("tls").handshakes != nil {
		t.Fatal("average 0 still bounds handshakes")
	}
}
