// Package metrics is Traefik's global series read from the proxy
// (Snapshot, Read) and the exporters that push them: Datadog (DogStatsD),
// StatsD, InfluxDB v2 and OpenTelemetry (OTLP over HTTP or gRPC), each with
// Traefik's names, labels and options (docs/reference/metrics.md).
// Prometheus is pulled: package api serves the same series at /metrics,
// beside tollgate's own.
//
// Traefik's HTTP request series (per entry point, router and service) have
// no TCP meaning and are not sent by any exporter.
package metrics

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-proxy/tollgate/proxy"
)

// Snapshot is Traefik's global series at one moment.
type Snapshot struct {
	// Reloads is how many configurations were applied, the first one at
	// start included (traefik_config_reloads_total).
	Reloads uint64
	// LastReload is when the last one was applied; zero before the first
	// (traefik_config_last_reload_success, in Unix seconds, as Traefik).
	LastReload time.Time
	// Open is each TCP entry point's connections now, from accept to close,
	// sorted by entry point (traefik_open_connections{protocol="TCP"}).
	Open []EntryPointConnections
	// Certificates are the certificates tollgate serves: the default TLS
	// store's (the generated default one included, as in Traefik) and what
	// the certificate resolvers hold, each once, sorted
	// (traefik_tls_certs_not_after).
	Certificates []Certificate
}

// EntryPointConnections is one entry point's open connections.
type EntryPointConnections struct {
	EntryPoint  string
	Connections int64
}

// Certificate is a certificate as Traefik labels it.
type Certificate struct {
	CN     string // the subject's common name
	Serial string // the serial number, decimal
	SANs   string // the DNS names, sorted, joined with ","
	// NotAfter is when it expires.
	NotAfter time.Time
}

// Read takes a Snapshot of srv. It only loads counters and the runtime
// view; it is safe from any goroutine.
func Read(srv *proxy.Server) Snapshot {
	var s Snapshot
	n, last, _ := srv.Reloads()
	s.Reloads = n
	if n > 0 {
		s.LastReload = last
	}
	for _, name := range srv.EntryPointNames() {
		if ep := srv.EntryPoint(name); ep != nil {
			s.Open = append(s.Open, EntryPointConnections{EntryPoint: name, Connections: ep.Open()})
		}
	}
	var infos []proxy.CertificateInfo
	if rt := srv.Runtime(); rt != nil {
		infos = append(infos, rt.Certificates...)
	}
	infos = append(infos, srv.ResolverCertificates()...)
	seen := map[Certificate]bool{}
	for _, ci := range infos {
		if ci.Leaf == nil {
			continue
		}
		c := CertificateOf(ci)
		if !seen[c] {
			seen[c] = true
			s.Certificates = append(s.Certificates, c)
		}
	}
	slices.SortFunc(s.Certificates, func(a, b Certificate) int {
		return cmp.Or(strings.Compare(a.CN, b.CN), strings.Compare(a.Serial, b.Serial), strings.Compare(a.SANs, b.SANs), a.NotAfter.Compare(b.NotAfter))
	})
	return s
}

// CertificateOf is ci as traefik_tls_certs_not_after labels it: the DNS
// names sorted, as Traefik sorts them; ci.Leaf must be set.
func CertificateOf(ci proxy.CertificateInfo) Certificate {
	names := slices.Clone(ci.Leaf.DNSNames)
	slices.Sort(names)
	return Certificate{CN: ci.Leaf.Subject.CommonName, Serial: ci.Leaf.SerialNumber.String(), SANs: strings.Join(names, ","), NotAfter: ci.Leaf.NotAfter}
}

// TotalOpen is the open connections of every entry point together: what
// a backend without labels (StatsD) sends as open.connections.
func (s Snapshot) TotalOpen() int64 {
	var n int64
	for _, e := range s.Open {
		n += e.Connections
	}
	return n
}

// FirstExpiry is the earliest NotAfter of the certificates (zero when there
// are none): what a backend without labels (StatsD) sends as
// tls.certs.notAfterTimestamp.
func (s Snapshot) FirstExpiry() time.Time {
	var first time.Time
	for _, c := range s.Certificates {
		if first.IsZero() || c.NotAfter.Before(first) {
			first = c.NotAfter
		}
	}
	return first
}

// Traefik's names of its global series in the StatsD, DogStatsD and
// InfluxDB exporters, after the prefix and a dot (StatsD's and Datadog's
// prefix option, "traefik" for InfluxDB). Prometheus and OTLP use the
// traefik_* names.
const (
	NameReloads    = "config.reload.total"
	NameLastReload = "config.reload.lastSuccessTimestamp"
	NameOpen       = "open.connections"
	NameCertExpiry = "tls.certs.notAfterTimestamp"
)

// Traefik's names of its global series in Prometheus and OTLP.
const (
	PromReloads    = "traefik_config_reloads_total"
	PromLastReload = "traefik_config_last_reload_success"
	PromOpen       = "traefik_open_connections"
	PromCertExpiry = "traefik_tls_certs_not_after"
)
