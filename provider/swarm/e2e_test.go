package swarm

import (
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// End-to-end tests: tollgate in a container on an overlay network, with the
// Docker socket mounted as users run it, routing to the tasks of echo
// services; clients are containers on the same network, each with its own
// address (internal/itest/forward), reached through published ports.

// routed reports whether the applied configuration has router db@swarm
// enabled with exactly the servers want (sorted "ip:port"; nil: any).
func (g *gate) routed(want []string) bool {
	rd := g.rawdata()
	if r, ok := rd.Routers["db@swarm"]; !ok || r.Status != "enabled" {
		return false
	}
	if want == nil {
		return true
	}
	return rd.ServersOf("db@swarm") == strings.Join(want, ",")
}

// The seed's label on a Swarm service: exactly 10 simultaneous connections
// per client address, another client gets its own 10, a client is
// re-admitted after closing one.
func TestE2ELimitPerClientAddress(t *testing.T) {
	w := newWorld(t)
	g := w.startGate(itest.DockerSocket(t))
	a, b := w.client("client-a", g), w.client("client-b", g)
	svc := w.service("db", seedLabels(10))
	itest.Eventually(t, 15*time.Second, func() bool { return g.routed(nil) && g.rawdata().ServersOf("db@swarm") != "" },
		"router db@swarm of service %s never served: %+v", svc, g.rawdata().Provider(Name))
	if got, want := g.rawdata().ServersOf("db@swarm"), strings.Join(w.taskIPs(svc), ","); got != want {
		t.Fatalf("servers %s, want the task's overlay address %s", got, want)
	}

	held := itest.HoldBanners(t, 10, "", a.addr, "task-1")
	defer func() { itest.CloseAll(held) }()
	if c, got := itest.DialBanner(t, "", a.addr); got != "" {
		c.Close()
		t.Fatalf("11th connection from client a (%s) got banner %q, want it rejected", a.ip, got)
	} else {
		c.Close()
	}
	other := itest.HoldBanners(t, 10, "", b.addr, "task-1")
	defer func() { itest.CloseAll(other) }()
	if c, got := itest.DialBanner(t, "", b.addr); got != "" {
		c.Close()
		t.Fatalf("11th connection from client b (%s) got banner %q, want it rejected", b.ip, got)
	} else {
		c.Close()
	}
	mw := g.rawdata().Middlewares["test-inflightconn@swarm"]
	if mw.InFlight == nil || mw.InFlight.InFlight != 20 {
		t.Fatalf("inFlight state %+v, want 20 connections (10 from each client)", mw.InFlight)
	}

	held[0].Close()
	held = held[1:]
	itest.Eventually(t, 2*time.Second, func() bool {
		c, got := itest.DialBanner(t, "", a.addr)
		if got == "task-1" {
			held = append(held, c)
			return true
		}
		c.Close()
		return false
	}, "client a not re-admitted after closing one of its 10")
	for i, c := range append(slices.Clone(held), other...) {
		if !itest.Alive(c) {
			t.Fatalf("held connection %d no longer echoes", i)
		}
	}
	if logs := g.logs(); !strings.Contains(logs, "max number of connections reached for "+a.ip) || !strings.Contains(logs, "max number of connections reached for "+b.ip) {
		t.Errorf("log lacks the rejection lines for %s and %s", a.ip, b.ip)
	}
}

// Scale 1 -> 3 -> 1: the servers follow the tasks, connections spread over
// the replicas, held connections survive the scale-down of the other tasks
// and the reloads, and the counts survive the reloads.
func TestE2EScale(t *testing.T) {
	w := newWorld(t)
	g := w.startGate(itest.DockerSocket(t))
	c := w.client("client", g)
	svc := w.service("db", seedLabels(6))
	itest.Eventually(t, 15*time.Second, func() bool { return g.routed(w.taskIPs(svc)) && len(w.taskIPs(svc)) == 1 }, "one task not served")

	// Three held on task-1 before the scale-up.
	held := itest.HoldBanners(t, 3, "", c.addr, "task-1")
	defer func() { itest.CloseAll(held) }()

	itest.Docker(t, "service", "scale", "--detach", svc+"=3")
	var tasks []string
	itest.Eventually(t, 15*time.Second, func() bool {
		tasks = w.taskIPs(svc)
		return len(tasks) == 3 && g.routed(tasks)
	}, "servers %s do not follow the three tasks %v", g.rawdata().ServersOf("db@swarm"), &tasks)
	if n := g.rawdata().Middlewares["test-inflightconn@swarm"].InFlight.InFlight; n != 3 {
		t.Fatalf("inFlight after the reload = %d, want the 3 held connections", n)
	}

	// Connections spread over the replicas (round robin over the servers; a
	// replica whose echo does not listen yet is skipped: poll).
	var seen map[string]int
	itest.Eventually(t, 5*time.Second, func() bool {
		seen = map[string]int{}
		for range 9 {
			seen[itest.Banner(t, c.addr)]++
		}
		return seen["task-1"] >= 2 && seen["task-2"] >= 2 && seen["task-3"] >= 2
	}, "banners over 9 connections = %v, want the three replicas used", &seen)

	// The probes above count until the proxy has seen them close.
	itest.Eventually(t, 2*time.Second, func() bool {
		return g.rawdata().Middlewares["test-inflightconn@swarm"].InFlight.InFlight == 3
	}, "the probe connections are still counted")
	// Hold up to the amount (6): one more connection on each replica at
	// least, so that some held connections are on tasks that go away.
	byTask := map[string][]net.Conn{"task-1": held}
	for len(held) < 6 {
		conn, b := itest.DialBanner(t, "", c.addr)
		if b == "" {
			conn.Close()
			t.Fatalf("connection %d of 6 rejected", len(held)+1)
		}
		held = append(held, conn)
		byTask[b] = append(byTask[b], conn)
	}
	if conn, b := itest.DialBanner(t, "", c.addr); b != "" {
		conn.Close()
		t.Fatalf("7th connection with amount 6 got %q, want rejected: the count did not survive the reload", b)
	}

	itest.Docker(t, "service", "scale", "--detach", svc+"=1")
	var left []string
	itest.Eventually(t, 15*time.Second, func() bool {
		left = w.taskIPs(svc)
		return len(left) == 1 && g.routed(left)
	}, "servers %s do not follow the one task left %v", g.rawdata().ServersOf("db@swarm"), &left)
	name := itest.Docker(t, "service", "ps", "--filter", "desired-state=running", "--format", "{{.Name}}", svc)
	survivor := "task-" + name[strings.LastIndexByte(name, '.')+1:] // <service>.<slot>
	if len(byTask[survivor]) == 0 {
		t.Fatalf("no held connection on the surviving %s: %v", survivor, byTask)
	}
	for i, conn := range byTask[survivor] {
		if !itest.Alive(conn) {
			t.Fatalf("held connection %d on the surviving %s was cut by the scale-down", i, survivor)
		}
	}
	// The connections of the removed tasks end with their tasks; the
	// survivor's still count, and the limit still bites at 6.
	itest.Eventually(t, 15*time.Second, func() bool {
		return g.rawdata().Middlewares["test-inflightconn@swarm"].InFlight.InFlight == int64(len(byTask[survivor]))
	}, "inFlight %d, want the %d held connections of %s", g.rawdata().Middlewares["test-inflightconn@swarm"].InFlight.InFlight, len(byTask[survivor]), survivor)
	more := itest.HoldBanners(t, 6-len(byTask[survivor]), "", c.addr, survivor)
	defer itest.CloseAll(more)
	if conn, b := itest.DialBanner(t, "", c.addr); b != "" {
		conn.Close()
		t.Fatalf("connection over the amount after the scale-down got %q, want rejected", b)
	}
}

// A bad label on one service disables only that service's resources, named
// with the service and the label key in the API and the log.
func TestE2EBadLabelIsReported(t *testing.T) {
	w := newWorld(t)
	g := w.startGate(itest.DockerSocket(t))
	w.service("good", seedLabels(10))
	bad := map[string]string{
		"traefik.tcp.routers.other.rule":                      "HostSNI(`*`)",
		"traefik.tcp.routers.other.entrypoints":               "db",
		"traefik.tcp.routers.other.middlewares":               "lim",
		"traefik.tcp.middlewares.lim.inflightconn.amount":     "abc",
		"traefik.tcp.services.other.loadbalancer.server.port": "7000",
	}
	badName := w.service("bad", bad)
	key := "traefik.tcp.middlewares.lim.inflightconn.amount"
	itest.Eventually(t, 15*time.Second, func() bool {
		s := strings.Join(g.rawdata().Provider(Name).Problems, "\n")
		return g.routed(nil) && strings.Contains(s, `swarm service "`+badName+`"`) && strings.Contains(s, key)
	}, "/api/rawdata providers do not name service %s and label %s: %+v", badName, key, g.rawdata().Provider(Name))
	// The log reaches the test through a pipe, after the API may already
	// show the problem: wait for it too.
	itest.Eventually(t, 10*time.Second, func() bool {
		logs := g.logs()
		return strings.Contains(logs, badName) && strings.Contains(logs, key)
	}, "a log line naming service %s and label %s", badName, key)
	// The label drops its middleware alone (issue 42; it used to leave out
	// the service): the router that uses it is disabled, not served.
	rd := g.rawdata()
	if r, ok := rd.Routers["other@swarm"]; ok && r.Status != "disabled" {
		t.Errorf("router other@swarm, using the middleware with a bad label, is %s", r.Status)
	}
	if _, ok := rd.Middlewares["lim@swarm"]; ok {
		t.Errorf("middleware lim@swarm with a bad label is in the configuration")
	}
	c := w.client("client", g)
	if b := itest.Banner(t, c.addr); b != "task-1" {
		t.Fatalf("the good service is not served next to the bad one: banner %q", b)
	}
}

// lbswarm: the service's virtual IP is the one server. (No IPVS here: the
// virtual IP does not answer, so only the choice is checked.) A service on
// two networks without a network label says which it uses.
func TestE2ELBSwarmAndNetworkChoice(t *testing.T) {
	w := newWorld(t)
	g := w.startGate(itest.DockerSocket(t))
	lbl := seedLabels(10)
	lbl["traefik.swarm.lbswarm"] = "true"
	svc := w.service("db", lbl)
	// The engine assigns the virtual IP a moment after the service exists.
	var vip string
	itest.Eventually(t, 15*time.Second, func() bool {
		vip = itest.Docker(t, "service", "inspect", "--format", `{{range .Endpoint.VirtualIPs}}{{.Addr}}{{end}}`, svc)
		vip, _, _ = strings.Cut(vip, "/")
		return vip != ""
	}, "service %s has no virtual IP", svc)
	itest.Eventually(t, 15*time.Second, func() bool { return g.routed([]string{vip + ":7000"}) },
		"servers %q, want the virtual IP %s:7000 alone", g.rawdata().ServersOf("db@swarm"), vip)
	var tasks []string
	itest.Eventually(t, 15*time.Second, func() bool { tasks = w.taskIPs(svc); return len(tasks) == 1 }, "the task is not running")
	if slices.Contains(tasks, vip+":7000") || !g.routed([]string{vip + ":7000"}) {
		t.Fatalf("task addresses %v, servers %q: the virtual IP %s must be the one server, and not a task's", tasks, g.rawdata().ServersOf("db@swarm"), vip)
	}

	// A second network, "a..." before the test's "tgit-..." by name.
	second := "a" + w.name("front")
	itest.Docker(t, "network", "create", "--driver", "overlay", "--attachable", second)
	itest.Docker(t, "network", "connect", second, g.container)
	// Removed after the service (cleanups run last first).
	two := map[string]string{
		"traefik.tcp.routers.two.rule":                      "HostSNI(`*`)",
		"traefik.tcp.services.two.loadbalancer.server.port": "7000",
	}
	twoName := w.service("two", two, "--network", second)
	t.Cleanup(func() {
		_ = itest.DockerCommand("service", "rm", twoName).Run()
		_ = itest.DockerCommand("network", "disconnect", "-f", second, g.container).Run()
		removeNetwork(t, second)
	})
	itest.Eventually(t, 15*time.Second, func() bool {
		return strings.Contains(strings.Join(g.rawdata().Provider(Name).Warnings, "\n"), `swarm service "`+twoName+`": the service is on networks `+second+", "+w.net)
	}, "no warning naming the networks of %s: %+v", twoName, g.rawdata().Provider(Name))
	onSecond := strings.Join(w.taskAddrs(twoName, second), ",")
	if got := g.rawdata().ServersOf("two@swarm"); got != onSecond {
		t.Fatalf("servers of two@swarm = %q, want the task's address on %s (first by name): %q", got, second, onSecond)
	}
	// The label picks the network: a service update (one event) applies it.
	itest.Docker(t, "service", "update", "--detach", "--quiet", "--label-add", "traefik.swarm.network="+w.net, twoName)
	itest.Eventually(t, 15*time.Second, func() bool {
		got := g.rawdata().ServersOf("two@swarm")
		return got != "" && got != onSecond && !strings.Contains(strings.Join(g.rawdata().Provider(Name).Warnings, "\n"), twoName)
	}, "traefik.swarm.network=%s not applied: servers %q, warnings %q", w.net, g.rawdata().ServersOf("two@swarm"), g.rawdata().Provider(Name).Warnings)
	if got, want := g.rawdata().ServersOf("two@swarm"), strings.Join(w.taskIPs(twoName), ","); got != want {
		t.Fatalf("servers of two@swarm = %q, want the task's address on %s: %q", got, w.net, want)
	}
}

// Engine unreachable (the socket relayed by the test, then cut): tollgate
// keeps the last configuration serving, reports the error in the API and
// the metrics, and reconverges with what changed meanwhile once the engine
// is back.
func TestE2EOutageThroughRelay(t *testing.T) {
	w := newWorld(t)
	rl := itest.NewRelay(t, itest.DockerSocket(t))
	g := w.startGate(rl.Path, "--metrics.prometheus")
	c := w.client("client", g)
	svc := w.service("db", seedLabels(10))
	itest.Eventually(t, 15*time.Second, func() bool { return g.routed(w.taskIPs(svc)) && len(w.taskIPs(svc)) == 1 }, "not served")
	held := itest.HoldBanners(t, 2, "", c.addr, "task-1")
	defer itest.CloseAll(held)

	rl.SetCut(true)
	itest.Eventually(t, 5*time.Second, func() bool {
		p := g.rawdata().Provider(Name)
		return p.State == "error" && p.LastError != ""
	}, "the outage is not in /api/rawdata: %+v", g.rawdata().Provider(Name))
	t.Logf("outage reported as: %s", g.rawdata().Provider(Name).LastError)
	itest.Eventually(t, 5*time.Second, func() bool {
		m := metrics(t, g.api)
		return strings.Contains(m, `tollgate_provider_up{provider="swarm"} 0`) && strings.Contains(m, `tollgate_provider_state{provider="swarm",state="error"} 1`)
	}, "the outage is not in /metrics")
	// The last configuration keeps serving: held connections live, new ones
	// are forwarded.
	if !g.routed(w.taskIPs(svc)) {
		t.Fatalf("the configuration changed during the outage: %s", g.rawdata().ServersOf("db@swarm"))
	}
	for i, conn := range held {
		if !itest.Alive(conn) {
			t.Fatalf("held connection %d cut by the outage", i)
		}
	}
	if b := itest.Banner(t, c.addr); b != "task-1" {
		t.Fatalf("new connection during the outage: banner %q, want task-1", b)
	}

	// Changes made while tollgate is blind: a scale-up and a new service.
	itest.Docker(t, "service", "scale", "--detach", svc+"=2")
	other := map[string]string{
		"traefik.tcp.routers.other.rule":                      "ClientIP(`192.0.2.1`)", // no client of the test
		"traefik.tcp.routers.other.entrypoints":               "db",
		"traefik.tcp.services.other.loadbalancer.server.port": "7000",
	}
	otherName := w.service("other", other)
	var tasks []string
	itest.Eventually(t, 15*time.Second, func() bool { tasks = w.taskIPs(svc); return len(tasks) == 2 && len(w.taskIPs(otherName)) == 1 }, "tasks not running")
	itest.Eventually(t, 5*time.Second, func() bool { return rl.Refused() >= 5 }, "tollgate made %d reconnect attempts, want 5", rl.Refused())
	if g.routed(tasks) {
		t.Fatalf("tollgate saw the scale-up through a cut relay")
	}

	rl.SetCut(false)
	restored := time.Now()
	itest.Eventually(t, 3*time.Second, func() bool {
		rd := g.rawdata()
		_, ok := rd.Routers["other@swarm"]
		return ok && g.routed(tasks) && rd.Provider(Name).State == "ok"
	}, "not reconverged after the relay was restored: %+v", g.rawdata().Provider(Name))
	t.Logf("reconverged %v after the relay was restored", time.Since(restored).Round(time.Millisecond))
	if m := metrics(t, g.api); !strings.Contains(m, `tollgate_provider_up{provider="swarm"} 1`) {
		t.Fatalf("tollgate_provider_up is not 1 after the outage")
	}
}

func metrics(t *testing.T, api string) string {
	t.Helper()
	resp, err := http.Get("http://" + api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
