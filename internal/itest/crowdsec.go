package itest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The CrowdSec Local API of the tests: Debian's crowdsec package (.ci/run
// installs it). StartLAPI starts `crowdsec -no-cs -no-capi` (the LAPI
// alone, no Central API) with a configuration of its own in a temporary
// directory, on a loopback port, with its own SQLite database; registers a
// machine (for cscli) and a bouncer with cscli; and the test adds and
// deletes decisions with `cscli decisions add/delete` (LAPI.CSCLI) and
// stops the LAPI by its PID (LAPI.Stop).

// LAPITLS makes the LAPI serve https with these PEM files, and verify the
// client certificates the CA signed (bouncers with OU bouncer-ou, agents
// with OU agent-ou).
type LAPITLS struct {
	ServerCert, ServerKey, CA string
}

// LAPI is a CrowdSec LAPI a test started.
type LAPI struct {
	t        testing.TB
	crowdsec string
	cscli    string
	// Dir holds its configuration (Config) and its database.
	Dir    string
	Config string
	Port   int
	// URL is its base URL (http://127.0.0.1:port, https:// with TLS).
	URL string
	// Key is a bouncer's API key, registered at start.
	Key  string
	proc *Proc
}

// NeedCrowdSec finds crowdsec and cscli, skipping (or failing under
// TOLLGATE_REQUIRE_INTEGRATION=1) when Debian's package is not installed.
func NeedCrowdSec(t testing.TB) (crowdsec, cscli string) {
	t.Helper()
	var err error
	cs, err1 := exec.LookPath("crowdsec")
	cli, err2 := exec.LookPath("cscli")
	if err1 != nil || err2 != nil {
		err = errors.New("crowdsec and cscli are not both on PATH (Debian's package: apt-get install -y crowdsec; .ci/run installs it)")
	}
	Need(t, "crowdsec", err)
	return cs, cli
}

// StartLAPI starts a LAPI (over TLS with client certificates when p is not
// nil) and a bouncer key for it, and stops it at cleanup.
func StartLAPI(t testing.TB, p *LAPITLS) *LAPI {
	t.Helper()
	cs, cli := NeedCrowdSec(t)
	l := &LAPI{t: t, crowdsec: cs, cscli: cli, Dir: t.TempDir(), Port: FreePort(t)}
	scheme := "http"
	if p != nil {
		scheme = "https"
	}
	l.URL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, l.Port)
	l.Config = filepath.Join(l.Dir, "config.yaml")
	lapiMust(t, os.MkdirAll(filepath.Join(l.Dir, "data"), 0o755))
	tlsBlock, clientInsecure := "", "false"
	if p != nil {
		clientInsecure = "true" // cscli's own connection: the test reads nothing secret through it
		tlsBlock = fmt.Sprintf(`
    tls:
      cert_file: %s
      key_file: %s
      ca_cert_path: %s
      client_verification: VerifyClientCertIfGiven
      bouncers_allowed_ou:
        - bouncer-ou
      agents_allowed_ou:
        - agent-ou`, p.ServerCert, p.ServerKey, p.CA)
	}
	config := fmt.Sprintf(`common:
  daemonize: false
  log_media: stdout
  log_level: info
  working_dir: %[1]s
config_paths:
  config_dir: %[1]s/
  data_dir: %[1]s/data/
  simulation_path: %[1]s/simulation.yaml
  hub_dir: %[1]s/hub/
  index_path: %[1]s/hub/.index.json
  notification_dir: %[1]s/notifications/
  plugin_dir: %[1]s/plugins/
cscli:
  output: human
db_config:
  log_level: info
  type: sqlite
  db_path: %[1]s/data/crowdsec.db
  use_wal: true
api:
  client:
    insecure_skip_verify: %[4]s
    credentials_path: %[1]s/local_api_credentials.yaml
  server:
    log_level: info
    listen_uri: 127.0.0.1:%[2]d
    profiles_path: %[1]s/profiles.yaml
    trusted_ips:
      - 127.0.0.1
      - ::1%[3]s
prometheus:
  enabled: false
`, l.Dir, l.Port, tlsBlock, clientInsecure)
	lapiMust(t, os.WriteFile(l.Config, []byte(config), 0o600))
	lapiMust(t, os.WriteFile(filepath.Join(l.Dir, "simulation.yaml"), []byte("simulation: off\n"), 0o600))
	lapiMust(t, os.WriteFile(filepath.Join(l.Dir, "profiles.yaml"), []byte(`name: default_ip_remediation
filters:
 - Alert.Remediation == true && Alert.GetScope() == "Ip"
decisions:
 - type: ban
   duration: 4h
on_success: break
`), 0o600))
	l.CSCLI("machines", "add", "tollgate-test", "--password", "tollgate-test-password", "-f", filepath.Join(l.Dir, "local_api_credentials.yaml"), "--url", l.URL)
	l.Key = l.NewKey("tollgate-test-bouncer")
	l.Start()
	t.Cleanup(l.Stop)
	return l
}

// Start runs crowdsec and waits until the LAPI answers.
func (l *LAPI) Start() {
	l.t.Helper()
	proc, err := StartProc(l.crowdsec, "-c", l.Config, "-no-cs", "-no-capi")
	if err != nil {
		l.t.Fatalf("starting crowdsec: %v", err)
	}
	l.proc = proc
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	err = Ready(proc, 60*time.Second, func() error {
		resp, err := client.Get(l.URL + "/v1/nothing")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	if err != nil {
		l.t.Fatalf("the LAPI did not come up: %v", err)
	}
}

// Stop ends crowdsec by its PID (SIGTERM to its process group) and waits.
func (l *LAPI) Stop() {
	if l.proc != nil {
		l.proc.Stop()
	}
}

// NewKey registers a bouncer and returns its key. Each bouncer needs its
// own: the LAPI hands each change to one pull per key.
func (l *LAPI) NewKey(name string) string {
	l.t.Helper()
	key := strings.TrimSpace(l.CSCLI("-oraw", "bouncers", "add", name))
	if key == "" || strings.ContainsAny(key, " \n") {
		l.t.Fatalf("cscli bouncers add printed no key: %q", key)
	}
	return key
}

// CSCLI runs cscli with the LAPI's configuration and returns its output.
func (l *LAPI) CSCLI(args ...string) string {
	l.t.Helper()
	cmd := exec.Command(l.cscli, append([]string{"-c", l.Config}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		l.t.Fatalf("cscli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func lapiMust(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
