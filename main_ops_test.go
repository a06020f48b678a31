package main

import (
	"bytes"
	"encoding/json"
	"errors"
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

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// --accessLog.filePath: one JSON line per closed connection, none for a
// rejection; --metrics.prometheus counts the router's bytes.
func TestAccessLogAndRouterMetrics(t *testing.T) {
	dir := t.TempDir()
	be := freeEcho(t)
	dyn := filepath.Join(dir, "dynamic.yml")
	conf := "tcp:\n  routers:\n    r:\n      rule: \"HostSNI(`*`)\"\n      service: s\n      middlewares: [one]\n" +
		"  middlewares:\n    one:\n      inFlightConn:\n        amount: 1\n" +
		"  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: \"" + be + "\"\n"
	if err := os.WriteFile(dyn, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "access.log")
	ep := freePort(t)
	p := start(t, "--entryPoints.tcp.address="+ep, "--providers.file.filename="+dyn,
		"--accessLog.filePath="+logPath, "--metrics.prometheus")
	itest.Eventually(t, 5*time.Second, func() bool { return p.status(t, "tcpRouters", "r@file") == "enabled" }, "router r@file enabled")

	held := hold(t, 2, "127.0.0.1", ep) // amount 1: one forwarded, one rejected
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
	resp, err := http.Get("http://" + p.api + "/metrics")
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

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// tollgate healthcheck: 0 against a running admin API (flag or TOLLGATE_
// variable), 1 when nothing answers.
func TestHealthcheckCommand(t *testing.T) {
	p := start(t, "--entryPoints.tcp.address="+freePort(t))
	bin := itest.Binary(t)

	out, err := exec.Command(bin, "healthcheck", "--api.address="+p.api).CombinedOutput()
	if exitCode(err) != 0 || !strings.Contains(string(out), "OK") {
		t.Fatalf("healthcheck against a running tollgate: exit %d, %s", exitCode(err), out)
	}
	_, port, _ := net.SplitHostPort(p.api)
	cmd := exec.Command(bin, "healthcheck")
	cmd.Env = append(os.Environ(), "TOLLGATE_API_ADDRESS=:"+port) // a listen address: empty host means loopback
	if out, err := cmd.CombinedOutput(); exitCode(err) != 0 {
		t.Fatalf("healthcheck with TOLLGATE_API_ADDRESS: exit %d, %s", exitCode(err), out)
	}
	dead := freePort(t)
	out, err = exec.Command(bin, "healthcheck", "--api.address="+dead).CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), dead) {
		t.Fatalf("healthcheck against nothing: exit %d, %s (want 1 naming %s)", exitCode(err), out, dead)
	}
}

// tollgate check: JSON on stdout, one located line per problem on stderr,
// exit 1 only when a router would be disabled.
func TestCheckCommand(t *testing.T) {
	bin := itest.Binary(t)
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, append([]string{"check"}, args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return exitCode(err), stdout.String(), stderr.String()
	}
	code, out, errOut := run("testdata/check/hostsni-no-tls.labels")
	if code != 1 || !strings.Contains(errOut, "testdata/check/hostsni-no-tls.labels:2: traefik.tcp.routers.web.rule: error:") {
		t.Fatalf("HostSNI without TLS: exit %d, stderr %s", code, errOut)
	}
	var rep struct {
		TCP      map[string]any   `json:"tcp"`
		Problems []map[string]any `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.TCP == nil || len(rep.Problems) != 1 {
		t.Fatalf("stdout is not the report: %v\n%s", err, out)
	}
	if code, _, errOut := run("testdata/check/amount-zero.yml"); code != 0 || !strings.Contains(errOut, "warning: inFlightConn.amount is 0") {
		t.Fatalf("amount 0 is a warning: exit %d, %s", code, errOut)
	}
	if code, _, errOut := run("--exposedByDefault=false", "docker-compose.yml"); code != 0 || errOut != "" {
		t.Fatalf("the shipped docker-compose.yml: exit %d, %s", code, errOut)
	}
	if code, _, errOut := run(); code != 1 || !strings.Contains(errOut, "no file given") {
		t.Fatalf("no file: exit %d, %s", code, errOut)
	}
	if code, _, errOut := run("--colour", "x.yml"); code != 1 || !strings.Contains(errOut, `unknown flag "--colour"`) {
		t.Fatalf("bad flag: exit %d, %s", code, errOut)
	}
}

// Log lines about an entry point, router, service, middleware or provider
// carry its name as a field, in JSON and in console format.
func TestLogLinesNameTheirComponent(t *testing.T) {
	dir := t.TempDir()
	be := freeEcho(t)
	dyn := filepath.Join(dir, "dynamic.yml")
	conf := "tcp:\n  routers:\n    ok:\n      rule: \"HostSNI(`*`)\"\n      service: s\n      middlewares: [nobody]\n" +
		"    broken:\n      rule: \"HostSNI(`a.test`)\"\n      service: s\n" +
		"  middlewares:\n    nobody:\n      inFlightConn:\n        amount: 0\n" +
		"  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: \"" + be + "\"\n"
	if err := os.WriteFile(dyn, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ep := freePort(t)
	p := start(t, "--entryPoints.tcp.address="+ep, "--providers.file.filename="+dyn)
	itest.Eventually(t, 5*time.Second, func() bool { return p.status(t, "tcpRouters", "broken@file") == "disabled" }, "router broken@file disabled")
	if len(hold(t, 1, "127.0.0.1", ep)) != 0 {
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
		for _, line := range strings.Split(p.out.String(), "\n") {
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
	ep := freePort(t)
	p := start(t, "--entryPoints.tcp.address="+ep, "--log.format=console")
	itest.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(p.out.String(), "entry point listening") && strings.Contains(p.out.String(), "entrypoint=tcp")
	}, "a console line naming the entry point: %s", p.out.String())
	if strings.Contains(p.out.String(), `{"level"`) {
		t.Fatalf("console format wrote JSON: %s", p.out.String())
	}
}

func TestAccessLogBadPath(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "missing", "access.log")
	cmd := exec.Command(itest.Binary(t), "--entryPoints.tcp.address="+freePort(t), "--api.address="+freePort(t), "--accessLog.filePath="+bad)
	out, err := cmd.CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), `accessLog.filePath="`+bad+`"`) {
		t.Fatalf("exit %d, %s: want 1 naming accessLog.filePath", exitCode(err), out)
	}
}
