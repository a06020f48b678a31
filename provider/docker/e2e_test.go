package docker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// End-to-end tests: the tollgate binary with the Docker provider in front of
// echo containers on the real engine. Each test's tollgate only sees its own
// containers, through a constraints expression on a per-test label.

const testLabel = "tollgate.itest"

// gate is a running tollgate.
type gate struct {
	ep  string // the "db" entry point
	api string
	out *itest.Buffer
	id  string // value of testLabel on this test's containers
}

func startGate(t *testing.T, extra ...string) *gate {
	t.Helper()
	g := &gate{ep: itest.FreeAddr(t), id: itest.Uniq()}
	tg := itest.StartTollgate(t, append([]string{
		"--entryPoints.db.address=" + g.ep,
		"--providers.docker",
		"--providers.docker.constraints=Label(`" + testLabel + "`, `" + g.id + "`)",
		"--log.level=DEBUG",
	}, extra...)...)
	g.api, g.out = tg.API, tg.Out
	return g
}

// labels returns the documented label example
// (docs/reference/middlewares/inflightconn.md) with a router and a service
// port, plus the test label. amount <= 0 leaves the middleware out.
func (g *gate) labels(router, service, mw string, amount int) map[string]string {
	l := map[string]string{
		testLabel: g.id,
		"traefik.tcp.routers." + router + ".rule":                       "HostSNI(`*`)",
		"traefik.tcp.routers." + router + ".entrypoints":                "db",
		"traefik.tcp.routers." + router + ".service":                    service,
		"traefik.tcp.services." + service + ".loadbalancer.server.port": "7000",
	}
	if amount > 0 {
		l["traefik.tcp.routers."+router+".middlewares"] = mw
		l["traefik.tcp.middlewares."+mw+".inflightconn.amount"] = fmt.Sprint(amount)
	}
	return l
}

func TestE2EForwardLimitStopStart(t *testing.T) {
	itest.NeedDocker(t)
	g := startGate(t)
	name := "tollgate-e2e-" + g.id
	runEcho(t, name, g.labels("db", "db", "test-inflightconn", 10), "-e", "BANNER=db-1")
	started := time.Now()
	itest.Eventually(t, 2*time.Second, func() bool { return itest.Banner(t, g.ep) == "db-1" }, "route to %s not live", name)
	t.Logf("route live %v after docker run returned", time.Since(started).Round(time.Millisecond))

	// amount 10 per source IP, exactly.
	held := itest.HoldBanners(t, 10, "127.0.0.1", g.ep, "db-1")
	defer func() { itest.CloseAll(held) }()
	if c, b := itest.DialBanner(t, "127.0.0.1", g.ep); b != "" {
		c.Close()
		t.Fatalf("11th connection from 127.0.0.1 got banner %q, want it rejected", b)
	} else {
		c.Close()
	}
	other := itest.HoldBanners(t, 1, "127.0.0.2", g.ep, "db-1")
	itest.CloseAll(other)
	held[0].Close()
	held = held[1:]
	itest.Eventually(t, 2*time.Second, func() bool {
		c, b := itest.DialBanner(t, "127.0.0.1", g.ep)
		if b == "db-1" {
			held = append(held, c)
			return true
		}
		c.Close()
		return false
	}, "no new connection from 127.0.0.1 after one of 10 closed")
	if !strings.Contains(g.out.String(), "max number of connections reached for 127.0.0.1") {
		t.Errorf("log lacks the rejection line for 127.0.0.1")
	}
	itest.CloseAll(held)
	held = nil

	itest.Docker(t, "stop", "-t", "2", name)
	stopped := time.Now()
	itest.Eventually(t, 2*time.Second, func() bool { return itest.Banner(t, g.ep) == "" }, "route still live after docker stop")
	t.Logf("no longer forwarded %v after docker stop returned", time.Since(stopped).Round(time.Millisecond))

	itest.Docker(t, "start", name)
	itest.Eventually(t, 2*time.Second, func() bool { return itest.Banner(t, g.ep) == "db-1" }, "route not restored after docker start")
}

func TestE2EAmountChangeKeepsHeldCounts(t *testing.T) {
	itest.NeedDocker(t)
	g := startGate(t)
	// The backend and the middleware live in separate containers, so that
	// recreating the middleware's container does not kill the backend that
	// the held connections are attached to.
	backend := g.labels("db", "db", "", 0)
	backend["traefik.tcp.routers.db.middlewares"] = "limit"
	runEcho(t, "tollgate-e2e-backend-"+g.id, backend, "-e", "BANNER=backend")
	mwLabels := func(amount int) map[string]string {
		return map[string]string{
			testLabel: g.id,
			"traefik.tcp.middlewares.limit.inflightconn.amount": fmt.Sprint(amount),
		}
	}
	mw1 := runEcho(t, "tollgate-e2e-limit3-"+g.id, mwLabels(3))
	itest.Eventually(t, 2*time.Second, func() bool { return itest.Banner(t, g.ep) == "backend" }, "route not live")
	// The probes above count until the proxy has seen them close.
	itest.Eventually(t, 2*time.Second, func() bool {
		in := itest.GetRawdata(t, g.api).Middlewares["limit@docker"].InFlight
		return in != nil && in.InFlight == 0
	}, "the probe connections are still counted")

	held := itest.HoldBanners(t, 3, "127.0.0.1", g.ep, "backend")
	defer func() { itest.CloseAll(held) }()
	if b := itest.Banner(t, g.ep); b != "" {
		t.Fatalf("4th connection with amount 3 got %q, want rejected", b)
	}

	// Recreate the middleware's container with amount 5.
	itest.Docker(t, "rm", "-f", mw1)
	runEcho(t, "tollgate-e2e-limit5-"+g.id, mwLabels(5))
	itest.Eventually(t, 2*time.Second, func() bool {
		return itest.GetRawdata(t, g.api).AmountOf("limit@docker") == 5
	}, "amount 5 not applied")
	for i, c := range held {
		if !itest.Alive(c) {
			t.Fatalf("held connection %d was cut by the amount change", i+1)
		}
	}
	// The 3 held connections still count: 2 more pass, the 6th is rejected.
	more := itest.HoldBanners(t, 2, "127.0.0.1", g.ep, "backend")
	held = append(held, more...)
	if b := itest.Banner(t, g.ep); b != "" {
		t.Fatalf("6th connection with amount 5 and 5 held got %q, want rejected (held counts were reset)", b)
	}
}

func TestE2ETwoReplicasAreLoadBalanced(t *testing.T) {
	itest.NeedDocker(t)
	g := startGate(t)
	l := g.labels("db", "db", "", 0)
	runEcho(t, "tollgate-e2e-r1-"+g.id, l, "-e", "BANNER=replica-1")
	runEcho(t, "tollgate-e2e-r2-"+g.id, l, "-e", "BANNER=replica-2")
	itest.Eventually(t, 2*time.Second, func() bool {
		return len(itest.GetRawdata(t, g.api).Services["db@docker"].LoadBalancer.Servers) == 2
	}, "service db@docker does not have two servers")
	// A replica's process may listen a moment after its container starts; until
	// then its dials fail over to the other replica. Poll until a window of 10
	// connections is spread over both.
	var seen map[string]int
	itest.Eventually(t, 5*time.Second, func() bool {
		seen = map[string]int{}
		for range 10 {
			seen[itest.Banner(t, g.ep)]++
		}
		return seen["replica-1"] >= 3 && seen["replica-2"] >= 3
	}, "banners over 10 connections = %v, want both replicas used", &seen)
}

func TestE2EBadLabelIsReported(t *testing.T) {
	itest.NeedDocker(t)
	g := startGate(t)
	runEcho(t, "tollgate-e2e-good-"+g.id, g.labels("db", "db", "", 0), "-e", "BANNER=good")
	bad := g.labels("other", "other", "lim", 0)
	bad["traefik.tcp.routers.other.middlewares"] = "lim"
	bad["traefik.tcp.middlewares.lim.inflightconn.amount"] = "abc"
	badName := runEcho(t, "tollgate-e2e-bad-"+g.id, bad)
	key := "traefik.tcp.middlewares.lim.inflightconn.amount"
	itest.Eventually(t, 2*time.Second, func() bool {
		s := strings.Join(itest.GetRawdata(t, g.api).Provider(Name).Problems, "\n")
		return strings.Contains(s, badName) && strings.Contains(s, key)
	}, "/api/rawdata providers do not name container %s and label %s: %v", badName, key, itest.GetRawdata(t, g.api).Providers)
	// The log reaches g.out through a pipe, after the API may already show
	// the problem: wait for it too.
	itest.Eventually(t, 2*time.Second, func() bool {
		out := g.out.String()
		return strings.Contains(out, badName) && strings.Contains(out, key)
	}, "a log line naming container %s and label %s", badName, key)
	if b := itest.Banner(t, g.ep); b != "good" {
		t.Fatalf("the good container is not served next to the bad one: banner %q", b)
	}
	// The label drops its middleware alone (issue 42; it used to exclude
	// the container): the router that uses it is disabled, not served.
	if r, ok := itest.GetRawdata(t, g.api).Routers["other@docker"]; ok && r.Status != "disabled" {
		t.Fatalf("router of the container with a bad label, using the middleware it declares, is %s", r.Status)
	}
}

// routed reports whether the applied configuration (/api/rawdata) has
// router db@docker enabled with the server addr.
func (g *gate) routed(t *testing.T, addr string) bool {
	rd := itest.GetRawdata(t, g.api)
	if r, ok := rd.Routers["db@docker"]; !ok || r.Status != "enabled" {
		return false
	}
	if addr == "" {
		return true
	}
	for _, s := range rd.Services["db@docker"].LoadBalancer.Servers {
		if s.Address == addr {
			return true
		}
	}
	return false
}

// TestE2EPropagationLatency measures, through the binary, the time from
// `docker run` / `docker stop` returning to the route being live / gone in
// the applied configuration (polled on /api/rawdata), for isolated changes
// (nothing else changed in the second before) and back-to-back ones (each
// change issued as soon as the previous one was applied). It also reports
// run -> first forwarded connection (the backend's banner through the
// entry point), which adds the proxy's first dial to a fresh container.
func TestE2EPropagationLatency(t *testing.T) {
	itest.NeedDockerAlone(t) // a measurement: no other engine test at the same time
	if testing.Short() {
		t.Skip("latency measurement: slow")
	}
	g := startGate(t)
	const rounds = 10
	itest.EchoImage(t)
	measure := func(what string, cond func() bool) time.Duration {
		start := time.Now()
		itest.Eventually(t, 3*time.Second, cond, "%s did not propagate", what)
		return time.Since(start)
	}
	// Between rounds the router is absent, so its presence means this
	// round's container.
	routed := func() bool { return g.routed(t, "") }
	var isoLive, isoGone, b2bLive, b2bGone, forward []time.Duration
	round := func(i int, isolated bool) {
		name := fmt.Sprintf("tollgate-e2e-lat-%s-%d-%v", g.id, i, isolated)
		want := fmt.Sprintf("lat-%d-%v", i, isolated)
		if isolated {
			time.Sleep(1100 * time.Millisecond) // nothing changed within the last second
		}
		runEcho(t, name, g.labels("db", "db", "", 0), "-e", "BANNER="+want)
		start := time.Now()
		live := measure("run", routed)
		if isolated {
			itest.Eventually(t, 3*time.Second, func() bool { return itest.Banner(t, g.ep) == want }, "%s not forwarded", name)
			forward = append(forward, time.Since(start))
			time.Sleep(1100 * time.Millisecond)
		}
		itest.Docker(t, "stop", "-t", "1", name)
		gone := measure("stop", func() bool { return !routed() })
		if isolated {
			isoLive, isoGone = append(isoLive, live), append(isoGone, gone)
		} else {
			b2bLive, b2bGone = append(b2bLive, live), append(b2bGone, gone)
		}
		itest.Docker(t, "rm", "-f", name)
	}
	for i := range rounds {
		round(i, true)
	}
	for i := range rounds {
		round(i, false)
	}
	report := func(what string, ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		p50, p95 := s[len(s)/2], s[(len(s)*95+99)/100-1]
		t.Logf("%-34s p50 %6.1f ms  p95 %6.1f ms  max %6.1f ms  (n=%d)", what, ms(p50), ms(p95), ms(s[len(s)-1]), len(s))
		return p50
	}
	iso := report("isolated, run -> routed", isoLive)
	iso2 := report("isolated, stop -> unrouted", isoGone)
	b2b := report("back-to-back, run -> routed", b2bLive)
	b2b2 := report("back-to-back, stop -> unrouted", b2bGone)
	report("isolated, both", append(slices.Clone(isoLive), isoGone...))
	report("back-to-back, both", append(slices.Clone(b2bLive), b2bGone...))
	report("isolated, run -> first forwarded", forward)
	if max(iso, iso2) > 50*time.Millisecond {
		t.Errorf("isolated p50 %v / %v, want <= 50ms (issue 3)", iso, iso2)
	}
	if max(b2b, b2b2) > 100*time.Millisecond {
		t.Errorf("back-to-back p50 %v / %v, want <= 100ms (issue 3)", b2b, b2b2)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
