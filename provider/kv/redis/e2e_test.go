package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider/kv/internal/kvtest"
)

// server is a redis-server (Debian's) on a loopback port of its own, with an
// append-only file synced on every write (so it survives a SIGKILL) and, when
// notify is set, keyspace notifications on (notify-keyspace-events KA).
type server struct {
	bin, dir string
	port     int
	notify   string
	proc     *kvtest.Proc
	cli      *goredis.Client
}

func redisBinary() (string, error) { return itest.RedisBinary() }

func startServer(t testing.TB, notify string) *server {
	t.Helper()
	bin, err := redisBinary()
	itest.Need(t, "redis-server", err)
	s := &server{bin: bin, dir: t.TempDir(), port: kvtest.FreePort(t), notify: notify}
	if err := s.start(s.port); err != nil {
		t.Fatal(err)
	}
	s.cli = s.client(s.port)
	t.Cleanup(func() {
		s.cli.Close()
		s.proc.Stop()
	})
	return s
}

func (s *server) client(port int) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), DisableIdentity: true})
}

// start runs the server on its data directory on port and waits for PING.
func (s *server) start(port int) error {
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no", "--loglevel", "warning"}
	if s.notify != "" {
		args = append(args, "--notify-keyspace-events", s.notify)
	}
	p, err := kvtest.StartProc(s.bin, args...)
	if err != nil {
		return err
	}
	s.proc = p
	c := s.client(port)
	defer c.Close()
	return kvtest.Ready(p, 15*time.Second, func() error { return c.Ping(context.Background()).Err() })
}

func (s *server) Provider() string { return Name }

func (s *server) Flags() []string {
	return []string{"--providers.redis=true", "--providers.redis.endpoints=127.0.0.1:" + strconv.Itoa(s.port)}
}

func (s *server) Put(t testing.TB, key, value string) {
	t.Helper()
	if err := s.cli.Set(context.Background(), key, value, 0).Err(); err != nil {
		t.Fatalf("redis-cli set %s: %v", key, err)
	}
}

func (s *server) DeletePrefix(t testing.TB, prefix string) {
	t.Helper()
	ctx := context.Background()
	keys, err := s.cli.Keys(ctx, escape(prefix)+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := s.cli.Del(ctx, keys...).Err(); err != nil {
			t.Fatalf("redis-cli del %v: %v", keys, err)
		}
	}
}

func (s *server) Kill(t testing.TB) { s.proc.Kill() }

func (s *server) WhileDown(t testing.TB, change func(put func(k, v string))) {
	t.Helper()
	port := kvtest.FreePort(t)
	if err := s.start(port); err != nil {
		t.Fatalf("redis on the same data, port %d: %v", port, err)
	}
	c := s.client(port)
	defer c.Close()
	change(func(k, v string) {
		if err := c.Set(context.Background(), k, v, 0).Err(); err != nil {
			t.Fatalf("redis-cli set %s (while down): %v", k, err)
		}
	})
	s.proc.Stop()
}

func (s *server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(s.port); err != nil {
		t.Fatalf("restarting redis: %v", err)
	}
}

// TestE2E is the acceptance scenario through the binary against a
// real Redis that publishes keyspace notifications.
func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	kvtest.E2E(t, startServer(t, "KA"))
}
