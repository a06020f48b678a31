package docker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The image has no built-in HEALTHCHECK, as Traefik's: a container started
// without the API (nothing answers /ping) has no health status, so it never
// turns unhealthy.
func TestImageHasNoBuiltInHealthcheck(t *testing.T) {
	itest.NeedDocker(t)
	image := itest.TollgateImage(t)
	if hc := itest.Docker(t, "inspect", "-f", "{{json .Config.Healthcheck}}", image); hc != "null" {
		t.Fatalf("the image has a HEALTHCHECK: %s", hc)
	}
	name := "tgit-image-" + itest.Uniq()
	itest.Docker(t, "run", "-d", "--name", name, image, "--entryPoints.db.address=:5432")
	t.Cleanup(func() { _ = itest.DockerCommand("rm", "-f", name).Run() })
	itest.Eventually(t, 20*time.Second, func() bool {
		return itest.Docker(t, "inspect", "-f", "{{.State.Status}}", name) == "running"
	}, "the container without the API is not running")
	if h := itest.Docker(t, "inspect", "-f", "{{json .State.Health}}", name); h != "null" {
		t.Errorf("a container without the API has a health status: %s", h)
	}
}

// The health checks written for Traefik's image make a container healthy:
// the exec form of Traefik's docs, ["CMD", "traefik", "healthcheck",
// "--ping"] (traefik is a link to tollgate on the default PATH), and the
// CMD-SHELL form users write, wget -q --spider http://localhost:8080/ping
// (busybox's sh and wget). The same shell check turns a container whose
// /ping is off unhealthy: it checks something.
func TestImageRunsTraefikHealthchecks(t *testing.T) {
	itest.NeedDocker(t)
	image := itest.TollgateImage(t)

	// The exec form, as a compose file's healthcheck.test or a derived
	// image's HEALTHCHECK gives it (docker run --health-cmd is always
	// CMD-SHELL).
	derived := "tollgate-itest-traefikcheck:" + itest.Uniq()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+image+"\n"+
		`HEALTHCHECK --interval=1s --timeout=3s --retries=3 CMD ["traefik", "healthcheck", "--ping"]`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	itest.Docker(t, "build", "-q", "-t", derived, dir)
	t.Cleanup(func() { _ = itest.DockerCommand("rmi", "-f", derived).Run() })

	shell := []string{"--health-cmd", "wget -q --spider http://localhost:8080/ping || exit 1", "--health-interval=1s", "--health-timeout=3s", "--health-retries=2"}
	for _, tc := range []struct {
		name  string
		run   []string // docker run options and image
		args  []string // tollgate's
		state string
	}{
		{"CMD traefik healthcheck --ping", []string{derived}, []string{"--ping", "--entryPoints.db.address=:5432"}, "healthy"},
		{"CMD-SHELL wget, api.insecure", append(shell, image), []string{"--api.insecure=true", "--ping", "--entryPoints.db.address=:5432"}, "healthy"},
		{"CMD-SHELL wget, ping alone", append(shell, image), []string{"--ping", "--entryPoints.db.address=:5432"}, "healthy"},
		{"CMD-SHELL wget, no ping", append(shell, image), []string{"--entryPoints.db.address=:5432"}, "unhealthy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "tgit-image-" + itest.Uniq()
			args := append(append([]string{"run", "-d", "--name", name}, tc.run...), tc.args...)
			itest.Docker(t, args...)
			t.Cleanup(func() { _ = itest.DockerCommand("rm", "-f", name).Run() })
			var state string
			itest.Eventually(t, 30*time.Second, func() bool {
				state = itest.Docker(t, "inspect", "-f", "{{.State.Health.Status}}", name)
				return state == tc.state
			}, "%s: the container's health is %q, want %q (logs: %s)", tc.name, lazy(func() string { return state }), tc.state, lazy(func() string { return logs(name) }))
		})
	}
}

// lazy is a failure message's argument, computed when it is printed.
type lazy func() string

func (l lazy) String() string { return l() }

func logs(name string) string {
	out, _ := itest.DockerCommand("logs", "--tail", "20", name).CombinedOutput()
	return strings.TrimSpace(string(out))
}
