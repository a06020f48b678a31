package itest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Recorder keeps every message a running provider sends (M is
// provider.Message; itest imports nothing of tollgate).
type Recorder[M any] struct {
	// Describe, when set, shows a message in failures (else %+v).
	Describe func(M) string

	mu   sync.Mutex
	msgs []M
}

// Record runs run (a provider's Run) until t ends, keeping what it sends.
// At cleanup it cancels run's context and fails t unless run returns nil
// within 5 s.
func Record[M any](t testing.TB, run func(ctx context.Context, out chan<- M) error) *Recorder[M] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan M)
	r := &Recorder[M]{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, out) }()
	go func() {
		for m := range out {
			r.mu.Lock()
			r.msgs = append(r.msgs, m)
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return within 5s of cancel")
		}
		close(out)
	})
	return r
}

// All returns every message so far.
func (r *Recorder[M]) All() []M {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]M(nil), r.msgs...)
}

// Latest returns the last message (zero when none) and how many came.
func (r *Recorder[M]) Latest() (M, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m M
	if len(r.msgs) == 0 {
		return m, 0
	}
	return r.msgs[len(r.msgs)-1], len(r.msgs)
}

// WaitLatest polls until the latest message satisfies cond, and returns it.
func (r *Recorder[M]) WaitLatest(t testing.TB, within time.Duration, what string, cond func(M) bool) M {
	t.Helper()
	var m M
	var n int
	Eventually(t, within, func() bool {
		m, n = r.Latest()
		return cond(m)
	}, "%s: %v", what, latest[M]{r, &m, &n})
	return m
}

// latest formats the last message seen, lazily: when Eventually fails.
type latest[M any] struct {
	r *Recorder[M]
	m *M
	n *int
}

func (l latest[M]) String() string {
	s := fmt.Sprintf("%+v", *l.m)
	if l.r.Describe != nil {
		s = l.r.Describe(*l.m)
	}
	return fmt.Sprintf("latest of %d messages: %s", *l.n, s)
}
