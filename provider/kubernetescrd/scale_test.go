package kubernetescrd

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The scale of TestScaleIngressRoutes: the 2,000 IngressRouteTCPs,
// then one new route at a time.
const (
	fleetRoutes = 2000
	fleetRounds = 30
)

// prioritized is ingressRouteTCP with the route's priority set.
func prioritized(ns, name, service string, port int64, priority int) *unstructured.Unstructured {
	u := ingressRouteTCP(ns, name, service, port)
	routes := u.Object["spec"].(map[string]any)["routes"].([]any)
	routes[0].(map[string]any)["priority"] = int64(priority)
	return u
}

// TestScaleIngressRoutes measures the Kubernetes CRD provider at the scale
// of docs/performance.md ("Providers at scale"), with the tollgate binary
// against a real kube-apiserver (TOLLGATE_SCALE=1; TOLLGATE_SCALE_ASSERT=1
// fails on a missed target):
//
//   - 2,000 IngressRouteTCPs on entry point db, each to one Service whose
//     EndpointSlice names a backend, are created before tollgate starts;
//   - fleetRounds times, a Service and its EndpointSlice for a new backend,
//     then an IngressRouteTCP to it whose route outranks every other: the
//     time from the route's creation returning until a connection to db
//     reaches its backend (target p50 <= 200 ms);
//   - 30 s with no change: the CPU time tollgate uses meanwhile.
func TestScaleIngressRoutes(t *testing.T) {
	itest.NeedScale(t)
	itest.Binary(t) // built before anything is timed
	k := kube(t)
	ns := namespace(t, k, "scale")
	ip := localIP(t)
	c := k.Client

	_, fleetPort := startEcho(t, ip)
	create(t, c, service(ns, "fleet", 5432))
	create(t, c, endpointSlice(ns, "fleet-1", "fleet", int64(fleetPort), map[string]bool{ip: true}))
	began := time.Now()
	if err := itest.Bounded(fleetRoutes, 16, func(i int) error {
		return createErr(c, ingressRouteTCP(ns, fmt.Sprintf("fleet-%d", i), "fleet", 5432))
	}); err != nil {
		t.Fatalf("creating the fleet: %v", err)
	}
	t.Logf("created %d IngressRouteTCPs in %v", fleetRoutes, time.Since(began).Round(time.Millisecond))

	started := time.Now()
	tg := startTollgate(t, k, ns)

	// probe creates the Service and EndpointSlice of a new backend that
	// answers its name, waits a moment (they are not what is measured),
	// then the route to it, and returns when that creation returned.
	probe := func(i int) (time.Time, string) {
		name := fmt.Sprintf("probe-%d", i)
		_, portStr, _ := net.SplitHostPort(itest.BannerServer(t, ip, name))
		port, _ := strconv.Atoi(portStr)
		create(t, c, service(ns, name, 5432))
		create(t, c, endpointSlice(ns, name+"-1", name, int64(port), map[string]bool{ip: true}))
		time.Sleep(300 * time.Millisecond) // a change after a quiet moment, as most are
		create(t, c, prioritized(ns, name, name, 5432, 1_000_000+i))
		return time.Now(), name
	}
	_, name := probe(0)
	first := itest.UntilBanner(t, tg.ep, name, started, 2*time.Minute)
	t.Logf("tollgate start -> the fleet and the first probe live: %v", first.Round(time.Millisecond))

	var live itest.Latencies
	for i := 1; i <= fleetRounds; i++ {
		at, name := probe(i)
		live = append(live, itest.UntilBanner(t, tg.ep, name, at, 10*time.Second))
	}
	t.Logf("kubernetes, %d IngressRouteTCPs: creation returned -> route live: %v", fleetRoutes, live)

	time.Sleep(2 * time.Second)
	rest := itest.CPUDuring(t, tg.PID(), 30*time.Second)
	t.Logf("at rest for 30 s: tollgate used %v of CPU", rest)
	t.Logf("%s", itest.Machine())
	itest.Target(t, "new IngressRouteTCP live, p50", live.Quantile(0.5), 200*time.Millisecond)
}
