package etcd

import (
	"context"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider/kv/internal/kvtest"
)

// server is one etcd member (the server scripts/k8s.sh builds) on loopback
// ports of its own, with its data on disk.
type server struct {
	bin, dir     string
	client, peer int
	downPort     int
	proc         *kvtest.Proc
	cli          *clientv3.Client
}

func startServer(t testing.TB) *server {
	t.Helper()
	bin, err := kvtest.EtcdBinary()
	itest.Need(t, "etcd", err)
	s := &server{bin: bin, dir: t.TempDir(), client: kvtest.FreePort(t), peer: kvtest.FreePort(t)}
	if err := s.start(s.client); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.proc.Stop()
		if s.cli != nil {
			s.cli.Close()
		}
	})
	s.cli = s.dial(t, s.client)
	return s
}

func (s *server) url(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

// start runs the member on its data directory with the client URL on port
// and waits until it answers.
func (s *server) start(port int) error {
	peer := s.url(s.peer)
	p, err := kvtest.StartProc(s.bin, "--name=kv-test", "--data-dir="+s.dir,
		"--listen-client-urls="+s.url(port), "--advertise-client-urls="+s.url(port),
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=kv-test="+peer,
		"--log-level=error")
	if err != nil {
		return err
	}
	s.proc = p
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.url(port)}, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	return kvtest.Ready(p, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.Put(ctx, "ready", "1")
		return err
	})
}

func (s *server) dial(t testing.TB, port int) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.url(port)}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (s *server) Provider() string { return Name }

func (s *server) Flags() []string {
	return []string{"--providers.etcd=true", "--providers.etcd.endpoints=127.0.0.1:" + strconv.Itoa(s.client)}
}

func put(t testing.TB, c *clientv3.Client, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, key, value); err != nil {
		t.Fatalf("etcdctl put %s: %v", key, err)
	}
}

func (s *server) Put(t testing.TB, key, value string) { t.Helper(); put(t, s.cli, key, value) }

func (s *server) DeletePrefix(t testing.TB, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		t.Fatalf("etcdctl del --prefix %s: %v", prefix, err)
	}
}

func (s *server) Kill(t testing.TB) { s.proc.Kill() }

func (s *server) WhileDown(t testing.TB, change func(put func(k, v string))) {
	t.Helper()
	s.downPort = kvtest.FreePort(t)
	if err := s.start(s.downPort); err != nil {
		t.Fatalf("etcd on the same data, client port %d: %v", s.downPort, err)
	}
	c := s.dial(t, s.downPort)
	defer c.Close()
	change(func(k, v string) { put(t, c, k, v) })
	s.proc.Stop()
}

// dialDown is a client of the server WhileDown runs.
func (s *server) dialDown(t testing.TB) *clientv3.Client { return s.dial(t, s.downPort) }

func (s *server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(s.client); err != nil {
		t.Fatalf("restarting etcd: %v", err)
	}
}

// TestE2E is the acceptance scenario through the binary against a
// real etcd.
func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	kvtest.E2E(t, startServer(t))
}
