package consul

import (
	"strconv"
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
