package docker

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// recorder keeps every message a running provider sends.
type recorder struct {
	mu   sync.Mutex
	msgs []provider.Message
}

func (r *recorder) all() []provider.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]provider.Message(nil), r.msgs...)
}

func (r *recorder) latest() (provider.Message, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.msgs) == 0 {
		return provider.Message{}, 0
	}
	return r.msgs[len(r.msgs)-1], len(r.msgs)
}

// waitLatest polls until the latest message satisfies cond.
func (r *recorder) waitLatest(t *testing.T, within time.Duration, what string, cond func(provider.Message) bool) provider.Message {
	t.Helper()
	var m provider.Message
	itest.Eventually(t, within, func() bool {
		m, _ = r.latest()
		return cond(m)
	}, "%s: latest message %+v", what, summary(r))
	return m
}

func summary(r *recorder) string {
	m, n := r.latest()
	var b strings.Builder
	b.WriteString("#")
	b.WriteString(strconv.Itoa(n))
	if m.Err != nil {
		b.WriteString(" err=" + m.Err.Error())
	}
	if m.Configuration != nil && m.Configuration.TCP != nil {
		for name, rt := range m.Configuration.TCP.Routers {
			b.WriteString(" router " + name + "->" + rt.Service)
		}
	}
	for _, p := range m.Problems {
		b.WriteString(" problem: " + p)
	}
	return b.String()
}

// startProvider runs a provider for cfg until t ends.
func startProvider(t *testing.T, cfg *config.DockerProvider) *recorder {
	t.Helper()
	p, err := New(cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan provider.Message)
	rec := &recorder{}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, out) }()
	go func() {
		for m := range out {
			rec.mu.Lock()
			rec.msgs = append(rec.msgs, m)
			rec.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return within 5s of cancel")
		}
		close(out)
	})
	return rec
}

func engineConfig(endpoint string) *config.DockerProvider {
	c := &config.DockerProvider{}
	c.SetDefaults()
	c.Endpoint = endpoint
	return c
}

func routerOf(m provider.Message, name string) *config.TCPRouter {
	if m.Err != nil || m.Configuration == nil || m.Configuration.TCP == nil {
		return nil
	}
	return m.Configuration.TCP.Routers[name]
}

func serversOf(m provider.Message, service string) []string {
	if m.Err != nil || m.Configuration == nil || m.Configuration.TCP == nil {
		return nil
	}
	s := m.Configuration.TCP.Services[service]
	if s == nil || s.LoadBalancer == nil {
		return nil
	}
	var addrs []string
	for _, srv := range s.LoadBalancer.Servers {
		addrs = append(addrs, srv.Address)
	}
	return addrs
}

func echoLabels(router, service, mw string) map[string]string {
	return map[string]string{
		"traefik.tcp.routers." + router + ".rule":                       "HostSNI(`*`)",
		"traefik.tcp.routers." + router + ".entrypoints":                "db",
		"traefik.tcp.routers." + router + ".service":                    service,
		"traefik.tcp.routers." + router + ".middlewares":                mw,
		"traefik.tcp.middlewares." + mw + ".inflightconn.amount":        "10",
		"traefik.tcp.services." + service + ".loadbalancer.server.port": "7000",
	}
}

func TestEngineStartStopSnapshot(t *testing.T) {
	needEngine(t)
	u := uniq()
	rec := startProvider(t, engineConfig(""))
	router, service, mw := "r-"+u, "s-"+u, "m-"+u
	name := runEcho(t, "tollgate-itest-"+u, echoLabels(router, service, mw))
	ip := bridgeIP(t, name)
	want := net.JoinHostPort(ip, "7000")

	m := rec.waitLatest(t, 2*time.Second, "container started", func(m provider.Message) bool {
		r := routerOf(m, router)
		s := serversOf(m, service)
		return r != nil && r.Service == service && len(s) == 1 && s[0] == want
	})
	if mwc := m.Configuration.TCP.Middlewares[mw]; mwc == nil || mwc.InFlightConn == nil || mwc.InFlightConn.Amount != 10 {
		t.Fatalf("middleware %s = %+v, want inFlightConn amount 10", mw, mwc)
	}

	dockerCLI(t, "stop", "-t", "1", name)
	rec.waitLatest(t, 2*time.Second, "container stopped", func(m provider.Message) bool {
		return m.Err == nil && routerOf(m, router) == nil && serversOf(m, service) == nil
	})

	dockerCLI(t, "start", name)
	rec.waitLatest(t, 2*time.Second, "container restarted", func(m provider.Message) bool {
		return routerOf(m, router) != nil && len(serversOf(m, service)) == 1
	})
}

func TestEngineBadLabelIsAProblem(t *testing.T) {
	needEngine(t)
	u := uniq()
	rec := startProvider(t, engineConfig(""))
	runEcho(t, "tollgate-itest-good-"+u, echoLabels("r-"+u, "s-"+u, "m-"+u))
	bad := runEcho(t, "tollgate-itest-bad-"+u, map[string]string{
		"traefik.tcp.routers.bad-" + u + ".rule":                    "HostSNI(`*`)",
		"traefik.tcp.middlewares.bad-" + u + ".inflightconn.amount": "abc",
	})
	key := "traefik.tcp.middlewares.bad-" + u + ".inflightconn.amount"
	m := rec.waitLatest(t, 2*time.Second, "bad label reported", func(m provider.Message) bool {
		if routerOf(m, "r-"+u) == nil {
			return false
		}
		for _, p := range m.Problems {
			if strings.Contains(p, `container "`+bad+`"`) && strings.Contains(p, key) && strings.Contains(p, "abc") {
				return true
			}
		}
		return false
	})
	if routerOf(m, "bad-"+u) != nil {
		t.Fatalf("router of the container with a bad label is served: %+v", routerOf(m, "bad-"+u))
	}
}

// relay is a unix-socket proxy to the engine that the test can cut (close
// every connection, refuse new ones) and restore.
type relay struct {
	path     string
	upstream string
	ln       net.Listener
	mu       sync.Mutex
	cut      bool
	refused  int
	conns    map[net.Conn]bool
	wg       sync.WaitGroup
}

func newRelay(t *testing.T, upstream string) *relay {
	t.Helper()
	dir, err := osMkdirShort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAll(dir) })
	r := &relay{path: filepath.Join(dir, "docker.sock"), upstream: upstream, conns: map[net.Conn]bool{}}
	r.ln, err = net.Listen("unix", r.path)
	if err != nil {
		t.Fatal(err)
	}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() {
		r.ln.Close()
		r.setCut(true)
		r.wg.Wait()
	})
	return r
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.cut {
			r.refused++
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.conns[c] = true
		r.mu.Unlock()
		r.wg.Add(1)
		go r.pipe(c)
	}
}

func (r *relay) pipe(c net.Conn) {
	defer r.wg.Done()
	up, err := net.Dial("unix", r.upstream)
	if err != nil {
		c.Close()
		return
	}
	r.mu.Lock()
	if r.cut {
		r.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	r.conns[up] = true
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	r.mu.Lock()
	delete(r.conns, c)
	delete(r.conns, up)
	r.mu.Unlock()
}

func (r *relay) refusedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

func (r *relay) setCut(cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = cut
	if cut {
		for c := range r.conns {
			c.Close()
		}
	}
}

func TestEngineOutageThroughRelay(t *testing.T) {
	needEngine(t)
	sock := "/var/run/docker.sock"
	if h := osGetenv("DOCKER_HOST"); h != "" {
		var ok bool
		if sock, ok = strings.CutPrefix(h, "unix://"); !ok {
			itest.Need(t, "a unix-socket Docker engine for the relay", fmt.Errorf("DOCKER_HOST=%s is not a unix socket", h))
		}
	}
	u := uniq()
	rl := newRelay(t, sock)
	rec := startProvider(t, engineConfig("unix://"+rl.path))

	runEcho(t, "tollgate-itest-a-"+u, echoLabels("a-"+u, "sa-"+u, "m-"+u))
	rec.waitLatest(t, 2*time.Second, "first container served", func(m provider.Message) bool {
		return routerOf(m, "a-"+u) != nil && len(serversOf(m, "sa-"+u)) == 1
	})
	_, before := rec.latest()

	rl.setCut(true)
	errMsg := rec.waitLatest(t, 2*time.Second, "outage reported", func(m provider.Message) bool { return m.Err != nil })
	t.Logf("outage reported as: %v", errMsg.Err)
	for _, m := range rec.all()[before:] {
		if m.Err == nil {
			t.Fatalf("a configuration was sent after the cut: %+v", m)
		}
	}

	// A change made while the provider is blind must show up after restore.
	runEcho(t, "tollgate-itest-b-"+u, echoLabels("b-"+u, "sb-"+u, "m-"+u))
	// Let the provider fail a few reconnects, so the backoff has grown
	// (100+200+400+500 ms before the fifth attempt, at the cap).
	itest.Eventually(t, 5*time.Second, func() bool { return rl.refusedCount() >= 5 }, "provider made %d reconnect attempts, want 5", rl.refusedCount())
	for _, m := range rec.all()[before:] {
		if m.Err == nil {
			t.Fatalf("a configuration was sent while the engine was unreachable: %+v", m)
		}
	}

	rl.setCut(false)
	restored := time.Now()
	rec.waitLatest(t, 2*time.Second, "reconverged after restore", func(m provider.Message) bool {
		return routerOf(m, "a-"+u) != nil && routerOf(m, "b-"+u) != nil && len(serversOf(m, "sb-"+u)) == 1
	})
	t.Logf("reconverged %v after the relay was restored", time.Since(restored).Round(time.Millisecond))
}

func TestEngineHealthGatesTheServer(t *testing.T) {
	needEngine(t)
	u := uniq()
	rec := startProvider(t, engineConfig(""))
	router, service := "h-"+u, "sh-"+u
	runEcho(t, "tollgate-itest-health-"+u, echoLabels(router, service, "m-"+u),
		"--health-interval", "300ms", "--health-retries", "1") // the image's exec-form check; scratch has no shell
	// Another container's start proves the provider has seen the engine after
	// this one started; until the health check passes, the router is absent.
	runEcho(t, "tollgate-itest-probe-"+u, echoLabels("p-"+u, "sp-"+u, "m-"+u))
	m := rec.waitLatest(t, 2*time.Second, "probe container served", func(m provider.Message) bool { return routerOf(m, "p-"+u) != nil })
	if st := dockerCLI(t, "inspect", "-f", "{{.State.Health.Status}}", "tollgate-itest-health-"+u); st == "starting" && routerOf(m, router) != nil {
		t.Fatalf("router %s served while its container's health is %q", router, st)
	}
	rec.waitLatest(t, 3*time.Second, "healthy container served", func(m provider.Message) bool {
		return routerOf(m, router) != nil && len(serversOf(m, service)) == 1
	})
}
