package swarm

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Tests of the provider (in the test process) against the real swarm.

// startProvider runs a provider on the engine, limited to w's services.
func (w *world) startProvider(edit func(*config.SwarmProvider)) *recorder {
	w.t.Helper()
	cfg := &config.SwarmProvider{}
	cfg.SetDefaults()
	cfg.Constraints = "Label(`" + testLabel + "`, `" + w.id + "`)"
	if edit != nil {
		edit(cfg)
	}
	p, err := New(cfg, provider.Options{Log: zerolog.New(zerolog.NewTestWriter(w.t)).Level(zerolog.InfoLevel)})
	if err != nil {
		w.t.Fatal(err)
	}
	return record(w.t, p)
}

func router(m provider.Message, name string) bool {
	return m.Err == nil && m.Configuration != nil && m.Configuration.TCP != nil && m.Configuration.TCP.Routers[name] != nil
}

func labelsOf(name string) map[string]string {
	return map[string]string{
		"traefik.tcp.routers." + name + ".rule":                      "HostSNI(`*`)",
		"traefik.tcp.services." + name + ".loadbalancer.server.port": "7000",
	}
}

// Replicated and global services both work; a service without a running
// task has no servers, and no router, unless allowEmptyServices keeps them.
func TestEngineGlobalAndEmptyServices(t *testing.T) {
	w := newWorld(t)
	rec := w.startProvider(nil)
	empty := w.startProvider(func(c *config.SwarmProvider) { c.AllowEmptyServices = true })

	global := w.service("global", labelsOf("g"), "--mode", "global")
	rep := w.service("rep", labelsOf("r"), "--replicas", "0")
	var tasks []string
	itest.Eventually(t, 15*time.Second, func() bool { tasks = w.taskIPs(global); return len(tasks) == 1 }, "global task not running")
	for _, r := range []*recorder{rec, empty} {
		r.WaitLatest(t, 2*time.Second, "global service served", func(m provider.Message) bool {
			return slices.Equal(servers(m, "g"), tasks)
		})
	}
	if m, _ := rec.Latest(); router(m, "r") {
		t.Fatalf("router r of a service with 0 replicas is served: %+v", m.Configuration.TCP.Routers)
	}
	empty.WaitLatest(t, 2*time.Second, "allowEmptyServices keeps the service with no task", func(m provider.Message) bool {
		return router(m, "r") && m.Configuration.TCP.Services["r"] != nil && len(servers(m, "r")) == 0
	})

	itest.Docker(t, "service", "scale", "--detach", rep+"=1")
	itest.Eventually(t, 15*time.Second, func() bool { tasks = w.taskIPs(rep); return len(tasks) == 1 }, "task not running")
	for _, r := range []*recorder{rec, empty} {
		r.WaitLatest(t, 2*time.Second, "scaled to 1", func(m provider.Message) bool { return slices.Equal(servers(m, "r"), tasks) })
	}
	itest.Docker(t, "service", "scale", "--detach", rep+"=0")
	rec.WaitLatest(t, 2*time.Second, "scaled to 0: gone", func(m provider.Message) bool { return m.Err == nil && !router(m, "r") && router(m, "g") })
	empty.WaitLatest(t, 2*time.Second, "scaled to 0: kept without servers", func(m provider.Message) bool {
		return router(m, "r") && len(servers(m, "r")) == 0
	})
}

// A task with a health check is running only once healthy: its server
// comes in then, not when its container starts.
func TestEngineHealthGatesTheServer(t *testing.T) {
	w := newWorld(t)
	rec := w.startProvider(nil)
	svc := w.service("health", labelsOf("h"), "--no-healthcheck=false") // the image's check: every 1 s
	var ctr, health string
	sawStarting := false
	itest.Eventually(t, 15*time.Second, func() bool {
		if ctr == "" {
			id := strings.Fields(itest.Docker(t, "service", "ps", "--filter", "desired-state=running", "--format", "{{.ID}}", "--no-trunc", svc))
			if len(id) > 0 {
				// Empty until the task has a container.
				ctr = strings.TrimSpace(execOut("docker", "inspect", "--format", "{{with .Status.ContainerStatus}}{{.ContainerID}}{{end}}", id[0]))
			}
			return false
		}
		m, _ := rec.Latest() // before the health: health only goes from starting to healthy
		health = strings.TrimSpace(execOut("docker", "inspect", "--format", "{{if .State.Health}}{{.State.Health.Status}}{{end}}", ctr))
		served := len(servers(m, "h")) == 1
		if served && health != "healthy" {
			t.Fatalf("server %v served while the container's health is %q", servers(m, "h"), health)
		}
		sawStarting = sawStarting || health == "starting"
		return served
	}, "the healthy task is not served (health %q)", &health)
	if !sawStarting {
		t.Logf("the container was never seen starting: the check proves less")
	}
}

func execOut(name string, args ...string) string {
	out, _ := exec.Command(name, args...).Output()
	return string(out)
}
