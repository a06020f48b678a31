package config

import (
	"strings"
	"testing"
	"time"

	"github.com/traefik/paerser/file"
)

// Traefik's metrics section decodes with Traefik's defaults (but
// addRoutersLabels, on here), and a bad value is refused naming its key.
func TestMetricsSection(t *testing.T) {
	const yml = `
entryPoints:
  db:
    address: ":5432"
metrics:
  addInternals: true
  prometheus: {}
  datadog:
    prefix: edge
  statsD: {}
  influxDB2:
    token: t
    org: o
    bucket: b
    additionalLabels:
      host: edge-1
  otlp:
    grpc:
      endpoint: collector:4317
      insecure: true
`
	c := NewCommand()
	if err := file.DecodeContent(yml, ".yml", c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	m := c.Metrics
	if p := m.Prometheus; !p.AddEntryPointsLabels || !p.AddRoutersLabels || !p.AddServicesLabels || p.Buckets != nil || p.EntryPoint != "traefik" {
		t.Errorf("prometheus %+v", p)
	}
	if d := m.Datadog; d.Prefix != "edge" || d.PushInterval != Duration(10*time.Second) || (d.Address != "localhost:8125" && !strings.HasSuffix(d.Address, ":8125")) {
		t.Errorf("datadog %+v", d)
	}
	if s := m.StatsD; s.Address != "localhost:8125" || s.Prefix != "traefik" || s.PushInterval != Duration(10*time.Second) {
		t.Errorf("statsD %+v", s)
	}
	if i := m.InfluxDB2; i.Address != "http://localhost:8086" || i.AdditionalLabels["host"] != "edge-1" {
		t.Errorf("influxDB2 %+v", i)
	}
	if o := m.OTLP; o.GRPC.Endpoint != "collector:4317" || !o.GRPC.Insecure || o.ServiceName != "traefik" || o.HTTP == nil || o.HTTP.Endpoint != "https://localhost:4318" {
		t.Errorf("otlp %+v (grpc %+v)", o, o.GRPC)
	}

	for _, tc := range []struct {
		edit func(*Metrics)
		want string
	}{
		{func(m *Metrics) { m.Datadog.Address = "nohost" }, `metrics.datadog.address="nohost": want host:port`},
		{func(m *Metrics) { m.Datadog.Address = "unixstream:///run/dsd.sock" }, `metrics.datadog.address="unixstream:///run/dsd.sock": a stream socket is not supported`},
		{func(m *Metrics) { m.Datadog.Address = "unix://" }, `metrics.datadog.address="unix://": no socket path`},
		{func(m *Metrics) { m.Datadog.PushInterval = 0 }, `metrics.datadog.pushInterval=0s: must be positive`},
		{func(m *Metrics) { m.StatsD.Address = "unixgram:///run/s.sock" }, `metrics.statsD.address="unixgram:///run/s.sock": want host:port`},
		{func(m *Metrics) { m.StatsD.PushInterval = -1 }, `metrics.statsD.pushInterval=-1ns: must be positive`},
		{func(m *Metrics) { m.InfluxDB2.Address = "localhost:8086" }, `metrics.influxDB2.address="localhost:8086": want http://host:port`},
		{func(m *Metrics) { m.InfluxDB2.Token, m.InfluxDB2.Bucket = "", "" }, `metrics.influxDB2: set metrics.influxDB2.token, metrics.influxDB2.bucket`},
		{func(m *Metrics) { m.OTLP.GRPC.Endpoint = "http://collector:4317" }, `metrics.otlp.grpc.endpoint="http://collector:4317": want host:port`},
		{func(m *Metrics) { m.OTLP.GRPC = nil; m.OTLP.HTTP.Endpoint = "collector:4318" }, `metrics.otlp.http.endpoint="collector:4318": want http://host:port`},
		{func(m *Metrics) { m.OTLP.GRPC, m.OTLP.HTTP = nil, nil }, `metrics.otlp: set grpc or http`},
		{func(m *Metrics) { m.OTLP.PushInterval = 0 }, `metrics.otlp.pushInterval=0s: must be positive`},
		{func(m *Metrics) { m.Prometheus.Address = "localhost" }, `metrics.prometheus.address="localhost"`},
	} {
		c := NewCommand()
		_ = file.DecodeContent(yml, ".yml", c)
		tc.edit(c.Metrics)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
}

func TestDialNetwork(t *testing.T) {
	for in, want := range map[string][2]string{
		"localhost:8125":             {"udp", "localhost:8125"},
		"unix:///var/run/dsd.socket": {"unixgram", "/var/run/dsd.socket"},
		"unixgram:///run/dsd":        {"unixgram", "/run/dsd"},
		"unixstream:///run/dsd":      {"unixstream", "/run/dsd"},
	} {
		if n, a := DialNetwork(in); n != want[0] || a != want[1] {
			t.Errorf("%q: %s %s, want %v", in, n, a, want)
		}
	}
}
