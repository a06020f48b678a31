package api

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/metrics"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/crowdsec"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// MetricsHandler serves Prometheus metrics read, at scrape time, from the
// counters the data plane keeps anyway: nothing is done per connection for
// metrics beyond those atomic adds. Per-router bytes and durations are
// counted when a connection closes, and only when the server's State has
// ConnObservers.Metrics set (internal/process sets it with --metrics.prometheus and
// its addRoutersLabels).
//
// Beside tollgate's own series it serves Traefik's global ones with
// Traefik's names and labels (package metrics reads them). opts, when not
// nil, is metrics.prometheus: its addEntryPointsLabels, addRoutersLabels
// and addServicesLabels keep or leave out tollgate's per-entry-point,
// per-router and per-service series (nil: all of them).
//
// up, when not nil, adds the process generation and the handover counters
// of binary upgrades (docs/operations/upgrading.md).
func MetricsHandler(srv *proxy.Server, w *provider.Watcher, up *upgrade.Stats, opts *config.Prometheus) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c := &collector{srv: srv, w: w, entryPoints: true, routers: true, services: true}
	if opts != nil {
		c.entryPoints, c.routers, c.services = opts.AddEntryPointsLabels, opts.AddRoutersLabels, opts.AddServicesLabels
	}
	reg.MustRegister(c, traefikCollector{srv})
	if up != nil {
		reg.MustRegister(upgradeCollector{up})
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// Traefik's global series, with Traefik's names and labels
// (docs/reference/metrics.md#traefiks-series).
var (
	descTraefikReloads = prometheus.NewDesc("traefik_config_reloads_total", "Configurations applied (Traefik's series).", nil, nil)
	descTraefikLast    = prometheus.NewDesc("traefik_config_last_reload_success", "When the last configuration was applied, in Unix seconds (Traefik's series).", nil, nil)
	descTraefikOpen    = prometheus.NewDesc("traefik_open_connections", "Open TCP connections, by entry point and protocol, from accept to close (Traefik's series).", []string{"entrypoint", "protocol"}, nil)
	descTraefikCerts   = prometheus.NewDesc("traefik_tls_certs_not_after", "When a certificate expires, in Unix seconds (Traefik's series).", []string{"cn", "serial", "sans"}, nil)
)

// traefikCollector serves Traefik's global series from a metrics.Snapshot,
// the one the push exporters send.
type traefikCollector struct{ srv *proxy.Server }

func (traefikCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTraefikReloads, descTraefikLast, descTraefikOpen, descTraefikCerts} {
		ch <- d
	}
}

func (c traefikCollector) Collect(ch chan<- prometheus.Metric) {
	s := metrics.Read(c.srv)
	ch <- prometheus.MustNewConstMetric(descTraefikReloads, prometheus.CounterValue, float64(s.Reloads))
	if !s.LastReload.IsZero() {
		ch <- prometheus.MustNewConstMetric(descTraefikLast, prometheus.GaugeValue, float64(s.LastReload.Unix()))
	}
	for _, e := range s.Open {
		ch <- prometheus.MustNewConstMetric(descTraefikOpen, prometheus.GaugeValue, float64(e.Connections), e.EntryPoint, "TCP")
	}
	for _, cert := range s.Certificates {
		ch <- prometheus.MustNewConstMetric(descTraefikCerts, prometheus.GaugeValue, float64(cert.NotAfter.Unix()), cert.CN, cert.Serial, cert.SANs)
	}
}

var (
	descEPOpen     = prometheus.NewDesc("tollgate_entrypoint_open_connections", "Connections being served, per entry point.", []string{"entrypoint"}, nil)
	descEPAccepted = prometheus.NewDesc("tollgate_entrypoint_connections_total", "Connections accepted, per entry point.", []string{"entrypoint"}, nil)
	descNoRoute    = prometheus.NewDesc("tollgate_entrypoint_rejected_total", "Connections closed by the entry point, per reason.", []string{"entrypoint", "reason"}, nil)
	descEPUnrouted = prometheus.NewDesc("tollgate_entrypoint_unrouted_connections", "Connections accepted and not yet routed (reading a PROXY header or a TLS ClientHello), per entry point.", []string{"entrypoint"}, nil)
	descEPAcceptEr = prometheus.NewDesc("tollgate_entrypoint_accept_errors_total", "Failed accepts (out of file descriptors, aborted handshakes), per entry point.", []string{"entrypoint"}, nil)
	descRouterOpen = prometheus.NewDesc("tollgate_router_open_connections", "Connections being served, per router.", []string{"router"}, nil)
	descMWConns    = prometheus.NewDesc("tollgate_middleware_connections_total", "Connections seen by a middleware, per result (accepted|rejected) and reason.", []string{"middleware", "result", "reason"}, nil)
	descInFlight   = prometheus.NewDesc("tollgate_inflightconn_connections", "Connections counted by an inFlightConn limiter now.", []string{"middleware"}, nil)
	descClients    = prometheus.NewDesc("tollgate_inflightconn_clients", "Distinct client keys with an open connection, per inFlightConn limiter.", []string{"middleware"}, nil)
	descDialErrors = prometheus.NewDesc("tollgate_service_dial_errors_total", "Failed backend dials, per service.", []string{"service"}, nil)
	descSrvOpen    = prometheus.NewDesc("tollgate_service_server_open_connections", "Connections open (or being dialled) to a server of a service whose servers have a maxConn.", []string{"service", "server"}, nil)
	descSrvMax     = prometheus.NewDesc("tollgate_service_server_max_connections", "A server's maxConn (0: no cap).", []string{"service", "server"}, nil)
	descSrvInh     = prometheus.NewDesc("tollgate_service_server_inherited_connections", "The old process's connections to a capped server after an upgrade, counted against its maxConn until they end.", []string{"service", "server"}, nil)
	descQueued     = prometheus.NewDesc("tollgate_service_queued_connections", "Connections waiting for a server slot, per capped service.", []string{"service"}, nil)
	descQueueRej   = prometheus.NewDesc("tollgate_service_queue_rejected_total", "Connections a capped service closed: its queue was full, the wait timed out, or a client holding fewer places took the place (evicted).", []string{"service", "reason"}, nil)
	descFallbacks  = prometheus.NewDesc("tollgate_service_splice_fallbacks_total", "Copies done through a buffer because no splice pipe could be created (out of file descriptors), per service.", []string{"service"}, nil)
	descReloads    = prometheus.NewDesc("tollgate_config_reloads_total", "Configurations applied.", nil, nil)
	descLastReload = prometheus.NewDesc("tollgate_config_last_reload_timestamp_seconds", "When the last configuration was applied.", nil, nil)
	descProvider   = prometheus.NewDesc("tollgate_provider_up", "1 when the provider reads its source, 0 when it reports an error.", []string{"provider"}, nil)
	descProvUpd    = prometheus.NewDesc("tollgate_provider_updates_total", "Configurations received from the provider.", []string{"provider"}, nil)
	descProvErr    = prometheus.NewDesc("tollgate_provider_errors_total", "Errors reported by the provider (source unreachable or unreadable).", []string{"provider"}, nil)
	descProvState  = prometheus.NewDesc("tollgate_provider_state", "1 for the provider's current state (starting|ok|error), 0 for the others.", []string{"provider", "state"}, nil)
	descProvOK     = prometheus.NewDesc("tollgate_provider_last_reload_success", "1 when the provider's last report was a configuration, 0 when it was an error.", []string{"provider"}, nil)
	descProvLast   = prometheus.NewDesc("tollgate_provider_last_reload_timestamp_seconds", "When the provider last delivered a configuration.", []string{"provider"}, nil)
	descProvErrAt  = prometheus.NewDesc("tollgate_provider_error_since_timestamp_seconds", "Since when the provider has been failing (absent while it is not).", []string{"provider"}, nil)
	descCSReady    = prometheus.NewDesc("tollgate_crowdsec_ready", "1 when the crowdSec bouncer has pulled its decisions since it started (until then failureMode applies).", []string{"middleware"}, nil)
	descCSLastPull = prometheus.NewDesc("tollgate_crowdsec_last_pull_timestamp_seconds", "When the crowdSec bouncer last pulled its decisions successfully (Unix time; 0: never).", []string{"middleware"}, nil)
	descCSPulls    = prometheus.NewDesc("tollgate_crowdsec_pulls_total", "The crowdSec bouncer's pulls from its Local API, by result (success, failure).", []string{"middleware", "result"}, nil)
	descCSBans     = prometheus.NewDesc("tollgate_crowdsec_bans", "The bans the crowdSec bouncer holds in force, by scope (ip, range).", []string{"middleware", "scope"}, nil)
	descRLClients  = prometheus.NewDesc("tollgate_ratelimit_clients", "Client keys whose bucket is not full, per rateLimit limiter (its per-IP entries).", []string{"middleware"}, nil)
	descStoreUp    = prometheus.NewDesc("tollgate_inflightconn_store_up", "1 when the shared store of an inFlightConn limiter answers and this replica's shares are asserted, 0 while its failureMode applies.", []string{"middleware", "store", "failure_mode"}, nil)
	descStoreFall  = prometheus.NewDesc("tollgate_inflightconn_store_fallbacks_total", "Connections admitted by the amount per replica while the shared store was unreachable (failureMode open), per inFlightConn limiter.", []string{"middleware"}, nil)
	descStoreRT    = prometheus.NewDesc("tollgate_store_round_trip_seconds", "Round trips to a shared store (pipelined batches of admissions and releases, lease refreshes).", []string{"store"}, nil)
	descStoreFail  = prometheus.NewDesc("tollgate_store_round_trip_errors_total", "Round trips to a shared store that failed or timed out.", []string{"store"}, nil)
	descStoreEvict = prometheus.NewDesc("tollgate_store_eviction_risk", "1 when the shared store's Redis server has a maxmemory-policy that may evict tollgate's keys (any but noeviction), else 0 (maxmemory_policy \"unknown\": it could not be read).", []string{"store", "maxmemory_policy"}, nil)
	descStoreLost  = prometheus.NewDesc("tollgate_store_shares_lost_total", "Times a shared store was found to have lost some of this replica's shares (flushed, deleted or evicted keys, writes lost in a failover), which were then asserted again.", []string{"store"}, nil)
	descAmount     = prometheus.NewDesc("tollgate_inflightconn_limit", "The per-client amount of an inFlightConn limiter.", []string{"middleware"}, nil)
	descBytesIn    = prometheus.NewDesc("tollgate_router_bytes_in_total", "Bytes from clients to backends, per router, counted when a connection closes.", []string{"router"}, nil)
	descBytesOut   = prometheus.NewDesc("tollgate_router_bytes_out_total", "Bytes from backends to clients, per router, counted when a connection closes.", []string{"router"}, nil)
	descTLSOK      = prometheus.NewDesc("tollgate_tls_handshakes_total", "TLS handshakes completed, per terminating router.", []string{"router"}, nil)
	descTLSFail    = prometheus.NewDesc("tollgate_tls_handshake_failures_total", "TLS handshakes that failed, per terminating router and reason (no_certificate, protocol_version, no_shared_cipher, bad_client_certificate, timeout, eof, other).", []string{"router", "reason"}, nil)
	descTLSBackend = prometheus.NewDesc("tollgate_service_tls_errors_total", "TLS handshakes with servers that failed (certificate not verified, among others), per service.", []string{"service"}, nil)
	descCertsNA    = prometheus.NewDesc("tollgate_tls_certs_not_after", "When a certificate expires (Unix seconds): the default TLS store's and what the certificate resolvers hold. Traefik's traefik_tls_certs_not_after.", []string{"cn", "sans", "serial"}, nil)
	descDuration   = prometheus.NewDesc("tollgate_router_connection_duration_seconds", "Duration of closed proxied connections, per router.", []string{"router"}, nil)
)

// providerStates are the values of tollgate_provider_state's state label.
var providerStates = []string{"starting", "ok", "error"}

type collector struct {
	srv *proxy.Server
	w   *provider.Watcher
	// The kinds of series served (metrics.prometheus.add*Labels).
	entryPoints, routers, services bool
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEPOpen, descEPAccepted, descNoRoute, descEPUnrouted, descEPAcceptEr, descRouterOpen, descMWConns, descInFlight, descClients, descDialErrors, descFallbacks, descSrvOpen, descSrvMax, descSrvInh, descQueued, descQueueRej, descReloads, descLastReload, descProvider, descProvUpd, descProvErr,
		descProvState, descProvOK, descProvLast, descProvErrAt, descAmount, descRLClients, descCSReady, descCSLastPull, descCSPulls, descCSBans, descStoreUp, descStoreFall, descStoreRT, descStoreFail, descStoreEvict, descStoreLost, descBytesIn, descBytesOut, descDuration, descTLSOK, descTLSFail, descTLSBackend, descCertsNA} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.collectEntryPoints(ch)
	st := c.srv.State()
	collectMiddlewares(ch, st.Keepers())
	st.Each(
		func(name string, s *proxy.ServiceCounters) {
			if !c.services {
				return
			}
			ch <- prometheus.MustNewConstMetric(descDialErrors, prometheus.CounterValue, float64(s.DialErrors.Load()), name)
			ch <- prometheus.MustNewConstMetric(descTLSBackend, prometheus.CounterValue, float64(s.TLSErrors.Load()), name)
			ch <- prometheus.MustNewConstMetric(descFallbacks, prometheus.CounterValue, float64(s.SpliceFallbacks.Load()), name)
		},
		func(name string, open int64) {
			if !c.routers {
				return
			}
			ch <- prometheus.MustNewConstMetric(descRouterOpen, prometheus.GaugeValue, float64(open), name)
		},
	)
	st.EachCapacity(func(name string, cs proxy.CapacityState) {
		if !c.services {
			return
		}
		for _, sv := range cs.Servers {
			ch <- prometheus.MustNewConstMetric(descSrvOpen, prometheus.GaugeValue, float64(sv.Open), name, sv.Address)
			ch <- prometheus.MustNewConstMetric(descSrvMax, prometheus.GaugeValue, float64(sv.Max), name, sv.Address)
			ch <- prometheus.MustNewConstMetric(descSrvInh, prometheus.GaugeValue, float64(sv.Inherited), name, sv.Address)
		}
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(cs.Queued), name)
		ch <- prometheus.MustNewConstMetric(descQueueRej, prometheus.CounterValue, float64(cs.RejectedFull), name, "full")
		ch <- prometheus.MustNewConstMetric(descQueueRej, prometheus.CounterValue, float64(cs.TimedOut), name, "timeout")
		ch <- prometheus.MustNewConstMetric(descQueueRej, prometheus.CounterValue, float64(cs.Evicted), name, "evicted")
	})
	st.EachTLSCounters(func(name string, tc *proxy.TLSCounters) {
		if !c.routers {
			return
		}
		ch <- prometheus.MustNewConstMetric(descTLSOK, prometheus.CounterValue, float64(tc.Handshakes.Load()), name)
		for i, reason := range proxy.HandshakeReasons {
			ch <- prometheus.MustNewConstMetric(descTLSFail, prometheus.CounterValue, float64(tc.Failures[i].Load()), name, reason)
		}
	})
	st.EachRouterCounters(func(name string, rc *proxy.RouterCounters) {
		if !c.routers {
			return
		}
		ch <- prometheus.MustNewConstMetric(descBytesIn, prometheus.CounterValue, float64(rc.BytesIn.Load()), name)
		ch <- prometheus.MustNewConstMetric(descBytesOut, prometheus.CounterValue, float64(rc.BytesOut.Load()), name)
		count, sum, buckets := rc.Duration.Snapshot()
		ch <- prometheus.MustNewConstHistogram(descDuration, count, sum, buckets, name)
	})
	seen := map[[3]string]bool{}
	for _, ci := range append(append([]proxy.CertificateInfo(nil), c.srv.Runtime().Certificates...), c.srv.ResolverCertificates()...) {
		labels := [3]string{ci.CN, strings.Join(ci.SANs, ","), ci.Serial}
		if ci.Error != "" || ci.NotAfter.IsZero() || seen[labels] {
			continue
		}
		seen[labels] = true
		ch <- prometheus.MustNewConstMetric(descCertsNA, prometheus.GaugeValue, float64(ci.NotAfter.Unix()), labels[:]...)
	}
	n, last, _ := c.srv.Reloads()
	ch <- prometheus.MustNewConstMetric(descReloads, prometheus.CounterValue, float64(n))
	if n > 0 {
		ch <- prometheus.MustNewConstMetric(descLastReload, prometheus.GaugeValue, float64(last.UnixNano())/1e9)
	}
	c.collectProviders(ch)
}

// collectEntryPoints collects each entry point's series.
func (c *collector) collectEntryPoints(ch chan<- prometheus.Metric) {
	var epNames []string
	if c.entryPoints {
		epNames = c.srv.EntryPointNames()
	}
	for _, name := range epNames {
		ep := c.srv.EntryPoint(name)
		ch <- prometheus.MustNewConstMetric(descEPOpen, prometheus.GaugeValue, float64(ep.Open()), name)
		ch <- prometheus.MustNewConstMetric(descEPAccepted, prometheus.CounterValue, float64(ep.Accepted()), name)
		ch <- prometheus.MustNewConstMetric(descNoRoute, prometheus.CounterValue, float64(ep.NoRoute()), name, "no_route")
		u := ep.Unrouted(0)
		ch <- prometheus.MustNewConstMetric(descNoRoute, prometheus.CounterValue, float64(u.Rejected), name, "unrouted_limit")
		ch <- prometheus.MustNewConstMetric(descNoRoute, prometheus.CounterValue, float64(u.RejectedMax), name, "unrouted_total_limit")
		ch <- prometheus.MustNewConstMetric(descEPUnrouted, prometheus.GaugeValue, float64(u.Open), name)
		ch <- prometheus.MustNewConstMetric(descEPAcceptEr, prometheus.CounterValue, float64(ep.AcceptErrors()), name)
	}
}

// collectMiddlewares collects every middleware's decisions (its kind's
// Counts) and the series of the kinds that have their own: inFlightConn's
// limits and shared stores, rateLimit's clients, crowdSec's bouncers.
func collectMiddlewares(ch chan<- prometheus.Metric, ks *middleware.Keepers) {
	stores := map[*inflightconn.Store]bool{}
	defer func() {
		for s := range stores {
			n, total, failed := s.RoundTrips()
			ch <- prometheus.MustNewConstSummary(descStoreRT, n, total.Seconds(), nil, s.Name())
			ch <- prometheus.MustNewConstMetric(descStoreFail, prometheus.CounterValue, float64(failed), s.Name())
			if policy, risk := s.Eviction(); policy != "" {
				v := 0.0
				if risk {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(descStoreEvict, prometheus.GaugeValue, v, s.Name(), policy)
			}
			ch <- prometheus.MustNewConstMetric(descStoreLost, prometheus.CounterValue, float64(s.SharesLost()), s.Name())
		}
	}()
	ks.Counts(func(name string, c middleware.Counts) {
		ch <- prometheus.MustNewConstMetric(descMWConns, prometheus.CounterValue, float64(c.Admitted), name, "accepted", "")
		for _, r := range c.Reasons {
			result := "rejected"
			if r.WouldBe {
				// In dry run nothing is rejected: the would-be
				// rejections keep their reason under result="would_reject".
				result = "would_reject"
			}
			ch <- prometheus.MustNewConstMetric(descMWConns, prometheus.CounterValue, float64(r.N), name, result, r.Reason.String())
		}
	})
	inflightconn.Limiters(ks).Each(func(name string, l *inflightconn.Limiter) {
		s := l.Stats()
		if store := l.Store(); store != nil {
			up := 0.0
			if store.Reachable() {
				up = 1
			}
			fallbacks, _, _ := l.StoreCounts()
			ch <- prometheus.MustNewConstMetric(descStoreUp, prometheus.GaugeValue, up, name, store.Name(), store.State(l).FailureMode)
			ch <- prometheus.MustNewConstMetric(descStoreFall, prometheus.CounterValue, float64(fallbacks), name)
			stores[store] = true
		}
		ch <- prometheus.MustNewConstMetric(descAmount, prometheus.GaugeValue, float64(s.Amount), name)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight), name)
		ch <- prometheus.MustNewConstMetric(descClients, prometheus.GaugeValue, float64(s.DistinctIPs), name)
	})
	ratelimit.Limiters(ks).Each(func(name string, l *ratelimit.Limiter) {
		ch <- prometheus.MustNewConstMetric(descRLClients, prometheus.GaugeValue, float64(l.Stats().DistinctIPs), name)
	})
	crowdsec.Bouncers(ks).Each(func(name string, l *crowdsec.Live) {
		b := l.Bouncer()
		if b == nil {
			return
		}
		ready, last := 0.0, 0.0
		if b.Ready {
			ready = 1
		}
		if !b.LastPull.IsZero() {
			last = float64(b.LastPull.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(descCSReady, prometheus.GaugeValue, ready, name)
		ch <- prometheus.MustNewConstMetric(descCSLastPull, prometheus.GaugeValue, last, name)
		ch <- prometheus.MustNewConstMetric(descCSPulls, prometheus.CounterValue, float64(b.Pulls), name, "success")
		ch <- prometheus.MustNewConstMetric(descCSPulls, prometheus.CounterValue, float64(b.Failures), name, "failure")
		ch <- prometheus.MustNewConstMetric(descCSBans, prometheus.GaugeValue, float64(b.IPs), name, "ip")
		ch <- prometheus.MustNewConstMetric(descCSBans, prometheus.GaugeValue, float64(b.Ranges), name, "range")
	})
}

// collectProviders collects each provider's series.
func (c *collector) collectProviders(ch chan<- prometheus.Metric) {
	for _, s := range c.w.Statuses() {
		up := 0.0
		if s.State == "ok" {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descProvider, prometheus.GaugeValue, up, s.Name)
		ch <- prometheus.MustNewConstMetric(descProvUpd, prometheus.CounterValue, float64(s.Updates), s.Name)
		ch <- prometheus.MustNewConstMetric(descProvErr, prometheus.CounterValue, float64(s.Errors), s.Name)
		for _, state := range providerStates {
			v := 0.0
			if s.State == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descProvState, prometheus.GaugeValue, v, s.Name, state)
		}
		if s.State != "starting" {
			ok := 1.0
			if s.State == "error" {
				ok = 0
			}
			ch <- prometheus.MustNewConstMetric(descProvOK, prometheus.GaugeValue, ok, s.Name)
		}
		if !s.LastUpdate.IsZero() {
			ch <- prometheus.MustNewConstMetric(descProvLast, prometheus.GaugeValue, float64(s.LastUpdate.UnixNano())/1e9, s.Name)
		}
		if !s.ErrorSince.IsZero() {
			ch <- prometheus.MustNewConstMetric(descProvErrAt, prometheus.GaugeValue, float64(s.ErrorSince.UnixNano())/1e9, s.Name)
		}
	}
}

var (
	descGeneration = prometheus.NewDesc("tollgate_process_generation", "1 for a process started by hand, one more than its predecessor's for one started by a binary upgrade.", nil, nil)
	descUpgrades   = prometheus.NewDesc("tollgate_upgrades_total", "Binary upgrades this process attempted, per result (ok|failed).", []string{"result"}, nil)
	descHandover   = prometheus.NewDesc("tollgate_handover_connections", "inFlightConn connections in the snapshot of a handover, per direction (received from the predecessor|sent to the successor).", []string{"direction"}, nil)
	descHandKeys   = prometheus.NewDesc("tollgate_handover_keys", "Client keys in the snapshot of a handover, per direction.", []string{"direction"}, nil)
	descReleases   = prometheus.NewDesc("tollgate_handover_releases_total", "Releases of the old process's connections, per direction (received|forwarded).", []string{"direction"}, nil)
	descOutstand   = prometheus.NewDesc("tollgate_handover_outstanding_connections", "The predecessor's connections still counted in this process's limiters.", nil, nil)
	descAtEnd      = prometheus.NewDesc("tollgate_handover_released_at_end_total", "The predecessor's connections released when its state channel ended (it exited or was killed).", nil, nil)
	descCapConns   = prometheus.NewDesc("tollgate_handover_capped_connections", "Connections to servers with a maxConn handed over (or reported later), per direction (received|sent).", []string{"direction"}, nil)
	descCapRel     = prometheus.NewDesc("tollgate_handover_capped_releases_total", "Releases of the old process's connections to servers with a maxConn, per direction (received|forwarded).", []string{"direction"}, nil)
	descUnrouted   = prometheus.NewDesc("tollgate_handover_unrouted_connections", "Connections accepted and not yet routed at a handover, handed to the new process to route, per direction (received|sent|lost: could not be sent, reset).", []string{"direction"}, nil)
)

// upgradeCollector reads a process's upgrade.Stats at scrape time.
type upgradeCollector struct{ s *upgrade.Stats }

func (c upgradeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGeneration, descUpgrades, descHandover, descHandKeys, descReleases, descOutstand, descAtEnd, descCapConns, descCapRel, descUnrouted} {
		ch <- d
	}
}

func (c upgradeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(descGeneration, int64(s.Generation.Load()))
	counter(descUpgrades, s.Attempts.Load()-s.Failures.Load(), "ok")
	counter(descUpgrades, s.Failures.Load(), "failed")
	gauge(descHandover, s.Received.Connections.Load(), "received")
	gauge(descHandover, s.Sent.Connections.Load(), "sent")
	gauge(descHandKeys, s.Received.Keys.Load(), "received")
	gauge(descHandKeys, s.Sent.Keys.Load(), "sent")
	counter(descReleases, s.ReleasesReceived.Load(), "received")
	counter(descReleases, s.ReleasesForwarded.Load(), "forwarded")
	gauge(descOutstand, s.Outstanding.Load())
	counter(descAtEnd, s.ReleasedAtEnd.Load())
	gauge(descCapConns, s.CapConnections.Load(), "received")
	gauge(descCapConns, s.CapConnectionsSent.Load(), "sent")
	counter(descCapRel, s.CapReleasesReceived.Load(), "received")
	counter(descCapRel, s.CapReleasesForwarded.Load(), "forwarded")
	gauge(descUnrouted, s.UnroutedReceived.Load(), "received")
	gauge(descUnrouted, s.UnroutedSent.Load(), "sent")
	gauge(descUnrouted, s.UnroutedLost.Load(), "lost")
}
