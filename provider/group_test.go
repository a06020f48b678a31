package provider

import (
	"slices"
	"testing"
	"time"
)

// Group.Wait returns once every run has, or at its deadline with the names
// of the runs still going: a provider stuck for good does not hold it.
func TestGroupWaitIsBounded(t *testing.T) {
	var g Group
	stuck, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	g.Go("file", func() { close(stuck); <-release })
	g.Go("docker", func() {})
	<-stuck
	start := time.Now()
	if got := g.Wait(start.Add(100 * time.Millisecond)); !slices.Equal(got, []string{"file"}) {
		t.Fatalf("Wait = %q, want [file]", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Wait took %s", d)
	}

	var done Group
	done.Go("a", func() {})
	done.Go("a", func() { time.Sleep(10 * time.Millisecond) })
	if got := done.Wait(time.Now().Add(time.Minute)); got != nil {
		t.Fatalf("Wait = %q, want none", got)
	}
}
