package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
)

// BenchmarkTLSTermination: one terminated connection per op, sequential:
// dial, a full TLS 1.3 handshake with tollgate (no resumption; ECDSA
// P-256, X25519), a 64-byte echo through it, close. The client's side of
// the handshake is in the figure too; bench/run.sh tls-handshake measures
// the proxy's CPU alone, against HAProxy and nginx. The entry point's
// tlsHandshakeRate is off: one client starts handshakes as fast as it can,
// which the default bucket would refuse after its burst.
func BenchmarkTLSTermination(b *testing.B) {
	ca := newTestCA(b)
	_, cert, key := ca.issue(b, leafOpts{}, "db.example")
	be := startBackend(b, "")
	s := newServerWith(b, func(_ string, ep *config.EntryPoint) { ep.Transport.TLSHandshakeRate = nil }, "tls")
	rt := s.Apply(&config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"db@file": terminating("HostSNI(`db.example`)", "a@file", "")},
		Services: map[string]*config.TCPService{"a@file": lbConfig(be.addr())},
		TLS:      &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(cert, key)}},
	})
	mustEnabled(b, rt)
	cfg := &tls.Config{ServerName: "db.example", RootCAs: ca.pool, CurvePreferences: []tls.CurveID{tls.X25519}}
	msg, buf := make([]byte, 64), make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		raw, err := net.Dial("tcp", s.addr("tls"))
		if err != nil {
			b.Fatal(err)
		}
		c := tls.Client(raw, cfg)
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		_ = c.Close()
	}
}
