package consulcatalog

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// tollgate is the real binary running as a subprocess, stopped by PID.
type tollgate struct {
	*itest.Tollgate
	ep string
}

// startTollgate runs tollgate with one entry point "db" and the Consul
// Catalog provider pointed at a, and waits for /ping.
func startTollgate(t *testing.T, a *agent, extra ...string) *tollgate {
	t.Helper()
	tg := &tollgate{ep: freeAddr(t)}
	g := itest.StartTollgate(t, append([]string{
		"--entryPoints.db.address=" + tg.ep,
		"--providers.consulCatalog=true",
		"--providers.consulCatalog.endpoint.address=" + a.Addr(),
		"--log.level=INFO",
	}, extra...)...)
	tg.Tollgate = g
	return tg
}

func freeAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", freePort(t))
}

// echo is a loopback backend that echoes every byte.
type echo struct {
	addr string
	port int
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return e
}

// dialEcho opens a connection from src to addr and reports whether bytes
// round-trip through it (the proxy forwarded it). A forwarded connection is
// returned open; the test closes it.
func dialEcho(t *testing.T, src, addr string) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, false
	}
	if !itest.Echoes(c) {
		c.Close()
		return nil, false
	}
	return c, true
}

// dbTags are the documented example tags with a router, an entry point and the
// backend's port.
func dbTags(amount, port int) []string {
	return []string{
		"traefik.tcp.routers.db.rule=HostSNI(`*`)",
		"traefik.tcp.routers.db.entrypoints=db",
		"traefik.tcp.routers.db.middlewares=test-inflightconn",
		fmt.Sprintf("traefik.tcp.middlewares.test-inflightconn.inflightconn.amount=%d", amount),
		fmt.Sprintf("traefik.tcp.services.db.loadbalancer.server.port=%d", port),
	}
}

// TestE2E runs the tollgate binary against a real Consul agent: a service
// registered with the documented example tags is routed and limited to exactly 10
// connections per client IP; an amount change applies to new connections
// without resetting held counts; health, deregistration, bad tags, an agent
// outage and its restart behave as the issue says.
func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	configDir := t.TempDir()
	a := startAgent(t, configDir)
	c := a.Client()
	backend := startEcho(t)
	tg := startTollgate(t, a)

	const router, mw, svc = "db@consulcatalog", "test-inflightconn@consulcatalog", "db@consulcatalog"
	registerDB := func(amount int) {
		t.Helper()
		register(t, c, "db", "db-1", 9, dbTags(amount, backend.port)...)
	}

	start := time.Now()
	registerDB(10)
	itest.Eventually(t, 2*time.Second, func() bool {
		rd := tg.Rawdata(t)
		return rd.Routers[router].Status == "enabled" && rd.AmountOf(mw) == 10
	}, "router %s with amount 10 in /api/rawdata", router)
	t.Logf("registration -> route in /api/rawdata: %v", time.Since(start))
	if rd := tg.Rawdata(t); len(rd.Services[svc].LoadBalancer.Servers) != 1 || rd.Services[svc].LoadBalancer.Servers[0].Address != backend.addr {
		t.Fatalf("service %s: %+v, want the one server %s", svc, rd.Services[svc], backend.addr)
	}

	top := t // connections that outlive a subtest are closed when TestE2E ends
	var held1 []net.Conn
	t.Run("amount 10 per client IP, exactly", func(t *testing.T) {
		held1 = itest.Hold(top, 15, "127.0.0.1", tg.ep)
		if len(held1) != 10 {
			t.Fatalf("127.0.0.1: %d of 15 forwarded, want exactly 10", len(held1))
		}
		held2 := itest.Hold(t, 15, "127.0.0.2", tg.ep)
		if len(held2) != 10 {
			t.Fatalf("127.0.0.2: %d of 15 forwarded, want exactly 10 (its own budget)", len(held2))
		}
		itest.CloseAll(held2)
	})

	t.Run("amount change applies to new connections without resetting held counts", func(t *testing.T) {
		if len(held1) != 10 {
			t.Skip("needs the 10 connections held by the previous subtest")
		}
		start := time.Now()
		registerDB(12)
		itest.Eventually(t, 2*time.Second, func() bool { return tg.Rawdata(t).AmountOf(mw) == 12 }, "amount 12 in /api/rawdata")
		t.Logf("tag change -> amount 12 applied: %v", time.Since(start))
		for i, hc := range held1 {
			if !itest.Echoes(hc) {
				t.Fatalf("held connection %d was cut by the reload", i)
			}
		}
		more := itest.Hold(t, 5, "127.0.0.1", tg.ep)
		if len(more) != 2 {
			t.Fatalf("after amount 10 -> 12 with 10 held: %d of 5 new forwarded, want exactly 2 (a reset count would admit 5)", len(more))
		}
		itest.CloseAll(more)
		itest.CloseAll(held1)
		// Counts fall as connections close: 12 from one IP again.
		itest.Eventually(t, 2*time.Second, func() bool {
			got := itest.Hold(t, 1, "127.0.0.1", tg.ep)
			itest.CloseAll(got)
			return len(got) == 1
		}, "127.0.0.1 admitted again after closing its connections")
		again := itest.Hold(t, 14, "127.0.0.1", tg.ep)
		if len(again) != 12 {
			t.Errorf("127.0.0.1 after closing everything: %d of 14 forwarded, want 12", len(again))
		}
		itest.CloseAll(again)
	})

	t.Run("failing health check removes the route, passing restores it", func(t *testing.T) {
		if err := c.Agent().UpdateTTL("db-1-ttl", "e2e: failing", api.HealthCritical); err != nil {
			t.Fatal(err)
		}
		itest.Eventually(t, 2*time.Second, func() bool { _, ok := tg.Rawdata(t).Routers[router]; return !ok }, "router gone while critical")
		if conn, ok := dialEcho(t, "127.0.0.3", tg.ep); ok {
			conn.Close()
			t.Fatal("a connection was forwarded while the only instance is critical")
		}
		if err := c.Agent().UpdateTTL("db-1-ttl", "e2e: passing", api.HealthPassing); err != nil {
			t.Fatal(err)
		}
		itest.Eventually(t, 2*time.Second, func() bool { return tg.Rawdata(t).Routers[router].Status == "enabled" }, "router back when passing")
		conn, ok := dialEcho(t, "127.0.0.3", tg.ep)
		if !ok {
			t.Fatal("not forwarded after the check passed again")
		}
		conn.Close()
	})

	t.Run("bad tag disables only that service, named with its tag in the API and the log", func(t *testing.T) {
		register(t, c, "bad", "bad-1", backend.port, "traefik.tcp.routers.bad.rule=HostSNI(`*`)", "traefik.tcp.routers.bad.entrypoints=db",
			"traefik.tcp.middlewares.bad-limit.inflightconn.amount=abc")
		const tag = "traefik.tcp.middlewares.bad-limit.inflightconn.amount"
		var problems []string
		itest.Eventually(t, 2*time.Second, func() bool {
			problems = tg.Rawdata(t).Provider("consulcatalog").Problems
			return len(problems) > 0
		}, "a consulcatalog problem in /api/rawdata")
		if len(problems) != 1 || !strings.Contains(problems[0], `consul service "bad"`) || !strings.Contains(problems[0], tag) {
			t.Errorf("problems %q: want one naming the service and the tag", problems)
		}
		// The problem reaches the API and the log from one message, in no
		// fixed order: wait for the log line too.
		itest.Eventually(t, 2*time.Second, func() bool { return strings.Contains(tg.Out.String(), tag) }, "a log line naming %s", tag)
		rd := tg.Rawdata(t)
		if _, ok := rd.Routers["bad@consulcatalog"]; ok {
			t.Errorf("the bad service's router is routed")
		}
		if rd.Routers[router].Status != "enabled" {
			t.Errorf("db router is %q, want enabled", rd.Routers[router].Status)
		}
		conn, ok := dialEcho(t, "127.0.0.3", tg.ep)
		if !ok {
			t.Fatal("db not forwarded next to a bad service")
		}
		conn.Close()
		if err := c.Agent().ServiceDeregister("bad-1"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("propagation to the proxy", func(t *testing.T) {
		lat := map[string][]time.Duration{}
		timed := func(kind string, op func(), what string, ok func(itest.Rawdata) bool) {
			t.Helper()
			start := time.Now()
			op()
			itest.Eventually(t, 3*time.Second, func() bool { return ok(tg.Rawdata(t)) }, "%s", what)
			lat[kind] = append(lat[kind], time.Since(start))
		}
		for i := range 10 {
			name := fmt.Sprintf("e%02d", i)
			q := name + "@consulcatalog"
			tags := func(amount int) []string {
				return []string{
					"traefik.tcp.routers." + name + ".rule=HostSNI(`*`)",
					"traefik.tcp.routers." + name + ".entrypoints=db",
					"traefik.tcp.routers." + name + ".priority=1",
					"traefik.tcp.routers." + name + ".middlewares=" + name,
					fmt.Sprintf("traefik.tcp.middlewares.%s.inflightconn.amount=%d", name, amount),
				}
			}
			routed := func(rd itest.Rawdata) bool { return rd.Routers[q].Status == "enabled" }
			gone := func(rd itest.Rawdata) bool { _, ok := rd.Routers[q]; return !ok }
			timed("register", func() { register(t, c, name, name, backend.port, tags(5)...) }, q+" enabled", routed)
			timed("tag change", func() { register(t, c, name, name, backend.port, tags(6)...) }, q+" amount 6",
				func(rd itest.Rawdata) bool { return rd.AmountOf(q) == 6 })
			timed("health change", func() {
				if err := c.Agent().UpdateTTL(name+"-ttl", "", api.HealthCritical); err != nil {
					t.Fatal(err)
				}
			}, q+" gone (critical)", gone)
			timed("health change", func() {
				if err := c.Agent().UpdateTTL(name+"-ttl", "", api.HealthPassing); err != nil {
					t.Fatal(err)
				}
			}, q+" back (passing)", routed)
			timed("deregister", func() {
				if err := c.Agent().ServiceDeregister(name); err != nil {
					t.Fatal(err)
				}
			}, q+" gone", gone)
		}
		var all []time.Duration
		for _, kind := range []string{"register", "deregister", "tag change", "health change"} {
			p50, p95, worst := percentiles(lat[kind])
			t.Logf("catalog -> /api/rawdata %-13s n=%d p50=%v p95=%v max=%v", kind, len(lat[kind]), p50, p95, worst)
			all = append(all, lat[kind]...)
		}
		p50, p95, worst := percentiles(all)
		t.Logf("catalog -> /api/rawdata all           n=%d p50=%v p95=%v max=%v", len(all), p50, p95, worst)
		if p50 > 200*time.Millisecond {
			t.Errorf("propagation p50 %v, want <= 200ms", p50)
		}
	})

	t.Run("agent killed: routes keep serving; restarted: reconverges", func(t *testing.T) {
		// The restarted -dev agent knows only its config dir: db with amount 3.
		def := map[string]any{"service": map[string]any{
			"id": "db-1", "name": "db", "address": "127.0.0.1", "port": 9, "tags": dbTags(3, backend.port),
		}}
		b, _ := json.Marshal(def)
		if err := os.WriteFile(filepath.Join(configDir, "db.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		a.kill()
		itest.Eventually(t, 3*time.Second, func() bool {
			state := tg.Rawdata(t).Provider("consulcatalog").State
			return state == "error"
		}, "provider state error after the agent was killed")
		lastErr := tg.Rawdata(t).Provider("consulcatalog").LastError
		t.Logf("provider error while the agent is down: %s", lastErr)
		if rd := tg.Rawdata(t); rd.Routers[router].Status != "enabled" || rd.AmountOf(mw) != 12 {
			t.Fatalf("last configuration not kept while the agent is down: router %+v amount %d", rd.Routers[router], rd.AmountOf(mw))
		}
		held := itest.Hold(t, 14, "127.0.0.4", tg.ep)
		if len(held) != 12 {
			t.Errorf("agent down: %d of 14 forwarded from 127.0.0.4, want the kept amount 12", len(held))
		}
		itest.CloseAll(held)

		restarted := time.Now()
		if err := a.restart(); err != nil {
			t.Fatal(err)
		}
		ready := time.Now()
		itest.Eventually(t, 5*time.Second, func() bool {
			rd := tg.Rawdata(t)
			state := rd.Provider("consulcatalog").State
			return state == "ok" && rd.AmountOf(mw) == 3
		}, "amount 3 from the restarted agent")
		done := time.Now()
		t.Logf("agent restart: process start -> ready %v, ready -> applied %v", ready.Sub(restarted), done.Sub(ready))
		if done.Sub(ready) > 2*time.Second {
			t.Errorf("reconverged %v after the agent was ready, want <= 2s", done.Sub(ready))
		}
		got := itest.Hold(t, 5, "127.0.0.5", tg.ep)
		if len(got) != 3 {
			t.Errorf("after the restart: %d of 5 forwarded, want 3", len(got))
		}
		itest.CloseAll(got)
	})

	t.Run("deregister removes the route", func(t *testing.T) {
		if err := c.Agent().ServiceDeregister("db-1"); err != nil {
			t.Fatal(err)
		}
		itest.Eventually(t, 2*time.Second, func() bool { _, ok := tg.Rawdata(t).Routers[router]; return !ok }, "router gone after deregistration")
		if conn, ok := dialEcho(t, "127.0.0.3", tg.ep); ok {
			conn.Close()
			t.Fatal("forwarded after deregistration")
		}
	})
}
