package metrics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
)

// pusher sends one Snapshot per push interval.
type pusher interface {
	push(context.Context, Snapshot) error
	close(context.Context) error
}

// Exporters are the push exporters that Start started. Stop ends them.
type Exporters struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	read    func() Snapshot
	pushers []pusher
	otlp    *otlpExporter
}

// failLogEvery is how often a push exporter that keeps failing says so again.
const failLogEvery = 5 * time.Minute

// Start starts the push exporters cfg configures (Datadog, StatsD,
// InfluxDB2, OTLP; Prometheus is served by package api), each sending what
// read returns every push interval, the first after one interval. version
// is tollgate's (OTLP's service.version). An exporter that cannot be built
// (an unreadable token or TLS file) is an error naming its option; one
// whose receiver is away logs it, once, and again every five minutes while
// it lasts, and keeps trying. A nil cfg starts nothing.
func Start(ctx context.Context, cfg *config.Metrics, version string, read func() Snapshot, log zerolog.Logger) (*Exporters, error) {
	ctx, cancel := context.WithCancel(ctx)
	e := &Exporters{cancel: cancel, read: read}
	if cfg == nil {
		return e, nil
	}
	start := func(name string, every config.Duration, p pusher) {
		e.pushers = append(e.pushers, p)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.loop(ctx, name, time.Duration(every), p, log.With().Str("metrics", name).Logger())
		}()
	}
	if d := cfg.Datadog; d != nil {
		start("datadog", d.PushInterval, newDatadog(d))
	}
	if s := cfg.StatsD; s != nil {
		start("statsD", s.PushInterval, newStatsd(s))
	}
	if i := cfg.InfluxDB2; i != nil {
		p, err := newInfluxDB2(i)
		if err != nil {
			_ = e.Stop(context.Background())
			return nil, err
		}
		start("influxDB2", i.PushInterval, p)
	}
	if o := cfg.OTLP; o != nil {
		x, err := newOTLP(ctx, o, version, read)
		if err != nil {
			_ = e.Stop(context.Background())
			return nil, err
		}
		e.otlp = x
	}
	return e, nil
}

// loop pushes every interval until ctx ends.
func (e *Exporters) loop(ctx context.Context, name string, every time.Duration, p pusher, log zerolog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	var failingSince, lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := p.push(pctx, e.read())
		cancel()
		now := time.Now()
		switch {
		case err != nil && (failingSince.IsZero() || now.Sub(lastLog) >= failLogEvery):
			if failingSince.IsZero() {
				failingSince = now
			}
			lastLog = now
			log.Error().Err(err).Time("since", failingSince).Msg("metrics." + name + ": cannot push the series; trying again every push interval")
		case err == nil && !failingSince.IsZero():
			log.Info().Msg("metrics." + name + ": pushing the series again")
			failingSince = time.Time{}
		}
	}
}

// Stop ends the exporters after a last push of each (bounded by ctx).
func (e *Exporters) Stop(ctx context.Context) error {
	if e == nil {
		return nil
	}
	e.cancel()
	e.wg.Wait()
	var errs []error
	for _, p := range e.pushers {
		s := e.read()
		errs = append(errs, p.push(ctx, s), p.close(ctx))
	}
	if e.otlp != nil {
		errs = append(errs, e.otlp.close(ctx))
	}
	return errors.Join(errs...)
}

// Warnings are the metrics options given that change nothing here, one
// line each, naming them and why (docs/reference/metrics.md).
func Warnings(cfg *config.Metrics) []string {
	if cfg == nil {
		return nil
	}
	var out []string
	if cfg.AddInternals {
		out = append(out, "metrics.addInternals: the requests to the admin listeners (ping, API, metrics) are HTTP and counted in no series")
	}
	if p := cfg.Prometheus; p != nil {
		if len(p.Buckets) > 0 {
			out = append(out, "metrics.prometheus.buckets: Traefik's buckets are for HTTP request durations; tollgate_router_connection_duration_seconds has its own, from 5 ms to 4 h")
		}
		if len(p.HeaderLabels) > 0 {
			out = append(out, "metrics.prometheus.headerLabels: labels from HTTP request headers; TCP connections have none")
		}
		if p.ManualRouting {
			out = append(out, "metrics.prometheus.manualRouting: /metrics is on no entry point of its own (Traefik leaves it to an HTTP router to prometheus@internal, which tollgate does not have): only on metrics.prometheus.address, or the admin API")
		}
	}
	// Traefik's defaults of the add*Labels options of the push exporters:
	// entry points and services on, routers off.
	labels := func(key string, ep, router, svc bool) {
		var changed []string
		if !ep {
			changed = append(changed, "addEntryPointsLabels")
		}
		if router {
			changed = append(changed, "addRoutersLabels")
		}
		if !svc {
			changed = append(changed, "addServicesLabels")
		}
		if len(changed) > 0 {
			out = append(out, fmt.Sprintf("metrics.%s.%s: they select Traefik's HTTP request series, which have no TCP meaning; Traefik's global series are sent either way", key, strings.Join(changed, ", .")))
		}
	}
	if d := cfg.Datadog; d != nil {
		labels("datadog", d.AddEntryPointsLabels, d.AddRoutersLabels, d.AddServicesLabels)
	}
	if s := cfg.StatsD; s != nil {
		labels("statsD", s.AddEntryPointsLabels, s.AddRoutersLabels, s.AddServicesLabels)
	}
	if i := cfg.InfluxDB2; i != nil {
		labels("influxDB2", i.AddEntryPointsLabels, i.AddRoutersLabels, i.AddServicesLabels)
	}
	if o := cfg.OTLP; o != nil {
		labels("otlp", o.AddEntryPointsLabels, o.AddRoutersLabels, o.AddServicesLabels)
		if len(o.ExplicitBoundaries) > 0 {
			out = append(out, "metrics.otlp.explicitBoundaries: the boundaries of Traefik's HTTP request-duration histograms, which have no TCP meaning")
		}
	}
	return out
}
