// Package itest holds helpers shared by integration tests: skipping (or, under
// TOLLGATE_REQUIRE_INTEGRATION=1, failing) when a real component is missing,
// building the tollgate binary once, and polling with a deadline.
package itest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Required reports whether integration tests must run (CI sets
// TOLLGATE_REQUIRE_INTEGRATION=1): a missing component is then a failure.
func Required() bool { return os.Getenv("TOLLGATE_REQUIRE_INTEGRATION") == "1" }

// Need skips t with a message naming what is missing and why, or fails it when
// integration is required. It does nothing when err is nil. A skip is also
// counted for the one-line summary that Main writes at the end of the run
// (without Main, the first skip of each component writes its line at once).
func Need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if Required() {
		t.Fatalf("%s is required (TOLLGATE_REQUIRE_INTEGRATION=1) but unavailable: %v", what, err)
	}
	noteSkip(what, err)
	t.Skipf("skipping: %s unavailable: %v (set TOLLGATE_REQUIRE_INTEGRATION=1 to fail instead)", what, err)
}

// skips are the tests Need skipped in this test binary, per component.
var skips struct {
	sync.Mutex
	main  bool // Main runs the tests and writes the summary
	whats []string
	count map[string]int
	why   map[string]string
}

func noteSkip(what string, err error) {
	skips.Lock()
	defer skips.Unlock()
	if skips.count == nil {
		skips.count, skips.why = map[string]int{}, map[string]string{}
	}
	if skips.count[what] == 0 {
		skips.whats = append(skips.whats, what)
		skips.why[what] = err.Error()
		if !skips.main {
			report(fmt.Sprintf("itest: %s: skipping the tests that need %s: %v (TOLLGATE_REQUIRE_INTEGRATION=1 makes a skip a failure)", pkgName(), what, err))
		}
	}
	skips.count[what]++
}

// Main runs a package's tests (from its TestMain: os.Exit(itest.Main(m)))
// and, when Need skipped some, writes one line saying how many, what was
// missing and how to get it, where the person running go test sees it.
// The binary Binary built for them is removed.
func Main(m *testing.M) int {
	skips.Lock()
	skips.main = true
	skips.Unlock()
	code := m.Run()
	if buildPath != "" {
		_ = os.RemoveAll(filepath.Dir(buildPath))
	}
	skips.Lock()
	defer skips.Unlock()
	if len(skips.whats) == 0 {
		return code
	}
	var parts []string
	for _, what := range skips.whats {
		n := skips.count[what]
		noun := "tests"
		if n == 1 {
			noun = "test"
		}
		parts = append(parts, fmt.Sprintf("%d %s skipped: %s unavailable: %s", n, noun, what, skips.why[what]))
	}
	report(fmt.Sprintf("itest: %s: %s (TOLLGATE_REQUIRE_INTEGRATION=1 makes a skip a failure)", pkgName(), strings.Join(parts, "; ")))
	return code
}

// report writes a line about skipped tests where it is seen. go test shows
// nothing of a passing package's output but its "ok" line (unless -v), so
// the line goes to the go command's own stderr, /proc/<parent>/fd/2 (opened
// for appending); with -v, or when that cannot be opened, to stdout with the
// rest of the test's output.
func report(line string) {
	if !testing.Verbose() {
		if f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", os.Getppid()), os.O_WRONLY|os.O_APPEND, 0); err == nil {
			_, _ = fmt.Fprintln(f, line)
			_ = f.Close()
			return
		}
	}
	fmt.Println(line)
}

// pkgName is the package under test, relative to the module root (tests
// run in their package's folder).
func pkgName() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	rel, err := filepath.Rel(ModuleRoot(), wd)
	if err != nil || rel == "." {
		return filepath.Base(wd)
	}
	return filepath.ToSlash(rel)
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

// WriteFile writes content to a file called name in a fresh temporary
// directory and returns its path.
func WriteFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
