package docker

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// recorder keeps what a running provider sends.
type recorder = itest.Recorder[provider.Message]

// summary shows a message in failures.
func summary(m provider.Message) string {
	var b strings.Builder
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
	p, err := New(cfg, provider.Options{Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	rec := itest.Record(t, p.Run)
	rec.Describe = summary
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
	itest.NeedDocker(t)
	u := itest.Uniq()
	rec := startProvider(t, engineConfig(""))
	router, service, mw := "r-"+u, "s-"+u, "m-"+u
	name := runEcho(t, "tollgate-itest-"+u, echoLabels(router, service, mw))
	ip := bridgeIP(t, name)
	want := net.JoinHostPort(ip, "7000")

	m := rec.WaitLatest(t, 2*time.Second, "container started", func(m provider.Message) bool {
		r := routerOf(m, router)
		s := serversOf(m, service)
		return r != nil && r.Service == service && len(s) == 1 && s[0] == want
	})
	if mwc := m.Configuration.TCP.Middlewares[mw]; mwc == nil || mwc.InFlightConn == nil || mwc.InFlightConn.Amount != 10 {
		t.Fatalf("middleware %s = %+v, want inFlightConn amount 10", mw, mwc)
	}

	itest.Docker(t, "stop", "-t", "1", name)
	rec.WaitLatest(t, 2*time.Second, "container stopped", func(m provider.Message) bool {
		return m.Err == nil && routerOf(m, router) == nil && serversOf(m, service) == nil
	})

	itest.Docker(t, "start", name)
	rec.WaitLatest(t, 2*time.Second, "container restarted", func(m provider.Message) bool {
		return routerOf(m, router) != nil && len(serversOf(m, service)) == 1
	})
}

func TestEngineBadLabelIsAProblem(t *testing.T) {
	itest.NeedDocker(t)
	u := itest.Uniq()
	rec := startProvider(t, engineConfig(""))
	runEcho(t, "tollgate-itest-good-"+u, echoLabels("r-"+u, "s-"+u, "m-"+u))
	bad := runEcho(t, "tollgate-itest-bad-"+u, map[string]string{
		"traefik.tcp.routers.bad-" + u + ".rule":                    "HostSNI(`*`)",
		"traefik.tcp.middlewares.bad-" + u + ".inflightconn.amount": "abc",
	})
	key := "traefik.tcp.middlewares.bad-" + u + ".inflightconn.amount"
	m := rec.WaitLatest(t, 2*time.Second, "bad label reported", func(m provider.Message) bool {
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
	// The label drops its middleware alone (issue 42; it used to exclude
	// the container): the container's router, which does not use it, is served.
	if routerOf(m, "bad-"+u) == nil || middlewareOf(m, "bad-"+u) != nil {
		t.Fatalf("router %+v, middleware %+v: want the router kept and the bad middleware dropped", routerOf(m, "bad-"+u), middlewareOf(m, "bad-"+u))
	}
}

func middlewareOf(m provider.Message, name string) *config.TCPMiddleware {
	if m.Configuration == nil || m.Configuration.TCP == nil {
		return nil
	}
	return m.Configuration.TCP.Middlewares[name]
}

func TestEngineOutageThroughRelay(t *testing.T) {
	itest.NeedDocker(t)
	u := itest.Uniq()
	rl := itest.NewRelay(t, itest.DockerSocket(t))
	rec := startProvider(t, engineConfig("unix://"+rl.Path))

	runEcho(t, "tollgate-itest-a-"+u, echoLabels("a-"+u, "sa-"+u, "m-"+u))
	rec.WaitLatest(t, 2*time.Second, "first container served", func(m provider.Message) bool {
		return routerOf(m, "a-"+u) != nil && len(serversOf(m, "sa-"+u)) == 1
	})
	_, before := rec.Latest()

	rl.SetCut(true)
	errMsg := rec.WaitLatest(t, 2*time.Second, "outage reported", func(m provider.Message) bool { return m.Err != nil })
	t.Logf("outage reported as: %v", errMsg.Err)
	for _, m := range rec.All()[before:] {
		if m.Err == nil {
			t.Fatalf("a configuration was sent after the cut: %+v", m)
		}
	}

	// A change made while the provider is blind must show up after restore.
	runEcho(t, "tollgate-itest-b-"+u, echoLabels("b-"+u, "sb-"+u, "m-"+u))
	// Let the provider fail a few reconnects, so the backoff has grown
	// (100+200+400+500 ms before the fifth attempt, at the cap).
	itest.Eventually(t, 5*time.Second, func() bool { return rl.Refused() >= 5 }, "provider made %d reconnect attempts, want 5", rl.Refused())
	for _, m := range rec.All()[before:] {
		if m.Err == nil {
			t.Fatalf("a configuration was sent while the engine was unreachable: %+v", m)
		}
	}

	rl.SetCut(false)
	restored := time.Now()
	rec.WaitLatest(t, 2*time.Second, "reconverged after restore", func(m provider.Message) bool {
		return routerOf(m, "a-"+u) != nil && routerOf(m, "b-"+u) != nil && len(serversOf(m, "sb-"+u)) == 1
	})
	t.Logf("reconverged %v after the relay was restored", time.Since(restored).Round(time.Millisecond))
}

func TestEngineHealthGatesTheServer(t *testing.T) {
	itest.NeedDocker(t)
	u := itest.Uniq()
	rec := startProvider(t, engineConfig(""))
	router, service := "h-"+u, "sh-"+u
	runEcho(t, "tollgate-itest-health-"+u, echoLabels(router, service, "m-"+u),
		"--health-interval", "300ms", "--health-retries", "1") // the image's exec-form check; scratch has no shell
	// Another container's start proves the provider has seen the engine after
	// this one started; until the health check passes, the router is absent.
	runEcho(t, "tollgate-itest-probe-"+u, echoLabels("p-"+u, "sp-"+u, "m-"+u))
	m := rec.WaitLatest(t, 2*time.Second, "probe container served", func(m provider.Message) bool { return routerOf(m, "p-"+u) != nil })
	if st := itest.Docker(t, "inspect", "-f", "{{.State.Health.Status}}", "tollgate-itest-health-"+u); st == "starting" && routerOf(m, router) != nil {
		t.Fatalf("router %s served while its container's health is %q", router, st)
	}
	rec.WaitLatest(t, 3*time.Second, "healthy container served", func(m provider.Message) bool {
		return routerOf(m, router) != nil && len(serversOf(m, service)) == 1
	})
}

// An engine reached over tcp:// with TLS and HTTP basic authentication
// (Traefik's providers.docker.tls and username/password): a relay in front
// of the real socket terminates TLS and records each connection's first
// Authorization header. The containers are read; without the CA the
// certificate is refused, and the error says so.
func TestEngineOverTLSWithAuth(t *testing.T) {
	itest.NeedDocker(t)
	sock := itest.DockerSocket(t)
	cert, _ := itest.SelfSigned(t, "127.0.0.1")
	certFile, _ := itest.WritePEM(t, t.TempDir(), cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var auths []string
	itest.Serve(t, ln, func(c net.Conn) {
		br := bufio.NewReader(c)
		var head []byte
		for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			head = append(head, line...)
			if h, ok := bytes.CutPrefix(line, []byte("Authorization: ")); ok {
				mu.Lock()
				auths = append(auths, strings.TrimSpace(string(h)))
				mu.Unlock()
			}
		}
		up, err := net.Dial("unix", sock)
		if err != nil {
			return
		}
		defer up.Close()
		if _, err := up.Write(head); err != nil {
			return
		}
		go func() { _, _ = io.Copy(up, br) }()
		_, _ = io.Copy(c, up)
	})

	u := itest.Uniq()
	cfg := engineConfig("tcp://" + ln.Addr().String())
	cfg.TLS = &config.KVClientTLS{CA: certFile}
	cfg.Username, cfg.Password = "ops", "secret"
	rec := startProvider(t, cfg)
	runEcho(t, "tollgate-itest-tls-"+u, echoLabels("r-"+u, "s-"+u, "m-"+u))
	rec.WaitLatest(t, 5*time.Second, "the container read over TLS", func(m provider.Message) bool {
		return routerOf(m, "r-"+u) != nil && len(serversOf(m, "s-"+u)) == 1
	})
	mu.Lock()
	got := append([]string(nil), auths...)
	mu.Unlock()
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:secret"))
	if len(got) == 0 || slices.ContainsFunc(got, func(a string) bool { return a != want }) {
		t.Errorf("Authorization headers %q, want each %q", got, want)
	}

	bad := engineConfig("tcp://" + ln.Addr().String())
	bad.TLS = &config.KVClientTLS{}
	rec = startProvider(t, bad)
	rec.WaitLatest(t, 5*time.Second, "an error naming the certificate", func(m provider.Message) bool {
		return m.Err != nil && strings.Contains(m.Err.Error(), "certificate")
	})
}
