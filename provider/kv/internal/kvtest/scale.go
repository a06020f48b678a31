package kvtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The fleet Scale writes: ScaleRouters routers of 4 keys each (rule,
// service, priority, and the service's server address), ScaleKeys keys
// under the root key "traefik". Router r<i> has priority i+1, so the last
// one takes every connection.
const (
	ScaleRouters = 2500
	ScaleKeys    = 4 * ScaleRouters
	scaleRounds  = 30
)

// ScaleFleet returns the fleet's keys and values, every server at backend.
func ScaleFleet(backend string) (keys, values []string) {
	for i := range ScaleRouters {
		r, s := fmt.Sprintf("traefik/tcp/routers/r%d/", i), fmt.Sprintf("traefik/tcp/services/s%d/", i)
		keys = append(keys, r+"rule", r+"service", r+"priority", s+"loadBalancer/servers/0/address")
		values = append(values, "HostSNI(`*`)", fmt.Sprintf("s%d", i), fmt.Sprint(i+1), backend)
	}
	return keys, values
}

// Scale measures a KV provider at the scale of docs/performance.md
// ("Providers at scale") through the tollgate binary (TOLLGATE_SCALE=1;
// TOLLGATE_SCALE_ASSERT=1 fails on a missed target): load writes the
// fleet's ScaleKeys keys (in bulk, as the store allows) before tollgate
// starts; then, scaleRounds times, one key changes, the address of the
// server of the router that takes the connections, to a new backend: the
// time from the write returning until a connection reaches that backend
// (target p50 <= 100 ms); then 30 s with no change: the CPU time tollgate
// uses meanwhile.
func Scale(t *testing.T, s Store, load func(keys, values []string)) {
	itest.NeedScale(t)
	itest.Binary(t) // built before anything is timed
	keys, values := ScaleFleet(itest.BannerServer(t, "", "fleet"))
	began := time.Now()
	load(keys, values)
	t.Logf("wrote %d keys in %v", len(keys), time.Since(began).Round(time.Millisecond))

	ep := itest.FreeAddr(t)
	started := time.Now()
	tg := itest.StartTollgate(t, append([]string{"--entryPoints.db.address=" + ep, "--log.level=ERROR"}, s.Flags()...)...)
	first := itest.UntilBanner(t, ep, "fleet", started, 2*time.Minute)
	t.Logf("tollgate start -> the %d keys live: %v", len(keys), first.Round(time.Millisecond))

	top := fmt.Sprintf("traefik/tcp/services/s%d/loadBalancer/servers/0/address", ScaleRouters-1)
	var live itest.Latencies
	for i := 1; i <= scaleRounds; i++ {
		want := fmt.Sprintf("probe-%d", i)
		addr := itest.BannerServer(t, "", want)
		time.Sleep(300 * time.Millisecond) // a change after a quiet moment, as most are
		s.Put(t, top, addr)
		at := time.Now()
		live = append(live, itest.UntilBanner(t, ep, want, at, 10*time.Second))
	}
	t.Logf("%s, %d keys: one key written -> live: %v", s.Provider(), len(keys), live)

	time.Sleep(2 * time.Second)
	rest := itest.CPUDuring(t, tg.PID(), 30*time.Second)
	t.Logf("at rest for 30 s: tollgate used %v of CPU", rest)
	t.Logf("%s", itest.Machine())
	itest.Target(t, "one changed key live, p50", live.Quantile(0.5), 100*time.Millisecond)
}
