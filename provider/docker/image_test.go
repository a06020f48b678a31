package docker

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The image answers a health check written for Traefik's image,
// ["CMD", "traefik", "healthcheck", "--ping"]: traefik is a link to
// tollgate on the default PATH. Its own HEALTHCHECK (/tollgate healthcheck,
// 127.0.0.1:8080) passes with Traefik's --api.insecure.
func TestImageAnswersTraefikHealthcheck(t *testing.T) {
	itest.NeedDocker(t)
	name := "tgit-image-" + itest.Uniq()
	itest.Docker(t, "run", "-d", "--name", name, "--health-interval=1s", itest.TollgateImage(t),
		"--api.insecure=true", "--ping", "--entryPoints.db.address=:5432")
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })

	var out []byte
	var err error
	itest.Eventually(t, 20*time.Second, func() bool {
		out, err = exec.Command("docker", "exec", name, "traefik", "healthcheck", "--ping").CombinedOutput()
		return err == nil
	}, "traefik healthcheck --ping in the container never passed")
	if strings.TrimSpace(string(out)) != "OK" {
		t.Errorf("traefik healthcheck --ping printed %q, want OK", out)
	}
	itest.Eventually(t, 20*time.Second, func() bool {
		return itest.Docker(t, "inspect", "-f", "{{.State.Health.Status}}", name) == "healthy"
	}, "the image's own HEALTHCHECK never reported healthy")
}
