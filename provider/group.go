package provider

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// Group runs providers, each on a goroutine of its own, and waits for them
// within a bound: a provider stuck in a call that cannot be interrupted (a
// file's template rendering to its budget, a client library that does not
// watch its context) must not hold the process's shutdown. The zero value
// is ready to use.
type Group struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	running map[string]int // provider name -> its runs not returned yet
}

// Go runs run on a new goroutine, as the provider name.
func (g *Group) Go(name string, run func()) {
	g.mu.Lock()
	if g.running == nil {
		g.running = map[string]int{}
	}
	g.running[name]++
	g.mu.Unlock()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer func() {
			g.mu.Lock()
			if g.running[name]--; g.running[name] == 0 {
				delete(g.running, name)
			}
			g.mu.Unlock()
		}()
		run()
	}()
}

// Wait waits until every run has returned or until deadline, and returns
// the names of the providers still running then (sorted; none when all
// returned). Those are left behind: the process may exit under them.
func (g *Group) Wait(deadline time.Time) []string {
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.running))
}
