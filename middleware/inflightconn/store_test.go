package inflightconn

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

func TestMain(m *testing.M) { os.Exit(itest.Main(m)) }

// replica is one simulated tollgate: a store and a limiter linked to it.
type replica struct {
	s *Store
	l *Limiter
}

const testMW = "limit@file"

// newStore makes the store "shared" on addr (closed at cleanup) and a
// registry that has it.
func newStore(t *testing.T, addr string, expiry time.Duration) (*Store, *Registry) {
	t.Helper()
	cfg := &config.RedisStore{Endpoints: []string{addr}, LeaseExpiry: config.Duration(expiry), Timeout: config.Duration(expiry / 4)}
	s, err := NewRedisStore("shared", cfg, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	reg := NewRegistry(map[string]*Store{"shared": s})
	return s, reg
}

func newReplica(t *testing.T, addr string, expiry time.Duration, amount int64, mode string) *replica {
	t.Helper()
	s, reg := newStore(t, addr, expiry)
	_, l, _, err := newMiddleware(testMW, &config.TCPInFlightConn{Amount: amount, Store: "shared", FailureMode: mode}, reg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	itest.Eventually(t, 5*time.Second, s.Reachable, "the store did not become reachable")
	return &replica{s: s, l: l}
}

// admit asks the store for one connection of k, as the middleware does, and
// waits for the outcome.
func (r *replica) admit(t *testing.T, k netip.Addr) outcome {
	t.Helper()
	ch := make(chan outcome, 1)
	if !r.s.enqueue(&admitReq{l: r.l, mw: testMW, a: k, done: func(o outcome) { ch <- o }}) {
		t.Fatal("queue full")
	}
	select {
	case o := <-ch:
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("no answer from the pipeline")
		return outFailed
	}
}

func (r *replica) admitN(t *testing.T, k netip.Addr, n int) (admitted int) {
	t.Helper()
	for range n {
		if r.admit(t, k) == outAdmitted {
			admitted++
		}
	}
	return admitted
}

// kill ends the replica's pipeline without deleting its leases: it stops
// refreshing, as a SIGKILLed process does.
func (r *replica) kill() {
	r.s.cancel()
	<-r.s.done
	r.s.up.Store(false)
}

func shares(t *testing.T, rdb *goredis.Client, k netip.Addr) map[string]string {
	t.Helper()
	m, err := rdb.HGetAll(context.Background(), keyOf(testMW, k)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var (
	ipA = netip.MustParseAddr("127.0.0.2")
	ipB = netip.MustParseAddr("127.0.0.3")
)

// The scripts' semantics: the amount is one budget across replicas, per
// key; a release frees a slot for any replica; a share is deleted at zero;
// a replica that stops refreshing stops counting after the expiry.
func TestSharedBudgetScripts(t *testing.T) {
	srv := itest.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	const expiry = 900 * time.Millisecond
	a := newReplica(t, srv.Addr, expiry, 3, "")
	b := newReplica(t, srv.Addr, expiry, 3, "")

	if got := a.admitN(t, ipA, 2); got != 2 {
		t.Fatalf("replica a admitted %d of 2", got)
	}
	if got := b.admitN(t, ipA, 3); got != 1 {
		t.Fatalf("replica b admitted %d of 3 with 2 open on a, amount 3: want 1", got)
	}
	if o := a.admit(t, ipB); o != outAdmitted {
		t.Fatalf("another key was refused (%d): keys must have budgets of their own", o)
	}
	if a.l.Count(ipA) != 2 || b.l.Count(ipA) != 1 {
		t.Fatalf("local counts %d, %d: want each replica's share, 2 and 1", a.l.Count(ipA), b.l.Count(ipA))
	}
	sh := shares(t, rdb, ipA)
	if sh[a.s.field(a.s.epoch.Load())] != "2" || sh[b.s.field(b.s.epoch.Load())] != "1" || len(sh) != 2 {
		t.Fatalf("shares in Redis: %v", sh)
	}

	// A release on a frees a slot that b can take.
	a.l.Release(ipA)
	itest.Eventually(t, 3*time.Second, func() bool { return shares(t, rdb, ipA)[a.s.field(a.s.epoch.Load())] == "1" },
		"a's release did not reach Redis: %v", shares(t, rdb, ipA))
	if o := b.admit(t, ipA); o != outAdmitted {
		t.Fatalf("b refused after a's release (%d)", o)
	}
	// ipB's only connection ends: its share (and hash) are deleted.
	a.l.Release(ipB)
	itest.Eventually(t, 3*time.Second, func() bool { return len(shares(t, rdb, ipB)) == 0 }, "a share at zero was kept: %v", shares(t, rdb, ipB))

	// b dies holding 2: a gets nothing now, b's 2 once its lease expired.
	b.kill()
	if o := a.admit(t, ipA); o != outRejected {
		t.Fatalf("a admitted (%d) while b's lease is live: budget 3 = 1 (a) + 2 (b)", o)
	}
	killed := time.Now()
	itest.Eventually(t, 3*expiry, func() bool { return a.admit(t, ipA) == outAdmitted }, "b's shares still count %s after it stopped", 3*expiry)
	if d := time.Since(killed); d < expiry/3 {
		t.Errorf("b's shares stopped counting %s after it stopped, before any expiry could pass", d)
	}
	if got := a.admitN(t, ipA, 2); got != 1 {
		t.Fatalf("after b's expiry a admitted %d more: want exactly 1 (a holds 2 of 3)", got)
	}
	if _, dead := shares(t, rdb, ipA)[b.s.field(b.s.epoch.Load())]; dead {
		t.Errorf("the dead replica's share was not deleted by the admission that met it: %v", shares(t, rdb, ipA))
	}
}

// Leases are refreshed: a live replica's shares keep counting long past
// the expiry, with no admission in between.
func TestSharedLeaseRefreshed(t *testing.T) {
	srv := itest.StartRedis(t)
	const expiry = 600 * time.Millisecond
	a := newReplica(t, srv.Addr, expiry, 2, "")
	b := newReplica(t, srv.Addr, expiry, 2, "")
	if got := a.admitN(t, ipA, 2); got != 2 {
		t.Fatalf("a admitted %d of 2", got)
	}
	deadline := time.Now().Add(4 * expiry)
	for time.Now().Before(deadline) {
		if o := b.admit(t, ipA); o != outRejected {
			t.Fatalf("b admitted (%d) while a holds the amount and refreshes its lease", o)
		}
		time.Sleep(expiry / 5)
	}
}

// The store stops: closed rejects, open falls back to the amount in this
// replica alone; the store returns empty (restarted without data): the
// replica asserts its counts again, so the cluster total is right within
// one expiry.
func TestSharedOutageAndReassert(t *testing.T) {
	srv := itest.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	const expiry = 900 * time.Millisecond
	open := newReplica(t, srv.Addr, expiry, 3, "open")
	closed := newReplica(t, srv.Addr, expiry, 3, "closed")
	if got := open.admitN(t, ipA, 1); got != 1 {
		t.Fatal("open replica refused its first connection")
	}

	srv.Stop()
	itest.Eventually(t, 3*expiry, func() bool { return !open.s.Reachable() && !closed.s.Reachable() }, "the stopped store still counts as reachable")
	if o := closed.admit(t, ipA); o != outFailed {
		t.Fatalf("the pipeline answered %d with the store down: want failed (the middleware applies the failure mode)", o)
	}
	// The open replica's fallback: its own count against the amount.
	for i := 0; i < 2; i++ {
		if ok, retry := open.l.acquireFallback(ipA, open.s.settled.Load()); !ok || retry {
			t.Fatalf("fallback %d: ok %v retry %v", i+1, ok, retry)
		}
	}
	if ok, _ := open.l.acquireFallback(ipA, open.s.settled.Load()); ok {
		t.Fatal("fallback admitted past the per-replica amount")
	}
	open.l.Release(ipA) // released while down: 2 left locally

	srv.Start()
	itest.Eventually(t, expiry+time.Second, open.s.Reachable, "the replica did not reach the store again within one expiry")
	f := open.s.field(open.s.epoch.Load())
	itest.Eventually(t, time.Second, func() bool { return shares(t, rdb, ipA)[f] == "2" }, "open replica's share after reconnecting: %v, want 2", shares(t, rdb, ipA))
	itest.Eventually(t, expiry+time.Second, closed.s.Reachable, "the closed replica did not reach the store again")
	if got := closed.admitN(t, ipA, 3); got != 1 {
		t.Fatalf("after the store returned, closed replica admitted %d: want 1 (the open one holds 2 of 3)", got)
	}
	// The reasserted share is released exactly: no drift.
	open.l.Release(ipA)
	open.l.Release(ipA)
	itest.Eventually(t, 2*time.Second, func() bool { _, ok := shares(t, rdb, ipA)[f]; return !ok }, "share after releasing everything: %v", shares(t, rdb, ipA))
}

// A store's endpoints and durations are checked with errors that name them.
func TestNewRedisStoreErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  config.RedisStore
		want string
	}{
		{config.RedisStore{}, "stores.s.redis.endpoints: no endpoint"},
		{config.RedisStore{Endpoints: []string{"localhost"}}, `"localhost" is not host:port`},
		{config.RedisStore{Endpoints: []string{"h:0"}}, `port "0" is not in 1..65535`},
		{config.RedisStore{Endpoints: []string{":6379"}}, "has no host"},
		{config.RedisStore{Endpoints: []string{"a:1", "b:2"}, DB: 2}, "Redis Cluster"},
		{config.RedisStore{Endpoints: []string{"a:1"}, SentinelPassword: "x"}, "stores.s.redis: sentinelUsername and sentinelPassword need masterName"},
		{config.RedisStore{Endpoints: []string{"a:1"}, LeaseExpiry: config.Duration(100 * time.Millisecond)}, "leaseExpiry=100ms"},
		{config.RedisStore{Endpoints: []string{"a:1"}, LeaseExpiry: config.Duration(3 * time.Second), Timeout: config.Duration(2 * time.Second)}, "timeout=2s"},
	} {
		cfg := tc.cfg
		_, err := NewRedisStore("s", &cfg, nil, zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to say %q", tc.cfg, err, tc.want)
		}
	}
}

// A middleware naming an unknown store, or a bad failure mode, is an error
// naming the field.
func TestStoreOptionErrors(t *testing.T) {
	reg := &Registry{}
	_, _, _, err := newMiddleware("m@file", &config.TCPInFlightConn{Amount: 1, Store: "nope"}, reg, zerolog.Nop())
	if err == nil || config.FieldOf(err) != "inFlightConn.store" || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown store: %v", err)
	}
	_, _, _, err = newMiddleware("m@file", &config.TCPInFlightConn{Amount: 1, FailureMode: "ajar"}, reg, zerolog.Nop())
	if err == nil || config.FieldOf(err) != "inFlightConn.failureMode" {
		t.Errorf("bad failure mode: %v", err)
	}
	_, _, warns, err := newMiddleware("m@file", &config.TCPInFlightConn{Amount: 1, FailureMode: "open"}, reg, zerolog.Nop())
	if err != nil || len(warns) != 1 || !strings.Contains(warns[0].Message, "no effect") || warns[0].Field != "inFlightConn.failureMode" {
		t.Errorf("failure mode without a store: warnings %+v, err %v", warns, err)
	}
}

func FuzzCheckEndpoint(f *testing.F) {
	for _, s := range []string{"127.0.0.1:6379", "[::1]:6379", "redis:1", "h:0", "h:65536", ":1", "a b:1", "h:-1", "h:+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, e string) {
		err := CheckEndpoint(e)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(e)) {
				t.Fatalf("error %q does not name the endpoint %q", err, e)
			}
			return
		}
		host, port, err := net.SplitHostPort(e)
		if err != nil || host == "" {
			t.Fatalf("accepted %q: %v", e, err)
		}
		if p, perr := strconv.Atoi(port); perr != nil || p < 1 || p > 65535 || strings.TrimLeft(port, "0123456789") != "" {
			t.Fatalf("accepted %q with port %q", e, port)
		}
	})
}

// The scripts are legal in Redis Cluster (every key of a middleware in one
// slot, through its hash tag: a cross-slot script is refused even on one
// node) and the store finds the master through Sentinel. One redis-server
// plays a one-node cluster, another a master watched by a Sentinel.
func TestSharedClusterAndSentinel(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		dir := t.TempDir()
		// The cluster bus listens on a port of its own: by default the
		// server's port + 10000, which lands in the kernel's ephemeral range,
		// where an outgoing connection may hold it (CI: "bind: Address already
		// in use" on 39012). So it is picked like the server's.
		srv := itest.StartRedis(t, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(itest.FreePort(t)),
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--dir", dir)
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DisableIdentity: true})
		defer c.Close()
		if err := c.ClusterAddSlotsRange(context.Background(), 0, 16383).Err(); err != nil {
			t.Fatal(err)
		}
		itest.Eventually(t, 10*time.Second, func() bool {
			info, _ := c.ClusterInfo(context.Background()).Result()
			return strings.Contains(info, "cluster_state:ok")
		}, "the one-node cluster did not become ok")
		// Two endpoints (the same node twice) make a Cluster client.
		cfg := &config.RedisStore{Endpoints: []string{srv.Addr, srv.Addr}, LeaseExpiry: config.Duration(900 * time.Millisecond), Timeout: config.Duration(200 * time.Millisecond)}
		checkTwoReplicas(t, cfg)
	})
	// The master and the Sentinel each want a password of their own.
	t.Run("sentinel", func(t *testing.T) {
		master := itest.StartRedis(t, "--requirepass", "server-pw")
		sen := itest.StartSentinel(t, master.Addr, "sentinel-pw", "sentinel auth-pass mymaster server-pw", "requirepass sentinel-pw")
		sc := goredis.NewSentinelClient(&goredis.Options{Addr: sen.Addr, Password: "sentinel-pw", DisableIdentity: true})
		defer sc.Close()
		itest.Eventually(t, 15*time.Second, func() bool {
			return sc.GetMasterAddrByName(context.Background(), "mymaster").Err() == nil
		}, "the Sentinel does not name the master")
		cfg := &config.RedisStore{Endpoints: []string{sen.Addr}, MasterName: "mymaster", Password: "server-pw", SentinelPassword: "sentinel-pw",
			LeaseExpiry: config.Duration(900 * time.Millisecond), Timeout: config.Duration(200 * time.Millisecond)}
		checkTwoReplicas(t, cfg)
	})
}

// checkTwoReplicas: two replicas on cfg share amount 2 for one key.
func checkTwoReplicas(t *testing.T, cfg *config.RedisStore) {
	t.Helper()
	var rs []*replica
	for range 2 {
		s, err := NewRedisStore("shared", cfg, nil, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		reg := NewRegistry(map[string]*Store{"shared": s})
		_, l, _, err := newMiddleware(testMW, &config.TCPInFlightConn{Amount: 2, Store: "shared"}, reg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		itest.Eventually(t, 5*time.Second, s.Reachable, "the store did not become reachable")
		rs = append(rs, &replica{s: s, l: l})
	}
	if got := rs[0].admitN(t, ipA, 1) + rs[1].admitN(t, ipA, 3); got != 2 {
		t.Fatalf("two replicas admitted %d for one key, amount 2", got)
	}
	rs[0].l.Release(ipA)
	itest.Eventually(t, 3*time.Second, func() bool { return rs[1].admit(t, ipA) == outAdmitted }, "the release on one replica did not free a slot for the other")
}

// The round trips waiting for a store are bounded: past the queue's size a
// connection is refused at once, metered, and never reaches the next handler.
func TestSharedQueueBounded(t *testing.T) {
	s := OfflineStore("shared")
	s.queue = make(chan *admitReq, queueSize) // a pipeline that never drains it
	s.up.Store(true)
	reg := NewRegistry(map[string]*Store{"shared": s})
	mw, l, _, err := newMiddleware(testMW, &config.TCPInFlightConn{Amount: 1, Store: "shared"}, reg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	var served int
	h := mw(tcp.HandlerFunc(func(c *tcp.Conn) { served++ }))
	for i := 0; i < queueSize+10; i++ {
		h.ServeTCP(&tcp.Conn{Client: netip.AddrPortFrom(ipA, uint16(i))})
	}
	if _, _, full := l.StoreCounts(); full != 10 || served != 0 || len(s.queue) != queueSize {
		t.Fatalf("queue %d of %d, %d refused as full, %d served: want the queue full, 10 refused, none served", len(s.queue), queueSize, full, served)
	}
	if st := l.Stats(); st.Rejected != 10 || st.InFlight != 0 {
		t.Fatalf("stats %+v: the refused are rejections, nothing is counted in flight", st)
	}
}

// A replica whose lease ran out while it still served (a stall, a
// partition) has its shares deleted by the others; at its next refresh it
// sees the lapse and asserts them again, under a new epoch.
func TestSharedLapsedLeaseReasserted(t *testing.T) {
	srv := itest.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	const expiry = 900 * time.Millisecond
	a := newReplica(t, srv.Addr, expiry, 3, "")
	b := newReplica(t, srv.Addr, expiry, 3, "")
	if got := a.admitN(t, ipA, 2); got != 2 {
		t.Fatalf("a admitted %d of 2", got)
	}
	old := a.s.epoch.Load()
	// The lapse, as the others see it: a's deadline in the past.
	if err := rdb.HSet(context.Background(), replicasOf(testMW), a.s.field(old), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := b.admitN(t, ipA, 1); got != 1 {
		t.Fatal("b was refused although a's lease had run out")
	}
	itest.Eventually(t, 3*expiry, func() bool { return a.s.epoch.Load() > old && a.s.Reachable() }, "a did not notice its lease had run out")
	f := a.s.field(a.s.epoch.Load())
	itest.Eventually(t, time.Second, func() bool { return shares(t, rdb, ipA)[f] == "2" }, "a's shares after the lapse: %v", shares(t, rdb, ipA))
	if o := b.admit(t, ipA); o != outRejected {
		t.Fatalf("b admitted (%d) with a's 2 and its 1 of 3 counted again", o)
	}
}

// Connections imported at an upgrade are the predecessor's in the store:
// re-asserting this replica's shares leaves them out, and their releases
// do not touch the store.
func TestSharedReassertLeavesImportsOut(t *testing.T) {
	srv := itest.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	const expiry = 900 * time.Millisecond
	a := newReplica(t, srv.Addr, expiry, 5, "")
	a.l.Import(ipA, 2)
	if got := a.admitN(t, ipA, 1); got != 1 {
		t.Fatal("refused with 2 imported (not in the store) and amount 5")
	}
	srv.Stop()
	itest.Eventually(t, 3*expiry, func() bool { return !a.s.Reachable() }, "the stopped store still counts as reachable")
	srv.Start()
	itest.Eventually(t, 3*expiry, a.s.Reachable, "not reachable again")
	f := a.s.field(a.s.epoch.Load())
	itest.Eventually(t, time.Second, func() bool { return shares(t, rdb, ipA)[f] == "1" }, "re-asserted share %v, want 1 (the 2 imported are the predecessor's)", shares(t, rdb, ipA))
	a.l.ReleaseLocal(ipA)
	a.l.ReleaseLocal(ipA)
	if a.l.Count(ipA) != 1 {
		t.Fatalf("local count %d after releasing the imports, want 1", a.l.Count(ipA))
	}
	a.l.Release(ipA)
	itest.Eventually(t, 2*time.Second, func() bool { return len(shares(t, rdb, ipA)) == 0 }, "share after the last release: %v", shares(t, rdb, ipA))
}

// liveTotal is a key's count as every replica's admission sees it: the
// shares of the replicas whose lease is live, in the server's clock.
func liveTotal(t *testing.T, rdb *goredis.Client, k netip.Addr) int64 {
	t.Helper()
	n, err := rdb.Eval(context.Background(), `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HGETALL', KEYS[1])
local sum = 0
for i = 1, #f, 2 do
  local dl = redis.call('HGET', KEYS[2], f[i])
  if dl and tonumber(dl) > now then sum = sum + tonumber(f[i + 1]) end
end
return sum`, []string{keyOf(testMW, k), replicasOf(testMW)}).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startPair starts a redis-server with args and two replicas on it with
// the lease expiry and amount given. rdb is a client of the server, closed
// at cleanup.
func startPair(t *testing.T, expiry time.Duration, amount int64, args ...string) (rdb *goredis.Client, a, b *replica) {
	t.Helper()
	srv := itest.StartRedis(t, args...)
	rdb = goredis.NewClient(&goredis.Options{Addr: srv.Addr, DisableIdentity: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb, newReplica(t, srv.Addr, expiry, amount, ""), newReplica(t, srv.Addr, expiry, amount, "")
}

// holdingPair is startPair with amount 3, a holding the amount for ipA.
func holdingPair(t *testing.T, expiry time.Duration) (rdb *goredis.Client, a, b *replica) {
	t.Helper()
	rdb, a, b = startPair(t, expiry, 3)
	if got := a.admitN(t, ipA, 3); got != 3 {
		t.Fatalf("a admitted %d of 3", got)
	}
	return rdb, a, b
}

// lossRefresh is how long a replica may take to find and repair a loss:
// one lease refresh (a third of the expiry) plus a margin for the round
// trips and a loaded machine.
func lossRefresh(expiry time.Duration) time.Duration { return expiry/3 + 700*time.Millisecond }

// The store loses a replica's shares while it answers (issue 41): a
// FLUSHALL, the replicas' deadlines deleted, a key's hash deleted (what an
// eviction does), a failover to a server that missed the last release or
// admission. Replica a holds the amount, 3, for one client; b admits what
// it can right after the loss (the window a loss opens). Within one lease
// refresh a has asserted its shares again: the cluster-wide count is every
// connection held, and once b's window admissions end it is the amount and
// admissions are refused. Three losses in a row, each repaired alike.
func TestSharedStoreLosesShares(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, rdb *goredis.Client, a *replica)
	}{
		{"flushall", func(t *testing.T, rdb *goredis.Client, _ *replica) {
			must(t, rdb.FlushAll(ctx).Err())
		}},
		{"del-replicas", func(t *testing.T, rdb *goredis.Client, _ *replica) {
			must(t, rdb.Del(ctx, replicasOf(testMW)).Err())
		}},
		{"del-ip-hash", func(t *testing.T, rdb *goredis.Client, _ *replica) {
			must(t, rdb.Del(ctx, keyOf(testMW, ipA)).Err())
		}},
		// A failover to a server that missed a's last release: its share is
		// one more than it holds, and its write count one less.
		{"lost-release", func(t *testing.T, rdb *goredis.Client, a *replica) {
			f := a.s.field(a.s.epoch.Load())
			must(t, rdb.HIncrBy(ctx, keyOf(testMW, ipA), f, 1).Err())
			must(t, rdb.HIncrBy(ctx, seqOf(testMW), f, -1).Err())
		}},
		// ... that missed a's last admission: one less, and one less.
		{"lost-admission", func(t *testing.T, rdb *goredis.Client, a *replica) {
			f := a.s.field(a.s.epoch.Load())
			must(t, rdb.HIncrBy(ctx, keyOf(testMW, ipA), f, -1).Err())
			must(t, rdb.HIncrBy(ctx, seqOf(testMW), f, -1).Err())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const expiry = 900 * time.Millisecond
			rdb, a, b := holdingPair(t, expiry)
			for round := 1; round <= 3; round++ {
				tc.lose(t, rdb, a)
				lost := time.Now()
				window := b.admitN(t, ipA, 3)
				held := a.l.Count(ipA) + b.l.Count(ipA)
				itest.Eventually(t, lossRefresh(expiry), func() bool { return liveTotal(t, rdb, ipA) == held },
					"loss %d: the store counts %d for %s, the replicas hold %d (a %d, b %d admitted in the window)",
					round, liveTotal(t, rdb, ipA), ipA, held, a.l.Count(ipA), window)
				t.Logf("loss %d: %d admitted in the window, all %d counted again after %s", round, window, held, time.Since(lost).Round(time.Millisecond))
				for range window {
					b.l.Release(ipA)
				}
				itest.Eventually(t, 3*time.Second, func() bool { return liveTotal(t, rdb, ipA) == 3 },
					"loss %d: after b's window connections ended the store counts %d, want a's 3", round, liveTotal(t, rdb, ipA))
				if got := b.admitN(t, ipA, 2); got != 0 {
					t.Fatalf("loss %d: b admitted %d with a holding the amount 3", round, got)
				}
				if o := a.admit(t, ipA); o != outRejected {
					t.Fatalf("loss %d: a admitted (%d) holding the amount 3", round, o)
				}
			}
			if tc.name != "del-replicas" && a.s.SharesLost() == 0 {
				t.Error("the losses were repaired but not counted (sharesLostTotal)")
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Repeated losses do not add up: with both replicas admitting all they can
// right after each of three FLUSHALLs, the three let in at most 3 in all
// (b's own amount; the first flush usually all of them, unless a's refresh
// comes first): a replica counts its own connections whatever the store
// lost, so only a replica short of the amount on its own admits.
func TestSharedRepeatedFlushesDoNotAddUp(t *testing.T) {
	const expiry = 900 * time.Millisecond
	rdb, a, b := holdingPair(t, expiry)
	var admitted []int
	for round := 1; round <= 3; round++ {
		must(t, rdb.FlushAll(context.Background()).Err())
		admitted = append(admitted, a.admitN(t, ipA, 3)+b.admitN(t, ipA, 3))
		held := a.l.Count(ipA) + b.l.Count(ipA)
		itest.Eventually(t, lossRefresh(expiry), func() bool { return liveTotal(t, rdb, ipA) == held },
			"flush %d: the store counts %d, the replicas hold %d", round, liveTotal(t, rdb, ipA), held)
	}
	if total := admitted[0] + admitted[1] + admitted[2]; total > 3 {
		t.Fatalf("admitted after each of three flushes: %v; want at most 3 in all (b's own amount)", admitted)
	}
	if open := a.l.Count(ipA) + b.l.Count(ipA); open > 6 {
		t.Fatalf("%d open for one client with amount 3 over two replicas", open)
	}
}

// A real eviction: maxmemory with allkeys-lru and a cache's data beside the
// shares. The store says its policy may evict (API state, metric source);
// the per-IP hash evicted, a asserts its shares again within one refresh,
// and b is refused.
func TestSharedEvictedShareReasserted(t *testing.T) {
	const expiry = 900 * time.Millisecond
	rdb, a, b := startPair(t, expiry, 3, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
	ctx := context.Background()
	if st := a.s.State(a.l); st.MaxmemoryPolicy != "allkeys-lru" || !st.EvictionRisk || st.Warning == "" {
		t.Fatalf("store state %+v: want maxmemoryPolicy allkeys-lru with the eviction risk and a warning", st)
	}
	if got := a.admitN(t, ipA, 3); got != 3 {
		t.Fatalf("a admitted %d of 3", got)
	}
	// The cache's data, until the shares' hash is evicted.
	value := strings.Repeat("x", 1024)
	evicted := false
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; !evicted && i < 200_000 && time.Now().Before(deadline); i += 100 {
		p := rdb.Pipeline()
		for j := range 100 {
			p.Set(ctx, "cache:"+strconv.Itoa(i+j), value, 0)
		}
		exists := p.Exists(ctx, keyOf(testMW, ipA))
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		evicted = exists.Val() == 0
	}
	if !evicted {
		t.Fatal("the filler did not evict the shares' hash")
	}
	itest.Eventually(t, lossRefresh(expiry), func() bool { return liveTotal(t, rdb, ipA) == 3 },
		"after the eviction the store counts %d for %s, a holds 3", liveTotal(t, rdb, ipA), ipA)
	if got := b.admitN(t, ipA, 2); got != 0 {
		t.Fatalf("b admitted %d after the eviction was repaired", got)
	}
	if a.s.SharesLost() == 0 {
		t.Error("the eviction was repaired but not counted")
	}
}

// A Redis whose CONFIG command is renamed away: the store works, its policy
// is "unknown" (no eviction risk claimed).
func TestSharedPolicyUnreadable(t *testing.T) {
	srv := itest.StartRedis(t, "--rename-command", "CONFIG", "")
	a := newReplica(t, srv.Addr, 900*time.Millisecond, 2, "")
	if got := a.admitN(t, ipA, 3); got != 2 {
		t.Fatalf("admitted %d of 3 with amount 2", got)
	}
	if st := a.s.State(a.l); st.MaxmemoryPolicy != "unknown" || st.EvictionRisk || !st.Reachable {
		t.Fatalf("store state %+v: want maxmemoryPolicy unknown, no risk, reachable", st)
	}
}

// Which policies may evict the keys (all of them have a time to live).
func TestPolicyEvicts(t *testing.T) {
	for p, want := range map[string]bool{
		"noeviction": false, "unknown": false,
		"allkeys-lru": true, "allkeys-lfu": true, "allkeys-random": true,
		"volatile-lru": true, "volatile-lfu": true, "volatile-random": true, "volatile-ttl": true,
		"some-future-policy": true,
	} {
		if got := policyEvicts(p); got != want {
			t.Errorf("policyEvicts(%q) = %v, want %v", p, got, want)
		}
	}
}

// A middleware that names a store after a reload (the store reachable all
// along) finds its connections counted there, asserted under a new epoch,
// not only here.
func TestSharedStoreAddedByReloadAssertsCounts(t *testing.T) {
	srv := itest.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	const expiry = 900 * time.Millisecond
	b := newReplica(t, srv.Addr, expiry, 3, "")
	s, reg := newStore(t, srv.Addr, expiry)
	_, l, _, err := newMiddleware(testMW, &config.TCPInFlightConn{Amount: 3}, reg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		l.Acquire(ipA)
	}
	itest.Eventually(t, 5*time.Second, s.Reachable, "the store did not become reachable")
	if _, l2, _, err := newMiddleware(testMW, &config.TCPInFlightConn{Amount: 3, Store: "shared"}, reg, zerolog.Nop()); err != nil || l2 != l {
		t.Fatalf("reload with a store: %v, limiter kept %v", err, l2 == l)
	}
	itest.Eventually(t, lossRefresh(expiry)+time.Second, func() bool { return s.Reachable() && liveTotal(t, rdb, ipA) == 2 },
		"the 2 connections counted before the store was named are not counted in it: %d", liveTotal(t, rdb, ipA))
	if got := b.admitN(t, ipA, 3); got != 1 {
		t.Fatalf("the other replica admitted %d with 2 of 3 held here, want 1", got)
	}
	l.Release(ipA)
	l.Release(ipA)
	itest.Eventually(t, 3*time.Second, func() bool { return liveTotal(t, rdb, ipA) == 1 }, "releases not counted in the store: %d", liveTotal(t, rdb, ipA))
}

// A state larger than one round trip carries (roundCap operations): the
// assertion and the checks go in several round trips, and a flush of all
// of it is repaired within one refresh as a small one is.
func TestSharedLargeStateReasserted(t *testing.T) {
	const expiry = 1500 * time.Millisecond
	rdb, a, b := startPair(t, expiry, 1)
	ctx := context.Background()
	const n = 3 * roundCap / 2
	key := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}) }
	for i := range n {
		a.l.add(key(i), 1, false)
	}
	a.s.markDirty() // as a store named by a reload: assert what is counted
	counted := func() int {
		keys, err := rdb.Keys(ctx, "tollgate:{"+testMW+"}:ip:*").Result()
		must(t, err)
		return len(keys)
	}
	itest.Eventually(t, 5*time.Second, func() bool { return counted() == n }, "%d of %d keys asserted", counted(), n)
	before := a.s.SharesLost()
	must(t, rdb.FlushAll(ctx).Err())
	itest.Eventually(t, lossRefresh(expiry), func() bool { return counted() == n && liveTotal(t, rdb, key(n-1)) == 1 },
		"after a flush, %d of %d keys asserted again", counted(), n)
	for _, i := range []int{0, n / 2, n - 1} {
		if o := b.admit(t, key(i)); o != outRejected {
			t.Fatalf("b admitted (%d) %s, held by a with amount 1", o, key(i))
		}
	}
	if a.s.SharesLost() != before+1 {
		t.Fatalf("losses counted %d, want one more than %d", a.s.SharesLost(), before)
	}
}
