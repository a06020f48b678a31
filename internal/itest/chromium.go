package itest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// chromiumNames are the commands a Chromium or Chrome is installed as
// (Debian's package: chromium).
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// NeedChromium returns the path of a Chromium (TOLLGATE_CHROMIUM, else the
// first of chromium, chromium-browser, google-chrome on PATH) that answers
// --version, or skips t (fails it under TOLLGATE_REQUIRE_INTEGRATION=1)
// saying how to get one: `apt-get install chromium` (.ci/run does).
func NeedChromium(t testing.TB) string {
	t.Helper()
	chromiumOnce.Do(func() { chromiumPath, chromiumErr = chromium() })
	Need(t, "a Chromium browser (apt-get install chromium, or TOLLGATE_CHROMIUM=/path/to/chrome)", chromiumErr)
	return chromiumPath
}

// The browser found, once per test process.
var (
	chromiumOnce sync.Once
	chromiumPath string
	chromiumErr  error
)

func chromium() (string, error) {
	var path string
	if p := os.Getenv("TOLLGATE_CHROMIUM"); p != "" {
		path = p
	} else {
		for _, n := range chromiumNames {
			if p, err := exec.LookPath(n); err == nil {
				path = p
				break
			}
		}
		if path == "" {
			return "", errors.New("none of " + strings.Join(chromiumNames, ", ") + " on PATH")
		}
	}
	cmd := exec.Command(path, "--headless", "--no-sandbox", "--version")
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return "", fmt.Errorf("%s --version did not answer in 30 s", path)
	}
	if err != nil {
		if o := strings.TrimSpace(string(out)); o != "" {
			err = fmt.Errorf("%v: %s", err, o)
		}
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	return path, nil
}

// ArtifactDir returns a directory for what a test leaves to be looked at
// (screenshots): $TOLLGATE_ARTIFACTS/<name>, created, when that variable is
// set, else a temporary directory removed after the test.
func ArtifactDir(t testing.TB, name string) string {
	t.Helper()
	root := os.Getenv("TOLLGATE_ARTIFACTS")
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("TOLLGATE_ARTIFACTS: %v", err)
	}
	return dir
}
