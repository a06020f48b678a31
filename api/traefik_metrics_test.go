package api

import (
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// Traefik's global series sit beside tollgate's, and metrics.prometheus's
// addEntryPointsLabels, addRoutersLabels and addServicesLabels leave out
// tollgate's series of that kind; Traefik's, the middlewares' and the
// providers' stay.
func TestPrometheusLabelOptions(t *testing.T) {
	r := newRig(t, rigOptions{log: zerolog.Nop(), obs: proxy.ConnObservers{Metrics: true}})
	r.send(t, "file", limitConfig(r.be, &config.TCPInFlightConn{Amount: 5}))
	var held []net.Conn
	for range 2 {
		c := dial(t, "127.0.0.1", r.addr)
		if c == nil {
			t.Fatal("connection not forwarded")
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	body := r.metrics(t)
	wantMetrics(t, body, map[string]string{
		`traefik_open_connections{entrypoint="tcp",protocol="TCP"}`: "2",
		`traefik_config_reloads_total`:                              "1",
	})
	_, last, _ := r.srv.Reloads()
	if v, err := strconv.ParseFloat(metricValue(body, "traefik_config_last_reload_success"), 64); err != nil || v != float64(last.Unix()) {
		t.Errorf("traefik_config_last_reload_success %v (%v), want %d: whole Unix seconds", v, err, last.Unix())
	}
	kinds := map[string]string{"entry point": "tollgate_entrypoint_", "router": "tollgate_router_", "service": "tollgate_service_", "router TLS": "tollgate_tls_handshake"}
	for kind, prefix := range kinds {
		if kind != "router TLS" && !strings.Contains(body, "\n"+prefix) {
			t.Errorf("no %s series (%s*) by default", kind, prefix)
		}
	}
	off := &config.Prometheus{}
	off.SetDefaults()
	off.AddEntryPointsLabels, off.AddRoutersLabels, off.AddServicesLabels = false, false, false
	h := httptest.NewServer(MetricsHandler(r.srv, r.w, nil, off))
	defer h.Close()
	_, body = get(t, h.URL)
	for kind, prefix := range kinds {
		if strings.Contains(body, "\n"+prefix) {
			t.Errorf("%s series (%s*) with add*Labels false", kind, prefix)
		}
	}
	wantMetrics(t, body, map[string]string{
		`traefik_open_connections{entrypoint="tcp",protocol="TCP"}`:                                "2",
		`tollgate_inflightconn_connections{middleware="lim@file"}`:                                 "2",
		`tollgate_middleware_connections_total{middleware="lim@file",reason="",result="accepted"}`: "2",
		`tollgate_provider_up{provider="file"}`:                                                    "1",
		`tollgate_config_reloads_total`:                                                            "1",
	})
}
