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
// (docs/operations/replicas.md). The design, in Redis terms:
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
// The store can also lose shares while it answers: a FLUSHALL or FLUSHDB,
// a key deleted, a key evicted (maxmemory with an evicting policy), a
// failover to a replica that missed the last writes. So every lease
// refresh also checks that the store still holds what this replica counts:
//
//   - the hash tollgate:{<middleware>}:seq counts, per replica field, the
//     writes of that field's scripts (admissions, releases; the assertion
//     writes 1). The pipeline knows how many of its writes were answered,
//     so a different number in the store means writes were lost (or the
//     hash was), in either direction: an admission lost counts too few, a
//     release lost counts too many for ever;
//   - for every key it counts, its share in the key's hash is at least
//     what it counts (a share is never less unless the hash was deleted,
//     evicted or flushed, or another replica took this one for dead: the
//     releases counted down here and not yet sent only make it more).
//
// Anything missing, it asserts its whole state again under a new epoch, as
// after an outage. The over-admission a loss allows (the others no longer
// see this replica's shares) lasts until that refresh, a third of the
// lease expiry, and does not add up over repeated losses: an admission
// counts the caller's own share as at least what the caller counts, so a
// replica never admits past the amount on its own connections, whatever
// the store lost.
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
	// roundCap bounds the Redis operations sent in one pipelined round
	// trip (a script counts the keys it touches): a large state (many
	// clients held, many releases at once) goes in several round trips,
	// each within the store's timeout, none holding Redis for long.
	roundCap = 4096
)

// Lua scripts. Times are milliseconds of the server's own clock, so that the
// replicas' clocks need not agree.

// admitScript: KEYS[1] the key's shares, KEYS[2] the replicas' deadlines,
// KEYS[3] the replicas' write counts; ARGV me, amount, the shares' time to
// live, dry run (1|0), the lease expiry, the caller's own count of the key
// (its share is taken as at least that: a share the store lost is still
// counted by the replica that holds it). Returns {admitted (1|0), the live
// total after the call}. A replica's first admission in a middleware starts
// its lease (the refresh keeps it).
const admitScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, amount = ARGV[1], tonumber(ARGV[2])
local f = redis.call('HGETALL', KEYS[1])
local sum, mine = 0, 0
for i = 1, #f, 2 do
  local who, n = f[i], tonumber(f[i + 1])
  if who == me then
    mine = n
  else
    local dl = redis.call('HGET', KEYS[2], who)
    if dl and tonumber(dl) > now then
      sum = sum + n
    else
      redis.call('HDEL', KEYS[1], who)
    end
  end
end
sum = sum + math.max(mine, tonumber(ARGV[6]))
if sum >= amount and ARGV[4] ~= '1' then
  return {0, sum}
end
redis.call('HINCRBY', KEYS[1], me, 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('HINCRBY', KEYS[3], me, 1)
if not redis.call('HGET', KEYS[2], me) then
  redis.call('HSET', KEYS[2], me, now + tonumber(ARGV[5]))
end
return {1, sum + 1}
`

// releaseScript: KEYS[1] the key's shares, KEYS[2] the replicas' write
// counts; ARGV the field, how many.
const releaseScript = `
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -tonumber(ARGV[2]))
if n <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
return n
`

// refreshScript: KEYS[1] the replicas' deadlines, KEYS[2] their write
// counts; ARGV me, the lease expiry. Pushes me's deadline forward, forgets
// replicas dead for ten expiries, and the write counts of fields without a
// deadline. Returns {0 when me's lease had run out (the others may have
// deleted its shares), else 1 (live, or new: a middleware that just
// joined, or a deadline the store lost, which the checks of the shares
// catch); me's write count (0: none)}.
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
local seqs = redis.call('HGETALL', KEYS[2])
for i = 1, #seqs, 2 do
  if redis.call('HEXISTS', KEYS[1], seqs[i]) == 0 then
    redis.call('HDEL', KEYS[2], seqs[i])
  end
end
redis.call('PEXPIRE', KEYS[1], 20 * exp)
redis.call('PEXPIRE', KEYS[2], 20 * exp)
local seq = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if old and tonumber(old) <= now then
  return {0, seq}
end
return {1, seq}
`

// verifyScript: KEYS the shares' hashes of keys this replica counts; ARGV
// me, the shares' time to live, then per key the share this replica counts
// for it. Keeps each hash alive and returns how many hold less for me than
// that (deleted, evicted, flushed, or my share deleted).
const verifyScript = `
local lost = 0
for i = 1, #KEYS do
  local n = tonumber(redis.call('HGET', KEYS[i], ARGV[1]) or '0')
  if n < tonumber(ARGV[i + 2]) then
    lost = lost + 1
  end
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return lost
`

// verifyChunk bounds the keys one verifyScript call checks, so that no
// call holds Redis for long.
const verifyChunk = 128

var (
	admitLua   = goredis.NewScript(admitScript)
	releaseLua = goredis.NewScript(releaseScript)
	refreshLua = goredis.NewScript(refreshScript)
	verifyLua  = goredis.NewScript(verifyScript)
)

// Failure modes of an inFlightConn middleware with a store.
const (
	FailClosed = "closed"
	FailOpen   = "open"
)

// Store is one shared store of the static configuration (stores.<name>):
// its Redis client, this replica's identity in it, and the pipeline
// goroutine that owns every round trip. Made by NewRedisStore, used by the
// middlewares that name it (NewRegistry), ended by Close.
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
	wake    chan struct{} // releases are pending, or the store is dirty
	// dirty: a member's counts may not be in the store under their keys (a
	// limiter joined, with counts made while it named no store, or it
	// re-keyed them: Limiter.setV6Bits); the pipeline asserts every
	// member's counts again before its next admission.
	dirty atomic.Bool

	mu       sync.Mutex
	members  map[string]*Limiter // by middleware name
	releases map[relKey]int64

	// wrote counts, per member, the writes of this epoch's field that the
	// store answered (the assertion counts 1): what the store's write
	// count for the field must be. Owned by the pipeline goroutine.
	wrote map[string]int64

	policy atomic.Pointer[evictionPolicy] // as read at the last assertion
	losses atomic.Uint64                  // times the store had lost this replica's shares

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

// admitReq is one connection (client address a) waiting for the store's
// answer. done runs on the pipeline goroutine with the outcome.
type admitReq struct {
	l    *Limiter
	mw   string
	a    netip.Addr
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
		wrote:    map[string]int64{},
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
	return &Store{name: name, members: map[string]*Limiter{}, releases: map[relKey]int64{}, wrote: map[string]int64{},
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
func seqOf(mw string) string                 { return "tollgate:{" + mw + "}:seq" }
func (s *Store) ttlMillis() int64            { return 3 * s.expiry.Milliseconds() }
func (s *Store) refreshEvery() time.Duration { return s.expiry / 3 }

// join makes l one of the store's members under the middleware name mw:
// its shards take the store's epoch, so that its releases go to the field
// its future admissions are counted in. It reports whether l was not the
// member for mw already.
func (s *Store) join(mw string, l *Limiter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members[mw] == l {
		return false
	}
	s.members[mw] = l
	e := s.epoch.Load()
	for i := range shardCount {
		sh := &l.table()[i]
		sh.mu.Lock()
		sh.epoch = e
		sh.mu.Unlock()
	}
	return true
}

// markDirty asks the pipeline to assert every member's counts again before
// its next admission. It takes no lock (Limiter.setV6Bits calls it with
// every shard locked).
func (s *Store) markDirty() {
	s.dirty.Store(true)
	select {
	case s.wake <- struct{}{}:
	default:
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
// alive and checks its shares, sends queued admissions with pending
// releases in batches, and re-asserts the shares after an outage or a
// loss. It ends with ctx.
func (s *Store) pipeline(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(s.refreshEvery())
	defer tick.Stop()
	// While down, the store is tried more often than the leases need.
	retry := time.NewTicker(min(s.refreshEvery(), retryEvery))
	defer retry.Stop()
	s.refresh(ctx)
	batch := make([]*admitReq, 0, maxBatch)
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
			s.refresh(ctx)
		case <-retry.C:
			if !s.up.Load() {
				s.reassert(ctx)
			}
		}
	}
}

// takeReleases returns the pending releases and starts a new set.
func (s *Store) takeReleases() map[relKey]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	rels := s.releases
	s.releases = make(map[relKey]int64, len(rels))
	return rels
}

// round is the pipelined round trips of one step, sent in order.
type round struct {
	s  *Store
	ps []goredis.Pipeliner
	n  int // operations in the last pipeline
}

// add returns the pipeline for n more operations: the last one, or a new
// one when that would go past roundCap.
func (r *round) add(n int) goredis.Pipeliner {
	if len(r.ps) == 0 || (r.n > 0 && r.n+n > roundCap) {
		r.ps = append(r.ps, r.s.rdb.Pipeline())
		r.n = 0
	}
	r.n += n
	return r.ps[len(r.ps)-1]
}

// exec sends the pipelines in turn and stops at the first that fails.
func (r *round) exec(ctx context.Context) error {
	for _, p := range r.ps {
		if err := r.s.exec(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// sendReleases adds rels to rd: those of epoch e (a release of an older
// epoch was counted down before its shard was copied into the newer one,
// so the newer share has it already). It returns, per middleware, the
// writes added.
func (s *Store) sendReleases(ctx context.Context, rd *round, rels map[relKey]int64, e uint64) map[string]int64 {
	writes := map[string]int64{}
	me := s.field(e)
	for rk, n := range rels {
		if rk.epoch != e {
			continue
		}
		releaseLua.EvalSha(ctx, rd.add(1), []string{keyOf(rk.mw, rk.k), seqOf(rk.mw)}, me, n)
		writes[rk.mw]++
	}
	return writes
}

// admit sends the pending releases and the batch's admissions in one
// pipelined round trip and hands each connection its outcome. While the
// store is down the admissions fail at once, without a round trip; while
// it is dirty, the shares are asserted first.
func (s *Store) admit(ctx context.Context, batch []*admitReq) {
	if s.up.Load() && s.dirty.Swap(false) {
		s.reassert(ctx)
	}
	if !s.up.Load() {
		for _, r := range batch {
			r.done(outFailed)
		}
		return
	}
	rels := s.takeReleases()
	e := s.epoch.Load()
	me := s.field(e)
	rd := &round{s: s}
	writes := s.sendReleases(ctx, rd, rels, e)
	cmds := make([]*goredis.Cmd, len(batch))
	type mwKey struct {
		mw string
		k  netip.Addr
	}
	var ahead map[mwKey]int64 // admissions of the key earlier in the batch
	for i, r := range batch {
		dry := "0"
		if r.l.dryRun.Load() {
			dry = "1"
		}
		k := r.l.Key(r.a)
		// The caller's own count of the key, with the admissions ahead of
		// it in the batch as if admitted (an admission refused leaves the
		// key's count as it was, so the next one is refused anyway).
		own := r.l.share(k)
		if len(batch) > 1 {
			if ahead == nil {
				ahead = make(map[mwKey]int64, len(batch))
			}
			own += ahead[mwKey{r.mw, k}]
			ahead[mwKey{r.mw, k}]++
		}
		cmds[i] = admitLua.EvalSha(ctx, rd.add(1), []string{keyOf(r.mw, k), replicasOf(r.mw), seqOf(r.mw)},
			me, r.l.amount.Load(), s.ttlMillis(), dry, s.expiry.Milliseconds(), own)
	}
	if err := rd.exec(ctx); err != nil {
		s.down(err)
		for _, r := range batch {
			r.done(outFailed)
		}
		return
	}
	for mw, n := range writes {
		s.wrote[mw] += n
	}
	for i, r := range batch {
		v, cerr := cmds[i].Int64Slice()
		switch {
		case cerr != nil || len(v) != 2:
			s.down(fmt.Errorf("admit script answered %v: %v", cmds[i].Val(), cerr))
			r.done(outFailed)
		case v[0] == 1:
			s.wrote[r.mw]++
			// Counted in the limiter here, on the pipeline, before any
			// re-assertion could copy the limiter's counts.
			r.l.admitShared(r.a, v[1] > r.l.amount.Load())
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

// refresh keeps this replica's leases and shares alive and checks that the
// store still holds them (the design above); while the store is down it
// tries to reach it and, when it does, asserts this replica's shares under
// a new epoch, as it does when the store lost any of them.
func (s *Store) refresh(ctx context.Context) {
	if !s.up.Load() {
		s.reassert(ctx)
		return
	}
	if s.dirty.Swap(false) {
		s.reassert(ctx)
		return
	}
	rels := s.takeReleases()
	e := s.epoch.Load()
	me := s.field(e)
	s.mu.Lock()
	names := make([]string, 0, len(s.members))
	limiters := make([]*Limiter, 0, len(s.members))
	for n, l := range s.members {
		names = append(names, n)
		limiters = append(limiters, l)
	}
	s.mu.Unlock()
	rd := &round{s: s}
	// The releases first: the checks below count them as done.
	writes := s.sendReleases(ctx, rd, rels, e)
	cmds := make([]*goredis.Cmd, len(names))
	for i, n := range names {
		cmds[i] = refreshLua.EvalSha(ctx, rd.add(1), []string{replicasOf(n), seqOf(n)}, me, s.expiry.Milliseconds())
	}
	// What this replica counts, read after the releases were taken: a
	// release counted down since is not in the store yet, so the store
	// holds at least this much.
	ttl := strconv.FormatInt(s.ttlMillis(), 10)
	var checks []*goredis.Cmd
	for i, l := range limiters {
		var keys []string
		args := []any{me, ttl}
		flush := func() {
			checks = append(checks, verifyLua.EvalSha(ctx, rd.add(len(keys)), keys, args...))
			keys, args = nil, []any{me, ttl}
		}
		l.eachShare(func(k netip.Addr, n int64, epoch uint64) {
			if epoch != e {
				return // joined meanwhile: the store is dirty, asserted next
			}
			keys = append(keys, keyOf(names[i], k))
			args = append(args, n)
			if len(keys) == verifyChunk {
				flush()
			}
		})
		if len(keys) > 0 {
			flush()
		}
	}
	if err := rd.exec(ctx); err != nil {
		s.down(err)
		return
	}
	for mw, n := range writes {
		s.wrote[mw] += n
	}
	var lost []string
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err != nil || len(v) != 2 {
			s.down(fmt.Errorf("refresh script answered %v: %v", c.Val(), err))
			return
		}
		if v[0] != 1 {
			// Our lease lapsed (a stall longer than the expiry): the others
			// may have deleted our shares. Assert them again.
			s.down(errors.New("this replica's lease had expired"))
			s.reassert(ctx)
			return
		}
		if want := s.wrote[names[i]]; v[1] != want {
			lost = append(lost, fmt.Sprintf("%s: %d of this replica's %d writes", names[i], v[1], want))
		}
	}
	missing := int64(0)
	for _, c := range checks {
		n, err := c.Int64()
		if err != nil {
			s.down(fmt.Errorf("verify script answered %v: %v", c.Val(), err))
			return
		}
		missing += n
	}
	if missing > 0 {
		lost = append(lost, fmt.Sprintf("%d keys hold less than this replica's share", missing))
	}
	if len(lost) > 0 {
		s.losses.Add(1)
		s.log.Warn().Strs("lost", lost).Uint64("epoch", e).
			Msg("shared store lost this replica's shares (flushed, deleted or evicted keys, or writes lost in a failover): asserting them again")
		s.reassert(ctx)
	}
}

// reassert loads the scripts, reads the server's eviction policy, starts a
// new epoch and writes every member's counts as this replica's shares under
// it, then deletes the old epoch's lease, so that whatever the old field
// still holds stops counting now. On success the store is up.
func (s *Store) reassert(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, s.timeout)
	for _, sc := range []*goredis.Script{admitLua, releaseLua, refreshLua, verifyLua} {
		if err := sc.Load(lctx, s.rdb).Err(); err != nil {
			cancel()
			s.down(err)
			return
		}
	}
	s.readPolicy(lctx)
	cancel()
	s.mu.Lock()
	// Cleared before the copy: a limiter re-keyed or joined from now on
	// marks the store dirty again.
	s.dirty.Store(false)
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
	life := 20 * s.expiry
	wrote := make(map[string]int64, len(s.members))
	// In order, in as many round trips as it takes: each member's new
	// lease, its shares (counted twice, old and new, until the end: never
	// too few), then the old lease deleted.
	rd := &round{s: s}
	for n := range s.members {
		refreshLua.EvalSha(ctx, rd.add(1), []string{replicasOf(n), seqOf(n)}, me, s.expiry.Milliseconds())
	}
	for n, l := range s.members {
		l.eachShardEpoch(e, func(k netip.Addr, c int64) {
			key := keyOf(n, k)
			p := rd.add(3)
			p.HSet(ctx, key, me, c)
			p.HDel(ctx, key, was) // what a loss left of it (dead once was's lease is deleted below)
			p.PExpire(ctx, key, ttl)
		})
		wrote[n] = 1
	}
	for n := range s.members {
		p := rd.add(4)
		p.HSet(ctx, seqOf(n), me, 1)
		p.PExpire(ctx, seqOf(n), life)
		p.HDel(ctx, replicasOf(n), was)
		p.HDel(ctx, seqOf(n), was)
	}
	// Not held for the round trips: a release on an event loop waits for
	// this lock.
	s.mu.Unlock()
	if err := rd.exec(ctx); err != nil {
		if !errors.Is(err, context.Canceled) {
			s.down(err)
		}
		return
	}
	s.wrote = wrote
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
		e := s.epoch.Load()
		rd := &round{s: s}
		s.sendReleases(ctx, rd, s.takeReleases(), e)
		s.mu.Lock()
		for n := range s.members {
			p := rd.add(2)
			p.HDel(ctx, replicasOf(n), s.field(e))
			p.HDel(ctx, seqOf(n), s.field(e))
		}
		s.mu.Unlock()
		_ = rd.exec(ctx)
	}
	_ = s.rdb.Close()
}

// evictionPolicy is the server's maxmemory-policy as read at an assertion.
type evictionPolicy struct {
	policy    string // "unknown" when CONFIG GET was refused
	maxmemory string // bytes, "0" for no limit; "" when unknown
	evicts    bool   // the policy may evict tollgate's keys
}

// policyEvicts reports whether a maxmemory-policy may evict the keys
// tollgate writes. Every one of them has a time to live, so the volatile-*
// policies, which evict among the keys that have one, take them as the
// allkeys-* ones do (volatile-ttl first of all: theirs are short). Only
// noeviction keeps them: at maxmemory, writes fail, and the store counts
// as unreachable (the failure mode applies) instead of losing shares. An
// unknown policy name counts as evicting; "unknown" (not readable) does not.
func policyEvicts(policy string) bool {
	switch policy {
	case "noeviction", "unknown":
		return false
	}
	return true
}

// readPolicy reads the server's maxmemory-policy (CONFIG GET, which may be
// refused: renamed, or not allowed to the user; the policy is then
// "unknown") and logs it when it changed: a warning when it may evict the
// shares.
func (s *Store) readPolicy(ctx context.Context) {
	ep := &evictionPolicy{policy: "unknown"}
	m, err := s.rdb.ConfigGet(ctx, "maxmemory*").Result()
	if err == nil && m["maxmemory-policy"] != "" {
		ep.policy, ep.maxmemory = m["maxmemory-policy"], m["maxmemory"]
	}
	ep.evicts = policyEvicts(ep.policy)
	if prev := s.policy.Swap(ep); prev != nil && *prev == *ep {
		return
	}
	switch {
	case ep.evicts:
		s.log.Warn().Str("maxmemoryPolicy", ep.policy).Str("maxmemory", ep.maxmemory).Msg("shared store: " + evictionWarning)
	case ep.policy == "unknown":
		ev := s.log.Info()
		if err != nil {
			ev = ev.Err(err)
		}
		ev.Msg("shared store: could not read the Redis server's maxmemory-policy (CONFIG GET refused); it should be noeviction")
	}
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
	// MaxmemoryPolicy is the Redis server's maxmemory-policy as read at the
	// last (re)connection: "unknown" when CONFIG GET was refused, empty
	// before the store was first reached. EvictionRisk: the policy may
	// evict this store's keys (every policy but noeviction), and Warning
	// says what to do about it.
	MaxmemoryPolicy string `json:"maxmemoryPolicy,omitempty"`
	EvictionRisk    bool   `json:"evictionRisk"`
	Warning         string `json:"warning,omitempty"`
	// SharesLost counts the times this replica found that the store had
	// lost some of its shares (keys flushed, deleted or evicted, writes lost
	// in a failover) and asserted them again.
	SharesLost uint64 `json:"sharesLostTotal"`
}

// evictionWarning is the warning of a store whose server may evict its keys.
const evictionWarning = "the Redis server's maxmemory-policy may evict tollgate's keys (all have a time to live), and an eviction lets connections past the amount until the next lease refresh: set maxmemory-policy noeviction"

// Eviction returns the Redis server's maxmemory-policy as read at the last
// (re)connection ("unknown" when it could not be read, "" before the store
// was first reached) and whether it may evict the store's keys.
func (s *Store) Eviction() (policy string, risk bool) {
	if ep := s.policy.Load(); ep != nil {
		return ep.policy, ep.evicts
	}
	return "", false
}

// SharesLost returns the times the store had lost some of this replica's
// shares (found at a lease refresh, and asserted again).
func (s *Store) SharesLost() uint64 { return s.losses.Load() }

// RoundTrips returns the round trips made and their total duration.
func (s *Store) RoundTrips() (n uint64, total time.Duration, failed uint64) {
	return s.rtCount.Load(), time.Duration(s.rtNanos.Load()), s.failures.Load()
}

// State returns the store's state as a middleware with failure mode mode sees it.
func (s *Store) State(l *Limiter) StoreState {
	n, tot, failed := s.RoundTrips()
	st := StoreState{Name: s.name, Type: "redis", Replica: s.base, Reachable: s.up.Load(),
		LeaseExpiry: s.expiry.String(), RoundTripMicros: s.lastRT.Load() / 1000,
		RoundTrips: n, FailedRoundTrips: failed, Outages: s.downs.Load(), Queued: len(s.queue), SharesLost: s.losses.Load()}
	st.MaxmemoryPolicy, st.EvictionRisk = s.Eviction()
	if st.EvictionRisk {
		st.Warning = evictionWarning
	}
	if n > 0 {
		st.AvgRoundTripMicros = int64(tot/time.Microsecond) / int64(n)
	}
	if l != nil {
		st.FailureMode = l.failMode()
		st.Fallbacks, st.Unreachable, st.QueueFull = l.fallbacks.Load(), l.unreachable.Load(), l.queueFull.Load()
	}
	return st
}
