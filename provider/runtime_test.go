package provider

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
)

// The backoff is capped, and its jitter takes at most the upper half
// (moved from provider/kv, whose retries it times now).
func TestBackoffCapped(t *testing.T) {
	tm := DefaultBackoff
	for i := range 100 {
		if d := tm.Delay(i); d > tm.Max || d < tm.Min/2 {
			t.Fatalf("backoff(%d) = %v, want within [%v, %v]", i, d, tm.Min/2, tm.Max)
		}
	}
	if d := (Backoff{Min: time.Second, Max: time.Second}).Delay(3); d != time.Second {
		t.Fatalf("a fixed backoff waits %v, want 1s (no jitter)", d)
	}
}

// step is one scripted attempt: the snapshots it sends, then its error
// (nil: it read what there was), or a Fail in the middle.
type step struct {
	snaps []int // Configuration.TCP.Routers of that many routers
	fail  error // reported with Fail before returning
	err   error
}

func dyn(n int) *config.Dynamic {
	d := &config.Dynamic{TCP: &config.TCPConfiguration{Routers: map[string]*config.TCPRouter{}}}
	for i := range n {
		d.TCP.Routers[string(rune('a'+i))] = &config.TCPRouter{Rule: "HostSNI(`*`)"}
	}
	return d
}

// runScript runs a Loop whose attempts follow script, and returns the
// messages it sent once every step has run.
func runScript(t *testing.T, resend bool, script []step) []Message {
	t.Helper()
	steps := make(chan step, len(script))
	for _, s := range script {
		steps <- s
	}
	out := make(chan Message, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ran := make(chan struct{}, len(script)+1)
	go func() {
		defer close(done)
		Loop{Name: "p", What: "the source", Backoff: Backoff{Min: time.Millisecond, Max: time.Millisecond}, Resend: resend,
			Attempt: func(ctx context.Context, s *Sink) error {
				select {
				case st := <-steps:
					defer func() { ran <- struct{}{} }()
					for _, n := range st.snaps {
						if !s.Snapshot(ctx, Message{Configuration: dyn(n)}) {
							return ctx.Err()
						}
					}
					if st.fail != nil && !s.Fail(ctx, st.fail) {
						return ctx.Err()
					}
					return st.err
				case <-ctx.Done():
					return ctx.Err()
				}
			}}.Run(ctx, out)
	}()
	for range script {
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatal("the script did not run")
		}
	}
	cancel()
	<-done
	close(out)
	var msgs []Message
	for m := range out {
		if m.ProviderName != "p" {
			t.Fatalf("message %+v without the provider's name", m)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// describe is a message as the tests compare it: "E:<error>" or
// "S:<routers>".
func describe(ms []Message) []string {
	var out []string
	for _, m := range ms {
		if m.Err != nil {
			out = append(out, "E:"+m.Err.Error())
		} else {
			out = append(out, "S:"+string(rune('0'+len(m.Configuration.TCP.Routers))))
		}
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Loop's rule: a snapshot equal to the last is sent only after an error;
// one error per outage, whatever its cause; a connection lost after a
// snapshot says why, and the outage that follows is reported by its first
// failed attempt; the same error is not sent twice in a row.
func TestLoopOutageRule(t *testing.T) {
	e := errors.New
	got := describe(runScript(t, false, []step{
		{snaps: []int{1}},                             // S:1
		{snaps: []int{1}},                             // unchanged: nothing
		{err: e("refused")},                           // E:refused, the outage
		{err: e("timeout")},                           // the same outage: nothing
		{snaps: []int{1}},                             // S:1 again: the error clears
		{snaps: []int{2}, err: e("EOF")},              // S:2, then E:EOF (a connection lost)
		{err: e("refused")},                           // E:refused: reconnecting fails
		{err: e("refused")},                           // nothing
		{err: e("timeout")},                           // nothing: the same outage
		{snaps: []int{2}, fail: e("watch"), err: nil}, // S:2 (after the error), E:watch
		{fail: e("watch 2")},                          // nothing: the same outage
		{snaps: []int{2}},                             // S:2: the error clears
	}))
	want := []string{"S:1", "E:refused", "S:1", "S:2", "E:EOF", "E:refused", "S:2", "E:watch", "S:2"}
	if !equal(got, want) {
		t.Fatalf("messages %q, want %q", got, want)
	}
}

// With Resend (the file provider), every read is sent.
func TestLoopResend(t *testing.T) {
	e := errors.New
	got := describe(runScript(t, true, []step{
		{snaps: []int{1}},
		{snaps: []int{1}},
		{fail: e("line 3")},
		{fail: e("line 3")},
		{fail: e("line 9")},
		{snaps: []int{1}},
	}))
	want := []string{"S:1", "S:1", "E:line 3", "E:line 3", "E:line 9", "S:1"}
	if !equal(got, want) {
		t.Fatalf("messages %q, want %q", got, want)
	}
}

// A wake-up starts the next attempt at once, and ends a backoff early.
func TestLoopWake(t *testing.T) {
	wake := make(chan struct{}, 1)
	attempts := make(chan int, 10)
	n := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Message, 10)
	go Loop{Name: "p", What: "the source", Wake: wake, Backoff: Backoff{Min: time.Hour, Max: time.Hour},
		Attempt: func(ctx context.Context, s *Sink) error {
			n++
			attempts <- n
			if n == 2 {
				return errors.New("down") // an hour's backoff, unless woken
			}
			return nil
		}}.Run(ctx, out)
	for want := 1; want <= 3; want++ {
		select {
		case got := <-attempts:
			if got != want {
				t.Fatalf("attempt %d, want %d", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("attempt %d did not start", want)
		}
		wake <- struct{}{}
	}
}

// A Result becomes a Message one way: its errors in Problems, its warnings
// in Warnings.
func TestResultMessage(t *testing.T) {
	r := Result{Configuration: dyn(1), Problems: []Problem{
		{Source: `container "a"`, Severity: SeverityError, Message: "bad"},
		{Source: `container "b"`, Severity: SeverityWarning, Message: "odd"},
	}}
	m := r.Message("docker")
	if m.ProviderName != "docker" || m.Configuration != r.Configuration ||
		!equal(m.Problems, []string{`container "a": bad`}) || !equal(m.Warnings, []string{`container "b": odd`}) {
		t.Fatalf("message %+v", m)
	}
	if m := (Result{}).Message("docker"); m.Problems != nil || m.Warnings != nil {
		t.Fatalf("empty result: %+v", m)
	}
}
