package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/kv"
	"github.com/tollgate-proxy/tollgate/provider/kv/internal/kvtest"
)

func TestEnabled(t *testing.T) {
	for flags, want := range map[string]bool{"": false, "KA": true, "AK": true, "K$g": true, "Kg$x": true, "EA": false, "K$": false, "Kl": false, "KEA": true} {
		if got := Enabled(flags); got != want {
			t.Errorf("Enabled(%q) = %v, want %v", flags, got, want)
		}
	}
}

func TestEscape(t *testing.T) {
	if got := escape(`a*b?c[d]e\f`); got != `a\*b\?c\[d\]e\\f` {
		t.Errorf("escape: %s", got)
	}
}

// Without keyspace notifications the provider polls every PollInterval; it
// follows them as soon as they are switched on at run time.
func TestPollsWithoutNotificationsThenFollowsThem(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: skipped with -short")
	}
	s := startServer(t, "")
	cfg := &config.RedisProvider{}
	cfg.SetDefaults()
	cfg.Endpoints = []string{"127.0.0.1:" + strconv.Itoa(s.port)}
	p, err := New(cfg, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan provider.Message, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx, out); close(done) }()
	defer func() { cancel(); <-done }()
	amount := func(m provider.Message) int64 {
		if m.Configuration == nil || m.Configuration.TCP.Middlewares["m"] == nil {
			return -1
		}
		return m.Configuration.TCP.Middlewares["m"].InFlightConn.Amount
	}
	wait := func(want int64, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			select {
			case m := <-out:
				if amount(m) == want {
					return time.Since(start)
				}
			case <-time.After(within):
				t.Fatalf("amount %d not applied within %v", want, within)
			}
		}
	}
	wait(-1, 3*time.Second) // the first, empty snapshot
	var worst time.Duration
	for i := range 3 {
		s.Put(t, "traefik/tcp/middlewares/m/inFlightConn/amount", strconv.Itoa(i+1))
		worst = max(worst, wait(int64(i+1), PollInterval+time.Second))
	}
	t.Logf("polling every %v: write -> snapshot at worst %v", PollInterval, worst)

	if err := s.cli.ConfigSet(context.Background(), "notify-keyspace-events", "KA").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(PollInterval + 200*time.Millisecond) // the next poll sees the setting and subscribes
	var slowest time.Duration
	for i := range 5 {
		s.Put(t, "traefik/tcp/middlewares/m/inFlightConn/amount", strconv.Itoa(10+i))
		slowest = max(slowest, wait(int64(10+i), time.Second))
	}
	t.Logf("notifications on: write -> snapshot at worst %v", slowest)
	if slowest > 200*time.Millisecond {
		t.Errorf("with notifications on, a write took %v to arrive: still polling?", slowest)
	}
}

// TLS with the CA, and an ACL user: the route applies; a wrong password is
// an error in /api/providers.
func TestTLSAndACLUser(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	bin, err := redisBinary()
	itest.Need(t, "redis-server", err)
	dir := t.TempDir()
	cert, key := kvtest.Cert(t, dir)
	port := kvtest.FreePort(t)
	proc, err := kvtest.StartProc(bin, "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", cert, "--tls-auth-clients", "no",
		"--save", "", "--notify-keyspace-events", "KA", "--user", "default", "off",
		"--user", "tollgate", "on", ">s3cret", "~*", "&*", "+@all")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Stop)
	pem, _ := os.ReadFile(cert)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), Username: "tollgate", Password: "s3cret",
		TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableIdentity: true})
	defer c.Close()
	if err := kvtest.Ready(proc, 15*time.Second, func() error { return c.Ping(context.Background()).Err() }); err != nil {
		t.Fatal(err)
	}
	ep := "--providers.redis.endpoints=127.0.0.1:" + strconv.Itoa(port)
	kvtest.Routed(t, Name, []string{ep, "--providers.redis.tls.ca=" + cert, "--providers.redis.username=tollgate", "--providers.redis.password=s3cret"},
		func(k, v string) {
			if err := c.Set(context.Background(), k, v, 0).Err(); err != nil {
				t.Fatal(err)
			}
		})
	kvtest.Failing(t, Name, []string{ep, "--providers.redis.tls.ca=" + cert, "--providers.redis.username=tollgate", "--providers.redis.password=wrong"}, "WRONGPASS")
	kvtest.Failing(t, Name, []string{ep, "--providers.redis.username=tollgate", "--providers.redis.password=s3cret"}, "EOF")
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		edit func(*config.RedisProvider)
		want string
	}{
		{func(c *config.RedisProvider) { c.Endpoints = nil }, "no endpoint"},
		{func(c *config.RedisProvider) { c.Endpoints = []string{"a:1", "b:2"} }, `providers.redis.endpoints=["a:1" "b:2"]: one endpoint only, unless they are Sentinels`},
		{func(c *config.RedisProvider) { c.Endpoints = []string{"nohost"} }, `"nohost" is not host:port`},
		{func(c *config.RedisProvider) { c.DB = -1 }, "providers.redis.db=-1"},
		{func(c *config.RedisProvider) { c.TLS = &config.KVClientTLS{Key: "k.pem"} }, "providers.redis.tls: set both cert and key"},
		{func(c *config.RedisProvider) { c.Sentinel = &config.RedisSentinel{} }, "providers.redis.sentinel.masterName: required"},
		{func(c *config.RedisProvider) {
			c.Sentinel = &config.RedisSentinel{MasterName: "m", LatencyStrategy: true, ReplicaStrategy: true}
		}, "providers.redis.sentinel: latencyStrategy and replicaStrategy are exclusive"},
		{func(c *config.RedisProvider) {
			c.Sentinel = &config.RedisSentinel{MasterName: "m", LatencyStrategy: true, RandomStrategy: true, ReplicaStrategy: true}
		}, "latencyStrategy and randomStrategy and replicaStrategy are exclusive"},
		{func(c *config.RedisProvider) {
			c.Endpoints, c.Sentinel = []string{"a:26379", "b"}, &config.RedisSentinel{MasterName: "m"}
		}, `providers.redis.endpoints: "b" is not host:port`},
		{func(c *config.RedisProvider) { c.Endpoints, c.Sentinel = nil, &config.RedisSentinel{MasterName: "m"} }, "no endpoint"},
	} {
		c := &config.RedisProvider{}
		c.SetDefaults()
		tc.edit(c)
		if _, err := New(c, provider.Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
}

// CONFIG GET refused (an ACL user without it) means "cannot tell": the
// provider polls. A refused login is an error, not a refusal to tell.
func TestNotifyingRefusedOrLoginRefused(t *testing.T) {
	srv := itest.StartRedis(t, "--user", "default", "on", "nopass", "~*", "&*", "+@all",
		"--user", "limited", "on", ">pw", "~*", "&*", "+@all", "-config")
	ctx := context.Background()
	for _, tc := range []struct {
		user, password string
		known, fails   bool
	}{
		{"default", "", true, false},
		{"limited", "pw", false, false},
		{"limited", "wrong", false, true},
	} {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Username: tc.user, Password: tc.password, DisableIdentity: true, MaxRetries: -1})
		s := newStore(c, kv.Options{}, 0, zerolog.Nop())
		_, known, err := s.notifying(ctx)
		if known != tc.known || (err != nil) != tc.fails {
			t.Errorf("%s/%s: known %v, error %v; want known %v, an error %v", tc.user, tc.password, known, err, tc.known, tc.fails)
		}
		_ = c.Close()
	}
}
