// Package redis is the Redis provider: the dynamic configuration as string
// keys under a root key in one Redis database (Traefik's layout, decoded by
// kv.Build).
//
// Redis has no watch of its own; the provider follows its keyspace
// notifications when the server publishes them (PSUBSCRIBE
// __keyspace@<db>__:<root>/*), which needs notify-keyspace-events to include
// K (keyspace events) and the events of SET and DEL, $ and g: "KA" (every
// class) or at least "K$g", set in redis.conf or at run time with
//
//	redis-cli CONFIG SET notify-keyspace-events KA
//
// as Traefik requires too. Each notification re-reads the whole prefix (SCAN
// MATCH <root>/*, then MGET), so every snapshot is complete. When the
// server does not publish them (the setting is empty, or CONFIG GET is not
// allowed), the provider polls the prefix every PollInterval instead, and
// switches to notifications as soon as they are on. The subscription
// connection is pinged after IdleCheck of silence, so that a server that
// went away is noticed; after an error everything is read again.
//
// Only string values are read (a key of another type under the root key is
// skipped). One endpoint, or Sentinels (providers.redis.sentinel, as in
// Traefik): Redis Cluster is not supported.
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/kv"
)

// Name is the provider's name in qualified resource names (`db@redis`).
const Name = "redis"

// PollInterval is how often the prefix is read when the server publishes no
// keyspace notifications.
const PollInterval = time.Second

// IdleCheck is how long the subscription may be silent before it is pinged
// (and notify-keyspace-events checked again).
const IdleCheck = 3 * time.Second

// RequestTimeout bounds one command.
const RequestTimeout = 3 * time.Second

// client is what the provider uses of a go-redis client.
type client interface {
	ConfigGet(ctx context.Context, parameter string) *goredis.MapStringStringCmd
	Scan(ctx context.Context, cursor uint64, match string, count int64) *goredis.ScanCmd
	MGet(ctx context.Context, keys ...string) *goredis.SliceCmd
	PSubscribe(ctx context.Context, patterns ...string) *goredis.PubSub
	Close() error
}

// New checks cfg and returns the provider. New does no I/O: an unreachable
// server is reported by Run. Errors name the option and the value.
//
// With sentinel, the endpoints are Sentinels: the client asks them for the
// master (or, with a strategy, for the replicas too), follows a failover
// they announce, and asks again after an error, so the provider's retry
// after an outage finds the new master.
func New(cfg *config.RedisProvider, po provider.Options) (*kv.Provider, error) {
	if cfg == nil {
		cfg = &config.RedisProvider{}
		cfg.SetDefaults()
	}
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("providers.redis.endpoints: %w", kv.ErrNoEndpoint)
	}
	if len(cfg.Endpoints) > 1 && cfg.Sentinel == nil {
		return nil, fmt.Errorf("providers.redis.endpoints=%q: one endpoint only, unless they are Sentinels (providers.redis.sentinel.masterName); Redis Cluster is not supported", cfg.Endpoints)
	}
	for _, ep := range cfg.Endpoints {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return nil, fmt.Errorf("providers.redis.endpoints: %q is not host:port", ep)
		}
	}
	if cfg.DB < 0 {
		return nil, fmt.Errorf("providers.redis.db=%d: must not be negative", cfg.DB)
	}
	tc, err := provider.TLSConfig(cfg.TLS, "providers.redis.tls")
	if err != nil {
		return nil, err
	}
	// go-redis logs through a logger of its own, global to the process;
	// tollgate's log says what matters (the provider's errors), so it is
	// silenced.
	goredis.SetLogger(quiet{})
	var c client
	desc := "redis " + cfg.Endpoints[0]
	if s := cfg.Sentinel; s != nil {
		if c, err = sentinelClient(cfg, s, tc); err != nil {
			return nil, err
		}
		desc = fmt.Sprintf("redis master %q through Sentinels %s", s.MasterName, strings.Join(cfg.Endpoints, ","))
	} else {
		c = goredis.NewClient(&goredis.Options{
			Addr: cfg.Endpoints[0], Username: cfg.Username, Password: cfg.Password, DB: cfg.DB, TLSConfig: tc,
			DialTimeout: RequestTimeout, ReadTimeout: RequestTimeout, WriteTimeout: RequestTimeout,
			// The provider's loop retries, with its own capped backoff.
			MaxRetries:               -1,
			DisableIdentity:          true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
	}
	opts := kv.Options{RootKey: cfg.RootKey}
	st := newStore(c, opts, cfg.DB, po.Log.With().Str("provider", Name).Logger())
	return kv.New(Name, desc, st, opts, po), nil
}

// sentinelClient checks providers.redis.sentinel and returns the client
// that reads through it, as Traefik's Redis provider does: the master by
// default, only replicas with replicaStrategy, and with latencyStrategy or
// randomStrategy the master and its replicas as one group (go-redis's
// failover cluster client), read from the closest or at random.
func sentinelClient(cfg *config.RedisProvider, s *config.RedisSentinel, tc *tls.Config) (client, error) {
	if s.MasterName == "" {
		return nil, errors.New("providers.redis.sentinel.masterName: required with providers.redis.sentinel (the name the Sentinels monitor)")
	}
	var set []string
	for _, st := range []struct {
		name string
		on   bool
	}{{"latencyStrategy", s.LatencyStrategy}, {"randomStrategy", s.RandomStrategy}, {"replicaStrategy", s.ReplicaStrategy}} {
		if st.on {
			set = append(set, st.name)
		}
	}
	if len(set) > 1 {
		return nil, fmt.Errorf("providers.redis.sentinel: %s are exclusive, set one", strings.Join(set, " and "))
	}
	o := &goredis.FailoverOptions{
		MasterName: s.MasterName, SentinelAddrs: cfg.Endpoints,
		SentinelUsername: s.Username, SentinelPassword: s.Password,
		RouteByLatency: s.LatencyStrategy, RouteRandomly: s.RandomStrategy,
		ReplicaOnly: s.ReplicaStrategy, UseDisconnectedReplicas: s.UseDisconnectedReplicas,
		Username: cfg.Username, Password: cfg.Password, DB: cfg.DB, TLSConfig: tc,
		DialTimeout: RequestTimeout, ReadTimeout: RequestTimeout, WriteTimeout: RequestTimeout,
		MaxRetries:      -1,
		DisableIdentity: true,
	}
	if s.LatencyStrategy || s.RandomStrategy {
		return goredis.NewFailoverClusterClient(o), nil
	}
	return goredis.NewFailoverClient(o), nil
}

// quiet drops go-redis's own log lines: the provider reports what matters.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// store is the Redis Store.
type store struct {
	c       client
	log     zerolog.Logger
	match   string // SCAN pattern of the root key's prefix
	channel string // PSUBSCRIBE pattern of its keyspace notifications

	started bool
	ps      *goredis.PubSub // nil: polling, or not subscribed yet
	polling bool
	mode    string // what was last logged about notifications
	pinged  bool   // a PING is outstanding on ps
	poll    time.Duration
	idle    time.Duration
}

var _ kv.Store = (*store)(nil)

func newStore(c client, opts kv.Options, db int, log zerolog.Logger) *store {
	root := strings.TrimRight(opts.RootKey, "/")
	if root == "" {
		root = kv.DefaultRootKey
	}
	m := escape(root) + "/*"
	return &store{c: c, log: log, match: m, channel: fmt.Sprintf("__keyspace@%d__:%s", db, m), poll: PollInterval, idle: IdleCheck}
}

// escape quotes the glob characters of s for SCAN MATCH and PSUBSCRIBE.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Next returns the pairs: at once the first time and after an error, else
// after the next notification (or poll).
func (s *store) Next(ctx context.Context) ([]kv.Pair, error) {
	if !s.started {
		if err := s.subscribe(ctx); err != nil {
			return nil, err
		}
		s.started = true
		return s.read(ctx)
	}
	if s.polling {
		if !provider.Sleep(ctx, s.poll) {
			return nil, ctx.Err()
		}
		if on, _, err := s.notifying(ctx); err != nil {
			return nil, s.fail(err)
		} else if on {
			if err := s.subscribe(ctx); err != nil {
				return nil, err
			}
		}
		return s.read(ctx)
	}
	for {
		msg, err := s.ps.ReceiveTimeout(ctx, s.idle)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !s.pinged {
				// Silence: is the server still there, and still publishing?
				if err := s.ps.Ping(ctx); err != nil {
					return nil, s.fail(err)
				}
				s.pinged = true
				if on, known, err := s.notifying(ctx); err != nil {
					return nil, s.fail(err)
				} else if known && !on {
					s.log.Warn().Dur("interval", s.poll).Msg("Redis stopped publishing keyspace notifications (notify-keyspace-events): polling")
					s.closeSub()
					s.polling = true
					return s.read(ctx)
				}
				continue
			}
			if s.pinged && errors.As(err, &ne) && ne.Timeout() {
				err = errors.New("no answer to PING on the subscription")
			}
			return nil, s.fail(err)
		}
		switch msg.(type) {
		case *goredis.Message:
			s.drain(ctx)
			return s.read(ctx)
		case *goredis.Pong:
			s.pinged = false
		}
	}
}

// drain takes the notifications already received, so that a burst of
// writes is one read.
func (s *store) drain(ctx context.Context) {
	for range 10000 {
		msg, err := s.ps.ReceiveTimeout(ctx, time.Millisecond)
		if err != nil {
			return // a timeout (nothing more), or an error the next receive reports
		}
		if _, ok := msg.(*goredis.Pong); ok {
			s.pinged = false
		}
	}
}

// fail closes the subscription so that the next Next starts over.
func (s *store) fail(err error) error {
	s.closeSub()
	s.started = false
	return err
}

func (s *store) closeSub() {
	if s.ps != nil {
		_ = s.ps.Close()
	}
	s.ps, s.pinged = nil, false
}

// notifying reports whether the server publishes the keyspace
// notifications the provider needs, and whether it could tell (CONFIG GET
// may be refused). An error means the server did not answer.
func (s *store) notifying(ctx context.Context) (on, known bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	m, err := s.c.ConfigGet(cctx, "notify-keyspace-events").Result()
	if err != nil {
		// The server (or, behind Sentinels, a Sentinel) answered with an
		// error: CONFIG GET refused (NOPERM, a renamed command) means "cannot
		// tell"; a refused login is the provider's error.
		var refused goredis.Error
		if errors.As(err, &refused) && !loginRefused(refused.Error()) {
			return false, false, nil
		}
		return false, false, err
	}
	return Enabled(m["notify-keyspace-events"]), true, nil
}

// loginRefused reports whether a Redis error reply refuses the login.
func loginRefused(msg string) bool {
	return strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS")
}

// Enabled reports whether a notify-keyspace-events value publishes what the
// provider follows: keyspace events (K) for SET ($) and DEL (g), or every
// class (A).
func Enabled(flags string) bool {
	return strings.Contains(flags, "K") && (strings.Contains(flags, "A") || (strings.Contains(flags, "$") && strings.Contains(flags, "g")))
}

// subscribe subscribes to the prefix's keyspace notifications when the
// server publishes them, else switches to polling.
func (s *store) subscribe(ctx context.Context) error {
	s.closeSub()
	on, known, err := s.notifying(ctx)
	if err != nil {
		return err
	}
	if !on {
		msg := "Redis publishes no keyspace notifications: polling (enable them with CONFIG SET notify-keyspace-events KA)"
		if !known {
			msg = "Cannot read notify-keyspace-events (CONFIG GET refused): polling"
		}
		if s.mode != msg {
			s.log.Info().Dur("interval", s.poll).Msg(msg)
		}
		s.mode, s.polling = msg, true
		return nil
	}
	if s.mode != "notifications" {
		s.log.Info().Str("channel", s.channel).Msg("Following Redis keyspace notifications")
	}
	s.mode, s.polling = "notifications", false
	ps := s.c.PSubscribe(ctx, s.channel)
	// Wait for the confirmation: a change after it is notified.
	rctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	if _, err := ps.Receive(rctx); err != nil {
		_ = ps.Close()
		return err
	}
	s.ps = ps
	return nil
}

// read returns every string key under the prefix and its value.
func (s *store) read(ctx context.Context) ([]kv.Pair, error) {
	rctx, cancel := context.WithTimeout(ctx, 4*RequestTimeout)
	defer cancel()
	var keys []string
	seen := map[string]bool{}
	var cursor uint64
	for {
		ks, next, err := s.c.Scan(rctx, cursor, s.match, 1000).Result()
		if err != nil {
			return nil, s.fail(err)
		}
		for _, k := range ks {
			if !seen[k] { // SCAN may return a key twice
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	out := make([]kv.Pair, 0, len(keys))
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 500)]
		keys = keys[len(batch):]
		vals, err := s.c.MGet(rctx, batch...).Result()
		if err != nil {
			return nil, s.fail(err)
		}
		for i, v := range vals {
			if str, ok := v.(string); ok { // nil: deleted meanwhile, or not a string
				out = append(out, kv.Pair{Key: batch[i], Value: str})
			}
		}
	}
	return out, nil
}

// Close ends the subscription and the client.
func (s *store) Close() error {
	s.closeSub()
	return s.c.Close()
}
