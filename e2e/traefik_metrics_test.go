package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// series is one scraped sample: its labels, __name__ included.
type series struct {
	labels map[string]string
	value  float64
}

// scrape reads tollgate's /metrics as Prometheus would, histograms and
// summaries as their _bucket, _sum and _count series.
func scrape(t *testing.T, p *itest.Tollgate) []series {
	t.Helper()
	resp, err := http.Get("http://" + p.API + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	var out []series
	for name, f := range fams {
		for _, m := range f.Metric {
			ls := func(extra ...string) map[string]string {
				l := map[string]string{}
				for _, lp := range m.Label {
					l[lp.GetName()] = lp.GetValue()
				}
				for i := 0; i < len(extra); i += 2 {
					l[extra[i]] = extra[i+1]
				}
				return l
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out = append(out, series{ls(model.MetricNameLabel, name), m.GetCounter().GetValue()})
			case dto.MetricType_GAUGE:
				out = append(out, series{ls(model.MetricNameLabel, name), m.GetGauge().GetValue()})
			case dto.MetricType_UNTYPED:
				out = append(out, series{ls(model.MetricNameLabel, name), m.GetUntyped().GetValue()})
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, bk := range h.Bucket {
					out = append(out, series{ls(model.MetricNameLabel, name+"_bucket", "le", fmt.Sprint(bk.GetUpperBound())), float64(bk.GetCumulativeCount())})
				}
				out = append(out, series{ls(model.MetricNameLabel, name+"_sum"), h.GetSampleSum()}, series{ls(model.MetricNameLabel, name+"_count"), float64(h.GetSampleCount())})
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				out = append(out, series{ls(model.MetricNameLabel, name+"_sum"), s.GetSampleSum()}, series{ls(model.MetricNameLabel, name+"_count"), float64(s.GetSampleCount())})
			}
		}
	}
	return out
}

// find returns the values of the series named name whose labels include
// want.
func find(all []series, name string, want map[string]string) []series {
	var out []series
	for _, s := range all {
		if s.labels[model.MetricNameLabel] != name {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && s.labels[k] == v
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

// one returns the value of the one series named name with labels want, or
// NaN.
func one(all []series, name string, want map[string]string) float64 {
	if f := find(all, name, want); len(f) == 1 {
		return f[0].value
	}
	return math.NaN()
}

// seriesRig is tollgate on entry points db (a router to an echo backend)
// and tls (a router that terminates TLS with a certificate for db.example
// and alt.example: the default TLS store is read when a router uses it),
// the file read again on SIGHUP only, and /metrics on the admin listener.
type seriesRig struct {
	p                 *itest.Tollgate
	dyn, backend, db  string
	certFile, keyFile string
	cn, serial, sans  string
	notAfter, started time.Time
}

func newSeriesRig(t *testing.T) *seriesRig {
	t.Helper()
	kp, _ := itest.SelfSigned(t, "db.example", "alt.example")
	dir := t.TempDir()
	r := &seriesRig{backend: itest.EchoServer(t, ""), dyn: filepath.Join(dir, "dyn.yml"), db: itest.FreeAddr(t),
		cn: "db.example", serial: kp.Leaf.SerialNumber.String(), sans: "alt.example,db.example", notAfter: kp.Leaf.NotAfter}
	r.certFile, r.keyFile = writeCert(t, dir, kp)
	r.write(t, 0)
	r.started = time.Now()
	r.p = itest.StartTollgate(t, "--entryPoints.db.address="+r.db, "--entryPoints.tls.address="+itest.FreeAddr(t),
		"--providers.file.filename="+r.dyn, "--providers.file.watch=false", "--metrics.prometheus", "--log.level=ERROR")
	itest.Eventually(t, 5*time.Second, func() bool { return r.p.Rawdata(t).Routers["db@file"].Status == "enabled" }, "db@file not enabled")
	return r
}

// write writes the dynamic file, with priority prio on the router (a
// change that reloads), through a rename.
func (r *seriesRig) write(t *testing.T, prio int) {
	t.Helper()
	tmp := r.dyn + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf(`tcp:
  routers:
    db:
      entryPoints: [db]
      rule: "HostSNI(`+"`*`"+`)"
      service: db
      priority: %d
    secure:
      entryPoints: [tls]
      rule: "HostSNI(`+"`db.example`"+`)"
      service: db
      tls: {}
  services:
    db:
      loadBalancer:
        servers:
          - address: %q
tls:
  certificates:
    - certFile: %q
      keyFile: %q
`, prio, r.backend, r.certFile, r.keyFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, r.dyn); err != nil {
		t.Fatal(err)
	}
}

// open is traefik_open_connections{entrypoint="db",protocol="TCP"} in s.
func openOnDB(s []series) float64 {
	return one(s, "traefik_open_connections", map[string]string{"entrypoint": "db", "protocol": "TCP"})
}

// Acceptance (issue 42, point 2), end to end: the tollgate binary with a
// file provider, a TLS certificate and two entry points; connections held,
// one closed, a reload: a live scrape shows Traefik's four global series
// with Traefik's names, labels and values, beside tollgate's own.
func TestTraefikSeriesLiveScrape(t *testing.T) {
	r := newSeriesRig(t)
	held := itest.Hold(t, 3, "127.0.0.1", r.db)
	if len(held) != 3 {
		t.Fatalf("%d of 3 connections forwarded", len(held))
	}
	var s []series
	itest.Eventually(t, 5*time.Second, func() bool { s = scrape(t, r.p); return openOnDB(s) == 3 },
		"traefik_open_connections{entrypoint=db,protocol=TCP} 3")
	if v := one(s, "traefik_open_connections", map[string]string{"entrypoint": "tls", "protocol": "TCP"}); v != 0 {
		t.Errorf("tls: %v open connections, want 0", v)
	}
	if v := one(s, "traefik_config_reloads_total", nil); v != 1 {
		t.Errorf("traefik_config_reloads_total %v, want 1 (the configuration at start)", v)
	}
	last := one(s, "traefik_config_last_reload_success", nil)
	if last < float64(r.started.Unix()) || last > float64(time.Now().Unix()) || last != math.Trunc(last) {
		t.Errorf("traefik_config_last_reload_success %v, want whole Unix seconds from %d to now", last, r.started.Unix())
	}
	certs := find(s, "traefik_tls_certs_not_after", map[string]string{"cn": r.cn})
	if len(certs) != 1 || certs[0].labels["serial"] != r.serial || certs[0].labels["sans"] != r.sans || certs[0].value != float64(r.notAfter.Unix()) {
		t.Errorf("traefik_tls_certs_not_after{cn=%q}: %v, want serial %s, sans %q, %d", r.cn, certs, r.serial, r.sans, r.notAfter.Unix())
	}
	for _, want := range []string{"tollgate_entrypoint_open_connections", "tollgate_router_open_connections", "tollgate_config_reloads_total"} {
		if len(find(s, want, nil)) == 0 {
			t.Errorf("tollgate's own %s is missing", want)
		}
	}

	// A connection closes; the configuration changes and SIGHUP reads it.
	held[0].Close()
	itest.Eventually(t, 5*time.Second, func() bool { return openOnDB(scrape(t, r.p)) == 2 },
		"traefik_open_connections{entrypoint=db} 2 after a close")
	before := time.Now().Unix()
	r.write(t, 7)
	if err := r.p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	itest.Eventually(t, 5*time.Second, func() bool { s = scrape(t, r.p); return one(s, "traefik_config_reloads_total", nil) == 2 },
		"traefik_config_reloads_total 2 after the reload")
	if last := one(s, "traefik_config_last_reload_success", nil); last < float64(before) || last > float64(time.Now().Unix()) {
		t.Errorf("traefik_config_last_reload_success %v after the reload at %d", last, before)
	}
	if v := openOnDB(s); v != 2 {
		t.Errorf("%v open connections after the reload, want 2: a reload never touches live connections", v)
	}
	// Traefik's HTTP request series mean nothing here and are not faked.
	for _, x := range s {
		if n := x.labels[model.MetricNameLabel]; strings.HasPrefix(n, "traefik_") && !slices.Contains(traefikGlobal, n) {
			t.Errorf("%s: not one of Traefik's global series", n)
		}
	}
}

// traefikGlobal are Traefik's global series, those a Traefik that routes
// TCP only exports with data.
var traefikGlobal = []string{"traefik_config_reloads_total", "traefik_config_last_reload_success", "traefik_open_connections", "traefik_tls_certs_not_after"}

// dashboard is what the test reads of a Grafana dashboard.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			IncludeAll bool   `json:"includeAll"`
			Query      any    `json:"query"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a row's
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func (p panel) walk(f func(panel)) {
	f(p)
	for _, c := range p.Panels {
		c.walk(f)
	}
}

var labelValuesRE = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// Acceptance (issue 42, point 2): Traefik's own Grafana dashboards
// (testdata/traefik-grafana, unchanged) are loaded, and every query whose
// panel shows TCP data under Traefik (those selecting only Traefik's global
// series: the entry point variable, "Traefik Instances", "Connections per
// Entrypoint") selects series that a live scrape of tollgate has, with the
// variables as Grafana substitutes them (All: every value). The queries on
// Traefik's HTTP request series select nothing, as for a Traefik that
// routes TCP only.
func TestTraefikGrafanaDashboards(t *testing.T) {
	r := newSeriesRig(t)
	if held := itest.Hold(t, 2, "127.0.0.1", r.db); len(held) != 2 {
		t.Fatalf("%d of 2 connections forwarded", len(held))
	}
	var s []series
	itest.Eventually(t, 5*time.Second, func() bool { s = scrape(t, r.p); return openOnDB(s) == 2 }, "two open connections on db")
	selects := func(ms []*labels.Matcher) bool {
		for _, x := range s {
			ok := true
			for _, m := range ms {
				ok = ok && m.Matches(x.labels[m.Name])
			}
			if ok {
				return true
			}
		}
		return false
	}
	tcpOnly := func(ms [][]*labels.Matcher) bool {
		for _, sel := range ms {
			name := ""
			for _, m := range sel {
				if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if !slices.Contains(traefikGlobal, name) {
				return false
			}
		}
		return len(ms) > 0
	}
	for _, file := range []string{"traefik.json", "traefik-kubernetes.json"} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "traefik-grafana", file))
			if err != nil {
				t.Fatal(err)
			}
			var d dashboard
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			// The variables, as Grafana fills them: a query variable from
			// the scrape, All as (v1|v2|...), the interval 5m.
			vars := map[string]string{"interval": "5m"}
			tcpVars := 0
			for _, v := range d.Templating.List {
				if v.Type != "query" {
					continue
				}
				m := labelValuesRE.FindStringSubmatch(v.Definition)
				if m == nil {
					t.Fatalf("variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
				}
				var values []string
				for _, x := range find(s, m[1], nil) {
					if lv := x.labels[m[2]]; lv != "" && !slices.Contains(values, lv) {
						values = append(values, lv)
					}
				}
				slices.Sort(values)
				if slices.Contains(traefikGlobal, m[1]) {
					tcpVars++
					if !slices.Equal(values, []string{"db", "tls"}) {
						t.Errorf("variable %s = %s: %v, want the entry points db and tls", v.Name, v.Definition, values)
					}
				} else if len(values) > 0 {
					t.Errorf("variable %s = %s: %v from an HTTP series tollgate does not export", v.Name, v.Definition, values)
				}
				vars[v.Name] = "(" + strings.Join(values, "|") + ")"
			}
			if tcpVars != 1 {
				t.Errorf("%d variables on Traefik's TCP series, want 1 (entrypoint)", tcpVars)
			}
			var tcpPanels, httpQueries []string
			for _, top := range d.Panels {
				top.walk(func(pn panel) {
					for _, tg := range pn.Targets {
						if tg.Expr == "" {
							continue
						}
						expr := tg.Expr
						for k, v := range vars {
							expr = strings.ReplaceAll(expr, "$"+k, v)
						}
						e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
						if err != nil {
							t.Errorf("%q: %q does not parse: %v", pn.Title, expr, err)
							continue
						}
						sels := parser.ExtractSelectors(e)
						if !tcpOnly(sels) {
							httpQueries = append(httpQueries, pn.Title)
							for _, sel := range sels {
								if selects(sel) {
									t.Errorf("%q: %v selects tollgate's series, but it is an HTTP query", pn.Title, sel)
								}
							}
							continue
						}
						tcpPanels = append(tcpPanels, pn.Title)
						for _, sel := range sels {
							if !selects(sel) {
								t.Errorf("panel %q: %v selects no series of tollgate's scrape", pn.Title, sel)
							}
						}
					}
				})
			}
			slices.Sort(tcpPanels)
			if !slices.Equal(tcpPanels, []string{"Connections per Entrypoint", "Traefik Instances"}) {
				t.Errorf("panels on Traefik's TCP series: %q", tcpPanels)
			}
			if len(httpQueries) < 10 {
				t.Errorf("only %d HTTP queries: the dashboard is not the one expected", len(httpQueries))
			}
		})
	}
}
