// Package itest holds helpers shared by integration tests: skipping (or, under
// TOLLGATE_REQUIRE_INTEGRATION=1, failing) when a real component is missing,
// building the tollgate binary once, and polling with a deadline.
package itest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// Required reports whether integration tests must run (CI sets
// TOLLGATE_REQUIRE_INTEGRATION=1): a missing component is then a failure.
func Required() bool { return os.Getenv("TOLLGATE_REQUIRE_INTEGRATION") == "1" }

// Need skips t with a message naming what is missing and why, or fails it when
// integration is required. It does nothing when err is nil.
func Need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if Required() {
		t.Fatalf("%s is required (TOLLGATE_REQUIRE_INTEGRATION=1) but unavailable: %v", what, err)
	}
	t.Skipf("skipping: %s unavailable: %v (set TOLLGATE_REQUIRE_INTEGRATION=1 to fail instead)", what, err)
}

// Eventually polls cond every 10 ms until it returns true or the deadline
// passes, then fails t with msg.
func Eventually(t testing.TB, within time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: "+msg, append([]any{within}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary builds the tollgate binary once per test process (CGO off, static)
// and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tollgate-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "tollgate")
		cmd := exec.Command("go", "build", "-o", buildPath, ".")
		cmd.Dir = ModuleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{out: string(out), err: err}
		}
	})
	if buildErr != nil {
		t.Fatalf("building tollgate: %v", buildErr)
	}
	return buildPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// ModuleRoot returns the repository root (where go.mod is).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// ExitCode is the exit status of a finished command: 0 for a nil error, the
// process's status for an *exec.ExitError, -1 for an error starting it.
func ExitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
