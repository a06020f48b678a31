package process

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/traefik/paerser/flag"

	"github.com/tollgate-proxy/tollgate/api"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
)

// A connection the admin server accepted before stop (a handover, a
// shutdown) is answered, even when its request arrives after stop; a
// connection made after it finds no listener; and shutdown then returns.
func TestAdminStopAnswersAcceptedConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := api.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("answered")) }))
	accepted := make(chan struct{}, 1)
	hs.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			accepted <- struct{}{}
		}
	}
	as := admins{{key: "api.address", what: "admin API", gate: upgrade.NewGate(ln.(*net.TCPListener)), hs: hs}}
	serveAdmin(as, zerolog.Nop())

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not accept within 5s")
	}
	as.stop()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("GET /api/process HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a request on a connection accepted before stop got no answer: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Errorf("answer after stop: %d, close %v; want 200 and the connection closed after it", resp.StatusCode, resp.Close)
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a connection after stop: %v, want refused (no process holds the socket)", err)
	}
	done := make(chan struct{})
	go func() { as.shutdown(time.Second); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("shutdown did not return within 5s")
	}
}

// Issue 41.3d: an admin API on an address other hosts reach, without
// api.insecure, is warned about at start, naming the address and what it
// serves them; on loopback it is not.
func TestWarnExposedAPI(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		metrics bool
		token   bool
		want    []string // empty: no warning
	}{
		{"0.0.0.0:9000", false, false, []string{`api.address=0.0.0.0:9000 is not a loopback address`, "every client IP", "without authentication"}},
		{":9000", true, true, []string{`api.address=:9000`, "/metrics", "POST /api/upgrade"}},
		{"[::]:9000", false, false, []string{`api.address=[::]:9000`}},
		{"10.1.2.3:9000", false, false, []string{`api.address=10.1.2.3:9000`}},
		{"127.0.0.1:9000", true, true, nil},
		{"127.0.0.2:9000", false, false, nil},
		{"localhost:9000", false, false, nil},
		{"[::1]:9000", false, false, nil},
	} {
		st := &config.Static{API: &config.API{Address: tc.addr}}
		if tc.metrics {
			st.Metrics = &config.Metrics{Prometheus: &config.Prometheus{}}
		}
		plans := planAdmin(st)
		var out strings.Builder
		warnExposed(plans[0], tc.token, zerolog.New(&out))
		if len(tc.want) == 0 && out.Len() != 0 {
			t.Errorf("%s: warned %s", tc.addr, out.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) || !strings.Contains(out.String(), `"level":"warn"`) {
				t.Errorf("%s: warning %q lacks %q", tc.addr, out.String(), w)
			}
		}
		if !tc.token && strings.Contains(out.String(), "upgrade") {
			t.Errorf("%s: the warning names upgrades, which are off: %s", tc.addr, out.String())
		}
	}
}

// Traefik's defaults for ping and metrics: without a declared traefik
// entry point, they are served where Traefik creates it, :8080 on every
// interface (scrapes and probes from other hosts reach them), not on
// 127.0.0.1; the admin API with its client IPs stays on loopback unless
// api.insecure; manualRouting leaves them on no listener of their own.
// The addresses are checked as planned, not bound (:8080 may be taken on
// the machine).
func TestPingAndMetricsListenWhereTraefikDoes(t *testing.T) {
	for _, tc := range []struct {
		args string
		want string // key addr serve [open...]; ...
	}{
		{"--ping", "ping.address :8080 ping"},
		{"--metrics.prometheus", "metrics.prometheus.address :8080 metrics"},
		{"--ping --metrics.prometheus", "metrics.prometheus.address :8080 metrics"},
		// The API on its default loopback address and Traefik's :8080 for
		// ping and metrics: one listener, the API to loopback clients only.
		{"--api --ping --metrics.prometheus", "api.address :8080 api /metrics /ping metrics"},
		{"--api --ping", "api.address :8080 api /ping"},
		{"--api", "api.address 127.0.0.1:8080 api"},
		// An admin API with an address of its own serves them.
		{"--api.address=127.0.0.1:9000 --ping --metrics.prometheus", "api.address 127.0.0.1:9000 api metrics"},
		{"--api.insecure --ping --metrics.prometheus", "api.address :8080 api metrics"},
		// A declared traefik entry point is theirs (and proxies nothing).
		{"--entryPoints.traefik.address=:9100 --ping --metrics.prometheus", "metrics.prometheus.address :9100 metrics"},
		{"--metrics.prometheus.address=127.0.0.1:9200 --ping", "metrics.prometheus.address 127.0.0.1:9200 metrics; ping.address :8080 ping"},
		// manualRouting: on no listener of their own.
		{"--ping.manualRouting --metrics.prometheus.manualRouting", ""},
		{"--entryPoints.traefik.address=:9100 --ping.manualRouting", ""},
		{"--api.address=127.0.0.1:9000 --metrics.prometheus.manualRouting", "api.address 127.0.0.1:9000 api metrics"},
	} {
		c := config.NewCommand()
		if err := flag.Decode(append([]string{"--entryPoints.db.address=:5432"}, strings.Fields(tc.args)...), c); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		var got []string
		for _, p := range planAdmin(&c.Static) {
			s := p.key + " " + p.addr + " " + map[adminServe]string{serveAPI: "api", serveMetrics: "metrics", servePing: "ping"}[p.serve]
			for _, o := range p.open {
				s += " " + o
			}
			if p.apiMetrics {
				s += " metrics"
			}
			got = append(got, s)
		}
		if strings.Join(got, "; ") != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.args, strings.Join(got, "; "), tc.want)
		}
		if strings.Contains(tc.args, "traefik.address") {
			_, proxied := c.EntryPoints["traefik"]
			if manual := strings.Contains(tc.args, "manualRouting"); proxied != manual {
				t.Errorf("%s: the traefik entry point proxies: %v", tc.args, proxied)
			}
		}
	}
}

// api.basePath serves the API under it, as Traefik: /traefik/api/... is
// the API's /api/...; /api/... is not found; /ping and /metrics stay at the
// root.
func TestAPIBasePath(t *testing.T) {
	var seen []string
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = append(seen, r.URL.Path) })
	h := withBasePath(inner, "/traefik/")
	for path, want := range map[string]int{"/traefik/api/rawdata": 200, "/api/rawdata": 404, "/ping": 200, "/metrics": 200, "/traefikx/api": 404} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want {
			t.Errorf("%s: %d, want %d", path, rec.Code, want)
		}
	}
	slices.Sort(seen)
	if strings.Join(seen, " ") != "/api/rawdata /metrics /ping" {
		t.Errorf("the API saw %v", seen)
	}
	if withBasePath(inner, "") == nil || withBasePath(inner, "/") == nil {
		t.Fatal("nil handler")
	}
}
