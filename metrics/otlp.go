package metrics

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding/gzip"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// scope is the instrumentation scope of tollgate's OTLP metrics.
const scope = "github.com/tollgate-proxy/tollgate"

// otlpExporter is the OpenTelemetry SDK's meter provider with a periodic
// reader and an OTLP exporter, as Traefik's. The series are observable
// instruments read at each collection: Traefik's names, descriptions' units
// and attributes (traefik_config_last_reload_success has Traefik's unit
// "ms" with a value in seconds, so that a collector names the series as it
// does Traefik's).
type otlpExporter struct {
	mp *sdkmetric.MeterProvider
}

func newOTLP(ctx context.Context, cfg *config.OTLP, version string, read func() Snapshot) (*otlpExporter, error) {
	exp, err := otlpMetricExporter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName), attribute.String("service.version", version)}
	for k, v := range cfg.ResourceAttributes {
		attrs = append(attrs, attribute.String(k, v))
	}
	// Traefik's detectors, but the process's command line: it may hold
	// secrets (--metrics.influxDB2.token=...).
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithOS(), resource.WithContainer(),
		resource.WithProcessPID(), resource.WithProcessExecutableName(), resource.WithProcessRuntimeName(), resource.WithProcessRuntimeVersion(),
		resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, fmt.Errorf("metrics.otlp: the resource: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Duration(cfg.PushInterval)))),
	)
	m := mp.Meter(scope, metric.WithInstrumentationVersion(version))
	reloads, err1 := m.Float64ObservableCounter(PromReloads, metric.WithDescription("Configurations applied."), metric.WithUnit("1"))
	last, err2 := m.Float64ObservableGauge(PromLastReload, metric.WithDescription("When the last configuration was applied (Unix seconds)."), metric.WithUnit("ms"))
	open, err3 := m.Float64ObservableGauge(PromOpen, metric.WithDescription("Open TCP connections, by entry point and protocol."), metric.WithUnit("1"))
	expiry, err4 := m.Float64ObservableGauge(PromCertExpiry, metric.WithDescription("When a certificate expires (Unix seconds)."), metric.WithUnit("s"))
	_, err5 := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := read()
		o.ObserveFloat64(reloads, float64(s.Reloads))
		if !s.LastReload.IsZero() {
			o.ObserveFloat64(last, float64(s.LastReload.Unix()))
		}
		for _, e := range s.Open {
			o.ObserveFloat64(open, float64(e.Connections), metric.WithAttributes(attribute.String("entrypoint", e.EntryPoint), attribute.String("protocol", "TCP")))
		}
		for _, c := range s.Certificates {
			o.ObserveFloat64(expiry, float64(c.NotAfter.Unix()), metric.WithAttributes(attribute.String("cn", c.CN), attribute.String("serial", c.Serial), attribute.String("sans", c.SANs)))
		}
		return nil
	}, reloads, last, open, expiry)
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if err != nil {
			_ = mp.Shutdown(ctx)
			return nil, fmt.Errorf("metrics.otlp: %w", err)
		}
	}
	return &otlpExporter{mp: mp}, nil
}

// otlpMetricExporter is Traefik's exporter: gRPC when grpc is set, else
// HTTP (plain text for an http:// endpoint), gzip either way.
func otlpMetricExporter(ctx context.Context, cfg *config.OTLP) (sdkmetric.Exporter, error) {
	if g := cfg.GRPC; g != nil {
		opts := []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpoint(g.Endpoint), otlpmetricgrpc.WithHeaders(g.Headers), otlpmetricgrpc.WithCompressor(gzip.Name)}
		if g.Insecure {
			opts = append(opts, otlpmetricgrpc.WithInsecure())
		}
		tc, err := provider.TLSConfig(g.TLS, "metrics.otlp.grpc.tls")
		if err != nil {
			return nil, err
		}
		if tc != nil {
			opts = append(opts, otlpmetricgrpc.WithTLSCredentials(credentials.NewTLS(tc)))
		}
		return otlpmetricgrpc.New(ctx, opts...)
	}
	h := cfg.HTTP
	u, err := url.Parse(h.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("metrics.otlp.http.endpoint=%q: %w", h.Endpoint, err)
	}
	opts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpoint(u.Host), otlpmetrichttp.WithHeaders(h.Headers), otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression)}
	if u.Scheme == "http" {
		opts = append(opts, otlpmetrichttp.WithInsecure())
	}
	if u.Path != "" {
		opts = append(opts, otlpmetrichttp.WithURLPath(u.Path))
	}
	tc, err := provider.TLSConfig(h.TLS, "metrics.otlp.http.tls")
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, otlpmetrichttp.WithTLSClientConfig(tc))
	}
	return otlpmetrichttp.New(ctx, opts...)
}

// close collects and exports a last time, then stops.
func (e *otlpExporter) close(ctx context.Context) error { return e.mp.Shutdown(ctx) }
