package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// bannerServer answers every connection with name and a newline.
func bannerServer(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(name + "\n"))
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// banner dials ep and returns the first line the backend sends, or "".
func banner(ep string) string {
	c, err := net.DialTimeout("tcp", ep, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// configEndpoint is providers.http's endpoint: a real HTTP server on
// loopback serving the body the test sets, or a status.
type configEndpoint struct {
	mu       sync.Mutex
	body     string
	status   int
	requests int
}

func (e *configEndpoint) set(body string, status int) {
	e.mu.Lock()
	e.body, e.status = body, status
	e.mu.Unlock()
}

func (e *configEndpoint) asked() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requests
}

func (e *configEndpoint) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requests++
	if e.status != http.StatusOK {
		http.Error(w, "down", e.status)
		return
	}
	_, _ = w.Write([]byte(e.body))
}

// providers.http with the real binary: the configuration the endpoint
// serves (JSON) routes TCP; a change is routed within a poll interval (and
// the throttle); while the endpoint fails (500, then a body that does not
// decode) the last good configuration keeps routing and the log has one
// error for the outage; when it answers again its configuration applies.
func TestHTTPProviderRoutesAndSurvivesOutages(t *testing.T) {
	a, b := bannerServer(t, "A"), bannerServer(t, "B")
	routesTo := func(addr string) string {
		return fmt.Sprintf(`{"tcp":{"routers":{"db":{"entryPoints":["db"],"rule":"HostSNI(`+"`*`"+`)","service":"s"}},`+
			`"services":{"s":{"loadBalancer":{"servers":[{"address":%q}]}}}}}`, addr)
	}
	e := &configEndpoint{}
	e.set(routesTo(a), http.StatusOK)
	srv := httptest.NewServer(e)
	defer srv.Close()
	ep := itest.FreeAddr(t)
	const interval = 300 * time.Millisecond
	cmd := exec.Command(itest.Binary(t), "--entryPoints.db.address="+ep, "--providers.http.endpoint="+srv.URL,
		"--providers.http.pollInterval="+interval.String(), "--providers.http.headers.X-Tenant=t1", "--log.format=json") // JSON lines, which the test reads
	out := &itest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()

	itest.Eventually(t, 10*time.Second, func() bool { return banner(ep) == "A" }, "the endpoint's configuration is not routed (output: %s)", out)
	start := time.Now()
	e.set(routesTo(b), http.StatusOK)
	itest.Eventually(t, 5*time.Second, func() bool { return banner(ep) == "B" }, "the change is not routed (output: %s)", out)
	if d := time.Since(start); d > interval+time.Second {
		t.Errorf("the change took %s with a %s poll interval", d, interval)
	}

	e.set(routesTo(a), http.StatusInternalServerError)
	from := e.asked()
	itest.Eventually(t, 10*time.Second, func() bool { return e.asked() >= from+5 }, "the endpoint is not polled")
	e.set(`{"tcp": {"routers": "not an object"}}`, http.StatusOK) // the same outage
	from = e.asked()
	itest.Eventually(t, 10*time.Second, func() bool { return e.asked() >= from+4 }, "the endpoint is not polled")
	if got := banner(ep); got != "B" {
		t.Errorf("during the outage: routed to %q, want the last good configuration's B", got)
	}
	errs := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, `"level":"error"`) && strings.Contains(line, srv.URL) {
			errs++
		}
	}
	if errs != 1 {
		t.Errorf("%d error lines about the endpoint for one outage, want 1: %s", errs, out)
	}
	if !strings.Contains(out.String(), "500 Internal Server Error") {
		t.Errorf("the error does not say what the endpoint answered: %s", out)
	}

	e.set(routesTo(a), http.StatusOK)
	itest.Eventually(t, 5*time.Second, func() bool { return banner(ep) == "A" }, "the configuration after the outage is not routed (output: %s)", out)
}

// Traefik's providers that tollgate does not implement and that can carry
// TCP routes are refused at start, naming them, however they are given (a
// flag, an option under one, a variable, a file); kubernetesIngress (HTTP
// routes only) starts with a warning (TestTraefikStaticFile).
func TestRefusedProviders(t *testing.T) {
	ep := itest.FreeAddr(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "traefik.yml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("entryPoints:\n  db:\n    address: %q\nproviders:\n  nomad:\n    endpoint:\n      address: http://127.0.0.1:4646\n", ep)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"kubernetesGateway", []string{"--providers.kubernetesGateway=true"}, nil, "providers.kubernetesGateway: Traefik's kubernetesGateway provider is refused: tollgate does not read the Kubernetes Gateway API (TCPRoute, TLSRoute)"},
		{"kubernetesGateway option", []string{"--providers.kubernetesgateway.experimentalChannel=true"}, nil, "providers.kubernetesGateway: Traefik's kubernetesGateway provider is refused"},
		{"nomad", []string{"--providers.nomad=true"}, nil, "providers.nomad: Traefik's nomad provider is refused: tollgate has no Nomad provider"},
		{"nomad option", []string{"--providers.nomad.endpoint.address=http://127.0.0.1:4646"}, nil, "flag --providers.nomad.endpoint.address=\"http://127.0.0.1:4646\": providers.nomad: Traefik's nomad provider is refused"},
		{"ecs", []string{"--providers.ecs.clusters=prod"}, nil, "providers.ecs: Traefik's ecs provider is refused"},
		{"rest", []string{"--providers.rest.insecure=true"}, nil, "providers.rest: Traefik's rest provider is refused"},
		{"plugin", []string{"--providers.plugin.demo.pollInterval=2s"}, nil, "providers.plugin: Traefik's plugin provider is refused"},
		{"variable", nil, []string{"TOLLGATE_ENTRYPOINTS_DB_ADDRESS=" + ep, "TOLLGATE_PROVIDERS_NOMAD_ENDPOINT_ADDRESS=http://127.0.0.1:4646"}, "environment variable TOLLGATE_PROVIDERS_NOMAD_ENDPOINT_ADDRESS=\"http://127.0.0.1:4646\": providers.nomad: Traefik's nomad provider is refused"},
		{"file", []string{"--configFile=" + file}, nil, "providers.nomad: Traefik's nomad provider is refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.env == nil && !strings.HasPrefix(args[0], "--configFile") {
				args = append([]string{"--entryPoints.db.address=" + ep}, args...)
			}
			// A tollgate that starts is stopped after a while: a
			// refusal comes at once.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, itest.Binary(t), args...)
			cmd.Env = append(os.Environ(), tc.env...)
			b, err := cmd.CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("tollgate started: %s", b)
			}
			if !strings.Contains(string(b), tc.want) {
				t.Errorf("output %q, want %q", b, tc.want)
			}
		})
	}
}
