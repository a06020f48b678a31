package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/provider"
)

// dashSetup is setup's proxy behind an API with the dashboard and a
// history that the test samples itself.
func dashSetup(t *testing.T, dashboard bool) (*httptest.Server, *History, string) {
	t.Helper()
	_, srv, addr := setup(t)
	hist := NewHistory(srv)
	h := httptest.NewServer(GuardHost(Handler(Sources{Server: srv, Watcher: &provider.Watcher{}, Dashboard: dashboard, History: hist}), nil))
	t.Cleanup(h.Close)
	return h, hist, addr
}

func decodeGET(t *testing.T, url string, v any) {
	t.Helper()
	code, body := get(t, url)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}

// TestRefusalsEndpoint: GET /api/refusals answers "why was this client
// refused?" from the record, filtered by IP (or prefix), reason,
// middleware; GET .../refused ranks a middleware's refused clients; a bad
// parameter is a 400 naming it.
func TestRefusalsEndpoint(t *testing.T) {
	h, _, addr := dashSetup(t, true)
	if dial(t, "127.0.0.1", addr) == nil || dial(t, "127.0.0.1", addr) == nil {
		t.Fatal("the first two connections from 127.0.0.1 were not forwarded")
	}
	for i := 0; i < 3; i++ {
		if dial(t, "127.0.0.1", addr) != nil {
			t.Fatal("a third connection from 127.0.0.1 was forwarded (amount 2)")
		}
	}
	if dial(t, "127.0.0.3", addr) != nil {
		t.Fatal("127.0.0.3 passed the allow list")
	}
	var v refusalsView
	decodeGET(t, h.URL+"/api/refusals?ip=127.0.0.1", &v)
	if v.Matched != 1 || len(v.Refusals) != 1 || v.Size != 10000 || v.RecordedTotal != 4 {
		t.Fatalf("127.0.0.1: %+v", v)
	}
	e := v.Refusals[0]
	if e.Count != 3 || e.Reason != "inflightconn_limit" || e.Router != "r@file" || e.Middleware != "lim@file" || e.EntryPoint != "tcp" ||
		e.ClientIP != "127.0.0.1" || e.Message != "max number of connections reached (inFlightConn.amount 2)" || time.Since(e.Last) > time.Minute {
		t.Fatalf("127.0.0.1's entry: %+v", e)
	}
	decodeGET(t, h.URL+"/api/refusals?ip=127.0.0.0/30&reason=ipallowlist_denied", &v)
	if len(v.Refusals) != 1 || v.Refusals[0].ClientIP != "127.0.0.3" || v.Refusals[0].Middleware != "allow@file" {
		t.Fatalf("127.0.0.0/30 denied by the allow list: %+v", v)
	}
	decodeGET(t, h.URL+"/api/refusals?ip=::ffff:127.0.0.1&since=1m&middleware=lim@file", &v)
	if len(v.Refusals) != 1 {
		t.Fatalf("by the mapped address: %+v", v)
	}
	decodeGET(t, h.URL+"/api/refusals?ip=127.0.0.9", &v)
	if v.Matched != 0 || v.Refusals == nil {
		t.Fatalf("a client never refused: %+v (want an empty list)", v)
	}
	var top refusedView
	decodeGET(t, h.URL+"/api/tcp/middlewares/lim@file/refused?since=30s", &top)
	if top.Clients != 1 || top.Refused != 3 || len(top.Top) != 1 || top.Top[0].ClientIP != "127.0.0.1" || top.Top[0].Refused != 3 || top.Top[0].PerSecond != 0.1 {
		t.Fatalf("lim@file's refused clients: %+v", top)
	}
	for path, want := range map[string]string{
		"/api/refusals?ip=300.1.1.1":                     "ip=",
		"/api/refusals?ip=10.0.0.0/40":                   "ip=",
		"/api/refusals?reason=colour":                    "reason=",
		"/api/refusals?since=yesterday":                  "since=",
		"/api/refusals?limit=0":                          "limit=",
		"/api/refusals?limit=1001":                       "limit=",
		"/api/tcp/middlewares/lim@file/refused?since=1h": "since=",
		"/api/tcp/middlewares/lim@file/refused?top=0":    "top=",
		"/api/history?seconds=301":                       "seconds=",
	} {
		code, body := get(t, h.URL+path)
		if code != 400 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %s, want 400 naming %s", path, code, body, want)
		}
	}
	if code, _ := get(t, h.URL+"/api/tcp/middlewares/nope@file/refused"); code != 404 {
		t.Errorf("refused clients of a middleware that does not exist: %d, want 404", code)
	}
}

// TestHistory: the per-second history files each second's increase of the
// counters under that second: admitted and refused per middleware, the
// refusals by reason; seconds without a sample stay zero.
func TestHistory(t *testing.T) {
	h, hist, addr := dashSetup(t, true)
	t0 := time.Now().Truncate(time.Second).Add(-10 * time.Second)
	hist.sample(t0)
	if dial(t, "127.0.0.1", addr) == nil || dial(t, "127.0.0.1", addr) == nil {
		t.Fatal("the first two connections from 127.0.0.1 were not forwarded")
	}
	hist.sample(t0.Add(time.Second))
	if dial(t, "127.0.0.1", addr) != nil || dial(t, "127.0.0.3", addr) != nil {
		t.Fatal("a refusal was forwarded")
	}
	hist.sample(t0.Add(3 * time.Second)) // t0+2 had no sample
	hist.sample(t0.Add(3 * time.Second)) // the same second again: ignored

	var v historyView
	decodeGET(t, h.URL+"/api/history?middleware=lim@file&middleware=allow@file&middleware=nope@file", &v)
	if v.Seconds != 4 || !v.End.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("seconds %d ending %s, want 4 ending %s", v.Seconds, v.End, t0.Add(3*time.Second))
	}
	lim := v.Middlewares["lim@file"]
	if lim == nil || lim.Type != "inflightconn" || !equal(lim.Admitted, 0, 2, 0, 0) || !equal(lim.Refused, 0, 0, 0, 1) ||
		!equal(lim.InFlight, 0, 2, 0, 2) || !equal(lim.Clients, 0, 1, 0, 1) {
		t.Fatalf("lim@file: %+v", lim)
	}
	if allow := v.Middlewares["allow@file"]; allow == nil || allow.Type != "ipallowlist" || !equal(allow.Admitted, 0, 2, 0, 1) || !equal(allow.Refused, 0, 0, 0, 1) {
		t.Fatalf("allow@file: %+v", allow)
	}
	if _, ok := v.Middlewares["nope@file"]; ok {
		t.Fatal("a middleware that does not exist has a history")
	}
	if !equal(v.Reasons["inflightconn_limit"], 0, 0, 0, 1) || !equal(v.Reasons["ipallowlist_denied"], 0, 0, 0, 1) || !equal(v.Reasons["no_route"], 0, 0, 0, 0) {
		t.Fatalf("reasons: %v", v.Reasons)
	}
	v = historyView{}
	decodeGET(t, h.URL+"/api/history?seconds=2", &v)
	if v.Seconds != 2 || !equal(v.Reasons["inflightconn_limit"], 0, 1) || v.Middlewares != nil {
		t.Fatalf("the last 2 seconds: %+v", v)
	}
	var lv limitersView
	decodeGET(t, h.URL+"/api/limiters", &lv)
	if lv.Total != 1 || lv.Limiters[0].Name != "lim@file" || lv.Limiters[0].InFlight != 2 || lv.Limiters[0].RefusedLastMin != 1 || lv.Limiters[0].AdmittedLastMin != 2 || lv.Limiters[0].Amount != 2 {
		t.Fatalf("limiters: %+v", lv)
	}

	// Five minutes later with nothing new: every second is zero, and a
	// middleware with nothing to show keeps no seconds.
	for s := 4; s < 4+HistorySeconds+2; s++ {
		hist.sample(t0.Add(time.Duration(s) * time.Second))
	}
	decodeGET(t, h.URL+"/api/history?middleware=lim@file", &v)
	if v.Seconds != HistorySeconds || sumOf(v.Reasons["inflightconn_limit"]) != 0 || sumOf(v.Middlewares["lim@file"].Refused) != 0 {
		t.Fatalf("five minutes later: %d seconds, %v", v.Seconds, v.Reasons["inflightconn_limit"])
	}
	hist.mu.Lock()
	kept := hist.mws["allow@file"].s
	hist.mu.Unlock()
	if kept != nil {
		t.Fatal("an allow list idle for five minutes still keeps its seconds")
	}
}

func equal(got []uint32, want ...uint32) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func sumOf(v []uint32) (n uint32) {
	for _, x := range v {
		n += x
	}
	return n
}

// TestDashboardServed: /dashboard/ serves the embedded page, its script
// and style with the security headers; / and /dashboard redirect there;
// nothing of it answers a write; the Host check applies to it as to the
// API; api.dashboard=false, and the metrics and ping listeners, serve none.
func TestDashboardServed(t *testing.T) {
	h, _, _ := dashSetup(t, true)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]string{
		"/dashboard/":           "text/html",
		"/dashboard/index.html": "text/html",
		"/dashboard/app.js":     "text/javascript",
		"/dashboard/app.css":    "text/css",
	} {
		resp, err := http.Get(h.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) ||
			!strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") || resp.Header.Get("ETag") == "" ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %d %v", path, resp.StatusCode, resp.Header)
		}
		// The ETag answers a repeated request with 304.
		req, _ := http.NewRequest("GET", h.URL+path, nil)
		req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
		again, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		again.Body.Close()
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("%s with its ETag: %d, want 304", path, again.StatusCode)
		}
	}
	for _, path := range []string{"/", "/dashboard"} {
		resp, err := noRedirect.Get(h.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc, _ := resp.Location(); resp.StatusCode != http.StatusFound || loc == nil || loc.Path != "/dashboard/" {
			t.Errorf("%s: %d to %q, want a redirect to /dashboard/", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if code, _ := get(t, h.URL+"/dashboard/nope.js"); code != 404 {
		t.Errorf("/dashboard/nope.js: %d", code)
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		req, _ := http.NewRequest(m, h.URL+"/dashboard/", strings.NewReader("x"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s /dashboard/: %d, want 405", m, resp.StatusCode)
		}
	}
	// DNS rebinding: a page on a name rebound to 127.0.0.1 gets nothing.
	req, _ := http.NewRequest("GET", h.URL+"/dashboard/", nil)
	req.Host = "rebound.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("/dashboard/ for Host rebound.example: %d, want 403", resp.StatusCode)
	}

	off, _, _ := dashSetup(t, false)
	for _, path := range []string{"/dashboard/", "/dashboard/app.js", "/"} {
		if code, _ := get(t, off.URL+path); code != 404 {
			t.Errorf("api.dashboard=false: %s answers %d, want 404", path, code)
		}
	}
	for name, hd := range map[string]http.Handler{"metrics": MetricsOnly(http.NotFoundHandler()), "ping": PingOnly()} {
		rec := httptest.NewRecorder()
		hd.ServeHTTP(rec, httptest.NewRequest("GET", "/dashboard/", nil))
		if rec.Code != 404 {
			t.Errorf("the %s listener serves /dashboard/: %d", name, rec.Code)
		}
	}
}

// TestStoresEndpoint: with no shared store, GET /api/stores is an empty list.
func TestStoresEndpoint(t *testing.T) {
	h, _, _ := dashSetup(t, true)
	var v []storeView
	decodeGET(t, h.URL+"/api/stores", &v)
	if v == nil || len(v) != 0 {
		t.Fatalf("stores: %+v", v)
	}
}
