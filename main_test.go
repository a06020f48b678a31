package main

import (
	"runtime"
	"testing"
)

// TestSpareP: the loops stay one per CPU (GOMAXPROCS as the process found
// it) and the scheduler gets one P more.
func TestSpareP(t *testing.T) {
	n := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(n) })
	if got := spareP(); got != n {
		t.Errorf("%d loops after spareP, want %d (one per CPU)", got, n)
	}
	if got := runtime.GOMAXPROCS(0); got != n+1 {
		t.Errorf("GOMAXPROCS %d after spareP, want %d", got, n+1)
	}
}
