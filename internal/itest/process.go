package itest

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Running reports whether process pid runs (a zombie, ended but not yet
// reaped by whoever adopted it, does not).
func Running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// StopAtCleanup ends process pid at cleanup, if it still runs: SIGTERM,
// then SIGKILL after 15 s. For processes a test did not start itself but
// caused (the new process of an upgrade): it must know their PID.
func StopAtCleanup(t testing.TB, pid int) {
	t.Cleanup(func() { StopPID(pid) })
}

// StopPID sends SIGTERM to pid and waits until it has ended, sending SIGKILL
// after 15 s.
func StopPID(pid int) {
	if !Running(pid) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for Running(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(5 * time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
