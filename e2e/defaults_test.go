package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// Every default --help states in words ("30s when unset") is the one the
// code applies: the dial defaults a service without a transport takes
// (proxy's, which TestServiceWithoutTransportDialsWithTraefikDefaults
// observes on a socket), and the "(Default: ...)" paerser prints from
// SetDefaults for the options named here.
func TestHelpStatesTheDefaults(t *testing.T) {
	out, err := exec.Command(itest.Binary(t), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	help := string(out)
	entry := func(option string) string { // the option's line and description
		i := strings.Index(help, "    --"+strings.ToLower(option)+"  ")
		if i < 0 {
			t.Fatalf("--help does not list --%s", option)
		}
		rest := help[i+4:]
		if j := strings.Index(rest, "\n    --"); j > 0 {
			rest = rest[:j]
		}
		return strings.Join(strings.Fields(rest), " ")
	}
	unset := regexp.MustCompile(`\(([0-9a-z]+) when unset`)
	for option, want := range map[string]time.Duration{
		"tcpServersTransport.dialTimeout":      proxy.TransportDialTimeout,
		"tcpServersTransport.dialKeepAlive":    proxy.TransportKeepAlive,
		"tcpServersTransport.terminationDelay": time.Duration(config.DefaultTerminationDelayMillis) * time.Millisecond,
	} {
		m := unset.FindStringSubmatch(entry(option))
		if m == nil {
			t.Errorf("--%s: no default stated: %s", option, entry(option))
			continue
		}
		if d, err := time.ParseDuration(m[1]); err != nil || d != want {
			t.Errorf("--%s: --help says %s when unset, the code applies %s", option, m[1], want)
		}
	}
	log := &config.Log{}
	log.SetDefaults()
	for option, want := range map[string]string{
		"log.level":   log.Level,
		"log.format":  log.Format,
		"api.address": config.DefaultAPIAddress,
	} {
		if e := entry(option); !strings.Contains(e, fmt.Sprintf("(Default: %q)", want)) {
			t.Errorf("--%s: %s; want the default %q", option, e, want)
		}
	}
	for _, option := range []string{"ping.entryPoint", "metrics.prometheus.entryPoint"} {
		if e := entry(option); !strings.Contains(e, "default traefik, at "+config.DefaultInternalAddress+" when not declared") {
			t.Errorf("--%s: %s; want the traefik entry point at %s", option, e, config.DefaultInternalAddress)
		}
	}
}

// logrotate's way: the log and the access log are moved away, SIGUSR1 is
// sent (postrotate kill -USR1), and the next lines land in new files at
// log.filePath and accessLog.filePath; the moved files get nothing more.
func TestSIGUSR1ReopensLogFiles(t *testing.T) {
	be := itest.EchoServer(t, "")
	dir := t.TempDir()
	dyn := echoRouteFile(t, dir, be, "")
	logPath, accessPath := filepath.Join(dir, "tollgate.log"), filepath.Join(dir, "access.log")
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.db.address="+ep, "--providers.file.filename="+dyn,
		"--log.filePath="+logPath, "--accessLog.filePath="+accessPath)
	oneConnection := func() {
		t.Helper()
		itest.Eventually(t, 10*time.Second, func() bool {
			held := itest.Hold(t, 1, "127.0.0.1", ep)
			for _, c := range held {
				c.Close()
			}
			return len(held) == 1
		}, "a connection was not forwarded")
	}
	lines := func(path string) []string {
		b, _ := os.ReadFile(path)
		if s := strings.TrimSpace(string(b)); s != "" {
			return strings.Split(s, "\n")
		}
		return nil
	}
	oneConnection()
	itest.Eventually(t, 5*time.Second, func() bool { return len(lines(accessPath)) == 1 && len(lines(logPath)) > 0 }, "no access log line")
	for _, path := range []string{logPath, accessPath} {
		if err := os.Rename(path, path+".1"); err != nil {
			t.Fatal(err)
		}
	}
	logged := len(lines(logPath + ".1"))
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	itest.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(strings.Join(lines(logPath), "\n"), "SIGUSR1: log files reopened")
	},
		"the log was not reopened at log.filePath")
	oneConnection()
	itest.Eventually(t, 5*time.Second, func() bool { return len(lines(accessPath)) == 1 }, "the access log line did not land in the new access.log")
	if n := len(lines(accessPath + ".1")); n != 1 {
		t.Errorf("the moved access log has %d lines, want the 1 written before SIGUSR1", n)
	}
	if n := len(lines(logPath + ".1")); n != logged {
		t.Errorf("the moved log got %d more lines after SIGUSR1", n-logged)
	}
	if resp, err := http.Get("http://" + p.API + "/ping"); err != nil {
		t.Errorf("tollgate after SIGUSR1: %v", err)
	} else {
		resp.Body.Close()
	}
}

// Without log options, tollgate logs as Traefik does by default: the
// common format (zerolog's console lines) at ERROR. A rejection is logged
// at Traefik's level (error) with its words, so it shows by default; the
// start's info lines do not.
func TestDefaultLogIsTraefiks(t *testing.T) {
	be := itest.EchoServer(t, "")
	dir := t.TempDir()
	dyn := filepath.Join(dir, "dyn.yml")
	conf := "tcp:\n  routers:\n    r:\n      rule: \"HostSNI(`*`)\"\n      service: s\n      middlewares: [none]\n" +
		"  middlewares:\n    none:\n      inFlightConn:\n        amount: 0\n" +
		"  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: \"" + be + "\"\n"
	if err := os.WriteFile(dyn, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ep, api := itest.FreeAddr(t), itest.FreeAddr(t)
	cmd := exec.Command(itest.Binary(t), "--entryPoints.db.address="+ep, "--providers.file.filename="+dyn, "--api.address="+api)
	out := &itest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	itest.Eventually(t, 10*time.Second, func() bool {
		_ = itest.Hold(t, 1, "127.0.0.1", ep)
		return strings.Contains(out.String(), "Connection rejected")
	}, "no rejection logged:\n%s", out)
	var rejected string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "Connection rejected") {
			rejected = line
		}
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d) ERR Connection rejected `).MatchString(rejected) ||
		!strings.Contains(rejected, `error="max number of connections reached for 127.0.0.1"`) {
		t.Errorf("rejection line %q: want Traefik's common line at ERR with its words", rejected)
	}
	if strings.Contains(out.String(), "entry point listening") || strings.Contains(out.String(), `{"level"`) {
		t.Errorf("info lines or JSON by default:\n%s", out)
	}
}

// A top-level key of the static file that names no option (a typo of
// entryPoints) is skipped, as Traefik skips it, with a warning naming it
// and its line, and tollgate starts; a nested one is an error naming the
// file and line.
func TestUnknownKeysOfTheStaticFile(t *testing.T) {
	dir := t.TempDir()
	ep := itest.FreeAddr(t)
	static := filepath.Join(dir, "traefik.yml")
	content := fmt.Sprintf("log:\n  level: WARN\nentryPoints:\n  db:\n    address: %q\nentryPointz:\n  web:\n    address: \":80\"\n", ep)
	if err := os.WriteFile(static, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(itest.Binary(t), "--configFile="+static)
	out := &itest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	want := static + ":6: entryPointz: unknown top-level key, skipped"
	itest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(out.String(), want) }, "no warning %q:\n%s", want, out)
	itest.Eventually(t, 10*time.Second, func() bool { // the entry point listens
		c, err := net.DialTimeout("tcp", ep, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "tollgate did not start:\n%s", out)

	for name, content := range map[string]string{
		"nested.yml":  "entryPoints:\n  db:\n    address: \":5432\"\n    transprt:\n      lifeCycle: {}\n",
		"nested.toml": "[entryPoints.db]\n  address = \":5432\"\n\n[entryPoints.db.transprt.lifeCycle]\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := exec.Command(itest.Binary(t), "--configFile="+path).CombinedOutput()
		line := map[string]string{"nested.yml": ":4: ", "nested.toml": ":4: "}[name]
		if itest.ExitCode(err) != 1 || !strings.Contains(string(b), path+line+"entryPoints.db.transprt: unknown option") {
			t.Errorf("%s: exit %d, %s; want 1 naming %s%sentryPoints.db.transprt", name, itest.ExitCode(err), b, path, line)
		}
	}
}
