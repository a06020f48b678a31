package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/kv/internal/kvtest"
)

// New takes Sentinels with each strategy and credentials of their own
// (TestNew has what it refuses).
func TestNewAcceptsSentinel(t *testing.T) {
	for _, s := range []config.RedisSentinel{
		{MasterName: "mymaster", Username: "u", Password: "x"},
		{MasterName: "mymaster", ReplicaStrategy: true, UseDisconnectedReplicas: true},
		{MasterName: "mymaster", LatencyStrategy: true},
		{MasterName: "mymaster", RandomStrategy: true},
	} {
		c := &config.RedisProvider{Endpoints: []string{"a:26379", "b:26379", "c:26379"}, DB: 2, Sentinel: &s}
		if p, err := New(c, provider.Options{}); err != nil || p == nil {
			t.Errorf("sentinel %+v: %v", s, err)
		}
	}
}

// Through the binary, with Traefik's flags: the provider finds the master
// through a Sentinel that requires a password, and after the master is
// killed and the Sentinel promotes its replica, a change written to the new
// master is applied. Without the Sentinel's password nothing is routed and
// the provider says why.
func TestSentinelFollowsFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	ctx, start := context.Background(), time.Now()
	master := startServer(t, "KA")
	replica := startServer(t, "KA")
	if err := replica.cli.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.port)).Err(); err != nil {
		t.Fatal(err)
	}
	itest.Eventually(t, 15*time.Second, func() bool {
		info, _ := replica.cli.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	}, "the replica did not sync with the master")
	sen := itest.StartSentinel(t, "127.0.0.1:"+strconv.Itoa(master.port), "sentinel-pw", "requirepass sentinel-pw")
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: sen.Addr, Password: "sentinel-pw", DisableIdentity: true})
	defer sc.Close()
	// The Sentinel learns the replica from the master's INFO: without it,
	// there is nothing to promote.
	itest.Eventually(t, 20*time.Second, func() bool {
		rs, _ := sc.Replicas(ctx, "mymaster").Result()
		return len(rs) == 1 && !strings.Contains(rs[0]["flags"], "down")
	}, "the Sentinel did not find the replica")
	t.Logf("%v: the Sentinel knows the master and its replica", time.Since(start).Round(time.Millisecond))

	flags := []string{"--providers.redis=true", "--providers.redis.endpoints=" + sen.Addr,
		"--providers.redis.sentinel.masterName=mymaster"}
	kvtest.Failing(t, Name, flags, "NOAUTH")

	tg := kvtest.Routed(t, Name, append(flags, "--providers.redis.sentinel.password=sentinel-pw"),
		func(k, v string) { master.Put(t, k, v) })
	first := tg.Rawdata(t).ServersOf("s@" + Name)
	t.Logf("%v: routed from the master", time.Since(start).Round(time.Millisecond))

	master.Kill(t)
	itest.Eventually(t, 30*time.Second, func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		return err == nil && addr[1] == strconv.Itoa(replica.port)
	}, "the Sentinel did not promote the replica")
	t.Logf("%v: the master is killed and the replica promoted", time.Since(start).Round(time.Millisecond))
	second := itest.FreeAddr(t)
	replica.Put(t, "traefik/tcp/services/s/loadBalancer/servers/1/address", second)
	want := strings.Join(sortedPair(first, second), ",")
	itest.Eventually(t, 15*time.Second, func() bool { return tg.Rawdata(t).ServersOf("s@"+Name) == want },
		"the change on the promoted replica was not applied: want servers %q", want)
	t.Logf("%v: the change written to the promoted replica is applied", time.Since(start).Round(time.Millisecond))
}

func sortedPair(a, b string) []string {
	if b < a {
		return []string{b, a}
	}
	return []string{a, b}
}
