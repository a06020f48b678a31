package consul

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider/kv/internal/kvtest"
)

// server is a one-node Consul server (not -dev: its KV store is kept on
// disk, so it survives a SIGKILL) on loopback ports of its own.
type server struct {
	bin, dir           string
	http, serf, server int
	proc               *kvtest.Proc
}

func startServer(t testing.TB) *server {
	t.Helper()
	bin, err := itest.ConsulBinary()
	itest.Need(t, "consul agent", err)
	s := &server{bin: bin, dir: t.TempDir(), http: kvtest.FreePort(t), serf: kvtest.FreePort(t), server: kvtest.FreePort(t)}
	if err := s.start(s.http); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.proc.Stop() })
	return s
}

func (s *server) addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// start runs the server on its data directory with the HTTP API on port and
// waits until it has a leader and writes.
func (s *server) start(port int) error {
	p, err := kvtest.StartProc(s.bin, "agent", "-server", "-bootstrap-expect=1", "-data-dir", s.dir, "-node", "kv-test",
		"-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-http-port", strconv.Itoa(port), "-serf-lan-port", strconv.Itoa(s.serf), "-server-port", strconv.Itoa(s.server),
		"-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1", "-serf-wan-port", "-1",
		"-hcl", "performance { raft_multiplier = 1 }", "-hcl", "disable_update_check = true", "-log-level", "warn")
	if err != nil {
		return err
	}
	s.proc = p
	c := s.client(port)
	return kvtest.Ready(p, 30*time.Second, func() error {
		if _, err := c.KV().Put(&api.KVPair{Key: "ready", Value: []byte("1")}, nil); err != nil {
			return err
		}
		return nil
	})
}

func (s *server) client(port int) *api.Client {
	c, err := api.NewClient(&api.Config{Address: s.addr(port)})
	if err != nil {
		panic(err)
	}
	return c
}

func (s *server) Provider() string { return Name }

func (s *server) Flags() []string {
	return []string{"--providers.consul=true", "--providers.consul.endpoints=" + s.addr(s.http)}
}

func (s *server) Put(t testing.TB, key, value string) {
	t.Helper()
	if _, err := s.client(s.http).KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
		t.Fatalf("consul kv put %s: %v", key, err)
	}
}

func (s *server) DeletePrefix(t testing.TB, prefix string) {
	t.Helper()
	if _, err := s.client(s.http).KV().DeleteTree(prefix, nil); err != nil {
		t.Fatalf("consul kv delete -recurse %s: %v", prefix, err)
	}
}

func (s *server) Kill(t testing.TB) { s.proc.Kill() }

func (s *server) WhileDown(t testing.TB, change func(put func(k, v string))) {
	t.Helper()
	port := kvtest.FreePort(t)
	if err := s.start(port); err != nil {
		t.Fatalf("consul on the same data, HTTP port %d: %v", port, err)
	}
	c := s.client(port)
	change(func(k, v string) {
		if _, err := c.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatalf("consul kv put %s (while down): %v", k, err)
		}
	})
	s.proc.Stop()
}

func (s *server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(s.http); err != nil {
		t.Fatalf("restarting consul: %v", err)
	}
}

// TestE2E is the acceptance scenario through the binary against a
// real Consul server.
func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	kvtest.E2E(t, startServer(t))
}

// `tollgate check` reads what `consul kv export` writes, through the same
// decoder: the seed routes, a bad key is named with its line.
func TestCheckReadsConsulKVExport(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	s := startServer(t)
	kvtest.Seed(t, s, 10, "127.0.0.1:4000")
	s.Put(t, "traefik/tcp/routers/bad/rule", "HostSNI(`*`)")
	s.Put(t, "traefik/tcp/routers/bad/priority", "high")
	export := exec.Command(s.bin, "kv", "export", "traefik")
	export.Env = append(os.Environ(), "CONSUL_HTTP_ADDR="+s.addr(s.http))
	dump, err := export.Output()
	if err != nil {
		t.Fatalf("consul kv export: %v", err)
	}
	file := filepath.Join(t.TempDir(), "traefik.json")
	if err := os.WriteFile(file, dump, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	check := exec.Command(itest.Binary(t), "check", "--entryPoints=db", file)
	check.Stdout, check.Stderr = &stdout, &stderr
	code := itest.ExitCode(check.Run())
	var rep struct {
		Status struct {
			Routers map[string]string `json:"routers"`
		} `json:"status"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if code != 1 || rep.Status.Routers["my-router@consul"] != "enabled" || len(rep.Status.Routers) != 1 {
		t.Errorf("exit %d, routers %v: want 1 and my-router@consul enabled alone", code, rep.Status.Routers)
	}
	want := fmt.Sprintf("%s:%d: traefik/tcp/routers/bad/priority: error:", file, lineOf(string(dump), `"traefik/tcp/routers/bad/priority"`)-1)
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr:\n%s\nwant a line starting %q", stderr.String(), want)
	}
}

// lineOf is the 1-based line of the first occurrence of s in text.
func lineOf(text, s string) int {
	i := strings.Index(text, s)
	if i < 0 {
		return 0
	}
	return strings.Count(text[:i], "\n") + 1
}

// With namespaces there is one provider per namespace, named
// consul-<namespace>; Consul without Enterprise refuses the namespace, and
// says so in /api/providers.
func TestNamespacesNeedEnterprise(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	s := startServer(t)
	flags := append(s.Flags(), "--providers.consul.namespaces=team-a,team-b")
	kvtest.Failing(t, "consul-team-a", flags, "Namespaces are a Consul Enterprise feature")
}
