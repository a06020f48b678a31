package consulcatalog

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The scale of TestScaleCatalog: the 1,000 services of 5 instances
// (registered as a registrator or a scheduler does, on the catalog nodes
// they run on), and the rounds of the measurement.
const (
	fleetServices  = 1000
	fleetInstances = 5
	fleetRounds    = 30
)

// pid is the agent's process ID.
func (a *agent) pid() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cmd.Process.Pid
}

// registerInstance registers one instance on node through the catalog
// (/v1/catalog/register), with a passing check; it returns when the catalog
// has it.
func registerInstance(c *api.Client, node, nodeAddr, name, id, addr string, port int, tags []string) error {
	_, err := c.Catalog().Register(&api.CatalogRegistration{
		Node: node, Address: nodeAddr, SkipNodeUpdate: true,
		Service: &api.AgentService{ID: id, Service: name, Address: addr, Port: port, Tags: tags},
		Check:   &api.AgentCheck{Node: node, CheckID: id + "-check", Name: "probe", Status: api.HealthPassing, ServiceID: id},
	}, nil)
	return err
}

// TestScaleCatalog measures the Consul Catalog provider at the scale of
// docs/performance.md ("Providers at scale"), with the tollgate binary
// against a real agent (TOLLGATE_SCALE=1; TOLLGATE_SCALE_ASSERT=1 fails on
// a missed target), the same fleet spread three ways: on 5 catalog nodes
// (1,000 instances each: one of each service), on 50 (100 each), and on
// 100 (more than MaxNodeWatches: the provider reads the catalog whole on
// each change). For each, on an agent of its own:
//
//   - 1,000 services x 5 instances are registered, each service with a
//     router, an inFlightConn middleware and its service on entry point db;
//   - then, fleetRounds times, one new instance of a new service whose
//     router has the highest priority: the time from the registration's
//     return until a connection to db reaches its backend (target p50 <=
//     200 ms, p95 <= 500 ms);
//   - then 30 s with no change: the CPU time tollgate uses meanwhile (the
//     blocking queries wait on the agent; nothing is polled).
func TestScaleCatalog(t *testing.T) {
	itest.NeedScale(t)
	itest.Binary(t) // built before anything is timed
	for _, nodes := range []int{5, 50, 100} {
		t.Run(fmt.Sprintf("%d-nodes", nodes), func(t *testing.T) { scaleCatalog(t, nodes) })
	}
}

func scaleCatalog(t *testing.T, nodes int) {
	a := startAgent(t, "")
	c := a.Client()
	ep := freeAddr(t)
	node := func(i int) (name, addr string) {
		return fmt.Sprintf("node-%d", i), fmt.Sprintf("127.0.%d.%d", 1+i/200, 1+i%200)
	}

	// The fleet, registered before tollgate starts (its first snapshot then
	// reads it whole), 16 registrations at a time: instance i of service s
	// on node (s*fleetInstances+i) mod nodes.
	began := time.Now()
	err := itest.Bounded(fleetServices*fleetInstances, 16, func(j int) error {
		svc, i := j/fleetInstances, j%fleetInstances
		name := fmt.Sprintf("s%04d", svc)
		n, addr := node(j % nodes)
		return registerInstance(c, n, addr, name, fmt.Sprintf("%s-%d", name, i),
			"", 20000+svc, []string{
				"traefik.tcp.routers." + name + ".rule=HostSNI(`*`)",
				"traefik.tcp.routers." + name + ".entrypoints=db",
				"traefik.tcp.routers." + name + ".middlewares=" + name,
				"traefik.tcp.middlewares." + name + ".inflightconn.amount=10",
			})
	})
	if err != nil {
		t.Fatalf("registering the fleet: %v", err)
	}
	t.Logf("registered %d services x %d instances on %d nodes in %v", fleetServices, fleetInstances, nodes, time.Since(began).Round(time.Millisecond))

	started := time.Now()
	tg := itest.StartTollgate(t, "--entryPoints.db.address="+ep,
		"--providers.consulCatalog=true", "--providers.consulCatalog.endpoint.address="+a.Addr(), "--log.level=ERROR")

	// probe registers the new service probe-<i>, one instance (on the
	// nodes in turn) whose router outranks every other, served by a
	// backend that answers its name.
	probe := func(i int) (time.Time, string) {
		name := fmt.Sprintf("probe-%d", i)
		_, portStr, _ := net.SplitHostPort(itest.BannerServer(t, "", name))
		port, _ := strconv.Atoi(portStr)
		n, addr := node(i % nodes)
		err := registerInstance(c, n, addr, name, name+"-0", "127.0.0.1", port, []string{
			"traefik.tcp.routers." + name + ".rule=HostSNI(`*`)",
			"traefik.tcp.routers." + name + ".entrypoints=db",
			"traefik.tcp.routers." + name + fmt.Sprintf(".priority=%d", 1_000_000+i),
		})
		if err != nil {
			t.Fatalf("registering %s: %v", name, err)
		}
		return time.Now(), name
	}

	// The first probe is live once the fleet is: a snapshot is complete.
	_, name := probe(0)
	first := itest.UntilBanner(t, ep, name, started, 2*time.Minute)
	t.Logf("tollgate start -> the fleet and the first probe live: %v", first.Round(time.Millisecond))

	var live itest.Latencies
	for i := 1; i <= fleetRounds; i++ {
		time.Sleep(300 * time.Millisecond) // a change after a quiet moment, as most are
		at, name := probe(i)
		live = append(live, itest.UntilBanner(t, ep, name, at, 10*time.Second))
	}
	t.Logf("consul catalog, %d services x %d instances on %d nodes: registration returned -> new instance's route live: %v", fleetServices, fleetInstances, nodes, live)

	time.Sleep(2 * time.Second) // let the last change settle
	agentBefore, err := itest.CPUTime(a.pid())
	if err != nil {
		t.Fatal(err)
	}
	rest := itest.CPUDuring(t, tg.PID(), 30*time.Second)
	agentAfter, err := itest.CPUTime(a.pid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("at rest for 30 s: tollgate used %v of CPU, the agent %v", rest, agentAfter-agentBefore)
	t.Logf("%s", itest.Machine())
	itest.Target(t, "new instance live, p50", live.Quantile(0.5), 200*time.Millisecond)
	itest.Target(t, "new instance live, p95", live.Quantile(0.95), 500*time.Millisecond)
	itest.Target(t, "tollgate's CPU at rest per 30 s", rest, 300*time.Millisecond)
}
