package kv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/provider"
)

// fakeStore answers Next from a script: pairs, or an error.
type fakeStore struct {
	script chan step
	closed chan struct{}
}

type step struct {
	pairs []Pair
	err   error
}

func newFake() *fakeStore {
	return &fakeStore{script: make(chan step, 100), closed: make(chan struct{})}
}

func (f *fakeStore) Next(ctx context.Context) ([]Pair, error) {
	select {
	case s := <-f.script:
		return s.pairs, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeStore) Close() error { close(f.closed); return nil }

func run(t *testing.T, f *fakeStore) (chan provider.Message, func()) {
	t.Helper()
	p := New("fake", "fake store", f, Options{}, provider.Options{Backoff: provider.Backoff{Min: time.Millisecond, Max: 4 * time.Millisecond}})
	out := make(chan provider.Message, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		if err := p.Run(ctx, out); err != nil {
			t.Errorf("Run: %v", err)
		}
		close(done)
	}()
	return out, func() {
		cancel()
		<-done
		select {
		case <-f.closed:
		default:
			t.Error("the store was not closed")
		}
	}
}

func next(t *testing.T, out chan provider.Message) provider.Message {
	t.Helper()
	select {
	case m := <-out:
		return m
	case <-time.After(2 * time.Second):
		t.Fatal("no message")
		return provider.Message{}
	}
}

func none(t *testing.T, out chan provider.Message) {
	t.Helper()
	select {
	case m := <-out:
		t.Fatalf("unexpected message %+v", m)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestRunSnapshotsOutagesAndDedupe(t *testing.T) {
	f := newFake()
	out, stop := run(t, f)
	defer stop()

	f.script <- step{pairs: issueExample}
	m := next(t, out)
	if m.ProviderName != "fake" || m.Err != nil || m.Configuration.TCP.Routers["my-router"] == nil {
		t.Fatalf("first snapshot: %+v", m)
	}
	f.script <- step{pairs: issueExample} // the same again: not sent
	none(t, out)

	// An outage: one Err, however many reads fail.
	for range 5 {
		f.script <- step{err: errors.New("connection refused")}
	}
	m = next(t, out)
	if m.Err == nil || m.Err.Error() != "fake store: connection refused" {
		t.Fatalf("outage: %+v", m)
	}
	none(t, out)
	// Back, unchanged: a snapshot all the same, so that the error clears.
	f.script <- step{pairs: issueExample}
	if m = next(t, out); m.Err != nil || m.Configuration == nil {
		t.Fatalf("after the outage: %+v", m)
	}

	// Problems and warnings travel apart.
	f.script <- step{pairs: with(issueExample, Pair{"traefik/tcp/routers/bad/priority", "x"}, Pair{"traefik/http/a", "b"})}
	m = next(t, out)
	if len(m.Problems) != 1 || !strings.Contains(m.Problems[0], "traefik/tcp/routers/bad/priority") ||
		len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "http section") {
		t.Fatalf("problems %q, warnings %q", m.Problems, m.Warnings)
	}
}

func TestRunUnreachableFromTheStart(t *testing.T) {
	f := newFake()
	out, stop := run(t, f)
	defer stop()
	f.script <- step{err: errors.New("no route")}
	if m := next(t, out); m.Err == nil {
		t.Fatalf("want an Err first, got %+v", m)
	}
	f.script <- step{pairs: nil}
	if m := next(t, out); m.Err != nil || m.Configuration == nil || len(m.Configuration.TCP.Routers) != 0 {
		t.Fatalf("an empty store: %+v", m)
	}
}
