package consulcatalog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// agentProvider runs the real provider (default timing) against a.
func agentProvider(t *testing.T, a *agent) <-chan provider.Message {
	t.Helper()
	cfg := &config.ConsulCatalogProvider{}
	cfg.SetDefaults()
	cfg.Endpoint.Address = a.Addr()
	p, err := New(cfg, provider.Options{Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	return runProvider(t, p)
}

func register(t testing.TB, c *api.Client, name, id string, port int, tags ...string) {
	t.Helper()
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: id, Name: name, Address: "127.0.0.1", Port: port, Tags: tags,
		Check: &api.AgentServiceCheck{CheckID: id + "-ttl", TTL: "10m", Status: api.HealthPassing},
	})
	if err != nil {
		t.Fatalf("registering %s/%s: %v", name, id, err)
	}
}

func noErr(t *testing.T) func(provider.Message) {
	return func(m provider.Message) {
		if m.Err != nil {
			t.Errorf("unexpected provider error: %v", m.Err)
		}
	}
}

// until waits for a message (not an Err) for which ok holds.
func until(t *testing.T, msgs <-chan provider.Message, within time.Duration, what string, ok func(*config.TCPConfiguration, provider.Message) bool) provider.Message {
	t.Helper()
	return next(t, msgs, within, what, func(m provider.Message) bool {
		noErr(t)(m)
		return m.Err == nil && m.Configuration != nil && m.Configuration.TCP != nil && ok(m.Configuration.TCP, m)
	})
}

func TestAgentProvider(t *testing.T) {
	configDir := t.TempDir()
	a := startAgent(t, configDir)
	c := a.Client()
	msgs := agentProvider(t, a)

	until(t, msgs, 2*time.Second, "the first snapshot", func(*config.TCPConfiguration, provider.Message) bool { return true })

	t.Run("register with the README's example tags", func(t *testing.T) {
		start := time.Now()
		register(t, c, "db", "db-1", 15432, design7...)
		m := until(t, msgs, time.Second, "the db router", func(tcp *config.TCPConfiguration, _ provider.Message) bool { return tcp.Routers["db"] != nil })
		t.Logf("registration -> snapshot in %v", time.Since(start))
		want := tcp(
			map[string]*config.TCPRouter{"db": dbRouter},
			map[string]*config.TCPService{"db": lb("127.0.0.1:5432")},
			map[string]*config.TCPMiddleware{"test-inflightconn": amount(10)})
		if !reflect.DeepEqual(m.Configuration, want) {
			t.Errorf("configuration:\ngot  %+v\nwant %+v", m.Configuration.TCP, want.TCP)
		}
		if len(m.Problems) != 0 {
			t.Errorf("problems: %q", m.Problems)
		}
	})

	t.Run("failing health check removes the instance, passing restores it", func(t *testing.T) {
		register(t, c, "db", "db-2", 15433, append(design7[:4:4], "traefik.tcp.services.db.loadbalancer.server.port=5433")...)
		until(t, msgs, time.Second, "two db servers", func(tcp *config.TCPConfiguration, m provider.Message) bool { return len(servers(m, "db")) == 2 })
		if err := c.Agent().UpdateTTL("db-2-ttl", "test: failing", api.HealthCritical); err != nil {
			t.Fatal(err)
		}
		m := until(t, msgs, time.Second, "one db server", func(tcp *config.TCPConfiguration, m provider.Message) bool { return len(servers(m, "db")) == 1 })
		if got := servers(m, "db"); got[0] != "127.0.0.1:5432" {
			t.Errorf("kept server %v, want the healthy 127.0.0.1:5432", got)
		}
		if err := c.Agent().UpdateTTL("db-2-ttl", "test: passing", api.HealthPassing); err != nil {
			t.Fatal(err)
		}
		until(t, msgs, time.Second, "two db servers again", func(tcp *config.TCPConfiguration, m provider.Message) bool { return len(servers(m, "db")) == 2 })
		// Warning is kept by the default strictChecks.
		if err := c.Agent().UpdateTTL("db-2-ttl", "test: warning", api.HealthWarning); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-msgs:
			if len(servers(m, "db")) != 2 {
				t.Errorf("warning removed a server: %+v", m)
			}
		case <-time.After(300 * time.Millisecond):
		}
	})

	t.Run("deregister removes the route", func(t *testing.T) {
		if err := c.Agent().ServiceDeregister("db-2"); err != nil {
			t.Fatal(err)
		}
		until(t, msgs, time.Second, "one db server", func(tcp *config.TCPConfiguration, m provider.Message) bool { return len(servers(m, "db")) == 1 })
		if err := c.Agent().ServiceDeregister("db-1"); err != nil {
			t.Fatal(err)
		}
		until(t, msgs, time.Second, "no db router", func(tcp *config.TCPConfiguration, m provider.Message) bool {
			return tcp.Routers["db"] == nil && tcp.Services["db"] == nil && tcp.Middlewares["test-inflightconn"] == nil
		})
	})

	t.Run("bad tag is a problem naming service and tag; other services unaffected", func(t *testing.T) {
		register(t, c, "bad", "bad-1", 16000, "traefik.tcp.routers.bad.rule=HostSNI(`*`)", "traefik.tcp.middlewares.lim.inflightconn.amount=abc")
		register(t, c, "good", "good-1", 16001, "traefik.tcp.routers.good.rule=HostSNI(`*`)", "traefik.tcp.middlewares.good-lim.inflightconn.amount=3")
		m := until(t, msgs, time.Second, "the good router and a problem", func(tcp *config.TCPConfiguration, m provider.Message) bool {
			return tcp.Routers["good"] != nil && len(m.Problems) > 0
		})
		// The tag drops its middleware alone (issue 42; it used to leave out
		// the instance): the instance's router, which does not use it, applies.
		if m.Configuration.TCP.Routers["bad"] == nil || m.Configuration.TCP.Middlewares["lim"] != nil {
			t.Errorf("want the bad instance's router kept and its middleware dropped: %+v", m.Configuration.TCP)
		}
		if len(m.Problems) != 1 || !strings.Contains(m.Problems[0], `consul service "bad"`) ||
			!strings.Contains(m.Problems[0], `tag "traefik.tcp.middlewares.lim.inflightconn.amount=abc"`) {
			t.Errorf("problems %q: want one naming the service and the tag", m.Problems)
		}
		if got := servers(m, "good"); !reflect.DeepEqual(got, []string{"127.0.0.1:16001"}) {
			t.Errorf("good servers %v", got)
		}
		_ = c.Agent().ServiceDeregister("bad-1")
		_ = c.Agent().ServiceDeregister("good-1")
		until(t, msgs, time.Second, "an empty configuration", func(tcp *config.TCPConfiguration, m provider.Message) bool {
			return len(tcp.Routers) == 0 && len(m.Problems) == 0
		})
	})

	t.Run("propagation", func(t *testing.T) {
		lat := map[string][]time.Duration{}
		timed := func(kind string, op func(), what string, ok func(*config.TCPConfiguration, provider.Message) bool) {
			start := time.Now()
			op()
			until(t, msgs, 2*time.Second, what, ok)
			lat[kind] = append(lat[kind], time.Since(start))
		}
		const n = 20
		for i := range n {
			name := fmt.Sprintf("p%02d", i)
			tags := func(amount int) []string {
				return []string{
					"traefik.tcp.routers." + name + ".rule=HostSNI(`*`)",
					"traefik.tcp.routers." + name + ".middlewares=" + name,
					fmt.Sprintf("traefik.tcp.middlewares.%s.inflightconn.amount=%d", name, amount),
				}
			}
			has := func(tcp *config.TCPConfiguration, _ provider.Message) bool { return tcp.Routers[name] != nil }
			gone := func(tcp *config.TCPConfiguration, _ provider.Message) bool { return tcp.Routers[name] == nil }
			timed("register", func() { register(t, c, name, name, 17000+i, tags(10)...) }, name, has)
			timed("tag change", func() { register(t, c, name, name, 17000+i, tags(20)...) }, name+" amount 20",
				func(tcp *config.TCPConfiguration, _ provider.Message) bool {
					mw := tcp.Middlewares[name]
					return mw != nil && mw.InFlightConn != nil && mw.InFlightConn.Amount == 20
				})
			timed("health change", func() {
				if err := c.Agent().UpdateTTL(name+"-ttl", "", api.HealthCritical); err != nil {
					t.Fatal(err)
				}
			}, name+" gone (critical)", gone)
			timed("health change", func() {
				if err := c.Agent().UpdateTTL(name+"-ttl", "", api.HealthPassing); err != nil {
					t.Fatal(err)
				}
			}, name+" back (passing)", has)
			timed("deregister", func() {
				if err := c.Agent().ServiceDeregister(name); err != nil {
					t.Fatal(err)
				}
			}, name+" gone", gone)
		}
		var all []time.Duration
		for _, kind := range []string{"register", "deregister", "tag change", "health change"} {
			p50, p95, max := percentiles(lat[kind])
			t.Logf("propagation %-13s n=%d p50=%v p95=%v max=%v", kind, len(lat[kind]), p50, p95, max)
			all = append(all, lat[kind]...)
		}
		p50, p95, max := percentiles(all)
		t.Logf("propagation all           n=%d p50=%v p95=%v max=%v", len(all), p50, p95, max)
		if p50 > 200*time.Millisecond {
			t.Errorf("propagation p50 %v, want <= 200ms", p50)
		}
	})

	t.Run("agent outage keeps the configuration; restart reconverges", func(t *testing.T) {
		register(t, c, "db", "db-1", 15432, design7...)
		until(t, msgs, time.Second, "the db router", func(tcp *config.TCPConfiguration, _ provider.Message) bool { return tcp.Routers["db"] != nil })

		// The restarted agent (in-memory, -dev) knows only the services of
		// its config dir: a different state to converge to.
		def := `{"service": {"id": "after-1", "name": "after", "address": "127.0.0.1", "port": 18000,
			"tags": ["traefik.tcp.routers.after.rule=HostSNI(` + "`*`" + `)", "traefik.tcp.middlewares.after.inflightconn.amount=5"]}}`
		if err := os.WriteFile(filepath.Join(configDir, "after.json"), []byte(def), 0o644); err != nil {
			t.Fatal(err)
		}

		killed := time.Now()
		a.kill()
		m := next(t, msgs, 3*time.Second, "an Err", func(m provider.Message) bool {
			if m.Err == nil {
				t.Errorf("configuration sent while the agent is down: %+v", m.Configuration)
			}
			return m.Err != nil
		})
		t.Logf("agent killed -> Err in %v: %v", time.Since(killed), m.Err)
		if m.Configuration != nil || !strings.Contains(m.Err.Error(), a.Addr()) {
			t.Errorf("outage message: %+v", m)
		}
		// While it is down: only Err messages (the watcher keeps serving the
		// last configuration).
		quiet := time.After(1500 * time.Millisecond)
	down:
		for {
			select {
			case m := <-msgs:
				if m.Err == nil {
					t.Fatalf("configuration sent while the agent is down: %+v", m.Configuration)
				}
			case <-quiet:
				break down
			}
		}

		restarted := time.Now()
		if err := a.restart(); err != nil {
			t.Fatal(err)
		}
		ready := time.Now()
		m = next(t, msgs, 3*time.Second, "the restarted agent's configuration", func(m provider.Message) bool {
			return m.Err == nil && m.Configuration.TCP.Routers["after"] != nil
		})
		got := time.Now()
		t.Logf("agent restart: process start -> ready %v, ready -> snapshot %v (process start -> snapshot %v)",
			ready.Sub(restarted), got.Sub(ready), got.Sub(restarted))
		if m.Configuration.TCP.Routers["db"] != nil {
			t.Errorf("the restarted agent has no db service, but the snapshot does: %+v", m.Configuration.TCP)
		}
		if got.Sub(ready) > 2*time.Second {
			t.Errorf("reconverged %v after the agent was ready, want <= 2s", got.Sub(ready))
		}
	})
}

// percentiles returns p50, p95 and the maximum of d (nearest rank).
func percentiles(d []time.Duration) (p50, p95, worst time.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return rank(0.50), rank(0.95), s[len(s)-1]
}

// TestAgentScale registers 1,000 services x 3 instances (on three catalog
// nodes, through /v1/catalog/register as an external registrator would) in a
// real agent while the provider runs, and measures the time from the last registration to the
// first complete snapshot, then the cost of one full read and build.
func TestAgentScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test: skipped with -short")
	}
	const services, instances = 1000, 3
	a := startAgent(t, "")
	c := a.Client()
	msgs := agentProvider(t, a)
	until(t, msgs, 2*time.Second, "the first snapshot", func(*config.TCPConfiguration, provider.Message) bool { return true })

	// Keep only the latest snapshot while registering.
	var (
		mu     sync.Mutex
		latest provider.Message
		at     time.Time
		count  atomic.Int64
	)
	complete := make(chan time.Time, 1)
	isComplete := func(m provider.Message) bool {
		if m.Err != nil || m.Configuration == nil || len(m.Configuration.TCP.Services) != services {
			return false
		}
		for _, s := range m.Configuration.TCP.Services {
			if len(s.LoadBalancer.Servers) != instances {
				return false
			}
		}
		return true
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			select {
			case m := <-msgs:
				now := time.Now()
				count.Add(1)
				mu.Lock()
				latest, at = m, now
				mu.Unlock()
				if isComplete(m) {
					complete <- now
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()

	jobs := make(chan int)
	var wg sync.WaitGroup
	began := time.Now()
	var failed atomic.Value
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				svc, i := j/instances, j%instances
				name := fmt.Sprintf("s%04d", svc)
				id := fmt.Sprintf("%s-%d", name, i)
				node := fmt.Sprintf("node-%d", i)
				_, err := c.Catalog().Register(&api.CatalogRegistration{
					Node: node, Address: fmt.Sprintf("127.0.%d.1", 1+i), SkipNodeUpdate: true,
					Service: &api.AgentService{
						ID: id, Service: name, Port: 20000 + svc,
						Tags: []string{
							"traefik.tcp.routers." + name + ".rule=HostSNI(`*`)",
							"traefik.tcp.routers." + name + ".middlewares=" + name,
							"traefik.tcp.middlewares." + name + ".inflightconn.amount=10",
						},
					},
					Check: &api.AgentCheck{Node: node, CheckID: id + "-check", Name: "probe", Status: api.HealthPassing, ServiceID: id},
				}, nil)
				if err != nil {
					failed.Store(err)
				}
			}
		}()
	}
	for j := range services * instances {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	last := time.Now()
	if err := failed.Load(); err != nil {
		t.Fatalf("registering: %v", err)
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average during the test: %s", strings.TrimSpace(string(la)))
	}
	t.Logf("registered %d instances of %d services in %v (%d snapshots meanwhile)", services*instances, services, last.Sub(began), count.Load())

	select {
	case got := <-complete:
		d := max(got.Sub(last), 0)
		t.Logf("scale: last registration -> complete snapshot (%d services x %d servers): %v", services, instances, d)
		// The target is 1s; on a shared 2-core machine one full read
		// alone can take longer, so only a gross regression fails the test.
		verdict := "met"
		if d > time.Second {
			verdict = "MISSED"
		}
		t.Logf("scale: target <= 1s %s", verdict)
		if d > 5*time.Second {
			t.Errorf("complete snapshot %v after the last registration, want well under 5s (target 1s)", d)
		}
	case <-time.After(10 * time.Second):
		mu.Lock()
		m, when := latest, at
		mu.Unlock()
		n := 0
		if m.Configuration != nil {
			n = len(m.Configuration.TCP.Services)
		}
		t.Fatalf("no complete snapshot 10s after the last registration; latest at %v has %d services (err %v)", when.Sub(last), n, m.Err)
	}

	// The cost of one wake-up: a full read and a build.
	start := time.Now()
	insts, err := fetch(context.Background(), consulClient{c: c}, "traefik", DefaultParallelReads)
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(start)
	start = time.Now()
	conf, problems := build(insts, defaultOpts())
	built := time.Since(start)
	if len(insts) != services*instances || len(conf.TCP.Routers) != services || len(problems) != 0 {
		t.Fatalf("read %d instances, built %d routers, problems %q", len(insts), len(conf.TCP.Routers), problems)
	}
	t.Logf("scale: one snapshot = read %v (3 nodes: per-node reads) + build %v (cold cache)", read, built)

	// What the proxy does with it: qualify (the watcher's Merge), compile a
	// first time and again as a reload with the same state.
	merged := provider.Merge(map[string]*config.Dynamic{Name: conf})
	st := proxy.NewState(zerolog.Nop(), proxy.StateOptions{})
	var compiles []time.Duration
	for range 3 {
		start = time.Now()
		tables, rt := proxy.Compile(merged, []string{"db"}, st, zerolog.Nop())
		compiles = append(compiles, time.Since(start))
		enabled := 0
		for _, r := range rt.Routers {
			if r.Status == "enabled" {
				enabled++
			}
		}
		if enabled != services || tables["db"] == nil {
			t.Fatalf("compiled %d enabled routers (want %d), table for db: %v", enabled, services, tables["db"] != nil)
		}
	}
	t.Logf("scale: proxy.Compile of that snapshot: first %v, reloads %v and %v (target <= 50ms)", compiles[0], compiles[1], compiles[2])
}

// The endpoint over HTTPS (endpoint.tls.ca), read in stale mode through the
// agent's cache: the registered service is routed. Without the CA the
// certificate is refused, and the error says so.
func TestAgentProviderTLS(t *testing.T) {
	configDir, certDir := t.TempDir(), t.TempDir()
	cert, _ := itest.SelfSigned(t, "127.0.0.1")
	certFile, keyFile := itest.WritePEM(t, certDir, cert)
	https := freePort(t)
	hcl := fmt.Sprintf("ports { https = %d }\ntls { defaults { cert_file = %q, key_file = %q } }\n", https, certFile, keyFile)
	if err := os.WriteFile(filepath.Join(configDir, "tls.hcl"), []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, configDir)
	register(t, a.Client(), "db", "db-1", 15432, design7...)

	run := func(tlsCfg *config.KVClientTLS) <-chan provider.Message {
		cfg := &config.ConsulCatalogProvider{}
		cfg.SetDefaults()
		cfg.Endpoint.Address = "127.0.0.1:" + strconv.Itoa(https)
		cfg.Endpoint.TLS = tlsCfg
		cfg.Stale, cfg.Cache = true, true
		p, err := New(cfg, provider.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return runProvider(t, p)
	}
	until(t, run(&config.KVClientTLS{CA: certFile}), 10*time.Second, "db routed over https", func(c *config.TCPConfiguration, _ provider.Message) bool {
		s := c.Services["db"]
		return s != nil && s.LoadBalancer != nil && len(s.LoadBalancer.Servers) == 1
	})
	next(t, run(&config.KVClientTLS{}), 10*time.Second, "an error naming the certificate", func(m provider.Message) bool {
		return m.Err != nil && strings.Contains(m.Err.Error(), "certificate")
	})
	if _, err := New(&config.ConsulCatalogProvider{Endpoint: &config.ConsulEndpoint{TLS: &config.KVClientTLS{CA: "/nonexistent/ca.pem"}}}, provider.Options{}); err == nil ||
		!strings.Contains(err.Error(), `providers.consulCatalog.endpoint.tls.ca="/nonexistent/ca.pem"`) {
		t.Errorf("a missing CA file: %v", err)
	}
}
