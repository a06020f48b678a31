// Package kvtest holds what the KV stores' end-to-end tests share: a server
// process started on free loopback ports and stopped by PID, and the
// scenario every store must pass through the tollgate binary (E2E). Tests
// alone use it.
package kvtest

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// Proc is a server process started by a test, stopped by PID (itest.Proc).
type Proc = itest.Proc

// StartProc runs bin with args (itest.StartProc).
func StartProc(bin string, args ...string) (*Proc, error) { return itest.StartProc(bin, args...) }

// StartProcEnv is StartProc with the environment env (itest.StartProcEnv).
func StartProcEnv(env []string, bin string, args ...string) (*Proc, error) {
	return itest.StartProcEnv(env, bin, args...)
}

// FreePort returns a loopback port that was free a moment ago (itest.FreePort).
func FreePort(t testing.TB) int { t.Helper(); return itest.FreePort(t) }

// Ready polls ready until it returns nil (itest.Ready).
func Ready(p *Proc, within time.Duration, ready func() error) error {
	return itest.Ready(p, within, ready)
}

// EtcdBinary finds the etcd server that scripts/k8s.sh builds (with
// kube-apiserver, for the Kubernetes tests): the one in itest.KubeAssets.
func EtcdBinary() (string, error) {
	dir, err := itest.KubeAssets()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "etcd"), nil
}

// Store is one KV store as the scenario drives it. Writes go through the
// store's own client; they fail the test on error.
type Store interface {
	// Provider is the provider's name (the qualified-name suffix).
	Provider() string
	// Flags are tollgate's flags to read the store under the root key "traefik".
	Flags() []string
	Put(t testing.TB, key, value string)
	// DeletePrefix deletes every key that starts with prefix.
	DeletePrefix(t testing.TB, prefix string)
	// Kill ends the server tollgate reads with SIGKILL.
	Kill(t testing.TB)
	// WhileDown runs change against the store's data while the server
	// tollgate reads is down (a second server on the same data, on another
	// client port, stopped afterwards).
	WhileDown(t testing.TB, change func(put func(key, value string)))
	// Restart starts the server again on the endpoint tollgate reads, and
	// returns once it answers.
	Restart(t testing.TB)
}

// Seed writes the documented example in KV form (docs/reference/providers/kv.md): the seed's middleware
// (inFlightConn amount) on a router "my-router" on entry point "db" with the
// service "my-service" whose server is backend. The router's rule is written
// last.
func Seed(t testing.TB, s Store, amount int, backend string) {
	t.Helper()
	s.Put(t, "traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", strconv.Itoa(amount))
	s.Put(t, "traefik/tcp/services/my-service/loadBalancer/servers/0/address", backend)
	s.Put(t, "traefik/tcp/routers/my-router/entryPoints/0", "db")
	s.Put(t, "traefik/tcp/routers/my-router/middlewares/0", "test-inflightconn")
	s.Put(t, "traefik/tcp/routers/my-router/service", "my-service")
	s.Put(t, "traefik/tcp/routers/my-router/rule", "HostSNI(`*`)")
}

// Percentiles returns the p50, p95 and largest of ds.
func Percentiles(ds []time.Duration) (p50, p95, worst time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.50), at(0.95), s[len(s)-1]
}

// until polls cond (no pause: each /api/rawdata read takes about a
// millisecond) until it holds, and returns how long that took since start.
func until(t testing.TB, start time.Time, within time.Duration, cond func() bool, msg string, args ...any) time.Duration {
	t.Helper()
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("after %s: "+msg, append([]any{within}, args...)...)
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// metric returns the value of the Prometheus sample line that starts with
// name{labels} at api, or "" when there is none.
func metric(t testing.TB, api, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimSpace(strings.TrimPrefix(line, series))
		}
	}
	return ""
}

// get returns the status and body of a GET of url.
func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// OutageFor is how long E2E keeps the store down.
const OutageFor = 5 * time.Second

// E2E runs the acceptance scenario against s through the tollgate
// binary, and logs the propagation percentiles. The steps run in order,
// each from where the one before left the store.
func E2E(t *testing.T, s Store) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	e := start(t, s)
	t.Run("the seed's middleware admits exactly 10 connections per client IP", e.perClientAmount)
	t.Run("an amount change applies to new connections without resetting the held ones", e.amountChange)
	t.Run("a bad value under one router disables only that router, named by its key", e.badRouterValue)
	t.Run("servers transports and TLS options from keys; a bad key drops only its transport", e.transportsAndTLSOptions)
	t.Run("propagation: write returning -> route in /api/rawdata", e.propagation)
	t.Run("store killed: the last configuration keeps serving; a change made while down applies after it returns", e.storeKilled)
	t.Run("deleting the router's keys removes the route", e.routerDeleted)
}

// A scenario is E2E's state: the store, the tollgate binary reading it and
// the names the seed defines.
type scenario struct {
	s       Store
	p       string // the provider's name
	tg      *itest.Tollgate
	ep      string // the entry point "db"'s address
	backend string // the seed's server, an echo server
	router  string // the seed's router, qualified
	mw      string // the seed's middleware, qualified
	// top is E2E's test: connections a step holds until the scenario ends.
	top *testing.T
}

// q qualifies name with the provider's name.
func (e *scenario) q(name string) string { return name + "@" + e.p }

// start runs tollgate on s and writes the seed (Seed, amount 10), and
// returns once the seed's route is in /api/rawdata.
func start(t *testing.T, s Store) *scenario {
	e := &scenario{s: s, p: s.Provider(), backend: itest.EchoServer(t, ""), ep: itest.FreeAddr(t), top: t}
	e.router, e.mw = e.q("my-router"), e.q("test-inflightconn")
	e.tg = itest.StartTollgate(t, append([]string{"--entryPoints.db.address=" + e.ep, "--metrics.prometheus=true", "--log.level=INFO"}, s.Flags()...)...)

	begin := time.Now()
	Seed(t, s, 10, e.backend)
	d := until(t, time.Now(), 3*time.Second, func() bool {
		rd := e.tg.Rawdata(t)
		return rd.Routers[e.router].Status == "enabled" && rd.AmountOf(e.mw) == 10 && rd.ServersOf(e.q("my-service")) == e.backend
	}, "%s enabled with amount 10 and server %s: %+v", e.router, e.backend, e.tg.Rawdata(t))
	t.Logf("seed written in %v; last write -> route in /api/rawdata: %v", time.Since(begin)-d, d)
	return e
}

// perClientAmount: the seed's middleware admits exactly 10 connections per client IP.
func (e *scenario) perClientAmount(t *testing.T) {
	held := itest.Hold(t, 15, "127.0.0.1", e.ep)
	if len(held) != 10 {
		t.Fatalf("127.0.0.1: %d of 15 forwarded, want exactly 10", len(held))
	}
	other := itest.Hold(t, 15, "127.0.0.2", e.ep)
	if len(other) != 10 {
		t.Fatalf("127.0.0.2: %d of 15 forwarded, want exactly 10 (its own budget)", len(other))
	}
	itest.CloseAll(held)
	itest.CloseAll(other)
}

// amountChange: an amount change applies to new connections without
// resetting the held ones.
func (e *scenario) amountChange(t *testing.T) {
	e.s.Put(t, "traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "3")
	until(t, time.Now(), 3*time.Second, func() bool { return e.tg.Rawdata(t).AmountOf(e.mw) == 3 }, "amount 3")
	// The closed connections of the previous subtest must have left the count.
	itest.Eventually(t, 3*time.Second, func() bool {
		m := e.tg.Rawdata(t).Middlewares[e.mw]
		return m.InFlight != nil && m.InFlight.InFlight == 0
	}, "no connection in flight")
	held := itest.Hold(e.top, 4, "127.0.0.3", e.ep)
	if len(held) != 3 {
		t.Fatalf("amount 3: %d of 4 forwarded, want 3", len(held))
	}
	e.s.Put(t, "traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "5")
	until(t, time.Now(), 3*time.Second, func() bool { return e.tg.Rawdata(t).AmountOf(e.mw) == 5 }, "amount 5")
	for i, c := range held {
		if !itest.Echoes(c) {
			t.Fatalf("held connection %d was cut by the change", i)
		}
	}
	more := itest.Hold(t, 5, "127.0.0.3", e.ep)
	if len(more) != 2 {
		t.Fatalf("amount 3 -> 5 with 3 held: %d of 5 new connections forwarded, want exactly 2 (a reset count would let 5 in)", len(more))
	}
	itest.CloseAll(more)
	itest.CloseAll(held)
	e.s.Put(t, "traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "10")
	until(t, time.Now(), 3*time.Second, func() bool { return e.tg.Rawdata(t).AmountOf(e.mw) == 10 }, "amount 10 again")
}

// badRouterValue: a bad value under one router disables only that router,
// named by its key.
func (e *scenario) badRouterValue(t *testing.T) {
	const key = "traefik/tcp/routers/bad/priority"
	e.s.Put(t, "traefik/tcp/routers/bad/entryPoints/0", "db")
	e.s.Put(t, "traefik/tcp/routers/bad/service", "my-service")
	e.s.Put(t, "traefik/tcp/routers/bad/rule", "HostSNI(`*`)")
	e.s.Put(t, key, "high")
	var problems []string
	// The provider's problems are recorded when its configuration
	// arrives; the configuration applies up to a throttle period later.
	until(t, time.Now(), 3*time.Second, func() bool {
		rd := e.tg.Rawdata(t)
		problems = rd.Provider(e.p).Problems
		_, routed := rd.Routers[e.q("bad")]
		return !routed && len(problems) > 0 && strings.Contains(strings.Join(problems, "\n"), key)
	}, "a problem for %s, and its router dropped", key)
	if len(problems) != 1 || !strings.Contains(problems[0], `key "`+key+`"="high"`) || !strings.Contains(problems[0], `router "bad" is dropped`) {
		t.Errorf("problems %q: want one naming the key %s and the router", problems, key)
	}
	rd := e.tg.Rawdata(t)
	if _, ok := rd.Routers[e.q("bad")]; ok {
		t.Errorf("router %s is routed", e.q("bad"))
	}
	if rd.Routers[e.router].Status != "enabled" || rd.Provider(e.p).State != "ok" {
		t.Errorf("%s is %q and the provider %q, want enabled and ok", e.router, rd.Routers[e.router].Status, rd.Provider(e.p).State)
	}
	if got := itest.Hold(t, 1, "127.0.0.4", e.ep); len(got) != 1 {
		t.Error("my-router does not forward next to the bad router")
	} else {
		itest.CloseAll(got)
	}
	if !strings.Contains(e.tg.Out.String(), key) {
		t.Errorf("the log does not name %s", key)
	}
	e.s.DeletePrefix(t, "traefik/tcp/routers/bad/")
	until(t, time.Now(), 3*time.Second, func() bool { return len(e.tg.Rawdata(t).Provider(e.p).Problems) == 0 }, "the problem gone with the keys")
}

// transportsAndTLSOptions: servers transports and TLS options from keys; a
// bad key drops only its transport.
func (e *scenario) transportsAndTLSOptions(t *testing.T) {
	const bad = "traefik/tcp/serversTransports/bad/dialTimeout"
	e.s.Put(t, "traefik/tcp/serversTransports/pg/dialTimeout", "5s")
	e.s.Put(t, "traefik/tcp/serversTransports/pg/tls/serverName", "db.internal")
	e.s.Put(t, "traefik/tls/options/mtls/minVersion", "VersionTLS13")
	e.s.Put(t, bad, "soon")
	// The provider's problems are recorded when its configuration
	// arrives, and the configuration applies up to a throttle period
	// later: wait for the last write's effect in the applied
	// configuration too (the TLS options), not only for its problem.
	until(t, time.Now(), 3*time.Second, func() bool {
		code, body := get(t, "http://"+e.tg.API+"/api/tcp/serversTransports/"+e.q("pg"))
		_, raw := get(t, "http://"+e.tg.API+"/api/rawdata")
		return code == 200 && strings.Contains(body, `"dialTimeout": "5s"`) && strings.Contains(body, `"serverName": "db.internal"`) &&
			strings.Contains(raw, `"`+e.q("mtls")+`"`) &&
			strings.Contains(strings.Join(e.tg.Rawdata(t).Provider(e.p).Problems, "\n"), bad)
	}, "%s at /api/tcp/serversTransports, TLS options %s in /api/rawdata and a problem naming %s", e.q("pg"), e.q("mtls"), bad)
	if code, _ := get(t, "http://"+e.tg.API+"/api/tcp/serversTransports/"+e.q("bad")); code != 404 {
		t.Errorf("%s: %d, want 404 (dropped for its bad key)", e.q("bad"), code)
	}
	if rd := e.tg.Rawdata(t); rd.Routers[e.router].Status != "enabled" {
		t.Errorf("%s is %q next to the bad transport, want enabled", e.router, rd.Routers[e.router].Status)
	}
	e.s.DeletePrefix(t, "traefik/tcp/serversTransports/")
	e.s.DeletePrefix(t, "traefik/tls/")
	until(t, time.Now(), 3*time.Second, func() bool { return len(e.tg.Rawdata(t).Provider(e.p).Problems) == 0 }, "the problem gone with the keys")
}

// propagation: write returning -> route in /api/rawdata, timed per kind of
// change; the percentiles are logged.
func (e *scenario) propagation(t *testing.T) {
	var all []time.Duration
	kinds := map[string][]time.Duration{}
	// Each timed write is isolated: it comes more than the watcher's
	// throttle (providersThrottleDuration, 50 ms) after the previous
	// change, which would otherwise hold it back until the throttle
	// period ends.
	timed := func(kind string, write func(), ok func(itest.Rawdata) bool, what string) {
		t.Helper()
		time.Sleep(120 * time.Millisecond)
		write()
		d := until(t, time.Now(), 3*time.Second, func() bool { return ok(e.tg.Rawdata(t)) }, "%s", what)
		kinds[kind] = append(kinds[kind], d)
		all = append(all, d)
	}
	for i := range 20 {
		name := fmt.Sprintf("p%02d", i)
		base := "traefik/tcp/routers/" + name + "/"
		e.s.Put(t, base+"entryPoints/0", "db")
		e.s.Put(t, base+"service", "my-service")
		e.s.Put(t, base+"priority", "1")
		timed("add route", func() { e.s.Put(t, base+"rule", "HostSNI(`*`)") },
			func(rd itest.Rawdata) bool { return rd.Routers[e.q(name)].Status == "enabled" }, e.q(name)+" enabled")
		timed("change value", func() {
			e.s.Put(t, "traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", strconv.Itoa(20+i))
		}, func(rd itest.Rawdata) bool { return rd.AmountOf(e.mw) == int64(20+i) }, fmt.Sprintf("amount %d", 20+i))
		timed("delete route", func() { e.s.DeletePrefix(t, base) },
			func(rd itest.Rawdata) bool { _, ok := rd.Routers[e.q(name)]; return !ok }, e.q(name)+" gone")
	}
	for _, k := range []string{"add route", "change value", "delete route"} {
		p50, p95, worst := Percentiles(kinds[k])
		t.Logf("%s: %-12s n=%d p50=%v p95=%v max=%v", e.p, k, len(kinds[k]), p50, p95, worst)
	}
	p50, p95, worst := Percentiles(all)
	t.Logf("%s: PROPAGATION all n=%d p50=%v p95=%v max=%v", e.p, len(all), p50, p95, worst)
	e.s.Put(t, "traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "10")
	until(t, time.Now(), 3*time.Second, func() bool { return e.tg.Rawdata(t).AmountOf(e.mw) == 10 }, "amount 10 again")
}

// storeKilled: the last configuration keeps serving while the store is
// down; a change made while down applies after it returns.
func (e *scenario) storeKilled(t *testing.T) {
	killed := time.Now()
	e.s.Kill(t)
	var rp itest.RawProvider
	until(t, killed, 5*time.Second, func() bool {
		rp = e.tg.Rawdata(t).Provider(e.p)
		return rp.State == "error"
	}, "provider %s in state error after the store was killed", e.p)
	t.Logf("store killed -> error in /api/providers after %v: %s", time.Since(killed), rp.LastError)
	if rp.LastError == "" {
		t.Error("no lastError while the store is down")
	}
	if up := metric(t, e.tg.API, `tollgate_provider_up{provider="`+e.p+`"}`); up != "0" {
		t.Errorf(`tollgate_provider_up{provider=%q} = %q while the store is down, want 0`, e.p, up)
	}
	if rd := e.tg.Rawdata(t); rd.Routers[e.router].Status != "enabled" || rd.AmountOf(e.mw) != 10 {
		t.Fatalf("the last configuration is not kept: router %+v, amount %d", rd.Routers[e.router], rd.AmountOf(e.mw))
	}
	if held := itest.Hold(t, 12, "127.0.0.5", e.ep); len(held) != 10 {
		t.Errorf("store down: %d of 12 forwarded, want the kept amount 10", len(held))
	} else {
		itest.CloseAll(held)
	}

	e.s.WhileDown(t, func(put func(k, v string)) {
		put("traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "4")
	})
	if rd := e.tg.Rawdata(t); rd.Routers[e.router].Status != "enabled" || rd.Provider(e.p).State != "error" {
		t.Fatalf("while down: router %+v, provider %+v", rd.Routers[e.router], rd.Provider(e.p))
	}
	if got := itest.Hold(t, 1, "127.0.0.6", e.ep); len(got) != 1 {
		t.Error("not forwarded while the store is down")
	} else {
		itest.CloseAll(got)
	}
	// Stay down long enough for the retries to back off to their cap:
	// the store must still be read within a couple of seconds of its
	// return, whatever the outage lasted.
	time.Sleep(time.Until(killed.Add(OutageFor)))
	downFor := time.Since(killed)

	e.s.Restart(t)
	back := time.Now()
	d := until(t, back, 5*time.Second, func() bool {
		rd := e.tg.Rawdata(t)
		return rd.Provider(e.p).State == "ok" && rd.AmountOf(e.mw) == 4
	}, "amount 4 (written while the store was down) applied after it returned")
	t.Logf("store down for %v; answering again -> change applied: %v", downFor, d)
	if d > 2*time.Second {
		t.Errorf("reconverged %v after the store answered again, want within 2s", d)
	}
	if up := metric(t, e.tg.API, `tollgate_provider_up{provider="`+e.p+`"}`); up != "1" {
		t.Errorf(`tollgate_provider_up{provider=%q} = %q after the restart, want 1`, e.p, up)
	}
	itest.Eventually(t, 3*time.Second, func() bool {
		m := e.tg.Rawdata(t).Middlewares[e.mw]
		return m.InFlight != nil && m.InFlight.InFlight == 0
	}, "no connection in flight")
	got := itest.Hold(t, 6, "127.0.0.7", e.ep)
	if len(got) != 4 {
		t.Errorf("after the restart: %d of 6 forwarded, want 4", len(got))
	}
	itest.CloseAll(got)
	// The watch works again: a change after the restart applies too.
	e.s.Put(t, "traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "6")
	until(t, time.Now(), 3*time.Second, func() bool { return e.tg.Rawdata(t).AmountOf(e.mw) == 6 }, "amount 6 written after the restart")
}

// routerDeleted: deleting the router's keys removes the route.
func (e *scenario) routerDeleted(t *testing.T) {
	e.s.DeletePrefix(t, "traefik/tcp/routers/my-router/")
	until(t, time.Now(), 3*time.Second, func() bool { _, ok := e.tg.Rawdata(t).Routers[e.router]; return !ok }, "%s gone", e.router)
	if got := itest.Hold(t, 1, "127.0.0.8", e.ep); len(got) != 0 {
		t.Error("forwarded after the router's keys were deleted")
	}
	if rd := e.tg.Rawdata(t); rd.AmountOf(e.mw) != 6 || rd.ServersOf(e.q("my-service")) != e.backend {
		t.Errorf("the middleware and service are not kept: amount %d, servers %q", rd.AmountOf(e.mw), rd.ServersOf(e.q("my-service")))
	}
}
