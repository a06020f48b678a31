package provider

// This file holds what a provider that keeps a connection to its source (the
// Docker engine, a Swarm manager) does the same way around that connection:
// send each complete snapshot once, report each distinct error once, and
// reconnect with a capped exponential backoff.

import (
	"context"
	"reflect"
	"time"

	"github.com/rs/zerolog"
)

// Timing of Reconnect.
const (
	ReconnectMin = 100 * time.Millisecond
	// ReconnectMax is low on purpose: a failed connect to a local socket
	// costs nothing, and the cap bounds how long after the source's return
	// the routes stay stale (issue 3: reconverge within 2 s).
	ReconnectMax = 500 * time.Millisecond
)

// Feed is a provider's side of its message channel across reconnections.
// The zero value is not usable: set Out and Name.
type Feed struct {
	Out  chan<- Message
	Name string // the provider's name, for error messages

	// healthy is set once a connection produced a snapshot.
	healthy bool
	// last is the last message sent; a snapshot equal to it is not re-sent,
	// except after an error message.
	last    *Message
	lastErr string
}

// Snapshot sends msg (a complete configuration) unless it equals the last
// one sent and no error was reported since: the watcher must learn that a
// provider is back even when nothing changed. onNew, when not nil, is called
// before a message is sent. It returns false when ctx ended first.
func (f *Feed) Snapshot(ctx context.Context, msg Message, onNew func(Message)) bool {
	f.healthy = true
	if f.last != nil && f.lastErr == "" && reflect.DeepEqual(*f.last, msg) {
		return true
	}
	if onNew != nil {
		onNew(msg)
	}
	if !f.send(ctx, msg) {
		return false
	}
	f.last, f.lastErr = &msg, ""
	return true
}

// fail reports a lost source once per distinct error.
func (f *Feed) fail(ctx context.Context, err error) bool {
	if f.lastErr == err.Error() {
		return true
	}
	if !f.send(ctx, Message{ProviderName: f.Name, Err: err}) {
		return false
	}
	f.lastErr = err.Error()
	return true
}

func (f *Feed) send(ctx context.Context, msg Message) bool {
	select {
	case f.Out <- msg:
		return true
	case <-ctx.Done():
		return false
	}
}

// Reconnect runs session until ctx is done. session connects, sends its
// snapshots with f.Snapshot and follows its source until the connection
// fails, returning why. Each failure is sent to the watcher (which keeps
// the last good configuration serving; the same error twice in a row is
// sent once) and logged as what (on log, at error level for the first
// attempt of an outage and about once a minute after, else at debug); the
// next attempt waits ReconnectMin, doubling up to ReconnectMax. A session
// that delivered a snapshot starts the next outage afresh.
func (f *Feed) Reconnect(ctx context.Context, log zerolog.Logger, what string, session func(ctx context.Context) error) {
	wait := ReconnectMin
	attempts := 0
	for {
		err := session(ctx)
		if ctx.Err() != nil {
			return
		}
		if f.healthy {
			wait, attempts = ReconnectMin, 0
		}
		f.healthy = false
		attempts++
		ev := log.Debug()
		if attempts == 1 || attempts%120 == 0 { // about once a minute at the cap
			ev = log.Error()
		}
		ev.Err(err).Int("attempt", attempts).Dur("retry_in", wait).Msg(what)
		if !f.fail(ctx, err) {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(wait*2, ReconnectMax)
	}
}
