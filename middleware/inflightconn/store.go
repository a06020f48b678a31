package inflightconn

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/ratelog"
)

// A shared store makes an inFlightConn amount one budget across replicas
// (README, "Running several replicas"). The design, in Redis terms:
//
//   - Each replica owns its share of each client key's count: the hash
//     tollgate:{<middleware>}:ip:<key> has one field per replica (its id and
//     epoch, "host-pid-random:epoch") holding the connections that replica
//     counts for the key.
//   - Liveness: the hash tollgate:{<middleware>}:replicas maps each replica's
//     field to a deadline in the server's clock, which the replica pushes
//     forward every third of the lease expiry. A replica that stops doing so
//     (killed, cut off) is not counted once its deadline passes.
//   - Admission is one script (admitScript): it sums the shares of the live
//     replicas (deleting the dead ones' as it meets them) plus the caller's
//     own, and increments the caller's share when the sum is under the
//     amount. A release decrements the share, deleting it at zero.
//   - The {<middleware>} hash tag keeps every key of one middleware in one
//     Redis Cluster slot, so the scripts touch keys of one node only.
//
// A replica's share of a key always equals its own Limiter's count for the
// key (the Limiter counts what the store admitted, without judging it
// again). That is what makes recovery exact: after an outage the replica
// starts a new epoch (a new field name, so whatever the old one holds stops
// counting at once) and writes its counts under it, shard by shard under
// each shard's lock; a release is sent to the field of the epoch its shard
// was in when it was counted down.
//
// Round trips never run on an event loop: the middleware queues the
// connection (a bounded queue; full, the connection is refused and
// metered) and one goroutine per store, the pipeline, sends what is queued
// as one pipelined batch, with the releases that piled up meanwhile, and
// hands each answer back to the connection's loop (tcp.Conn.Later).

const (
	// queueSize bounds the admissions waiting for a round trip per store.
	queueSize = 4096
	// maxBatch bounds the commands sent in one pipelined round trip.
	maxBatch = 256
	// retryEvery is how often an unreachable store is tried again.
	retryEvery = 250 * time.Millisecond
)

// Lua scripts. Times are milliseconds of the server's own clock, so that the
// replicas' clocks need not agree.

// admitScript: KEYS[1] the key's shares, KEYS[2] the replicas' deadlines;
// ARGV me, amount, the shares' time to live, dry run (1|0), the lease expiry.
// Returns {admitted (1|0), the live total after the call}. A replica's first
// admission in a middleware starts its lease (the refresh keeps it).
const admitScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, amount = ARGV[1], tonumber(ARGV[2])
local f = redis.call('HGETALL', KEYS[1])
local sum = 0
for i = 1, #f, 2 do
  local who, n = f[i], tonumber(f[i + 1])
  if who == me then
    sum = sum + n
  else
    local dl = redis.call('HGET', KEYS[2], who)
    if dl and tonumber(dl) > now then
      sum = sum + n
    else
      redis.call('HDEL', KEYS[1], who)
    end
  end
end
if sum >= amount and ARGV[4] ~= '1' then
  return {0, sum}
end
redis.call('HINCRBY', KEYS[1], me, 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if not redis.call('HGET', KEYS[2], me) then
  redis.call('HSET', KEYS[2], me, now + tonumber(ARGV[5]))
end
return {1, sum + 1}
`

// releaseScript: KEYS[1] the key's shares; ARGV the field, how many.
const releaseScript = `
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -tonumber(ARGV[2]))
if n <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return n
`

// refreshScript: KEYS[1] the replicas' deadlines; ARGV me, the lease expiry.
// Pushes me's deadline forward and forgets replicas dead for ten expiries.
// Returns 0 when me's lease had run out (the others may have deleted its
// shares), else 1 (live, or new: a middleware that just joined).
const refreshScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = tonumber(ARGV[2])
local old = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], now + exp)
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if tonumber(all[i + 1]) < now - 10 * exp then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
redis.call('PEXPIRE', KEYS[1], 20 * exp)
if old and tonumber(old) <= now then
  return 0
end
return 1
`

var (
	admitLua   = goredis.NewScript(admitScript)
	releaseLua = goredis.NewScript(releaseScript)
	refreshLua = goredis.NewScript(refreshScript)
)

// Failure modes of an inFlightConn middleware with a store.
const (
	FailClosed = "closed"
	FailOpen   = "open"
)

// Store is one shared store of the static configuration (stores.<name>):
// its Redis client, this replica's identity in it, and the pipeline
// goroutine that owns every round trip. Made by NewRedisStore, used by the
// middlewares that name it (Registry.SetStores), ended by Close.
type Store struct {
	name    string
	rdb     goredis.UniversalClient
	expiry  time.Duration
	timeout time.Duration
	base    string // this replica: host-pid-random
	log     zerolog.Logger
	logs    ratelog.Limiter

	up    atomic.Bool
	epoch atomic.Uint64 // the epoch asserted last (or being asserted)
	// settled is the newest epoch that will be asserted again before the
	// store counts as up: a count made in a shard of that epoch or older
	// (a fallback admission, a release) is in the next assertion's copy.
	settled atomic.Uint64
	queue   chan *admitReq
	wake    chan struct{} // releases are pending

	mu       sync.Mutex
	members  map[string]*Limiter // by middleware name
	releases map[relKey]int64

	rtCount  atomic.Uint64
	rtNanos  atomic.Uint64
	lastRT   atomic.Int64
	failures atomic.Uint64
	downs    atomic.Uint64

	cancel context.CancelFunc
	done   chan struct{}
}

type relKey struct {
	mw    string
	k     netip.Addr
	epoch uint64
}

// admitReq is one connection waiting for the store's answer. done runs on
// the pipeline goroutine with the outcome.
type admitReq struct {
	l    *Limiter
	mw   string
	k    netip.Addr
	done func(o outcome)
}

type outcome uint8

const (
	outAdmitted outcome = iota // counted in the store and in the limiter
	outRejected                // the cluster-wide amount is reached
	outFailed                  // the store did not answer: the failure mode decides
)

// NewRedisStore checks cfg (the store named name; option is where it was
// written, for errors) and returns the store, not yet connected: the
// pipeline connects in the background, and until it has, the store counts
// as unreachable (the failure mode applies). tlsConf is the TLS the
// configuration asks for, or nil.
func NewRedisStore(name string, cfg *config.RedisStore, tlsConf *tls.Config, log zerolog.Logger) (*Store, error) {
	option := "stores." + name + ".redis"
	if cfg == nil {
		return nil, fmt.Errorf("%s: no configuration", option)
	}
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%s.endpoints: no endpoint (host:port)", option)
	}
	for _, e := range cfg.Endpoints {
		if err := CheckEndpoint(e); err != nil {
			return nil, fmt.Errorf("%s.endpoints: %w", option, err)
		}
	}
	if cfg.DB < 0 {
		return nil, fmt.Errorf("%s.db=%d: must not be negative", option, cfg.DB)
	}
	if cfg.MasterName == "" && (cfg.SentinelUsername != "" || cfg.SentinelPassword != "") {
		return nil, fmt.Errorf("%s: sentinelUsername and sentinelPassword need masterName (without it the endpoints are not Sentinels)", option)
	}
	if cfg.DB != 0 && cfg.MasterName == "" && len(cfg.Endpoints) > 1 {
		return nil, fmt.Errorf("%s.db=%d: Redis Cluster (several endpoints, no masterName) has only database 0", option, cfg.DB)
	}
	expiry, timeout := time.Duration(cfg.LeaseExpiry), time.Duration(cfg.Timeout)
	if expiry == 0 {
		expiry = 10 * time.Second
	}
	if timeout == 0 {
		timeout = 500 * time.Millisecond
	}
	if expiry < 300*time.Millisecond {
		return nil, fmt.Errorf("%s.leaseExpiry=%s: must be at least 300ms (refreshed every third of it)", option, expiry)
	}
	if timeout < 0 || timeout > expiry/3 {
		return nil, fmt.Errorf("%s.timeout=%s: must be positive and at most a third of leaseExpiry (%s)", option, timeout, expiry)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	host, _ := os.Hostname()
	s := &Store{
		name: name, expiry: expiry, timeout: timeout,
		base:     host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(rnd[:]),
		log:      log.With().Str("store", name).Logger(),
		queue:    make(chan *admitReq, queueSize),
		wake:     make(chan struct{}, 1),
		members:  map[string]*Limiter{},
		releases: map[relKey]int64{},
		done:     make(chan struct{}),
	}
	s.rdb = goredis.NewUniversalClient(&goredis.UniversalOptions{
		Addrs: cfg.Endpoints, MasterName: cfg.MasterName, DB: cfg.DB,
		Username: cfg.Username, Password: cfg.Password,
		SentinelUsername: cfg.SentinelUsername, SentinelPassword: cfg.SentinelPassword,
		TLSConfig:   tlsConf,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		MaxRetries: -1, DisableIdentity: true, ContextTimeoutEnabled: true,
	})
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.pipeline(ctx)
	return s, nil
}

// OfflineStore returns a store named name that is never reached: for
// tollgate check, which compiles configurations without I/O, so that a
// middleware naming a store compiles as it would in the proxy.
func OfflineStore(name string) *Store {
	return &Store{name: name, members: map[string]*Limiter{}, releases: map[relKey]int64{},
		queue: make(chan *admitReq), wake: make(chan struct{}, 1), log: zerolog.Nop()}
}

// CheckEndpoint reports whether e is a Redis endpoint, host:port with a
// port in 1..65535 and a host name or IP, and says what is wrong with it.
func CheckEndpoint(e string) error {
	host, port, err := net.SplitHostPort(e)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", e, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", e)
	}
	for _, r := range host {
		if r <= ' ' || r == '/' || r == '@' || r == 0x7f {
			return fmt.Errorf("%q: host %q is not a host name or IP", e, host)
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || strings.TrimLeft(port, "0123456789") != "" {
		return fmt.Errorf("%q: port %q is not in 1..65535", e, port)
	}
	return nil
}

// Name returns the store's name in the static configuration.
func (s *Store) Name() string { return s.name }

// Replica returns this replica's id in the store (its field, without the epoch).
func (s *Store) Replica() string { return s.base }

// Expiry returns the lease expiry.
func (s *Store) Expiry() time.Duration { return s.expiry }

// Reachable reports whether the last round trip succeeded and this
// replica's shares are asserted.
func (s *Store) Reachable() bool { return s.up.Load() }

func (s *Store) field(epoch uint64) string { return s.base + ":" + strconv.FormatUint(epoch, 10) }

func keyOf(mw string, k netip.Addr) string   { return "tollgate:{" + mw + "}:ip:" + k.String() }
func replicasOf(mw string) string            { return "tollgate:{" + mw + "}:replicas" }
func (s *Store) ttlMillis() int64            { return 3 * s.expiry.Milliseconds() }
func (s *Store) refreshEvery() time.Duration { return s.expiry / 3 }

// join makes l one of the store's members under the middleware name mw:
// its shards take the store's epoch, so that its releases go to the field
// its future admissions are counted in.
func (s *Store) join(mw string, l *Limiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members[mw] == l {
		return
	}
	s.members[mw] = l
	e := s.epoch.Load()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		sh.epoch = e
		sh.mu.Unlock()
	}
}

// leave ends l's membership (its middleware no longer names the store).
func (s *Store) leave(mw string, l *Limiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members[mw] == l {
		delete(s.members, mw)
	}
}

// enqueue queues r for the pipeline; false when the queue is full.
func (s *Store) enqueue(r *admitReq) bool {
	select {
	case s.queue <- r:
		return true
	default:
		return false
	}
}

// release counts one connection of k down in the share of epoch. While the
// store is down, a release of an epoch that will be asserted again is
// dropped: the next assertion starts from the limiter's counts.
func (s *Store) release(mw string, k netip.Addr, epoch uint64) {
	if !s.up.Load() && epoch <= s.settled.Load() {
		return
	}
	s.mu.Lock()
	s.releases[relKey{mw, k, epoch}]++
	first := len(s.releases) == 1
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// pipeline owns every round trip: it connects, keeps this replica's leases
// alive, sends queued admissions with pending releases in batches, and
// re-asserts the shares after an outage. It ends with ctx.
func (s *Store) pipeline(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(s.refreshEvery())
	defer tick.Stop()
	// While down, the store is tried more often than the leases need.
	retry := time.NewTicker(min(s.refreshEvery(), retryEvery))
	defer retry.Stop()
	s.refresh(ctx, true)
	batch := make([]*admitReq, 0, maxBatch)
	ticks := 0
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.queue:
			batch = append(batch[:0], r)
		fill:
			for len(batch) < maxBatch {
				select {
				case r := <-s.queue:
					batch = append(batch, r)
				default:
					break fill
				}
			}
			s.admit(ctx, batch)
			clear(batch)
		case <-s.wake:
			if s.up.Load() {
				s.admit(ctx, nil)
			}
		case <-tick.C:
			ticks++
			s.refresh(ctx, ticks%3 == 0)
		case <-retry.C:
			if !s.up.Load() {
				s.reassert(ctx)
			}
		}
	}
}

// admit sends the pending releases and the batch's admissions in one
// pipelined round trip and hands each connection its outcome. While the
// store is down the admissions fail at once, without a round trip.
func (s *Store) admit(ctx context.Context, batch []*admitReq) {
	if !s.up.Load() {
		for _, r := range batch {
			r.done(outFailed)
		}
		return
	}
	s.mu.Lock()
	rels := s.releases
	s.releases = make(map[relKey]int64, len(rels))
	s.mu.Unlock()
	e := s.epoch.Load()
	me := s.field(e)
	p := s.rdb.Pipeline()
	for rk, n := range rels {
		releaseLua.EvalSha(ctx, p, []string{keyOf(rk.mw, rk.k)}, s.field(rk.epoch), n)
	}
	cmds := make([]*goredis.Cmd, len(batch))
	for i, r := range batch {
		dry := "0"
		if r.l.dryRun.Load() {
			dry = "1"
		}
		cmds[i] = admitLua.EvalSha(ctx, p, []string{keyOf(r.mw, r.k), replicasOf(r.mw)}, me, r.l.amount.Load(), s.ttlMillis(), dry, s.expiry.Milliseconds())
	}
	err := s.exec(ctx, p)
	if err != nil {
		s.down(err)
		for _, r := range batch {
			r.done(outFailed)
		}
		return
	}
	for i, r := range batch {
		v, cerr := cmds[i].Int64Slice()
		switch {
		case cerr != nil || len(v) != 2:
			s.down(fmt.Errorf("admit script answered %v: %v", cmds[i].Val(), cerr))
			r.done(outFailed)
		case v[0] == 1:
			// Counted in the limiter here, on the pipeline, before any
			// re-assertion could copy the limiter's counts.
			r.l.admitShared(r.k, v[1] > r.l.amount.Load())
			r.done(outAdmitted)
		default:
			r.l.rejects.Add(1)
			r.done(outRejected)
		}
	}
}

// exec runs p with the store's timeout and meters the round trip.
func (s *Store) exec(ctx context.Context, p goredis.Pipeliner) error {
	if p.Len() == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	t0 := time.Now()
	_, err := p.Exec(ctx)
	d := time.Since(t0)
	s.rtCount.Add(1)
	s.rtNanos.Add(uint64(d))
	s.lastRT.Store(int64(d))
	if err != nil {
		s.failures.Add(1)
	}
	return err
}

// down marks the store unreachable (the failure mode applies from now on)
// and logs it, rate-limited.
func (s *Store) down(err error) {
	s.settled.Store(s.epoch.Load())
	if s.up.Swap(false) {
		s.downs.Add(1)
	}
	if ok, sup := s.logs.Allow(0); ok {
		ev := s.log.Warn().Err(err)
		if sup > 0 {
			ev = ev.Uint64("suppressed", sup)
		}
		ev.Msg("shared store unreachable: inFlightConn middlewares naming it apply their failureMode")
	}
}

// refresh keeps this replica's leases alive (and, with touch, the shares'
// keys); while the store is down it tries to reach it and, when it does,
// asserts this replica's shares under a new epoch.
func (s *Store) refresh(ctx context.Context, touch bool) {
	if !s.up.Load() {
		s.reassert(ctx)
		return
	}
	s.mu.Lock()
	names := make([]string, 0, len(s.members))
	for n := range s.members {
		names = append(names, n)
	}
	var keys []string
	if touch {
		for n, l := range s.members {
			l.eachKey(func(k netip.Addr, _ int64) { keys = append(keys, keyOf(n, k)) })
		}
	}
	s.mu.Unlock()
	me := s.field(s.epoch.Load())
	p := s.rdb.Pipeline()
	cmds := make([]*goredis.Cmd, len(names))
	for i, n := range names {
		cmds[i] = refreshLua.EvalSha(ctx, p, []string{replicasOf(n)}, me, s.expiry.Milliseconds())
	}
	for _, k := range keys {
		p.PExpire(ctx, k, time.Duration(s.ttlMillis())*time.Millisecond)
	}
	if err := s.exec(ctx, p); err != nil {
		s.down(err)
		return
	}
	for _, c := range cmds {
		if v, _ := c.Int64(); v != 1 {
			// Our lease lapsed (a stall longer than the expiry): the others
			// may have deleted our shares. Assert them again.
			s.down(errors.New("this replica's lease had expired"))
			s.reassert(ctx)
			return
		}
	}
}

// reassert loads the scripts, starts a new epoch and writes every member's
// counts as this replica's shares under it, then deletes the old epoch's
// lease, so that whatever the old field still holds stops counting now.
// On success the store is up again.
func (s *Store) reassert(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, s.timeout)
	for _, sc := range []*goredis.Script{admitLua, releaseLua, refreshLua} {
		if err := sc.Load(lctx, s.rdb).Err(); err != nil {
			cancel()
			s.down(err)
			return
		}
	}
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.epoch.Load()
	e := old + 1
	s.epoch.Store(e)
	for rk := range s.releases { // counted down already in the limiters' counts
		if rk.epoch != e {
			delete(s.releases, rk)
		}
	}
	me, was := s.field(e), s.field(old)
	ttl := time.Duration(s.ttlMillis()) * time.Millisecond
	p := s.rdb.Pipeline()
	for n, l := range s.members {
		refreshLua.EvalSha(ctx, p, []string{replicasOf(n)}, me, s.expiry.Milliseconds())
		l.eachShardEpoch(e, func(k netip.Addr, c int64) {
			key := keyOf(n, k)
			p.HSet(ctx, key, me, c)
			p.PExpire(ctx, key, ttl)
		})
		p.HDel(ctx, replicasOf(n), was)
	}
	if err := s.exec(ctx, p); err != nil {
		if !errors.Is(err, context.Canceled) {
			s.down(err)
		}
		return
	}
	if !s.up.Swap(true) {
		s.log.Info().Uint64("epoch", e).Msg("shared store reachable: this replica's shares asserted")
	}
}

// Close ends the pipeline after a last flush of the releases and deletes
// this replica's leases, so that its shares stop counting at once (its
// connections are over). It waits at most the store's timeout for Redis.
func (s *Store) Close() {
	if s.cancel == nil {
		return // OfflineStore
	}
	s.cancel()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if s.up.Load() {
		s.mu.Lock()
		rels := s.releases
		s.releases = map[relKey]int64{}
		p := s.rdb.Pipeline()
		for rk, n := range rels {
			releaseLua.EvalSha(ctx, p, []string{keyOf(rk.mw, rk.k)}, s.field(rk.epoch), n)
		}
		for n := range s.members {
			p.HDel(ctx, replicasOf(n), s.field(s.epoch.Load()))
		}
		s.mu.Unlock()
		_ = s.exec(ctx, p)
	}
	_ = s.rdb.Close()
}

// StoreState is a store's state for the API, beside the middleware naming it.
type StoreState struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Replica     string `json:"replica"`
	Reachable   bool   `json:"reachable"`
	FailureMode string `json:"failureMode"`
	LeaseExpiry string `json:"leaseExpiry"`
	// RoundTripMicros is the last round trip's duration; AvgRoundTripMicros
	// the mean of all.
	RoundTripMicros    int64  `json:"roundTripMicros"`
	AvgRoundTripMicros int64  `json:"avgRoundTripMicros"`
	RoundTrips         uint64 `json:"roundTripsTotal"`
	FailedRoundTrips   uint64 `json:"failedRoundTripsTotal"`
	Outages            uint64 `json:"outagesTotal"`
	Queued             int    `json:"queued"`
	// Fallbacks are connections admitted by the per-replica amount while
	// the store was unreachable (failureMode open); Unreachable those
	// rejected for it (closed); QueueFull those refused because the queue
	// of round trips was full.
	Fallbacks   uint64 `json:"fallbacksTotal"`
	Unreachable uint64 `json:"rejectedUnreachableTotal"`
	QueueFull   uint64 `json:"rejectedQueueFullTotal"`
}

// RoundTrips returns the round trips made and their total duration.
func (s *Store) RoundTrips() (n uint64, total time.Duration, failed uint64) {
	return s.rtCount.Load(), time.Duration(s.rtNanos.Load()), s.failures.Load()
}

// State returns the store's state as a middleware with failure mode mode sees it.
func (s *Store) State(l *Limiter) StoreState {
	n, tot, failed := s.RoundTrips()
	st := StoreState{Name: s.name, Type: "redis", Replica: s.base, Reachable: s.up.Load(),
		LeaseExpiry: s.expiry.String(), RoundTripMicros: s.lastRT.Load() / 1000,
		RoundTrips: n, FailedRoundTrips: failed, Outages: s.downs.Load(), Queued: len(s.queue)}
	if n > 0 {
		st.AvgRoundTripMicros = int64(tot/time.Microsecond) / int64(n)
	}
	if l != nil {
		st.FailureMode = l.failMode()
		st.Fallbacks, st.Unreachable, st.QueueFull = l.fallbacks.Load(), l.unreachable.Load(), l.queueFull.Load()
	}
	return st
}
