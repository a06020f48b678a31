package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// Metrics is Traefik's metrics section: the exporters, each with Traefik's
// options and defaults (docs/reference/metrics.md). Prometheus is pulled
// from /metrics (package api); the others push Traefik's global series
// (package metrics).
type Metrics struct {
	// AddInternals is Traefik's: count the requests to its own HTTP
	// services (ping, the API). Accepted; tollgate counts none of them.
	AddInternals bool        `description:"Accepted for Traefik compatibility: the requests to the admin listeners are HTTP and counted in no series (warning)." json:"addInternals,omitempty" toml:"addInternals,omitempty" yaml:"addInternals,omitempty" export:"true"`
	Prometheus   *Prometheus `description:"Serve Prometheus metrics on the admin listener at /metrics." json:"prometheus,omitempty" toml:"prometheus,omitempty" yaml:"prometheus,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	Datadog      *Datadog    `description:"Push Traefik's global series to a DogStatsD agent." json:"datadog,omitempty" toml:"datadog,omitempty" yaml:"datadog,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	StatsD       *Statsd     `description:"Push Traefik's global series to a StatsD server." json:"statsD,omitempty" toml:"statsD,omitempty" yaml:"statsD,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	InfluxDB2    *InfluxDB2  `description:"Push Traefik's global series to InfluxDB v2 (line protocol over HTTP)." json:"influxDB2,omitempty" toml:"influxDB2,omitempty" yaml:"influxDB2,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	OTLP         *OTLP       `description:"Push Traefik's global series to an OpenTelemetry collector (OTLP over HTTP or gRPC)." json:"otlp,omitempty" toml:"otlp,omitempty" yaml:"otlp,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// Prometheus is /metrics. Address is tollgate's; the rest are Traefik's
// options. The add*Labels options keep or leave out tollgate's series of
// that kind (tollgate_entrypoint_*, tollgate_router_* with the per-router
// TLS handshake series, tollgate_service_*), as Traefik's keep or leave out
// its request series of that kind; Traefik's global series
// (traefik_config_*, traefik_open_connections, traefik_tls_certs_not_after)
// are always there, as in Traefik.
type Prometheus struct {
	// Address, when set, serves /metrics on a listener of its own (and not on
	// the admin API's). Without it, /metrics is on the traefik entry point
	// (DefaultInternalAddress, :8080, when none is declared, as in
	// Traefik), serving only /metrics and /ping, or on the admin API's
	// listener when --api gives it an address of its own: the admin API
	// (configuration, client IPs) needs --api.
	Address              string            `description:"Serve /metrics on this address of its own ([host]:port) instead of the admin listener's." json:"address,omitempty" toml:"address,omitempty" yaml:"address,omitempty" export:"true"`
	AddEntryPointsLabels bool              `description:"Export the per-entry-point series (tollgate_entrypoint_*); traefik_open_connections keeps its entrypoint label either way." json:"addEntryPointsLabels,omitempty" toml:"addEntryPointsLabels,omitempty" yaml:"addEntryPointsLabels,omitempty" export:"true"`
	AddRoutersLabels     bool              `description:"Export the per-router series (tollgate_router_*, tollgate_tls_handshake*), and count bytes and durations per router; on by default here (Traefik: off), as they are tollgate's view of each route." json:"addRoutersLabels,omitempty" toml:"addRoutersLabels,omitempty" yaml:"addRoutersLabels,omitempty" export:"true"`
	AddServicesLabels    bool              `description:"Export the per-service series (tollgate_service_*)." json:"addServicesLabels,omitempty" toml:"addServicesLabels,omitempty" yaml:"addServicesLabels,omitempty" export:"true"`
	Buckets              []float64         `description:"Traefik's HTTP request-duration buckets (Traefik's default: 0.1, 0.3, 1.2, 5); tollgate_router_connection_duration_seconds keeps its own, from 5 ms to 4 h (warning)." json:"buckets,omitempty" toml:"buckets,omitempty" yaml:"buckets,omitempty" export:"true"`
	EntryPoint           string            `description:"Serve /metrics on this entry point's address when metrics have no address (it then proxies nothing); default traefik, at :8080 when not declared." json:"entryPoint,omitempty" toml:"entryPoint,omitempty" yaml:"entryPoint,omitempty" export:"true"`
	ManualRouting        bool              `description:"Serve /metrics on no entry point of its own (Traefik leaves it to an HTTP router, which tollgate does not have): only on metrics.prometheus.address, or the admin API." json:"manualRouting,omitempty" toml:"manualRouting,omitempty" yaml:"manualRouting,omitempty" export:"true"`
	HeaderLabels         map[string]string `description:"Accepted for Traefik compatibility: labels from HTTP request headers, which TCP connections do not have (warning)." json:"headerLabels,omitempty" toml:"headerLabels,omitempty" yaml:"headerLabels,omitempty" export:"true"`
}

// SetDefaults sets Traefik's defaults, but for addRoutersLabels (on here)
// and buckets (none: they are HTTP request durations').
func (p *Prometheus) SetDefaults() {
	p.AddEntryPointsLabels = true
	p.AddRoutersLabels = true
	p.AddServicesLabels = true
	p.EntryPoint = InsecureAPIEntryPoint
}

// DefaultPushInterval is how often the push exporters send, as in Traefik.
const DefaultPushInterval = Duration(10 * time.Second)

// Datadog pushes over DogStatsD: Traefik's names under Prefix, its labels
// as tags.
type Datadog struct {
	Address              string   `description:"DogStatsD address: host:port (UDP), or a datagram socket's path as unix:///path or unixgram:///path; default $DD_AGENT_HOST:$DD_DOGSTATSD_PORT, else localhost:8125." json:"address,omitempty" toml:"address,omitempty" yaml:"address,omitempty"`
	PushInterval         Duration `description:"How often the series are sent." json:"pushInterval,omitempty" toml:"pushInterval,omitempty" yaml:"pushInterval,omitempty" export:"true"`
	AddEntryPointsLabels bool     `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addEntryPointsLabels,omitempty" toml:"addEntryPointsLabels,omitempty" yaml:"addEntryPointsLabels,omitempty" export:"true"`
	AddRoutersLabels     bool     `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addRoutersLabels,omitempty" toml:"addRoutersLabels,omitempty" yaml:"addRoutersLabels,omitempty" export:"true"`
	AddServicesLabels    bool     `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addServicesLabels,omitempty" toml:"addServicesLabels,omitempty" yaml:"addServicesLabels,omitempty" export:"true"`
	Prefix               string   `description:"Prefix of the metric names (prefix.config.reload.total, ...)." json:"prefix,omitempty" toml:"prefix,omitempty" yaml:"prefix,omitempty" export:"true"`
}

// SetDefaults sets Traefik's defaults: the agent named by DD_AGENT_HOST and
// DD_DOGSTATSD_PORT (localhost:8125), every 10 s, prefix traefik.
func (d *Datadog) SetDefaults() {
	host, ok := os.LookupEnv("DD_AGENT_HOST")
	if !ok {
		host = "localhost"
	}
	port, ok := os.LookupEnv("DD_DOGSTATSD_PORT")
	if !ok {
		port = "8125"
	}
	d.Address = net.JoinHostPort(host, port)
	d.PushInterval = DefaultPushInterval
	d.AddEntryPointsLabels = true
	d.AddServicesLabels = true
	d.Prefix = "traefik"
}

// Statsd pushes over StatsD: Traefik's names under Prefix, without labels.
type Statsd struct {
	Address              string   `description:"StatsD address (host:port, UDP)." json:"address,omitempty" toml:"address,omitempty" yaml:"address,omitempty"`
	PushInterval         Duration `description:"How often the series are sent." json:"pushInterval,omitempty" toml:"pushInterval,omitempty" yaml:"pushInterval,omitempty" export:"true"`
	AddEntryPointsLabels bool     `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addEntryPointsLabels,omitempty" toml:"addEntryPointsLabels,omitempty" yaml:"addEntryPointsLabels,omitempty" export:"true"`
	AddRoutersLabels     bool     `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addRoutersLabels,omitempty" toml:"addRoutersLabels,omitempty" yaml:"addRoutersLabels,omitempty" export:"true"`
	AddServicesLabels    bool     `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addServicesLabels,omitempty" toml:"addServicesLabels,omitempty" yaml:"addServicesLabels,omitempty" export:"true"`
	Prefix               string   `description:"Prefix of the metric names (prefix.config.reload.total, ...)." json:"prefix,omitempty" toml:"prefix,omitempty" yaml:"prefix,omitempty" export:"true"`
}

// SetDefaults sets Traefik's defaults: localhost:8125, every 10 s, prefix
// traefik.
func (s *Statsd) SetDefaults() {
	s.Address = "localhost:8125"
	s.PushInterval = DefaultPushInterval
	s.AddEntryPointsLabels = true
	s.AddServicesLabels = true
	s.Prefix = "traefik"
}

// InfluxDB2 writes line protocol to InfluxDB v2's /api/v2/write.
type InfluxDB2 struct {
	Address              string            `description:"InfluxDB v2 URL (http:// or https://)." json:"address,omitempty" toml:"address,omitempty" yaml:"address,omitempty"`
	Token                string            `description:"Access token, or the path of a file holding it." json:"token,omitempty" toml:"token,omitempty" yaml:"token,omitempty" loggable:"false"`
	PushInterval         Duration          `description:"How often the series are sent." json:"pushInterval,omitempty" toml:"pushInterval,omitempty" yaml:"pushInterval,omitempty" export:"true"`
	Org                  string            `description:"Organization written to." json:"org,omitempty" toml:"org,omitempty" yaml:"org,omitempty" export:"true"`
	Bucket               string            `description:"Bucket written to." json:"bucket,omitempty" toml:"bucket,omitempty" yaml:"bucket,omitempty" export:"true"`
	AddEntryPointsLabels bool              `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addEntryPointsLabels,omitempty" toml:"addEntryPointsLabels,omitempty" yaml:"addEntryPointsLabels,omitempty" export:"true"`
	AddRoutersLabels     bool              `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addRoutersLabels,omitempty" toml:"addRoutersLabels,omitempty" yaml:"addRoutersLabels,omitempty" export:"true"`
	AddServicesLabels    bool              `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addServicesLabels,omitempty" toml:"addServicesLabels,omitempty" yaml:"addServicesLabels,omitempty" export:"true"`
	AdditionalLabels     map[string]string `description:"Tags added to every point." json:"additionalLabels,omitempty" toml:"additionalLabels,omitempty" yaml:"additionalLabels,omitempty" export:"true"`
}

// SetDefaults sets Traefik's defaults: http://localhost:8086, every 10 s.
func (i *InfluxDB2) SetDefaults() {
	i.Address = "http://localhost:8086"
	i.PushInterval = DefaultPushInterval
	i.AddEntryPointsLabels = true
	i.AddServicesLabels = true
}

// OTLP exports with the OpenTelemetry SDK: over gRPC when grpc is set,
// else over HTTP.
type OTLP struct {
	GRPC                 *OTelGRPC         `description:"Export over gRPC (it wins over http)." json:"grpc,omitempty" toml:"grpc,omitempty" yaml:"grpc,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	HTTP                 *OTelHTTP         `description:"Export over HTTP (protobuf)." json:"http,omitempty" toml:"http,omitempty" yaml:"http,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	AddEntryPointsLabels bool              `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addEntryPointsLabels,omitempty" toml:"addEntryPointsLabels,omitempty" yaml:"addEntryPointsLabels,omitempty" export:"true"`
	AddRoutersLabels     bool              `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addRoutersLabels,omitempty" toml:"addRoutersLabels,omitempty" yaml:"addRoutersLabels,omitempty" export:"true"`
	AddServicesLabels    bool              `description:"Accepted for Traefik compatibility: it selects Traefik's HTTP request series, which have no TCP meaning (warning when changed)." json:"addServicesLabels,omitempty" toml:"addServicesLabels,omitempty" yaml:"addServicesLabels,omitempty" export:"true"`
	ExplicitBoundaries   []float64         `description:"Accepted for Traefik compatibility: the boundaries of Traefik's HTTP request-duration histograms (warning)." json:"explicitBoundaries,omitempty" toml:"explicitBoundaries,omitempty" yaml:"explicitBoundaries,omitempty" export:"true"`
	PushInterval         Duration          `description:"How often the series are exported." json:"pushInterval,omitempty" toml:"pushInterval,omitempty" yaml:"pushInterval,omitempty" export:"true"`
	ServiceName          string            `description:"The service.name resource attribute." json:"serviceName,omitempty" toml:"serviceName,omitempty" yaml:"serviceName,omitempty" export:"true"`
	ResourceAttributes   map[string]string `description:"More resource attributes (OTEL_RESOURCE_ATTRIBUTES overrides them)." json:"resourceAttributes,omitempty" toml:"resourceAttributes,omitempty" yaml:"resourceAttributes,omitempty" export:"true"`
}

// SetDefaults sets Traefik's defaults: HTTP to https://localhost:4318,
// every 10 s, service name traefik (and no explicitBoundaries: they are
// HTTP request durations').
func (o *OTLP) SetDefaults() {
	o.HTTP = &OTelHTTP{}
	o.HTTP.SetDefaults()
	o.AddEntryPointsLabels = true
	o.AddServicesLabels = true
	o.PushInterval = DefaultPushInterval
	o.ServiceName = "traefik"
}

// OTelGRPC is an OTLP/gRPC collector.
type OTelGRPC struct {
	Endpoint string            `description:"The collector's host:port." json:"endpoint,omitempty" toml:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	Insecure bool              `description:"Plain text (no TLS) to the collector." json:"insecure,omitempty" toml:"insecure,omitempty" yaml:"insecure,omitempty" export:"true"`
	TLS      *KVClientTLS      `description:"TLS to the collector: ca, cert, key, insecureSkipVerify." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
	Headers  map[string]string `description:"Headers sent with each export." json:"headers,omitempty" toml:"headers,omitempty" yaml:"headers,omitempty" loggable:"false"`
}

// SetDefaults sets Traefik's default endpoint.
func (o *OTelGRPC) SetDefaults() { o.Endpoint = "localhost:4317" }

// OTelHTTP is an OTLP/HTTP collector.
type OTelHTTP struct {
	Endpoint string            `description:"The collector's URL (scheme://host:port[/path]; the path defaults to /v1/metrics; http:// is plain text)." json:"endpoint,omitempty" toml:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	TLS      *KVClientTLS      `description:"TLS to the collector: ca, cert, key, insecureSkipVerify." json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
	Headers  map[string]string `description:"Headers sent with each export." json:"headers,omitempty" toml:"headers,omitempty" yaml:"headers,omitempty" loggable:"false"`
}

// SetDefaults sets Traefik's default endpoint.
func (o *OTelHTTP) SetDefaults() { o.Endpoint = "https://localhost:4318" }

// DialNetwork splits a Datadog or StatsD address into the network and the
// address net.Dial takes: "udp" for host:port, "unixgram" for unix:// and
// unixgram://, and "unixstream" for unixstream:// (which Validate refuses).
func DialNetwork(address string) (network, addr string) {
	for _, p := range []struct{ prefix, network string }{{"unixgram://", "unixgram"}, {"unixstream://", "unixstream"}, {"unix://", "unixgram"}} {
		if rest, ok := strings.CutPrefix(address, p.prefix); ok {
			return p.network, rest
		}
	}
	return "udp", address
}

// validate checks the metrics section: each address parses and each push
// interval is positive. Called by Static.Validate.
func (m *Metrics) validate() error {
	if m == nil {
		return nil
	}
	if p := m.Prometheus; p != nil && p.Address != "" {
		if err := checkAddress(p.Address); err != nil {
			return fmt.Errorf("metrics.prometheus.address=%q: %w", p.Address, err)
		}
	}
	interval := func(key string, d Duration) error {
		if d <= 0 {
			return fmt.Errorf("metrics.%s.pushInterval=%s: must be positive", key, time.Duration(d))
		}
		return nil
	}
	udp := func(key, address string) error {
		network, addr := DialNetwork(address)
		if network == "unixstream" {
			return fmt.Errorf("metrics.%s.address=%q: a stream socket is not supported (DogStatsD frames datagrams on it): use unixgram:// or host:port", key, address)
		}
		if network != "udp" {
			if addr == "" {
				return fmt.Errorf("metrics.%s.address=%q: no socket path", key, address)
			}
			return nil
		}
		if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
			return fmt.Errorf("metrics.%s.address=%q: want host:port", key, address)
		}
		return nil
	}
	if d := m.Datadog; d != nil {
		if err := udp("datadog", d.Address); err != nil {
			return err
		}
		if err := interval("datadog", d.PushInterval); err != nil {
			return err
		}
	}
	if s := m.StatsD; s != nil {
		if network, _ := DialNetwork(s.Address); network != "udp" {
			return fmt.Errorf("metrics.statsD.address=%q: want host:port (StatsD is sent over UDP)", s.Address)
		}
		if err := udp("statsD", s.Address); err != nil {
			return err
		}
		if err := interval("statsD", s.PushInterval); err != nil {
			return err
		}
	}
	if i := m.InfluxDB2; i != nil {
		if err := httpURL("metrics.influxDB2.address", i.Address); err != nil {
			return err
		}
		var missing []string
		for _, f := range []struct{ key, v string }{{"token", i.Token}, {"org", i.Org}, {"bucket", i.Bucket}} {
			if f.v == "" {
				missing = append(missing, "metrics.influxDB2."+f.key)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("metrics.influxDB2: set %s", strings.Join(missing, ", "))
		}
		if err := interval("influxDB2", i.PushInterval); err != nil {
			return err
		}
	}
	if o := m.OTLP; o != nil {
		switch {
		case o.GRPC != nil:
			if host, port, err := net.SplitHostPort(o.GRPC.Endpoint); err != nil || host == "" || port == "" {
				return fmt.Errorf("metrics.otlp.grpc.endpoint=%q: want host:port", o.GRPC.Endpoint)
			}
		case o.HTTP != nil:
			if err := httpURL("metrics.otlp.http.endpoint", o.HTTP.Endpoint); err != nil {
				return err
			}
		default:
			return fmt.Errorf("metrics.otlp: set grpc or http")
		}
		if err := interval("otlp", o.PushInterval); err != nil {
			return err
		}
	}
	return nil
}

// httpURL checks an http:// or https:// URL with a host.
func httpURL(key, s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s=%q: want http://host:port or https://host:port", key, s)
	}
	return nil
}
