package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// Helpers for tests against the real engine. They use the docker CLI for what
// a user would type (docker run, stop, start) and skip (or fail under
// TOLLGATE_REQUIRE_INTEGRATION=1) when no engine answers.

var (
	imageOnce sync.Once
	imageName string
	imageErr  error
)

func TestMain(m *testing.M) {
	code := itest.Main(m)
	if imageName != "" {
		_ = exec.Command("docker", "rmi", "-f", imageName).Run()
	}
	os.Exit(code)
}

// needEngine skips t unless the engine at DOCKER_HOST (or the default socket)
// answers a ping.
func needEngine(t *testing.T) {
	t.Helper()
	err := func() error {
		if _, err := exec.LookPath("docker"); err != nil {
			return err
		}
		cl, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = cl.Ping(ctx)
		return err
	}()
	itest.Need(t, "docker engine", err)
}

// uniq returns a short random suffix for names.
func uniq() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// echoImage builds (once per test binary) the FROM scratch echo image and
// returns its name; TestMain removes it.
func echoImage(t *testing.T) string {
	t.Helper()
	imageOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tollgate-echo-image-")
		if err != nil {
			imageErr = err
			return
		}
		defer os.RemoveAll(dir)
		root := itest.ModuleRoot()
		build := exec.Command("go", "build", "-o", filepath.Join(dir, "echo"), "./examples/echo")
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("building examples/echo: %v\n%s", err, out)
			return
		}
		df, err := os.ReadFile(filepath.Join(root, "examples", "echo", "Dockerfile"))
		if err != nil {
			imageErr = err
			return
		}
		if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), df, 0o644); err != nil {
			imageErr = err
			return
		}
		name := "tollgate-itest-echo:" + uniq()
		if out, err := exec.Command("docker", "build", "-q", "-t", name, dir).CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("docker build: %v\n%s", err, out)
			return
		}
		imageName = name
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageName
}

// dockerCLI runs docker with args and fails t on error.
func dockerCLI(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// runEcho starts a detached echo container named name with labels and extra
// `docker run` flags, removes it when t ends, and returns its name. The
// image's health check is disabled unless extra sets a --health-* flag.
func runEcho(t testing.TB, name string, labels map[string]string, extra ...string) string {
	t.Helper()
	img := echoImage(t.(*testing.T))
	args := []string{"run", "-d", "--name", name}
	if !slices.ContainsFunc(extra, func(s string) bool { return strings.HasPrefix(s, "--health") }) {
		args = append(args, "--no-healthcheck")
	}
	for k, v := range labels {
		args = append(args, "--label", k+"="+v)
	}
	args = append(args, extra...)
	args = append(args, img)
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	dockerCLI(t, args...)
	return name
}

// containerIP returns the container's IP on the default bridge network.
func bridgeIP(t testing.TB, name string) string {
	t.Helper()
	return dockerCLI(t, "inspect", "-f", "{{.NetworkSettings.IPAddress}}", name)
}

func osGetenv(k string) string { return os.Getenv(k) }

// osMkdirShort makes a directory with a short path (unix socket paths are
// limited to 108 bytes; t.TempDir can exceed that).
func osMkdirShort() (string, error) { return os.MkdirTemp("", "tg-") }

func removeAll(dir string) { _ = os.RemoveAll(dir) }
