package docker

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// Helpers for tests against the real engine, on top of internal/itest's
// (NeedDocker, Docker, EchoImage): they use the docker CLI for what a user
// would type (docker run, stop, start).

func TestMain(m *testing.M) {
	code := itest.Main(m)
	itest.RemoveImages()
	os.Exit(code)
}

// runEcho starts a detached echo container named name with labels and extra
// `docker run` flags, removes it when t ends, and returns its name. The
// image's health check is disabled unless extra sets a --health-* flag.
func runEcho(t testing.TB, name string, labels map[string]string, extra ...string) string {
	t.Helper()
	img := itest.EchoImage(t)
	args := []string{"run", "-d", "--name", name}
	if !slices.ContainsFunc(extra, func(s string) bool { return strings.HasPrefix(s, "--health") }) {
		args = append(args, "--no-healthcheck")
	}
	for k, v := range labels {
		args = append(args, "--label", k+"="+v)
	}
	args = append(args, extra...)
	args = append(args, img)
	t.Cleanup(func() { _ = itest.DockerCommand("rm", "-f", name).Run() })
	itest.Docker(t, args...)
	return name
}

// bridgeIP returns the container's IP on the default bridge network.
func bridgeIP(t testing.TB, name string) string {
	t.Helper()
	return itest.Docker(t, "inspect", "-f", "{{.NetworkSettings.IPAddress}}", name)
}
