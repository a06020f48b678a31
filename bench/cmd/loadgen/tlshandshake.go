package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"time"
)

// tls-handshake: connect, full TLS handshake (no session cache: no
// resumption), echo 64 B through the terminated connection, close. Every
// peer terminates with the same certificate (ECDSA P-256) and the same
// settings: TLS 1.3, TLS_AES_128_GCM_SHA256, X25519. The client does not
// verify the certificate (its cost is the client's, not the proxy's).
func tlsHandshakeCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	var f cycleFlags
	f.register(fs, "127.4.0.1", 10*time.Second)
	sni := fs.String("sni", "bench.example", "server name sent (the peers' certificate names it)")
	return func() (*Result, error) {
		l, err := f.load(c)
		if err != nil {
			return nil, err
		}
		l.tls = &tls.Config{ServerName: *sni, InsecureSkipVerify: true,
			MinVersion: tls.VersionTLS13, CurvePreferences: []tls.CurveID{tls.X25519}}
		// What was negotiated, checked once before the load.
		probe := l
		probe.workers, probe.maxCycles, probe.duration = 1, 1, 5*time.Second
		var state tls.ConnectionState
		probe.tls = l.tls.Clone()
		probe.tls.VerifyConnection = func(cs tls.ConnectionState) error { state = cs; return nil }
		if s := probe.run(); s.ok != 1 {
			return nil, fmt.Errorf("probe handshake failed: %v", s.errs)
		}
		// The group is the client's only one (X25519): a peer without it fails the probe.
		if state.Version != tls.VersionTLS13 || state.CipherSuite != tls.TLS_AES_128_GCM_SHA256 {
			return nil, fmt.Errorf("negotiated %s %s, want TLS 1.3 with TLS_AES_128_GCM_SHA256",
				tls.VersionName(state.Version), tls.CipherSuiteName(state.CipherSuite))
		}
		cpu := startCPU(c.pid)
		s := l.run()
		m := map[string]any{}
		s.report("", m)
		m["handshakes_per_s"] = m["conns_per_s"]
		if pc := cpu.stop(m); pc > 0 && s.ok > 0 {
			m["proxy_cpu_us_per_handshake"] = round(pc*1e6/float64(s.ok), 1)
		}
		return &Result{Metrics: m, human: humanf(
			fmt.Sprintf("%.0f handshakes/s", m["handshakes_per_s"]),
			fmt.Sprintf("errors=%d", s.errs.total()),
			fmt.Sprintf("p50=%vms p99=%vms", m["p50_ms"], m["p99_ms"]),
			"proxy_cpu="+opt(m, "proxy_cpu_us_per_handshake")+"µs/handshake",
			fmt.Sprintf("host_cpu=%v%%", m["host_cpu_busy_pct"]),
		)}, nil
	}
}
