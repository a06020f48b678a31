package itest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The Docker engine is shared by the test processes of several packages
// (go test ./... runs packages side by side): a test that measures how fast
// the engine's changes reach tollgate would measure the others' load too.
// So every engine test holds the engine shared (NeedDocker), and a
// measurement holds it alone (NeedDockerAlone), through a flock on one file
// that every test process of this module opens. The lock goes with the
// process: a test binary that dies releases it.

// engineLockPath is the lock file, in the temporary directory.
func engineLockPath() string { return filepath.Join(os.TempDir(), "tollgate-itest-docker-engine.lock") }

// lockEngine takes the engine lock (exclusive or shared) for t's duration.
// A test takes it once: NeedDocker or NeedDockerAlone, not both.
func lockEngine(t testing.TB, exclusive bool) {
	t.Helper()
	unlock, err := LockEngine(exclusive)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
}

// LockEngine takes the engine lock, waiting up to 15 minutes, for work that
// is not a test's (a TestMain's cleanup: leaving a swarm, removing
// images); unlock releases it.
func LockEngine(exclusive bool) (unlock func(), err error) {
	f, err := os.OpenFile(engineLockPath(), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("engine lock: %w", err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(15 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("engine lock %s: %w", engineLockPath(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
