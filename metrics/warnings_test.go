package metrics

import (
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
)

// Traefik's defaults warn of nothing; each option given that changes
// nothing here is named once.
func TestWarnings(t *testing.T) {
	p, d, o := &config.Prometheus{}, &config.Datadog{}, &config.OTLP{}
	p.SetDefaults()
	d.SetDefaults()
	o.SetDefaults()
	if w := Warnings(&config.Metrics{Prometheus: p, Datadog: d, OTLP: o}); len(w) != 0 {
		t.Errorf("defaults: %q", w)
	}
	p.Buckets, p.HeaderLabels, p.ManualRouting = []float64{1, 2}, map[string]string{"ua": "User-Agent"}, true
	d.AddRoutersLabels, d.AddServicesLabels = true, false
	o.ExplicitBoundaries = []float64{1}
	got := strings.Join(Warnings(&config.Metrics{AddInternals: true, Prometheus: p, Datadog: d, OTLP: o}), "\n")
	for _, want := range []string{
		"metrics.addInternals:", "metrics.prometheus.buckets:", "metrics.prometheus.headerLabels:", "metrics.prometheus.manualRouting:",
		"metrics.datadog.addRoutersLabels, .addServicesLabels: they select Traefik's HTTP request series", "metrics.otlp.explicitBoundaries:",
	} {
		if strings.Count(got, want) != 1 {
			t.Errorf("want %q once in:\n%s", want, got)
		}
	}
}
