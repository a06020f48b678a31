package docker

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The scale of TestScaleEngine: the 300 labelled containers, then
// one new container at a time, then a burst of 100.
const (
	fleetContainers = 300
	fleetRounds     = 20
	fleetBurst      = 100
	// engineOps bounds the docker commands in flight: the engine is shared
	// and an earlier session deadlocked it with hundreds of removals at once.
	engineOps = 8
)

// containers are the containers a test created, removed at its end
// engineOps at a time.
type containers struct {
	mu    sync.Mutex
	names []string
}

func (cs *containers) add(name string) {
	cs.mu.Lock()
	cs.names = append(cs.names, name)
	cs.mu.Unlock()
}

// removeAll removes every container, engineOps `docker rm -f` at a time,
// and checks that the engine still answers afterwards.
func (cs *containers) removeAll(t testing.TB) {
	cs.mu.Lock()
	names := cs.names
	cs.names = nil
	cs.mu.Unlock()
	start := time.Now()
	err := itest.Bounded(len(names), engineOps, func(i int) error {
		out, err := exec.Command("docker", "rm", "-f", names[i]).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "No such container") {
			return fmt.Errorf("docker rm -f %s: %v: %s", names[i], err, out)
		}
		return nil
	})
	if err != nil {
		t.Errorf("removing the test's containers: %v", err)
	}
	if err := itest.EngineAnswers(20 * time.Second); err != nil {
		t.Errorf("the engine does not answer after the removal of %d containers: %v", len(names), err)
	}
	t.Logf("removed %d containers in %v", len(names), time.Since(start).Round(time.Millisecond))
}

// TestScaleEngine measures the Docker provider at the scale of
// docs/performance.md ("Providers at scale"), with the tollgate binary on
// the real engine (TOLLGATE_SCALE=1; TOLLGATE_SCALE_ASSERT=1 fails on a
// missed target). It holds the engine alone (a measurement), and never has
// more than engineOps docker commands in flight:
//
//   - 300 echo containers (FROM scratch), each with a router on entry point
//     db, are started before tollgate;
//   - fleetRounds times, one more container whose router outranks every
//     other: the time from `docker run` returning until a connection to db
//     reaches it (target p50 <= 200 ms);
//   - a burst of 100 starts: the time from the last `docker run` returning
//     until all 100 routers are in the applied configuration (target 2 s);
//   - 30 s with no change: the CPU time tollgate uses meanwhile.
func TestScaleEngine(t *testing.T) {
	itest.NeedScale(t)
	itest.Binary(t) // built before anything is timed
	itest.NeedDockerAlone(t)
	img := itest.EchoImage(t)
	id := itest.Uniq()
	cs := &containers{}
	t.Cleanup(func() { cs.removeAll(t) })

	run := func(name string, labels map[string]string, banner string) error {
		args := []string{"run", "-d", "--no-healthcheck", "--name", name, "--label", testLabel + "=" + id}
		for k, v := range labels {
			args = append(args, "--label", k+"="+v)
		}
		if banner != "" {
			args = append(args, "-e", "BANNER="+banner)
		}
		cs.add(name) // removed at the end even if the run failed halfway
		out, err := exec.Command("docker", append(args, img)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("docker run %s: %v: %s", name, err, out)
		}
		return nil
	}
	router := func(name string, priority int) map[string]string {
		l := map[string]string{
			"traefik.tcp.routers." + name + ".rule":                      "HostSNI(`*`)",
			"traefik.tcp.routers." + name + ".entrypoints":               "db",
			"traefik.tcp.services." + name + ".loadbalancer.server.port": "7000",
		}
		if priority > 0 {
			l["traefik.tcp.routers."+name+".priority"] = fmt.Sprint(priority)
		}
		return l
	}

	began := time.Now()
	if err := itest.Bounded(fleetContainers, engineOps, func(i int) error {
		name := fmt.Sprintf("tollgate-scale-%s-%d", id, i)
		return run(name, router(fmt.Sprintf("fleet-%d", i), 0), "")
	}); err != nil {
		t.Fatalf("starting the fleet: %v", err)
	}
	t.Logf("started %d containers in %v", fleetContainers, time.Since(began).Round(time.Millisecond))

	ep := itest.FreeAddr(t)
	started := time.Now()
	tg := itest.StartTollgate(t, "--entryPoints.db.address="+ep, "--log.level=ERROR",
		"--providers.docker", "--providers.docker.constraints=Label(`"+testLabel+"`, `"+id+"`)")

	probe := func(i int) time.Time {
		name := fmt.Sprintf("probe-%d", i)
		if err := run(fmt.Sprintf("tollgate-scale-%s-probe-%d", id, i), router(name, 1_000_000+i), name); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}
	probe(0)
	first := itest.UntilBanner(t, ep, "probe-0", started, 2*time.Minute)
	t.Logf("tollgate start -> the fleet and the first probe live: %v", first.Round(time.Millisecond))

	var live itest.Latencies
	for i := 1; i <= fleetRounds; i++ {
		time.Sleep(300 * time.Millisecond) // a change after a quiet moment, as most are
		at := probe(i)
		live = append(live, itest.UntilBanner(t, ep, fmt.Sprintf("probe-%d", i), at, 10*time.Second))
	}
	t.Logf("docker, %d containers: docker run returned -> route live: %v", fleetContainers, live)

	// The burst: 100 starts, engineOps at a time; converged when every
	// burst router is enabled in /api/rawdata.
	time.Sleep(time.Second)
	var (
		mu   sync.Mutex
		last time.Time
	)
	burstStart := time.Now()
	if err := itest.Bounded(fleetBurst, engineOps, func(i int) error {
		err := run(fmt.Sprintf("tollgate-scale-%s-burst-%d", id, i), router(fmt.Sprintf("burst-%d", i), 0), "")
		mu.Lock()
		last = time.Now()
		mu.Unlock()
		return err
	}); err != nil {
		t.Fatalf("the burst: %v", err)
	}
	converged := func() bool {
		rd := tg.Rawdata(t)
		for i := range fleetBurst {
			if r, ok := rd.Routers[fmt.Sprintf("burst-%d@docker", i)]; !ok || r.Status != "enabled" {
				return false
			}
		}
		return true
	}
	for !converged() {
		if time.Since(last) > 30*time.Second {
			t.Fatalf("the burst of %d has not converged 30 s after its last start", fleetBurst)
		}
		time.Sleep(20 * time.Millisecond)
	}
	burst := time.Since(last)
	t.Logf("burst of %d starts over %v: converged %v after the last docker run returned", fleetBurst, last.Sub(burstStart).Round(time.Millisecond), burst.Round(time.Millisecond))

	time.Sleep(2 * time.Second)
	rest := itest.CPUDuring(t, tg.PID(), 30*time.Second)
	t.Logf("at rest for 30 s (%d containers): tollgate used %v of CPU", fleetContainers+fleetRounds+1+fleetBurst, rest)
	t.Logf("%s", itest.Machine())
	itest.Target(t, "new container live, p50", live.Quantile(0.5), 200*time.Millisecond)
	itest.Target(t, "burst of 100 converged after the last start", burst, 2*time.Second)
}
