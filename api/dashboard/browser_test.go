package dashboard_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The browser tests run the real binary with a real configuration and
// Debian's Chromium driven by chromedp: they skip without a browser (fail
// under TOLLGATE_REQUIRE_INTEGRATION=1) and write screenshots to
// TOLLGATE_ARTIFACTS/dashboard when that is set.

// browser is one headless Chromium tab, with what the page wrote to the
// console and the methods of the requests it made.
type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string // http://<api>/dashboard/
	shots string

	mu       sync.Mutex
	console  []chromedp.ConsoleMessage
	requests []string // "METHOD URL"
}

func newBrowser(t *testing.T, api string) *browser {
	t.Helper()
	path := itest.NeedChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		// Chromium refuses to start its sandbox as root (as on the
		// development machines and in CI, which run as root): only then is
		// the sandbox turned off. The page it loads is our own, from loopback.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, base: "http://" + api + "/dashboard/", shots: itest.ArtifactDir(t, "dashboard")}
	// The first action starts the browser: no timeout on it but the test's.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	msgs := chromedp.Console(ctx)
	reqs := chromedp.Events(ctx, network.RequestWillBeSent)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range reqs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.requests = append(b.requests, ev.Request.Method+" "+ev.Request.URL)
			b.mu.Unlock()
		}
	}()
	return b
}

// do runs actions with a deadline.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\n%s", what, err, b.consoleText())
	}
}

// eval returns what expr evaluates to.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitJS waits until the JavaScript expression is truthy.
func (b *browser) waitJS(what, expr string, within time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(within)))
	if err != nil {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("main").innerText`))
		b.t.Fatalf("waiting for %s (%s): %v\npage:\n%.3000s\n%s", what, expr, err, html, b.consoleText())
	}
}

// open loads the dashboard at the hash route (as a user following a link
// or typing the address) and waits until the page has rendered: its h1,
// and ready, a JavaScript condition.
func (b *browser) open(route, ready string) {
	b.t.Helper()
	b.do("navigating to "+route, chromedp.Navigate(b.base+"#"+route))
	b.waitJS(route+" rendered", `document.querySelector("main h1") && `+cond(ready), 15*time.Second)
}

func cond(js string) string {
	if js == "" {
		return "true"
	}
	return "(" + js + ")"
}

// go_ follows a hash route inside the page (no reload).
func (b *browser) goTo(route, ready string) {
	b.t.Helper()
	b.do("following "+route, chromedp.Evaluate[chromedp.Void](`void (location.hash = `+jsString(route)+`)`))
	b.waitJS(route+" rendered", `location.hash.split("?")[0] === `+jsString("#"+route)+` && document.querySelector("main h1") && `+cond(ready), 15*time.Second)
}

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// screenshot writes the viewport as name.png in the artifacts directory.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// noConsoleErrors fails the test if the page wrote an error or threw.
func (b *browser) noConsoleErrors(where string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var bad []string
	for _, m := range b.console {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			bad = append(bad, m.String())
		}
	}
	if len(bad) > 0 {
		b.t.Fatalf("%s: the page wrote errors to the console:\n%s", where, strings.Join(bad, "\n"))
	}
}

func (b *browser) consoleText() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s []string
	for _, m := range b.console {
		s = append(s, m.String())
	}
	return "console:\n" + strings.Join(s, "\n")
}

// onlyGETs fails the test if the page made a request other than GET: the
// dashboard is read-only.
func (b *browser) onlyGETs() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.requests) == 0 {
		b.t.Fatal("no request seen: the request log is broken")
	}
	for _, r := range b.requests {
		if !strings.HasPrefix(r, "GET ") {
			b.t.Errorf("the dashboard made a request that is not a GET: %s", r)
		}
		if u := strings.SplitN(r, " ", 2)[1]; !strings.HasPrefix(u, "http://127.0.0.1:") && !strings.HasPrefix(u, "data:") {
			b.t.Errorf("the dashboard fetched something from elsewhere: %s", r)
		}
	}
}

// setup is a tollgate with the test configuration: four routers on four
// entry points (one with an error), an inFlightConn of 2, a rateLimit, an
// allow list, a capped service, a weighted one, a TLS certificate.
type setup struct {
	tg                       *itest.Tollgate
	db, rated, listed, tlsEP string
}

var testRouters = []string{"db@file", "rated@file", "listed@file", "secure@file", "broken@file"}

func start(t *testing.T) *setup {
	t.Helper()
	echo := itest.EchoServer(t, "")
	dir := t.TempDir()
	chain, key := itest.SelfSignedPEM(t, "db.example", false, time.Now().Add(60*24*time.Hour), "db.example")
	certFile, keyFile := filepath.Join(dir, "db.crt"), filepath.Join(dir, "db.key")
	if err := os.WriteFile(certFile, chain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	dyn := itest.WriteFile(t, "dynamic.yaml", fmt.Sprintf(`tcp:
  routers:
    db:
      entryPoints: [db]
      rule: "HostSNI(%[1]s*%[1]s)"
      service: echo
      middlewares: [db-limit]
    rated:
      entryPoints: [rated]
      rule: "HostSNI(%[1]s*%[1]s)"
      service: echo
      middlewares: [slow]
    listed:
      entryPoints: [listed]
      rule: "HostSNI(%[1]s*%[1]s)"
      service: split
      middlewares: [office]
    secure:
      entryPoints: [tls]
      rule: "HostSNI(%[1]sdb.example%[1]s)"
      service: capped
      tls: {}
    broken:
      entryPoints: [tls]
      rule: "HostSNI(%[1]sother.example%[1]s)"
      service: echo
  services:
    echo:
      loadBalancer:
        servers:
          - address: "%[2]s"
    capped:
      loadBalancer:
        servers:
          - address: "%[2]s"
            maxConn: 4
    split:
      weighted:
        services:
          - name: echo
            weight: 3
          - name: capped
            weight: 1
  middlewares:
    db-limit:
      inFlightConn:
        amount: 2
    slow:
      rateLimit:
        average: 5
        period: 1m
        burst: 2
    office:
      ipAllowList:
        sourceRange: ["127.0.0.1/32", "127.0.0.2/31"]
tls:
  certificates:
    - certFile: %[3]s
      keyFile: %[4]s
`, "`", echo, certFile, keyFile))
	s := &setup{db: itest.FreeAddr(t), rated: itest.FreeAddr(t), listed: itest.FreeAddr(t), tlsEP: itest.FreeAddr(t)}
	s.tg = itest.StartTollgate(t, "--providers.file.filename="+dyn, "--entryPoints.db.address="+s.db, "--entryPoints.rated.address="+s.rated,
		"--entryPoints.listed.address="+s.listed, "--entryPoints.tls.address="+s.tlsEP, "--log.level=ERROR")
	itest.Eventually(t, 10*time.Second, func() bool {
		var raw struct {
			Routers map[string]any `json:"tcpRouters"`
		}
		s.tg.GetJSON(t, "/api/rawdata", &raw)
		return len(raw.Routers) == len(testRouters)
	}, "the test configuration was not applied")
	return s
}

// refused dials addr from src and reports whether the proxy closed the
// connection without forwarding it.
func refused(t *testing.T, src, addr string) bool {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return true
	}
	defer c.Close()
	return !itest.Echoes(c)
}

// pages are every page of the dashboard with what shows it rendered.
var pages = []struct{ name, route, ready string }{
	{"overview", "/", `document.querySelector("#entrypoints .card") && document.querySelector("#reasons-table")`},
	{"limiters", "/limiters", `document.querySelector("#limiters-table tbody a")`},
	{"refusals", "/refusals", `document.querySelector("#refusals-table")`},
	{"routers", "/routers", `document.querySelector("#routers-table tbody a")`},
	{"router", "/routers/db@file", `document.querySelector("#router-refusals table")`},
	{"services", "/services", `document.querySelector("#services-table tbody a")`},
	{"service-capped", "/services/capped@file", `document.querySelector("#servers-table tbody tr") && document.querySelector("#queue")`},
	{"service-weighted", "/services/split@file", `document.querySelector("#service table")`},
	{"middlewares", "/middlewares", `document.querySelector("#middlewares-table tbody a")`},
	{"limiter", "/middlewares/db-limit@file", `document.querySelector("#top-clients") && document.querySelector(".chart svg")`},
	{"ratelimit", "/middlewares/slow@file", `document.querySelector("#refused-clients")`},
	{"allowlist", "/middlewares/office@file", `document.querySelector("#refused-clients")`},
	{"certificates", "/certificates", `document.querySelector("#certs-table tbody tr td")`},
}

// TestDashboardPages: every page loads from the real binary without a
// console error, the overview and the lists show the test configuration's
// routers, the page makes GET requests to its own origin only, and each
// page is screenshotted.
func TestDashboardPages(t *testing.T) {
	itest.NeedChromium(t)
	s := start(t)
	b := newBrowser(t, s.tg.API)
	for _, p := range pages {
		b.open(p.route, p.ready)
		b.noConsoleErrors(p.name)
		b.screenshot(p.name)
	}
	// The overview: the counts of the configuration and the router with an error.
	b.open("/", pages[0].ready+` && document.querySelector("#problems a")`)
	res := eval[string](b, `document.getElementById("resources").innerText`)
	if !strings.Contains(res, "5") || !strings.Contains(res, "1 error") {
		t.Errorf("overview's resources: %q, want 5 routers with 1 error", res)
	}
	if got := eval[string](b, `document.getElementById("problems").innerText`); !strings.Contains(got, "broken@file") {
		t.Errorf("overview's problems: %q, want broken@file", got)
	}
	for _, ep := range []string{"db", "rated", "listed", "tls"} {
		if got := eval[string](b, `document.getElementById("entrypoints").innerText`); !strings.Contains(got, ep) {
			t.Errorf("overview's entry points: %q, want %s", got, ep)
		}
	}
	// The routers list: every router by name, and its status.
	b.open("/routers", pages[3].ready)
	names := eval[[]string](b, `[...document.querySelectorAll("#routers-table tbody td:nth-child(2) a")].map(a => a.textContent)`)
	if !slices.Equal(names, slices.Sorted(slices.Values(testRouters))) {
		t.Errorf("routers list: %q, want %q", names, testRouters)
	}
	if got := eval[string](b, `document.querySelector("#routers-table tbody tr:first-child").innerText`); !strings.Contains(got, "error") || !strings.Contains(got, "broken@file") {
		t.Errorf("the broken router's row: %q", got)
	}
	// The services list and a service's servers, weights, caps and queue.
	b.open("/services/capped@file", pages[6].ready)
	if got := eval[string](b, `document.getElementById("service").innerText`); !strings.Contains(got, "4") || !strings.Contains(got, "Waiting") {
		t.Errorf("capped service: %q, want its maxConn and queue", got)
	}
	b.open("/services/split@file", pages[7].ready)
	if got := eval[string](b, `document.getElementById("service").innerText`); !strings.Contains(got, "75 %") || !strings.Contains(got, "25 %") {
		t.Errorf("weighted service: %q, want shares of 75 %% and 25 %%", got)
	}
	b.open("/certificates", pages[12].ready)
	if got := eval[string](b, `document.getElementById("certs-table").innerText`); !strings.Contains(got, "db.example") || !strings.Contains(got, "days left") || !strings.Contains(got, "secure@file") {
		t.Errorf("certificates: %q, want db.example with its days left and its router", got)
	}
	b.noConsoleErrors("the checks")
	b.onlyGETs()
}

// TestDashboardLimiterView: connections held from two client IPs show in
// the inFlightConn middleware's view at their counts, live; a refused
// connection shows under its reason on the overview and the middleware's
// refused clients, and in "why was this client refused?" with its router,
// middleware, time and message; a rateLimit's and an allow list's
// refusals too.
func TestDashboardLimiterView(t *testing.T) {
	itest.NeedChromium(t)
	s := start(t)
	b := newBrowser(t, s.tg.API)
	b.open("/middlewares/db-limit@file", pages[9].ready)

	// Opened before the connections: the view must update by itself.
	itest.Hold(t, 2, "127.0.0.2", s.db)
	itest.Hold(t, 1, "127.0.0.3", s.db)
	b.waitJS("127.0.0.2 at 2 and 127.0.0.3 at 1 in the top clients",
		`(() => { const r = (ip) => document.querySelector('#top-clients tr[data-ip="' + ip + '"]');
		  return r("127.0.0.2") && r("127.0.0.2").cells[1].textContent === "2" && r("127.0.0.2").innerText.includes("at limit") &&
		         r("127.0.0.3") && r("127.0.0.3").cells[1].textContent === "1" && !r("127.0.0.3").innerText.includes("at limit") })()`, 10*time.Second)
	if got := strings.Join(strings.Fields(eval[string](b, `document.getElementById("live-view").innerText`)), " "); !strings.Contains(got, "In flight 3 connections") || !strings.Contains(got, "Clients 2 distinct") {
		t.Errorf("limiter view: %q, want 3 in flight from 2 clients", got)
	}

	if !refused(t, "127.0.0.2", s.db) {
		t.Fatal("a third connection from 127.0.0.2 was forwarded (amount 2)")
	}
	b.waitJS("127.0.0.2 among the clients refused in the last minute",
		`document.querySelector('#refused-clients tr[data-ip="127.0.0.2"]')`, 10*time.Second)
	b.waitJS("the refusal in the chart of refused per second",
		`document.querySelector('.chart svg[aria-label*="refused: now"]') && !document.querySelector('.chart svg').getAttribute("aria-label").includes("refused: now 0/s, peak 0/s")`, 10*time.Second)
	b.screenshot("limiter-live")

	// A rateLimit's refusal (burst 2) and an allow list's.
	for i := 0; i < 2; i++ {
		if refused(t, "127.0.0.4", s.rated) {
			t.Fatalf("connection %d from 127.0.0.4 refused within the burst", i+1)
		}
	}
	if !refused(t, "127.0.0.4", s.rated) {
		t.Fatal("a third connection from 127.0.0.4 within the minute was forwarded (average 5 per minute, burst 2)")
	}
	if !refused(t, "127.0.0.9", s.listed) {
		t.Fatal("127.0.0.9 passed the allow list")
	}

	// The overview: refusals by reason.
	b.goTo("/", pages[0].ready)
	for _, reason := range []string{"inflightconn_limit", "ratelimit", "ipallowlist_denied"} {
		b.waitJS(reason+" counted in the last minute on the overview",
			`(() => { const r = document.querySelector('#reasons-table tr[data-reason="`+reason+`"]'); return r && +r.cells[3].textContent >= 1 })()`, 10*time.Second)
	}
	b.waitJS("the chart of refusals by reason", `document.querySelector('#reasons svg[aria-label*="inFlightConn limit"]')`, 5*time.Second)
	b.waitJS("the busiest limiters", `document.querySelector('#busy tbody a') && document.querySelector('#busy tbody a').textContent === "db-limit@file"`, 5*time.Second)
	b.screenshot("overview-live")

	// Why was 127.0.0.2 refused? Typed into the form, as a user would.
	b.goTo("/refusals", pages[2].ready)
	b.do("typing the IP", chromedp.SendKeys(chromedp.ID("ip"), "127.0.0.2"), chromedp.SendKeys(chromedp.ID("ip"), kb.Enter))
	b.waitJS("127.0.0.2's refusal in the lookup",
		`document.getElementById("why-summary").textContent.startsWith("1 entry for 127.0.0.2") && (() => { const r = document.querySelector('#refusals-table tbody tr[data-reason="inflightconn_limit"]'); return r && r.innerText.includes("db@file") && r.innerText.includes("db-limit@file") &&
		  r.innerText.includes("max number of connections reached") && r.innerText.includes("127.0.0.2") })()`, 10*time.Second)
	if rows := eval[int](b, `document.querySelectorAll("#refusals-table tbody tr").length`); rows != 1 {
		t.Errorf("%d entries for 127.0.0.2, want 1:\n%s", rows, eval[string](b, `document.getElementById("refusals-table").innerText`))
	}
	if got := eval[string](b, `location.hash`); got != "#/refusals?ip=127.0.0.2" {
		t.Errorf("the lookup's address is %q: it cannot be shared", got)
	}
	b.screenshot("why")
	b.open("/refusals?ip=127.0.0.9", `document.querySelector('#refusals-table tbody tr[data-reason="ipallowlist_denied"]')`)
	b.open("/refusals?ip=127.0.0.3", `document.getElementById("why-summary").textContent.includes("not in the record")`)
	b.open("/middlewares/slow@file", `document.querySelector('#refused-clients tr[data-ip="127.0.0.4"]')`)
	b.screenshot("ratelimit-live")
	b.noConsoleErrors("the limiter views")
	b.onlyGETs()
}

// TestDashboardSharedStore: an inFlightConn with a shared store (a real
// redis-server) shows the store on the overview and in its view,
// reachable, then unreachable once Redis stops, without a reload; and a
// connection refused for it shows under store_unreachable.
func TestDashboardSharedStore(t *testing.T) {
	itest.NeedChromium(t)
	rd := itest.StartRedis(t)
	echo := itest.EchoServer(t, "")
	dyn := itest.WriteFile(t, "dynamic.yaml", fmt.Sprintf(`tcp:
  routers:
    db:
      rule: "HostSNI(%[1]s*%[1]s)"
      service: echo
      middlewares: [shared-limit]
  services:
    echo:
      loadBalancer:
        servers:
          - address: "%[2]s"
  middlewares:
    shared-limit:
      inFlightConn:
        amount: 2
        store: shared
`, "`", echo))
	db := itest.FreeAddr(t)
	tg := itest.StartTollgate(t, "--providers.file.filename="+dyn, "--entryPoints.db.address="+db, "--log.level=ERROR",
		"--stores.shared.redis.endpoints="+rd.Addr, "--stores.shared.redis.timeout=200ms")
	itest.Eventually(t, 10*time.Second, func() bool { return !refused(t, "127.0.0.2", db) }, "a connection through the shared store")
	b := newBrowser(t, tg.API)
	b.open("/", `document.querySelector("#process") && document.getElementById("process").innerText.includes("Store shared")`)
	if got := eval[string](b, `document.getElementById("process").innerText`); !strings.Contains(got, "reachable") || strings.Contains(got, "unreachable") || !strings.Contains(got, "shared-limit@file") {
		t.Errorf("the store on the overview: %q, want shared reachable, used by shared-limit@file", got)
	}
	rd.Stop()
	b.waitJS("the store unreachable on the overview", `document.getElementById("process").innerText.includes("unreachable")`, 15*time.Second)
	if !refused(t, "127.0.0.3", db) {
		t.Fatal("a connection was forwarded while the store is unreachable (failureMode closed)")
	}
	b.waitJS("the refusal under store_unreachable", `(() => { const r = document.querySelector('#reasons-table tr[data-reason="store_unreachable"]'); return r && +r.cells[3].textContent >= 1 })()`, 10*time.Second)
	b.open("/middlewares/shared-limit@file", `document.getElementById("live-view").innerText.includes("Shared store shared")`)
	if got := eval[string](b, `document.getElementById("live-view").innerText`); !strings.Contains(got, "unreachable") {
		t.Errorf("the middleware's view: %q, want its store unreachable", got)
	}
	b.open("/refusals?ip=127.0.0.3", `document.querySelector('#refusals-table tbody tr[data-reason="store_unreachable"]')`)
	b.screenshot("store-unreachable")
	b.noConsoleErrors("the shared store")
}

// TestDashboardUnderBasePath: with api.basePath the dashboard is at
// <basePath>/dashboard/, <basePath>/ leads there, and its pages read the
// API under the same path.
func TestDashboardUnderBasePath(t *testing.T) {
	itest.NeedChromium(t)
	echo := itest.EchoServer(t, "")
	dyn := itest.WriteFile(t, "dynamic.yaml", fmt.Sprintf("tcp:\n  routers:\n    db:\n      rule: \"HostSNI(`*`)\"\n      service: echo\n  services:\n    echo:\n      loadBalancer:\n        servers:\n          - address: %q\n", echo))
	tg := itest.StartTollgate(t, "--providers.file.filename="+dyn, "--entryPoints.db.address="+itest.FreeAddr(t), "--api.basePath=/tollgate", "--log.level=ERROR")
	b := newBrowser(t, tg.API)
	b.do("opening <basePath>/", chromedp.Navigate("http://"+tg.API+"/tollgate/"))
	b.waitJS("the overview under /tollgate/dashboard/", `location.pathname === "/tollgate/dashboard/" && document.querySelector("#entrypoints .card") && document.getElementById("resources").innerText.includes("Routers")`, 15*time.Second)
	b.goTo("/routers", `document.querySelector("#routers-table tbody a") && document.querySelector("#routers-table tbody a").textContent === "db@file"`)
	b.noConsoleErrors("under api.basePath")
	b.onlyGETs()
}

// TestDashboardKeyboardAndContrast: every page can be used from the
// keyboard (the skip link, the lists' rows opened with Enter, a visible
// focus), its text has WCAG AA contrast, and at a narrow width (360 px)
// no page scrolls sideways (wide tables scroll in their box).
func TestDashboardKeyboardAndContrast(t *testing.T) {
	itest.NeedChromium(t)
	s := start(t)
	b := newBrowser(t, s.tg.API)
	b.open("/", pages[0].ready)
	b.do("Tab", chromedp.KeyEvent(kb.Tab))
	if got := eval[string](b, `document.activeElement.className + " " + document.activeElement.textContent`); got != "skip Skip to content" {
		t.Fatalf("the first Tab reaches %q, want the skip link", got)
	}
	b.do("Enter on the skip link", chromedp.KeyEvent(kb.Enter))
	if got := eval[string](b, `document.activeElement.id`); got != "main" {
		t.Fatalf("the skip link moved the focus to %q, want main", got)
	}
	// A list: Tab from the search box to the first row's link, Enter opens it.
	b.open("/routers", pages[3].ready)
	b.do("focus the search box", chromedp.Focus(chromedp.ID("list-search")))
	found := false
	for i := 0; i < 30 && !found; i++ {
		b.do("Tab", chromedp.KeyEvent(kb.Tab))
		found = eval[bool](b, `!!document.activeElement.closest("#routers-table tbody")`)
	}
	if !found {
		t.Fatal("Tab never reached a row of the routers list")
	}
	if style := eval[string](b, `getComputedStyle(document.activeElement).outlineStyle`); style == "none" {
		t.Error("the focused row link shows no focus outline")
	}
	target := eval[string](b, `document.activeElement.textContent`)
	b.do("Enter on a row", chromedp.KeyEvent(kb.Enter))
	b.waitJS("the router's page", `location.hash.startsWith("#/routers/") && document.querySelector("main h1") && document.querySelector("main h1").textContent.includes(`+jsString(target)+`)`, 10*time.Second)
	// The heading is drawn before the page's first data arrives; the focus
	// moves to it once the page is complete.
	b.waitJS("after following a link, the focus on the page's heading", `document.activeElement.tagName === "H1"`, 10*time.Second)
	// Sorting from the keyboard: the Name header's button, Enter.
	b.open("/routers", pages[3].ready)
	b.do("focus the sort button", chromedp.Focus(chromedp.ID("sort-name")))
	b.do("Enter", chromedp.KeyEvent(kb.Enter))
	b.waitJS("sorted by name, descending", `document.querySelector("#routers-table th[aria-sort=descending]") && document.querySelector("#routers-table tbody td:nth-child(2) a").textContent === "secure@file"`, 10*time.Second)

	// The checks below can fail: text of 2.3:1 and a box wider than the
	// window are found.
	b.open("/", pages[0].ready)
	b.do("a grey text and a wide box", chromedp.Evaluate[chromedp.Void](`void document.getElementById("main").append(Object.assign(document.createElement("p"), {id: "probe", textContent: "grey"}))`))
	b.do("colour", chromedp.Evaluate[chromedp.Void](`void (document.getElementById("probe").style.color = "#aaaaaa")`))
	if bad := eval[[]string](b, contrastJS); len(bad) != 1 || !strings.Contains(bad[0], "grey") {
		t.Fatalf("the contrast check found %q, want the grey probe", bad)
	}
	b.do("width", chromedp.Evaluate[chromedp.Void](`void (document.getElementById("probe").style.width = "3000px")`))
	if over := eval[int](b, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); over < 1000 {
		t.Fatalf("a box of 3000 px makes the page scroll by %d px: the check cannot see it", over)
	}
	b.do("remove the probe", chromedp.Evaluate[chromedp.Void](`void document.getElementById("probe").remove()`))

	for _, width := range []int64{1280, 360} {
		b.do("viewport", chromedp.EmulateViewport(width, 800))
		for _, p := range pages {
			b.open(p.route, p.ready)
			if bad := eval[[]string](b, contrastJS); len(bad) > 0 {
				t.Errorf("%s at %d px: text below WCAG AA contrast:\n%s", p.name, width, strings.Join(bad, "\n"))
			}
			if over := eval[int](b, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); over > 1 {
				t.Errorf("%s at %d px: the page scrolls sideways by %d px", p.name, width, over)
			}
		}
		if width == 360 {
			b.open("/", pages[0].ready)
			b.screenshot("overview-narrow")
		}
	}
	b.noConsoleErrors("keyboard and contrast")
}

// contrastJS lists the visible text whose contrast with its background is
// below WCAG AA: 4.5:1, or 3:1 for large text (24 px, or 18.66 px bold).
// Disabled controls are exempt, as WCAG exempts inactive components.
const contrastJS = `(() => {
  const parse = (c) => { const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null; const p = m[1].split(",").map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const bgOf = (el) => { for (let e = el; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor); if (c && c.a > 0) return c; } return {r: 255, g: 255, b: 255, a: 1}; };
  const bad = [];
  for (const el of document.querySelectorAll("body *")) {
    if (![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    if (!el.getClientRects().length || el.closest(".sr-only, .skip, [disabled], noscript")) continue;
    const st = getComputedStyle(el);
    if (st.visibility === "hidden") continue;
    const fg = parse(st.color), bg = bgOf(el);
    const [l1, l2] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    const ratio = (l1 + 0.05) / (l2 + 0.05);
    const size = parseFloat(st.fontSize), bold = parseInt(st.fontWeight, 10) >= 700;
    const need = size >= 24 || (size >= 18.66 && bold) ? 3 : 4.5;
    if (ratio < need) bad.push(ratio.toFixed(2) + ":1 " + el.tagName + " " + JSON.stringify(el.textContent.trim().slice(0, 40)));
  }
  return bad;
})()`

// TestDashboardTenThousandRouters: at 10,000 routers the lists page,
// search, sort and page through the API and render one page: each step
// answers in well under the bound, and the overview still loads.
func TestDashboardTenThousandRouters(t *testing.T) {
	itest.NeedChromium(t)
	const n = 10000
	echo := itest.EchoServer(t, "")
	var sb strings.Builder
	sb.WriteString("tcp:\n  routers:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "    r%05d:\n      entryPoints: [db]\n      rule: \"HostSNI(`*`) && ClientIP(`10.%d.%d.%d`)\"\n      service: echo\n      middlewares: [lim%02d]\n", i, i>>16, (i>>8)&255, i&255, i%50)
	}
	sb.WriteString("  middlewares:\n")
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&sb, "    lim%02d:\n      inFlightConn:\n        amount: %d\n", i, i+1)
	}
	fmt.Fprintf(&sb, "  services:\n    echo:\n      loadBalancer:\n        servers:\n          - address: %q\n", echo)
	dyn := itest.WriteFile(t, "routers.yaml", sb.String())
	tg := itest.StartTollgate(t, "--providers.file.filename="+dyn, "--entryPoints.db.address="+itest.FreeAddr(t), "--log.level=ERROR")
	itest.Eventually(t, 60*time.Second, func() bool {
		var ov struct {
			TCP struct {
				Routers struct{ Total int } `json:"routers"`
			} `json:"tcp"`
		}
		tg.GetJSON(t, "/api/overview", &ov)
		return ov.TCP.Routers.Total == n
	}, "10,000 routers were not applied")
	// The API's own answer for a page of the list.
	began := time.Now()
	resp, err := http.Get("http://" + tg.API + "/api/tcp/routers?per_page=50&page=3&sortBy=priority&direction=desc")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	apiTook := time.Since(began)

	b := newBrowser(t, tg.API)
	const bound = 5 * time.Second
	step := func(what string, f func()) time.Duration {
		t.Helper()
		began := time.Now()
		f()
		took := time.Since(began)
		if took > bound {
			t.Errorf("%s took %s at %d routers, want under %s", what, took, n, bound)
		}
		return took
	}
	first := step("the routers list", func() {
		b.open("/routers", `document.querySelectorAll("#routers-table tbody tr").length === 50 && document.getElementById("list-total").textContent.includes("10,000")`)
	})
	search := step("a search", func() {
		b.do("typing", chromedp.SendKeys(chromedp.ID("list-search"), "r09999"))
		b.waitJS("the one match", `document.querySelectorAll("#routers-table tbody tr").length === 1 && document.querySelector("#routers-table tbody a").textContent === "r09999@file"`, bound)
	})
	b.do("clearing the search", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById("list-search"); s.value = ""; s.dispatchEvent(new Event("input")); })()`))
	b.waitJS("the full list again", `document.querySelectorAll("#routers-table tbody tr").length === 50`, bound)
	sorted := step("a sort", func() {
		b.do("sort by name", chromedp.Click(chromedp.ID("sort-name")))
		b.waitJS("descending", `document.querySelector("#routers-table tbody a").textContent === "r09999@file"`, bound)
	})
	paged := step("the next page", func() {
		b.do("next", chromedp.Click(chromedp.ID("next")))
		b.waitJS("page 2", `document.getElementById("page-no").textContent.startsWith("Page 2") && document.querySelector("#routers-table tbody a").textContent === "r09949@file"`, bound)
	})
	overview := step("the overview", func() {
		b.open("/", pages[0].ready+` && document.getElementById("resources").innerText.includes("10,000")`)
	})
	limiters := step("the limiters", func() { b.open("/limiters", `document.querySelectorAll("#limiters-table tbody tr").length === 50`) })
	b.screenshot("routers-10000")
	b.noConsoleErrors("10,000 routers")
	t.Logf("at %d routers: API page %s; list %s, search %s, sort %s, next page %s, overview %s, limiters %s",
		n, apiTook.Round(time.Millisecond), first.Round(time.Millisecond), search.Round(time.Millisecond), sorted.Round(time.Millisecond),
		paged.Round(time.Millisecond), overview.Round(time.Millisecond), limiters.Round(time.Millisecond))
}

// TestDashboardDocsScreenshots writes the screenshots of the docs
// (docs/images/dashboard-*.png) after a minute of traffic, so that the
// charts have something to show: run it by hand with
// TOLLGATE_DOCS_SCREENSHOTS=<folder> (then reduce them to 256 colours:
// docs/operations/dashboard.md says how). Skipped otherwise.
func TestDashboardDocsScreenshots(t *testing.T) {
	dir := os.Getenv("TOLLGATE_DOCS_SCREENSHOTS")
	if dir == "" {
		t.Skip("TOLLGATE_DOCS_SCREENSHOTS=<folder> writes the docs' screenshots there")
	}
	itest.NeedChromium(t)
	s := start(t)
	b := newBrowser(t, s.tg.API)
	b.do("viewport", chromedp.EmulateViewport(1280, 860))
	// A minute of clients coming and going: 127.0.0.2 holds its amount and
	// keeps trying, others hold one or two, a scanner tries the allow
	// list, a client opens connections faster than the rate limit.
	deadline := time.Now().Add(70 * time.Second)
	for i := 0; ; i++ {
		var held []net.Conn
		hold := func(n int, src, addr string) { held = append(held, itest.Hold(t, n, src, addr)...) }
		hold(2, "127.0.0.2", s.db)
		hold(1+i%2, "127.0.0.3", s.db)
		hold(i%3, "127.0.0.5", s.db)
		hold(1, "127.0.0.6", s.db)
		for j := 0; j < 1+i%4; j++ {
			refused(t, "127.0.0.2", s.db)
		}
		if i%5 == 0 {
			refused(t, "127.0.0.9", s.listed)
		}
		refused(t, "127.0.0.4", s.rated)
		time.Sleep(time.Second)
		if time.Until(deadline) < 2*time.Second {
			break // the last ones stay open, for the top clients
		}
		itest.CloseAll(held)
	}
	shot := func(name, route, ready string) {
		b.open(route, ready)
		time.Sleep(2500 * time.Millisecond) // one more refresh, for the latest second
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "dashboard-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shot("overview", "/", pages[0].ready+` && document.querySelector("#reasons svg")`)
	shot("limiter", "/middlewares/db-limit@file", `document.querySelector('#top-clients tr[data-ip="127.0.0.2"]')`)
	shot("why", "/refusals?ip=127.0.0.2", `document.querySelector('#refusals-table tbody tr[data-reason]')`)
	shot("limiters", "/limiters", pages[1].ready)
	b.noConsoleErrors("the docs' screenshots")
}
