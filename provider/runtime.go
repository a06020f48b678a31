package provider

// This file is the runtime every provider runs on (ARCHITECTURE.md, "Where
// the next pieces go"): a provider writes how it reads its source once (an
// attempt) and Loop does the rest the same way for all of them: sending
// each complete snapshot once, one error per outage, the retries and their
// capped backoff, and a Build's Result turned into a Message.

import (
	"context"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
)

// Options are what every provider's constructor takes besides its own
// configuration: New(cfg, Options) (*Provider, error). The zero value is
// ready to use.
type Options struct {
	// Log is the process's logger; the provider adds its name to it.
	Log zerolog.Logger
	// Backoff spaces the attempts to read a source that cannot be read
	// (zero: DefaultBackoff). Tests shorten it.
	Backoff Backoff
	// Limits bound what a provider reads (nil: the defaults): the file
	// provider reads no file over Limits.MaxFileSize.
	Limits *config.Limits
}

// Backoff is the wait between two attempts to read a source that cannot be
// read: Min, doubling with each failed attempt up to Max, its upper half
// jittered so that loops do not retry in step (a fixed wait, Min equal to
// Max, is not). The zero value is DefaultBackoff.
type Backoff struct {
	Min, Max time.Duration
}

// DefaultBackoff retries within 100 ms, then at least every 500 ms: low on
// purpose, since a failed attempt on a local socket or an agent that is
// down costs next to nothing, and Max bounds how long after a source's
// return the routes stay stale (issue 3: reconverge within 2 s).
var DefaultBackoff = Backoff{Min: 100 * time.Millisecond, Max: 500 * time.Millisecond}

// Delay is the wait before retry number retry (0 for the first).
func (b Backoff) Delay(retry int) time.Duration {
	if b.Min <= 0 || b.Max <= 0 {
		b = DefaultBackoff
	}
	d := b.Max
	if retry < 30 {
		d = min(b.Min<<retry, b.Max)
	}
	if half := d / 2; half > 0 && b.Min < b.Max {
		d = half + rand.N(half)
	}
	return d
}

// Sleep waits for d or until ctx is done, and reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Loop is a provider run: what the provider writes of its own (Attempt,
// and what wakes it) and what the runtime does the same way for every
// provider. Create it in Run and call its Run.
//
// Run calls Attempt until ctx is done. An attempt reads the source, or
// connects to it and follows it, and sends each complete configuration it
// reads through the Sink. It returns nil when it read what there was: the
// next attempt starts on Wake, on Every, or at once with neither (the
// attempt waits for its source itself, as a KV store's watch does). It
// returns an error when the source cannot be read: the next attempt starts
// after Backoff (a Wake or Every's tick cuts the wait short), and the error
// is reported by the outage rule:
//
//   - one error per outage: the first failed attempt since the last
//     snapshot sends its error (Message.Err: the watcher keeps the last good
//     configuration serving and shows the error); the attempts that fail
//     after it send nothing, whatever their error, until a snapshot ends
//     the outage;
//   - an attempt that had sent a snapshot and then fails (a followed
//     connection lost) is not an outage yet: its error is sent as why the
//     connection ended, and the outage, if reconnecting fails, is reported
//     by its first failed attempt;
//   - the same error is never sent twice in a row.
//
// A snapshot equal to the last one sent is not sent again, except after an
// error: the watcher must learn that the provider is back even when nothing
// changed. The backoff starts afresh after an attempt that read its source.
// (Resend, below, is the one exception to both rules.)
type Loop struct {
	// Name is the provider's name (Message.ProviderName).
	Name string
	// What names the source in the log: "Docker engine", "etcd
	// 127.0.0.1:2379".
	What string
	// Log is the provider's logger.
	Log     zerolog.Logger
	Backoff Backoff
	Attempt func(ctx context.Context, s *Sink) error
	// Wake, when not nil, starts the next attempt: a change the source
	// announced (a blocking query's answer).
	Wake <-chan struct{}
	// Every, when positive, is the period of the attempts (a poll).
	Every time.Duration
	// Resend sends what every attempt reads, even a snapshot equal to the
	// last, and every error it reports with Fail: the file provider's, whose
	// reads each follow an edit or SIGHUP, so that the API's lastUpdate says
	// when the files were last read and its lastError what the last edit
	// broke.
	Resend bool
	// Close, when not nil, releases the source's client when Run returns.
	Close func() error
}

// Run runs the loop until ctx is done.
func (l Loop) Run(ctx context.Context, out chan<- Message) {
	if l.Close != nil {
		defer func() { _ = l.Close() }()
	}
	s := &Sink{out: out, loop: &l}
	var tick <-chan time.Time
	if l.Every > 0 {
		t := time.NewTicker(l.Every)
		defer t.Stop()
		tick = t.C
	}
	retry := 0 // failed attempts since the last snapshot
	var warned time.Time
	for {
		s.delivered = false
		err := l.Attempt(ctx, s)
		if ctx.Err() != nil {
			return
		}
		if err == nil || s.delivered {
			retry = 0
		}
		if err == nil {
			if l.Wake == nil && tick == nil {
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-l.Wake:
			case <-tick:
			}
			continue
		}
		wait := l.Backoff.Delay(retry)
		retry++
		ev := l.Log.Debug()
		if retry == 1 || time.Since(warned) >= time.Minute { // and about once a minute in a long outage
			ev, warned = l.Log.Warn(), time.Now() // the watcher logs the error itself at error level
		}
		ev.Err(err).Int("attempt", retry).Dur("retry_in", wait).Msg(l.What + " cannot be read; keeping the last configuration")
		if !s.report(ctx, err, s.delivered) {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-l.Wake:
		case <-tick:
		case <-t.C:
		}
		t.Stop()
	}
}

// Sink is an attempt's side of the provider's message channel: what it
// sends goes through the outage rule and the dedupe of Loop. It is used by
// the goroutine that runs the attempts only.
type Sink struct {
	out  chan<- Message
	loop *Loop
	// last is the last snapshot sent; errSent the error sent since ("" for
	// none); outage is set once the outage under way has been reported.
	last    *Message
	errSent string
	outage  bool
	// delivered: the current attempt sent a snapshot.
	delivered bool
}

// Snapshot sends msg, the provider's complete configuration (its
// ProviderName is set here), unless it equals the last one sent and no
// error was sent since (see Loop). It ends the outage, if any. It returns
// false when ctx ended first.
func (s *Sink) Snapshot(ctx context.Context, msg Message) bool {
	msg.ProviderName = s.loop.Name
	s.delivered = true
	if s.errSent != "" {
		s.loop.Log.Info().Msg(s.loop.What + " readable again")
	}
	if s.last != nil && s.errSent == "" && !s.loop.Resend && reflect.DeepEqual(*s.last, msg) {
		return true
	}
	if !s.send(ctx, msg) {
		return false
	}
	s.last, s.errSent, s.outage = &msg, "", false
	return true
}

// Result sends a Build's result as a snapshot (Result.Message).
func (s *Sink) Result(ctx context.Context, r Result) bool {
	return s.Snapshot(ctx, r.Message(s.loop.Name))
}

// Fail reports that the source cannot be read, by the outage rule, while
// the attempt goes on: a file that does not parse (read again on its next
// change, not retried), a watch that fails while the others serve. It
// returns false when ctx ended first.
func (s *Sink) Fail(ctx context.Context, err error) bool {
	return s.report(ctx, err, false)
}

// report sends err by the outage rule; lost: the attempt that failed had
// sent a snapshot.
func (s *Sink) report(ctx context.Context, err error, lost bool) bool {
	resend := s.loop.Resend // every error is sent
	if !lost && !resend {
		if s.outage {
			return true
		}
		s.outage = true
	}
	if err.Error() == s.errSent && !resend {
		return true
	}
	if !s.send(ctx, Message{ProviderName: s.loop.Name, Err: err}) {
		return false
	}
	s.errSent = err.Error()
	return true
}

func (s *Sink) send(ctx context.Context, msg Message) bool {
	select {
	case s.out <- msg:
		return true
	case <-ctx.Done():
		return false
	}
}

// Message is the Message of a Build's result, for the provider name: the
// errors (Problems) apart from the warnings (Warnings), one line each, both
// nil when empty. It is the one way a Result becomes a Message.
func (r Result) Message(name string) Message {
	m := Message{ProviderName: name, Configuration: r.Configuration}
	for _, p := range r.Problems {
		if p.Severity == SeverityWarning {
			m.Warnings = append(m.Warnings, p.String())
		} else {
			m.Problems = append(m.Problems, p.String())
		}
	}
	return m
}
