package swarm

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// Helpers for tests against a real Swarm. The engine becomes a single-node
// swarm (docker swarm init --advertise-addr 127.0.0.1, which works offline)
// the first time a test needs it, only if it is in no swarm; TestMain leaves
// that swarm at the end, only if this test binary made it. A swarm already
// there is used as it is and left alone. Containers that are not swarm tasks
// (the Docker provider's tests, running at the same time under go test
// ./...) are not affected by swarm mode: they stay on their bridge networks.
//
// Every test creates its own attachable overlay network and its own
// services and containers (named tgit-<id>-...), and removes them when it
// ends, failed or not. The kernel here has no IPVS, so Swarm virtual IPs do
// not answer: the tests check which address tollgate picks for lbswarm, and
// send traffic to tasks only.

var (
	swarmOnce  sync.Once
	swarmErr   error
	swarmOwned bool // this test binary initialised the swarm
)

func TestMain(m *testing.M) {
	code := itest.Main(m)
	if swarmOwned {
		// Engine work: not while another package's test measures latencies.
		unlock, err := itest.LockEngine(false)
		if out, err := itest.DockerCommand("swarm", "leave", "--force").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "docker swarm leave --force: %v\n%s", err, out)
		}
		// swarm init made the bridge that links tasks to the host; leaving
		// keeps it. Remove it too, unless something still uses it.
		_ = itest.DockerCommand("network", "rm", "docker_gwbridge").Run()
		if err == nil {
			unlock()
		}
	}
	itest.RemoveImages()
	os.Exit(code)
}

// needSwarm skips t (or fails it under TOLLGATE_REQUIRE_INTEGRATION=1)
// unless the engine answers and is, or can be made, a Swarm manager. t holds
// the engine shared with the other engine tests, or alone (a measurement).
func needSwarm(t *testing.T, alone bool) {
	t.Helper()
	if alone {
		itest.NeedDockerAlone(t)
	} else {
		itest.NeedDocker(t)
	}
	swarmOnce.Do(func() {
		state, err := swarmState()
		if err != nil {
			swarmErr = err
			return
		}
		switch {
		case state == "active true":
			return // a manager already: use it, leave it alone
		case strings.HasPrefix(state, "inactive "):
		default:
			swarmErr = fmt.Errorf("the engine's swarm state is %q: the tests need a manager, or no swarm at all", state)
			return
		}
		out, err := itest.DockerCommand("swarm", "init", "--advertise-addr", "127.0.0.1").CombinedOutput()
		switch {
		case err == nil:
			swarmOwned = true
		case strings.Contains(string(out), "already part of a swarm"):
			// Another process made it in the meantime: theirs to leave.
		default:
			swarmErr = fmt.Errorf("docker swarm init: %v: %s", err, out)
		}
	})
	itest.Need(t, "a Swarm manager", swarmErr)
}

// swarmState is "<LocalNodeState> <ControlAvailable>": "inactive false",
// "active true" for a manager.
func swarmState() (string, error) {
	out, err := itest.DockerCommand("info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker info: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// testLabel is on every service a test creates, with the test's id, and
// each test's tollgate sees only those (--providers.swarm.constraints).
const testLabel = "tollgate.itest"

// world is one test's swarm: its id, overlay network and what it created.
type world struct {
	t   *testing.T
	id  string
	net string
}

// newWorld makes an attachable overlay network for t and removes it (after
// every service and container of t) when t ends.
func newWorld(t *testing.T) *world {
	t.Helper()
	return makeWorld(t, false)
}

// newWorldAlone is newWorld for a measurement: no other engine test of this
// module runs meanwhile.
func newWorldAlone(t *testing.T) *world {
	t.Helper()
	return makeWorld(t, true)
}

func makeWorld(t *testing.T, alone bool) *world {
	t.Helper()
	needSwarm(t, alone)
	w := &world{t: t, id: itest.Uniq()}
	w.net = "tgit-" + w.id
	itest.Docker(t, "network", "create", "--driver", "overlay", "--attachable", w.net)
	t.Cleanup(func() { removeNetwork(t, w.net) })
	return w
}

// removeNetwork removes a network once the containers of removed services
// have left it (a moment after `docker service rm`).
func removeNetwork(t *testing.T, name string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := itest.DockerCommand("network", "rm", name).CombinedOutput()
		if err == nil || strings.Contains(string(out), "not found") {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("docker network rm %s: %v: %s", name, err, out)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// name returns a name of this test's: tgit-<id>-<what>.
func (w *world) name(what string) string { return "tgit-" + w.id + "-" + what }

// service creates an echo service (`docker service create --detach`) with
// the test label and labels on this test's network, its tasks' host names
// (the echo banner) task-<slot>, and extra flags; it is removed when the
// test ends. It returns the service's name.
func (w *world) service(what string, labels map[string]string, extra ...string) string {
	w.t.Helper()
	name := w.name(what)
	args := w.serviceArgs(name, labels, extra...)
	w.t.Cleanup(func() { _ = itest.DockerCommand("service", "rm", name).Run() })
	itest.Docker(w.t, args...)
	return name
}

func (w *world) serviceArgs(name string, labels map[string]string, extra ...string) []string {
	args := []string{"service", "create", "--detach", "--quiet", "--name", name, "--network", w.net,
		"--no-healthcheck", "--hostname", "task-{{.Task.Slot}}", "--stop-grace-period", "1s",
		"--label", testLabel + "=" + w.id}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--label", k+"="+labels[k])
	}
	args = append(args, extra...)
	return append(args, itest.EchoImage(w.t))
}

// taskIPs returns the addresses of the service's running tasks on the
// test's network, sorted, as "ip:7000".
func (w *world) taskIPs(service string) []string {
	w.t.Helper()
	return w.taskAddrs(service, w.net)
}

// taskAddrs is taskIPs on network.
func (w *world) taskAddrs(service, network string) []string {
	w.t.Helper()
	out := itest.Docker(w.t, "service", "ps", "--filter", "desired-state=running", "--format", "{{.ID}} {{.CurrentState}}", "--no-trunc", service)
	var addrs []string
	for _, line := range strings.Split(out, "\n") {
		id, state, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(state, "Running") {
			continue
		}
		ip := itest.Docker(w.t, "inspect", "--format", `{{range .NetworksAttachments}}{{if eq .Network.Spec.Name "`+network+`"}}{{index .Addresses 0}}{{end}}{{end}}`, id)
		ip, _, _ = strings.Cut(ip, "/")
		if ip != "" {
			addrs = append(addrs, ip+":7000")
		}
	}
	sort.Strings(addrs)
	return addrs
}

// gate is a tollgate running in a container on the test's network, with the
// Docker socket (or a relay of it) mounted, reached through ports published
// on 127.0.0.1.
type gate struct {
	w         *world
	container string
	ep        string // the "db" entry point, published
	api       string // the admin API, published
	ip        string // tollgate's address on the overlay network
}

// startGate runs tollgate with the Swarm provider limited to this test's
// services, plus extra flags; socket is the engine's socket on the host.
func (w *world) startGate(socket string, extra ...string) *gate {
	w.t.Helper()
	g := &gate{w: w, container: w.name("tollgate")}
	args := []string{"run", "-d", "--name", g.container, "--network", w.net,
		"-v", socket + ":/var/run/docker.sock",
		"-p", "127.0.0.1::5432", "-p", "127.0.0.1::8080",
		itest.TollgateImage(w.t),
		"--entryPoints.db.address=:5432",
		"--providers.swarm",
		"--providers.swarm.constraints=Label(`" + testLabel + "`, `" + w.id + "`)",
		"--api.address=:8080",
		"--log.level=DEBUG",
	}
	args = append(args, extra...)
	w.t.Cleanup(func() {
		if w.t.Failed() {
			out, _ := itest.DockerCommand("logs", g.container).CombinedOutput()
			w.t.Logf("tollgate logs:\n%s", out)
		}
		_ = itest.DockerCommand("rm", "-f", g.container).Run()
	})
	itest.Docker(w.t, args...)
	g.ep = published(w.t, g.container, "5432/tcp")
	g.api = published(w.t, g.container, "8080/tcp")
	g.ip = w.ipOf(g.container)
	itest.Eventually(w.t, 10*time.Second, func() bool {
		resp, err := http.Get("http://" + g.api + "/ping")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "tollgate in %s does not answer /ping", g.container)
	return g
}

// logs returns the container's log so far.
func (g *gate) logs() string {
	out, _ := itest.DockerCommand("logs", g.container).CombinedOutput()
	return string(out)
}

func (g *gate) rawdata() itest.Rawdata { return itest.GetRawdata(g.w.t, g.api) }

// published returns the host address a container port is published on.
func published(t *testing.T, container, port string) string {
	t.Helper()
	out := itest.Docker(t, "port", container, port)
	addr, _, _ := strings.Cut(out, "\n")
	return strings.TrimSpace(addr)
}

// ipOf returns a container's address on the test's network.
func (w *world) ipOf(container string) string {
	w.t.Helper()
	return itest.Docker(w.t, "inspect", "--format", `{{(index .NetworkSettings.Networks "`+w.net+`").IPAddress}}`, container)
}

// peer is a client: a container on the test's network, with an address of its own,
// that forwards every connection made to addr (published on 127.0.0.1) to
// tollgate's entry point: one connection to addr is one connection to
// tollgate from ip.
type peer struct {
	addr string
	ip   string
}

func (w *world) client(what string, g *gate) peer {
	w.t.Helper()
	name := w.name(what)
	w.t.Cleanup(func() { _ = itest.DockerCommand("rm", "-f", name).Run() })
	itest.Docker(w.t, "run", "-d", "--name", name, "--network", w.net, "-p", "127.0.0.1::9000",
		itest.ForwardImage(w.t), "-to", g.ip+":5432")
	c := peer{addr: published(w.t, name, "9000/tcp"), ip: w.ipOf(name)}
	// The forwarder listens a moment after the container starts.
	itest.Eventually(w.t, 5*time.Second, func() bool {
		out, _ := itest.DockerCommand("logs", name).CombinedOutput()
		return strings.Contains(string(out), "forward:")
	}, "forwarder %s did not start", name)
	return c
}

// seedLabels are the seed label on a HostSNI(`*`) router of the
// entry point db, with the echo's port.
func seedLabels(amount int) map[string]string {
	return map[string]string{
		"traefik.tcp.routers.db.rule":                                   "HostSNI(`*`)",
		"traefik.tcp.routers.db.entrypoints":                            "db",
		"traefik.tcp.routers.db.middlewares":                            "test-inflightconn",
		"traefik.tcp.middlewares.test-inflightconn.inflightconn.amount": fmt.Sprint(amount),
		"traefik.tcp.services.db.loadbalancer.server.port":              "7000",
	}
}
