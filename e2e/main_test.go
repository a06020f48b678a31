package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

const designYAML = "tcp:\n" +
	"  routers:\n" +
	"    my-router:\n" +
	"      rule: \"HostSNI(`*`)\"\n" +
	"      service: my-service\n" +
	"      middlewares:\n" +
	"        - test-inflightconn@file\n" +
	"  middlewares:\n" +
	"    test-inflightconn:\n" +
	"      inFlightConn:\n" +
	"        amount: 10\n" +
	"  services:\n" +
	"    my-service:\n" +
	"      loadBalancer:\n" +
	"        servers:\n" +
	"          - address: \"127.0.0.1:4000\"\n"

// The TOML form: the middleware block of docs/reference/middlewares/inflightconn.md
// verbatim, plus the same router and service.
const designTOML = "[tcp.routers.my-router]\n" +
	"  rule = \"HostSNI(`*`)\"\n" +
	"  service = \"my-service\"\n" +
	"  middlewares = [\"test-inflightconn@file\"]\n" +
	"\n" +
	"[tcp.middlewares]\n" +
	"  [tcp.middlewares.test-inflightconn.inFlightConn]\n" +
	"    amount = 10\n" +
	"\n" +
	"[[tcp.services.my-service.loadBalancer.servers]]\n" +
	"  address = \"127.0.0.1:4000\"\n"

// The YAML and TOML examples users copy work unchanged: 15 held from one IP
// -> exactly 10 forwarded; another IP gets its own 10; after the first IP
// closes, it gets 10 again.
func TestDesignExamples(t *testing.T) {
	itest.EchoServer(t, "127.0.0.1:4000")
	for _, tc := range []struct{ name, file, content string }{
		{"yaml", "dynamic.yml", designYAML},
		{"toml", "dynamic.toml", designTOML},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tc.file)
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			ep := itest.FreeAddr(t)
			p := itest.StartTollgate(t, "--entryPoints.tcp.address="+ep, "--providers.file.filename="+path, "--log.level=ERROR")
			itest.Eventually(t, 5*time.Second, func() bool {
				return p.Rawdata(t).Routers["my-router@file"].Status == "enabled"
			}, "my-router@file not enabled")

			a := itest.Hold(t, 15, "127.0.0.2", ep)
			if len(a) != 10 {
				t.Fatalf("127.0.0.2: %d of 15 forwarded, want 10", len(a))
			}
			b := itest.Hold(t, 15, "127.0.0.3", ep)
			if len(b) != 10 {
				t.Fatalf("127.0.0.3: %d of 15 forwarded, want 10", len(b))
			}
			for _, c := range a {
				c.Close()
			}
			itest.Eventually(t, 5*time.Second, func() bool {
				live := p.Rawdata(t).Middlewares["test-inflightconn@file"].InFlight
				return live != nil && live.InFlight == 10
			}, "127.0.0.2's connections were not released")
			again := itest.Hold(t, 15, "127.0.0.2", ep)
			if len(again) != 10 {
				t.Fatalf("127.0.0.2 after closing: %d of 15 forwarded, want 10", len(again))
			}
		})
	}
}

// A file that stops parsing keeps the last good configuration serving and
// reports the error; fixing it applies at once (fsnotify), and so does SIGHUP.
func TestFileProviderBadFileKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dyn.yml")
	be := itest.EchoServer(t, "")
	write := func(content string) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	good := func(amount int) string {
		return fmt.Sprintf("tcp:\n  routers:\n    r:\n      rule: \"HostSNI(`*`)\"\n      service: s\n      middlewares: [m]\n  middlewares:\n    m:\n      inFlightConn:\n        amount: %d\n  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: %q\n", amount, be)
	}
	write(good(2))
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.tcp.address="+ep, "--providers.file.filename="+path)
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers["r@file"].Status == "enabled" }, "r@file not enabled")

	write("tcp:\n  routers:\n    r:\n      rulez: oops\n")
	itest.Eventually(t, 5*time.Second, func() bool {
		resp, err := http.Get("http://" + p.API + "/api/providers")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "rulez") && strings.Contains(string(body), `"error"`)
	}, "the parse error (naming the key) did not show in /api/providers")
	if got := len(itest.Hold(t, 3, "127.0.0.20", ep)); got != 2 {
		t.Fatalf("with a broken file: %d of 3 forwarded, want 2 (last good config, amount 2)", got)
	}

	write(good(3))
	itest.Eventually(t, 5*time.Second, func() bool {
		return p.Rawdata(t).AmountOf("m@file") == 3
	}, "the fixed file was not applied")
	if got := len(itest.Hold(t, 3, "127.0.0.21", ep)); got != 3 {
		t.Fatalf("after the fix: %d of 3 forwarded, want 3", got)
	}
}

// Bad static configuration exits non-zero with one line naming the flag and value.
func TestStaticConfigErrors(t *testing.T) {
	busy := itest.EchoServer(t, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--entryPoints.db.adress=:5432"}, `--entryPoints.db.adress=":5432": unknown option "adress"`},
		{[]string{"--entryPoints.db.address=:99999"}, `entryPoints.db.address=":99999"`},
		{[]string{"--entryPoints.db.address=1.2.3:80"}, `entryPoints.db.address="1.2.3:80"`},
		{[]string{"--entryPoints.db.address=" + busy}, `entry point "db" cannot listen on ` + busy},
		{[]string{"--entryPoints.db.address=127.0.0.1:0", "--providers.providersThrottleDuration=abc"}, `--providers.providersThrottleDuration="abc"`},
		{[]string{"--configFile=/nonexistent/tollgate.toml"}, `--configFile="/nonexistent/tollgate.toml"`},
		{[]string{"--entryPoints.db.address=127.0.0.1:0", "--log.level=LOUD"}, `log.level="LOUD"`},
		{[]string{"--entryPoints.db.address=127.0.0.1:0", "--tcpServersTransport.tls.rootCAs=/nonexistent/ca.pem"}, `tcpServersTransport.tls.rootCAs[0] "/nonexistent/ca.pem": no such file`},
		{[]string{"--entryPoints.db.address=127.0.0.1:0", "--tcpServersTransport.dialTimeout=-1s"}, `tcpServersTransport: dialTimeout -1s is negative`},
		// A compose command written for Traefik's image: the leading word is dropped.
		{[]string{"traefik", "--entryPoints.db.adress=:5432"}, `--entryPoints.db.adress=":5432": unknown option "adress"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.Command(itest.Binary(t), tc.args...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("exit 0, want non-zero; output %s", out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("output %q, want one line containing %q", out, tc.want)
			}
		})
	}
}

// A misspelled variable root configures nothing, and paerser skips it
// without a word: when the configuration is then incomplete, the error says
// which variable was not read.
func TestUnreadVariableNamedInStartError(t *testing.T) {
	cmd := exec.Command(itest.Binary(t))
	cmd.Env = itest.Environ("TOLLGATE_ENTRYPOINT_DB_ADDRESS=127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	want := "no entry point configured: set --entryPoints.<name>.address=[host]:port; TOLLGATE_ENTRYPOINT_DB_ADDRESS names no option"
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("%v %s, want a failure saying %q", err, out, want)
	}
}

func TestHelpListsFlags(t *testing.T) {
	out, err := exec.Command(itest.Binary(t), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, f := range []string{
		"--entrypoints.<name>.address", "--entrypoints.<name>.proxyprotocol.trustedips",
		"--entrypoints.<name>.transport.respondingtimeouts.readtimeout",
		"--entrypoints.<name>.transport.lifecycle.gracetimeout", "--providers.providersthrottleduration",
		"--providers.file.filename", "--providers.file.directory", "--providers.file.watch",
		"--api.address", "--metrics.prometheus", "--log.level", "--log.format", "--configfile",
	} {
		if !strings.Contains(strings.ToLower(string(out)), f) {
			t.Errorf("--help does not list %s", f)
		}
	}
}

// Env vars with the TOLLGATE_ prefix and a YAML --configFile configure
// tollgate like flags do.
func TestEnvAndConfigFile(t *testing.T) {
	be := itest.EchoServer(t, "")
	dir := t.TempDir()
	dyn := echoRouteFile(t, dir, be, "")

	ep, api := itest.FreeAddr(t), itest.FreeAddr(t)
	cmd := exec.Command(itest.Binary(t))
	cmd.Env = itest.Environ("TOLLGATE_ENTRYPOINTS_DB_ADDRESS="+ep, "TOLLGATE_PROVIDERS_FILE_FILENAME="+dyn, "TOLLGATE_API_ADDRESS="+api)
	runUntilForwarded(t, cmd, ep, api)

	static := filepath.Join(dir, "tollgate.yml")
	ep, api = itest.FreeAddr(t), itest.FreeAddr(t)
	_ = os.WriteFile(static, []byte(fmt.Sprintf("entryPoints:\n  db:\n    address: %q\nproviders:\n  file:\n    filename: %q\napi:\n  address: %q\n", ep, dyn, api)), 0o644)
	runUntilForwarded(t, exec.Command(itest.Binary(t), "--configFile="+static), ep, api)
}

// A Traefik static configuration of a TCP setup starts unchanged: the global
// and ping options, api.dashboard (served at /dashboard/), and api.insecure,
// which serves the API on the traefik entry point's address (that entry
// point proxies nothing); log.filePath receives the log.
func TestTraefikStaticConfigStarts(t *testing.T) {
	be := itest.EchoServer(t, "")
	dir := t.TempDir()
	dyn := echoRouteFile(t, dir, be, "db")
	ep, api := itest.FreeAddr(t), itest.FreeAddr(t)
	logFile := filepath.Join(dir, "tollgate.log")
	cmd := exec.Command(itest.Binary(t), "--global.checkNewVersion=false", "--global.sendAnonymousUsage=false",
		"--api.dashboard=true", "--api.insecure=true", "--entryPoints.traefik.address="+api, "--entryPoints.db.address="+ep,
		"--ping", "--providers.file.filename="+dyn, "--log.level=INFO", "--log.format=json", "--log.filePath="+logFile, "--accessLog=true", "--accessLog.format=json")
	// A variable beside flags is not read (sources do not mix): logged.
	cmd.Env = itest.Environ("TRAEFIK_LOG_LEVEL=DEBUG")
	stop := startForwarding(t, cmd, ep)
	defer stop()
	for path, want := range map[string]string{"/ping": "OK", "/api/rawdata": `"tcpRouters"`, "/dashboard/": "<title>tollgate"} {
		resp, err := http.Get("http://" + api + path)
		if err != nil {
			t.Fatalf("%s on the traefik entry point's address: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %.200s, want 200 with %s", path, resp.StatusCode, b, want)
		}
	}
	itest.Eventually(t, 5*time.Second, func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), "api.insecure") &&
			strings.Contains(string(b), `"variable":"TRAEFIK_LOG_LEVEL"`) &&
			strings.Contains(string(b), `"message":"not read: the static configuration comes from flags`)
	}, "log.filePath never received the start lines")
	// The health check, given the same options, asks the traefik entry point's address.
	hc, err := exec.Command(itest.Binary(t), "healthcheck", "--api.insecure=true", "--entryPoints.traefik.address="+api, "--ping").CombinedOutput()
	if err != nil || !strings.Contains(string(hc), "OK") {
		t.Errorf("healthcheck with api.insecure: %v %s", err, hc)
	}
}

// A Traefik static file with its HTTP settings (an entry point's http
// redirections and tls, http2, metrics buckets), a UDP entry point and
// access log fields starts: each ignored setting is said once at start, the
// UDP entry point is not listened on, an address's "/tcp" is read, and
// accessLog.fields.names.ClientHost=drop keeps client addresses out of the
// access log.
func TestTraefikStaticFileWithHTTPSettings(t *testing.T) {
	be := itest.EchoServer(t, "")
	dir := t.TempDir()
	dyn := echoRouteFile(t, dir, be, "db")
	ep, web := itest.FreeAddr(t), itest.FreeAddr(t)
	logFile, accessFile := filepath.Join(dir, "tollgate.log"), filepath.Join(dir, "access.log")
	static := filepath.Join(dir, "traefik.yml")
	if err := os.WriteFile(static, []byte(fmt.Sprintf(`log:
  level: INFO
  format: json
  filePath: %q
accessLog:
  filePath: %q
  bufferingSize: 100
  fields:
    names:
      ClientHost: drop
metrics:
  prometheus:
    addRoutersLabels: true
    buckets: [0.1, 0.3, 1.2, 5.0]
entryPoints:
  web:
    address: %q
    http:
      redirections:
        entryPoint:
          to: db
          scheme: https
  db:
    address: "%s/tcp"
    http:
      tls:
        certResolver: le
    http2:
      maxConcurrentStreams: 250
  dns:
    address: "127.0.0.1:%d/udp"
providers:
  kubernetesIngress:
    allowEmptyServices: true
  file:
    filename: %q
`, logFile, accessFile, web, ep, itest.FreePort(t), dyn)), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := startForwarding(t, exec.Command(itest.Binary(t), "--configFile="+static), ep)
	// web redirects to db's port, as Traefik's entry point redirection.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + web + "/x?y=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, port, _ := net.SplitHostPort(ep)
	if want := "https://127.0.0.1:" + port + "/x?y=1"; resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != want {
		t.Errorf("GET on web: %s to %q, want 301 to %s", resp.Status, resp.Header.Get("Location"), want)
	}
	stop()
	b, _ := os.ReadFile(logFile)
	for _, want := range []string{
		`entryPoints.web.http.redirections: plain HTTP requests that no TCP router takes are redirected to https on port `,
		// One warning per Traefik option that changes nothing here
		// (config.TraefikOptions), naming it as written.
		`entryPoints.db.http.tls.certResolver: it configures the HTTP routers of the entry point`,
		`entryPoints.db.http2.maxConcurrentStreams: HTTP/2 settings`,
		`entryPoints.dns: a UDP entry point`,
		`metrics.prometheus.buckets`,
		`providers.kubernetesIngress.allowEmptyServices: this provider's resources route HTTP only`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the log does not say %q: %s", want, b)
		}
	}
	if strings.Contains(string(b), `"entrypoint":"dns","address"`) {
		t.Errorf("the UDP entry point is listened on: %s", b)
	}
	a, _ := os.ReadFile(accessFile)
	if !strings.Contains(string(a), `"router":"r@file"`) || strings.Contains(string(a), "client_ip") || strings.Contains(string(a), "127.0.0.1\"") {
		t.Errorf("access log %s: want lines without the client's address", a)
	}
}

// The arguments of Traefik's Helm chart: /ping on the traefik entry point
// and /metrics on the metrics one (both ":port/tcp"), which proxy nothing,
// beside a proxying entry point; the Ingress provider is accepted; the
// health check finds /ping there. When the traefik entry point takes the
// admin API's default port (the chart's :8080), one listener serves both,
// the API to loopback clients (api.LocalOnly).
func TestTraefikHelmChartArguments(t *testing.T) {
	be := itest.EchoServer(t, "")
	dir := t.TempDir()
	dyn := echoRouteFile(t, dir, be, "web")
	traefikEP, metricsEP, web, apiAddr := itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t)
	chart := func(traefik string, extra ...string) []string {
		return append([]string{"--global.checknewversion", "--global.sendanonymoususage",
			"--entryPoints.metrics.address=" + metricsEP + "/tcp", "--entryPoints.traefik.address=" + traefik + "/tcp",
			"--entryPoints.web.address=" + web + "/tcp", "--api.dashboard=true", "--ping=true",
			"--metrics.prometheus=true", "--metrics.prometheus.entrypoint=metrics", "--providers.kubernetesingress",
			"--providers.file.filename=" + dyn, "--log.level=INFO"}, extra...)
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	args := chart(traefikEP, "--api.address="+apiAddr)
	stop := startForwarding(t, exec.Command(itest.Binary(t), args...), web)
	if code, body := get("http://" + traefikEP + "/ping"); code != 200 || body != "OK" {
		t.Errorf("/ping on the traefik entry point: %d %q", code, body)
	}
	if code, body := get("http://" + metricsEP + "/metrics"); code != 200 || !strings.Contains(body, "tollgate_") {
		t.Errorf("/metrics on the metrics entry point: %d %.100q", code, body)
	}
	if code, _ := get("http://" + apiAddr + "/api/rawdata"); code != 200 {
		t.Errorf("the admin API on api.address: %d", code)
	}
	hc, err := exec.Command(itest.Binary(t), append([]string{"healthcheck"}, args...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(hc), "OK") {
		t.Errorf("healthcheck with the chart's arguments: %v %s", err, hc)
	}
	stop()

	// The chart's traefik entry point on the API's default port.
	ln, err := net.Listen("tcp", config.DefaultAPIAddress)
	itest.Need(t, "the default admin address "+config.DefaultAPIAddress+" (free, for the collision with it)", err)
	ln.Close()
	stop = startForwarding(t, exec.Command(itest.Binary(t), chart(config.DefaultAPIAddress)...), web)
	defer stop()
	if code, body := get("http://" + config.DefaultAPIAddress + "/ping"); code != 200 || body != "OK" {
		t.Errorf("/ping on the traefik entry point at the default admin address: %d %q", code, body)
	}
	if code, body := get("http://" + config.DefaultAPIAddress + "/api/rawdata"); code != 200 || !strings.Contains(body, "tcpRouters") {
		t.Errorf("the admin API beside it, to a loopback client: %d %.100q", code, body)
	}
}

func runUntilForwarded(t *testing.T, cmd *exec.Cmd, ep, api string) {
	t.Helper()
	startForwarding(t, cmd, ep)()
}

// startForwarding starts tollgate's cmd and waits until it forwards a
// connection on ep; stop ends it (SIGTERM) and waits.
func startForwarding(t *testing.T, cmd *exec.Cmd, ep string) (stop func()) {
	t.Helper()
	out := &itest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	ok := false
	defer func() {
		if !ok {
			stop()
		}
	}()
	itest.Eventually(t, 10*time.Second, func() bool {
		held := itest.Hold(t, 1, "127.0.0.1", ep)
		for _, c := range held {
			c.Close() // closed now, so SIGTERM does not wait out the drain
		}
		return len(held) == 1
	}, "never forwarded on %s (output: %s)", ep, out)
	ok = true
	return stop
}

// SIGTERM stops accepting, drains, and exits 0 within the grace timeout.
func TestGracefulShutdown(t *testing.T) {
	be := itest.EchoServer(t, "")
	dir := t.TempDir()
	dyn := echoRouteFile(t, dir, be, "")
	ep, api := itest.FreeAddr(t), itest.FreeAddr(t)
	cmd := exec.Command(itest.Binary(t), "--entryPoints.db.address="+ep, "--entryPoints.db.transport.lifeCycle.graceTimeOut=300ms", "--providers.file.filename="+dyn, "--api.address="+api)
	out := &itest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	itest.Eventually(t, 10*time.Second, func() bool { held = itest.Hold(t, 1, "127.0.0.1", ep); return len(held) == 1 }, "never forwarded")
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, out.String())
		}
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("did not exit within 5 s of SIGTERM\n%s", out.String())
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("exited after %s with a connection open: did not drain for the 300ms grace", d)
	}
	_ = held[0].SetReadDeadline(time.Now().Add(time.Second))
	if _, err := held[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("held connection still open after exit")
	}
}

// lifeCycle.requestAcceptGraceTimeout: after SIGTERM the entry point
// accepts and forwards new connections for that long, then stops accepting
// and the process exits.
func TestRequestAcceptGraceTimeout(t *testing.T) {
	be := itest.EchoServer(t, "")
	dir := t.TempDir()
	dyn := echoRouteFile(t, dir, be, "")
	ep := itest.FreeAddr(t)
	cmd := exec.Command(itest.Binary(t), "--entryPoints.db.address="+ep, "--entryPoints.db.transport.lifeCycle.requestAcceptGraceTimeout=3s",
		"--entryPoints.db.transport.lifeCycle.graceTimeOut=100ms", "--providers.file.filename="+dyn, "--log.level=INFO")
	out := &itest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	forwarded := func() bool {
		held := itest.Hold(t, 1, "127.0.0.1", ep)
		for _, c := range held {
			c.Close()
		}
		return len(held) == 1
	}
	itest.Eventually(t, 10*time.Second, forwarded, "never forwarded")
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	itest.Eventually(t, 5*time.Second, func() bool { return strings.Contains(out.String(), "still accepting") }, "no line says it still accepts:\n%s", out)
	if !forwarded() || time.Since(start) > 3*time.Second {
		t.Fatalf("a connection %v after SIGTERM was not forwarded within the 3s requestAcceptGraceTimeout\n%s", time.Since(start), out)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, out)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("did not exit\n%s", out)
	}
	if d := time.Since(start); d < 2900*time.Millisecond {
		t.Fatalf("exited %v after SIGTERM, before the 3s requestAcceptGraceTimeout", d)
	}
}

// --accessLog.filePath: one JSON line per closed connection, none for a
// rejection; --metrics.prometheus counts the router's bytes.
func TestAccessLogAndRouterMetrics(t *testing.T) {
	dir := t.TempDir()
	be := itest.EchoServer(t, "")
	dyn := filepath.Join(dir, "dynamic.yml")
	conf := "tcp:\n  routers:\n    r:\n      rule: \"HostSNI(`*`)\"\n      service: s\n      middlewares: [one]\n" +
		"  middlewares:\n    one:\n      inFlightConn:\n        amount: 1\n" +
		"  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: \"" + be + "\"\n"
	if err := os.WriteFile(dyn, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "access.log")
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.tcp.address="+ep, "--providers.file.filename="+dyn,
		"--accessLog.filePath="+logPath, "--metrics.prometheus")
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers["r@file"].Status == "enabled" }, "router r@file enabled")

	held := itest.Hold(t, 2, "127.0.0.1", ep) // amount 1: one forwarded, one rejected
	if len(held) != 1 {
		t.Fatalf("%d of 2 connections forwarded with amount 1", len(held))
	}
	c := held[0]
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	c.Close()

	var lines []string
	itest.Eventually(t, 5*time.Second, func() bool {
		b, _ := os.ReadFile(logPath)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		return len(b) > 0
	}, "an access log line in %s", logPath)
	time.Sleep(50 * time.Millisecond) // a second line, if one were wrongly written, would be there by now
	b, _ := os.ReadFile(logPath)
	lines = strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d access log lines, want 1 (rejections are not logged):\n%s", len(lines), b)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatalf("not JSON: %q", lines[0])
	}
	for k, want := range map[string]any{"entrypoint": "tcp", "router": "r@file", "service": "s@file", "server": be,
		"client_ip": "127.0.0.1", "bytes_in": 6.0, "bytes_out": 6.0, "end": "closed"} {
		if m[k] != want {
			t.Errorf("access log %s = %v, want %v (line %s)", k, m[k], want, lines[0])
		}
	}
	for _, k := range []string{"time", "duration_ms", "client_port"} {
		if _, ok := m[k]; !ok {
			t.Errorf("access log line lacks %s: %s", k, lines[0])
		}
	}
	resp, err := http.Get("http://" + p.API + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`tollgate_router_bytes_in_total{router="r@file"} 6`,
		`tollgate_router_bytes_out_total{router="r@file"} 6`,
		`tollgate_router_connection_duration_seconds_count{router="r@file"} 1`,
		`tollgate_middleware_connections_total{middleware="one@file",reason="inflightconn_limit",result="rejected"} 1`,
	} {
		if !bytes.Contains(body, []byte(line)) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

// Log lines about an entry point, router, service, middleware or provider
// carry its name as a field, in JSON and in console format.
func TestLogLinesNameTheirComponent(t *testing.T) {
	dir := t.TempDir()
	be := itest.EchoServer(t, "")
	dyn := filepath.Join(dir, "dynamic.yml")
	conf := "tcp:\n  routers:\n    ok:\n      rule: \"HostSNI(`*`)\"\n      service: s\n      middlewares: [nobody]\n" +
		"    broken:\n      rule: \"HostSNI(`a.test`)\"\n      service: s\n" +
		"  middlewares:\n    nobody:\n      inFlightConn:\n        amount: 0\n" +
		"  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: \"" + be + "\"\n"
	if err := os.WriteFile(dyn, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.tcp.address="+ep, "--providers.file.filename="+dyn)
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers["broken@file"].Status == "disabled" }, "router broken@file disabled")
	if len(itest.Hold(t, 1, "127.0.0.1", ep)) != 0 {
		t.Fatal("amount 0 forwarded a connection")
	}
	_ = p.Signal(syscall.SIGHUP)
	want := map[string]string{ // message prefix -> field that must name the component
		"entry point listening":   "entrypoint",
		"router disabled":         "router",
		"middleware warning":      "middleware",
		"Connection rejected":     "middleware",
		"SIGHUP: reloading files": "provider",
	}
	seen := map[string]bool{}
	itest.Eventually(t, 5*time.Second, func() bool {
		for _, line := range strings.Split(p.Out.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			msg, _ := m["message"].(string)
			for prefix, field := range want {
				if strings.HasPrefix(msg, prefix) {
					if s, _ := m[field].(string); s == "" {
						t.Fatalf("log line %q has no %s field", line, field)
					}
					seen[prefix] = true
				}
			}
		}
		return len(seen) == len(want)
	}, "log lines %v (saw %v)", want, seen)
}

func TestConsoleLogFormat(t *testing.T) {
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.tcp.address="+ep, "--log.format=console")
	itest.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(p.Out.String(), "entry point listening") && strings.Contains(p.Out.String(), "entrypoint=tcp")
	}, "a console line naming the entry point: %s", p.Out.String())
	if strings.Contains(p.Out.String(), `{"level"`) {
		t.Fatalf("console format wrote JSON: %s", p.Out.String())
	}
}

func TestAccessLogBadPath(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "missing", "access.log")
	cmd := exec.Command(itest.Binary(t), "--entryPoints.tcp.address="+itest.FreeAddr(t), "--api.address="+itest.FreeAddr(t), "--accessLog.filePath="+bad)
	out, err := cmd.CombinedOutput()
	if itest.ExitCode(err) != 1 || !strings.Contains(string(out), `accessLog.filePath="`+bad+`"`) {
		t.Fatalf("exit %d, %s: want 1 naming accessLog.filePath", itest.ExitCode(err), out)
	}
}

// echoRouteFile writes dir/dyn.yml, a dynamic file routing every connection
// (on entry point ep, or on every one when ep is empty) to the server at
// addr, and returns its path.
func echoRouteFile(t *testing.T, dir, addr, ep string) string {
	t.Helper()
	eps := ""
	if ep != "" {
		eps = "      entryPoints: [" + ep + "]\n"
	}
	dyn := filepath.Join(dir, "dyn.yml")
	content := fmt.Sprintf("tcp:\n  routers:\n    r:\n%s      rule: \"HostSNI(`*`)\"\n      service: s\n  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: %q\n", eps, addr)
	if err := os.WriteFile(dyn, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dyn
}
