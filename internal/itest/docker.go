package itest

import (
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// Helpers for tests against the real Docker engine. They use the docker CLI
// for what a user would type (docker run, stop, service create) and skip (or
// fail under TOLLGATE_REQUIRE_INTEGRATION=1) when no engine answers. Images
// are FROM scratch around static binaries built from this module: no image
// is pulled.

// NeedDocker skips t unless the docker CLI is installed and the engine at
// DOCKER_HOST (or the default socket) answers a ping; t then holds the
// engine shared with the other tests of this module (enginelock.go) until
// it ends.
func NeedDocker(t testing.TB) {
	t.Helper()
	needDocker(t)
	lockEngine(t, false)
}

// NeedDockerAlone is NeedDocker for a test that measures latencies: it
// waits until no other test of this module uses the engine, and keeps the
// others waiting until it ends.
func NeedDockerAlone(t testing.TB) {
	t.Helper()
	needDocker(t)
	lockEngine(t, true)
}

func needDocker(t testing.TB) {
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
		if _, err = cl.Ping(ctx); err != nil {
			return err
		}
		// A deadlocked engine still answers the ping, which takes no lock;
		// listing its containers does.
		if err := EngineAnswers(30 * time.Second); err != nil {
			return fmt.Errorf("the engine answers a ping but not /info within 30 s (a hung engine): %w", err)
		}
		return nil
	}()
	Need(t, "docker engine", err)
}

// EngineAnswers reports whether the engine at DOCKER_HOST (or the default
// socket) answers /info within timeout: unlike a ping, it takes the
// engine's locks (`timeout 20 docker info`, the check of an engine after
// heavy work).
func EngineAnswers(timeout time.Duration) error {
	cl, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err = cl.Info(ctx)
	return err
}

// DockerSocket is the path of the engine's unix socket (DOCKER_HOST, else
// /var/run/docker.sock); it skips t (or fails it, when integration is
// required) when the engine is not on a unix socket.
func DockerSocket(t testing.TB) string {
	t.Helper()
	h := os.Getenv("DOCKER_HOST")
	if h == "" {
		return "/var/run/docker.sock"
	}
	sock, ok := strings.CutPrefix(h, "unix://")
	if !ok {
		Need(t, "a unix-socket Docker engine", fmt.Errorf("DOCKER_HOST=%s is not a unix socket", h))
	}
	return sock
}

// Uniq returns a short random suffix for names.
func Uniq() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Docker runs the docker CLI with args and fails t on error; it returns the
// trimmed output.
func Docker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := DockerCommand(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// dockerTimeout bounds one docker CLI command of a test, so that an engine
// that stops answering fails the test with the command named instead of
// holding it until go test's own timeout.
const dockerTimeout = 5 * time.Minute

// DockerCommand is the docker CLI with args, killed after dockerTimeout.
func DockerCommand(args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	_ = cancel // the deadline releases the context
	return exec.CommandContext(ctx, "docker", args...)
}

// images are the images built by this test binary, by kind.
var (
	imagesMu sync.Mutex
	images   = map[string]*image{}
)

type image struct {
	once sync.Once
	name string
	err  error
}

// RemoveImages removes every image this test binary built, holding the
// engine shared (enginelock.go). Call it from TestMain after m.Run. It first
// waits (up to 30 s) for the containers made
// from them to be gone: Swarm removes a removed service's task containers
// a few seconds later, and an image removed while a container still uses
// it would stay behind, untagged.
func RemoveImages() {
	imagesMu.Lock()
	defer imagesMu.Unlock()
	if len(images) == 0 {
		return
	}
	if unlock, err := LockEngine(false); err == nil { // engine work: not during a measurement
		defer unlock()
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, img := range images {
		if img.name == "" {
			continue
		}
		for time.Now().Before(deadline) {
			out, err := DockerCommand("ps", "-aq", "--filter", "ancestor="+img.name).Output()
			if err != nil || strings.TrimSpace(string(out)) == "" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		_ = DockerCommand("rmi", "-f", img.name).Run()
	}
}

// scratchImage builds (once per test binary) the image kind: the file
// binary, which build writes to the path it is given, with the Dockerfile
// dockerfile; it returns the image's name. RemoveImages removes it.
func scratchImage(t testing.TB, kind, binary, dockerfile string, build func(dst string) error) string {
	t.Helper()
	imagesMu.Lock()
	img := images[kind]
	if img == nil {
		img = &image{}
		images[kind] = img
	}
	imagesMu.Unlock()
	img.once.Do(func() {
		dir, err := os.MkdirTemp("", "tollgate-image-")
		if err != nil {
			img.err = err
			return
		}
		defer os.RemoveAll(dir)
		if err := build(filepath.Join(dir, binary)); err != nil {
			img.err = err
			return
		}
		if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
			img.err = err
			return
		}
		name := "tollgate-itest-" + kind + ":" + Uniq()
		if out, err := DockerCommand("build", "-q", "-t", name, dir).CombinedOutput(); err != nil {
			img.err = fmt.Errorf("docker build %s: %v\n%s", kind, err, out)
			return
		}
		imagesMu.Lock()
		img.name = name
		imagesMu.Unlock()
	})
	if img.err != nil {
		t.Fatal(img.err)
	}
	return img.name
}

// goBuild returns a build for scratchImage: the static build of package pkg
// of this module.
func goBuild(pkg string) func(dst string) error {
	return func(dst string) error {
		build := exec.Command("go", "build", "-o", dst, pkg)
		build.Dir = ModuleRoot()
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", pkg, err, out)
		}
		return nil
	}
}

// moduleFile reads a file of this module, by path from its root.
func moduleFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ModuleRoot(), path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// EchoImage is the demo's echo backend (examples/echo, with its Dockerfile:
// port 7000, a banner line then echo, an exec-form health check).
func EchoImage(t testing.TB) string {
	t.Helper()
	return scratchImage(t, "echo", "echo", moduleFile(t, "examples/echo/Dockerfile"), goBuild("./examples/echo"))
}

// TollgateImage is tollgate itself, with the repository's Dockerfile (no
// HEALTHCHECK; /bin/sh and wget from Debian's busybox-static, which it
// needs: without it the test skips, or fails when integration tests are
// required).
func TollgateImage(t testing.TB) string {
	t.Helper()
	_, err := Busybox()
	Need(t, "Debian's busybox-static (/bin/busybox, the image's shell)", err)
	bin := Binary(t) // the test binary's tollgate, built once (static)
	return scratchImage(t, "tollgate", "tollgate", moduleFile(t, "Dockerfile"), func(dst string) error {
		b, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		if err := ImageFiles(filepath.Dir(dst)); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o755)
	})
}

// Busybox is the static busybox the image's shell is (Debian's
// busybox-static installs /bin/busybox), or why there is none: missing, or
// dynamically linked (Debian's busybox package), which would not run in an
// empty image.
func Busybox() (string, error) {
	const path = "/bin/busybox"
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w (apt-get install busybox-static)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked: install busybox-static", path)
		}
	}
	return path, nil
}

// ImageFiles puts into the build context dir what the Dockerfile copies
// besides tollgate: deploy/image (the links /usr/local/bin/traefik ->
// /tollgate, /bin/sh and /bin/wget -> busybox) and busybox (Busybox).
func ImageFiles(dir string) error {
	root := filepath.Join(ModuleRoot(), "deploy", "image")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(ModuleRoot(), path)
		dst := filepath.Join(dir, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o755)
	})
	if err != nil {
		return err
	}
	bb, err := Busybox()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "busybox"), b, 0o755)
}

// ForwardImage is internal/itest/forward: a client in a container that
// forwards each connection it accepts on :9000 to its -to address, from its
// own address.
func ForwardImage(t testing.TB) string {
	t.Helper()
	return scratchImage(t, "forward", "forward",
		"FROM scratch\nCOPY forward /forward\nEXPOSE 9000\nENTRYPOINT [\"/forward\"]\n", goBuild("./internal/itest/forward"))
}
