package kv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Store is one KV store as the provider's loop drives it: the store's real
// client behind the calls the loop makes.
type Store interface {
	// Next returns every pair under the root key: at once on the first call
	// and on the first call after an error, else as soon as something under
	// the root key may have changed (the store's own watch). It may return
	// the same pairs again. An error means the store cannot be read now; the
	// next call starts over (reconnects, reads again or resumes its watch).
	// Next returns ctx's error when ctx is done.
	Next(ctx context.Context) ([]Pair, error)
	// Close releases the client. Next is not called after it.
	Close() error
}

// Timing tunes the loop's retries. The zero value is not usable: New uses
// DefaultTiming, tests shorten it.
type Timing struct {
	// BackoffMin and BackoffMax bound the capped exponential backoff
	// between the reads that fail while the store is unreachable; it resets
	// on the next success. BackoffMax bounds how long after the store is
	// back the loop notices it.
	BackoffMin, BackoffMax time.Duration
}

// DefaultTiming retries within 100 ms, then at most every second: a store
// that comes back is read again within a second, whatever the outage lasted.
var DefaultTiming = Timing{BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second}

// backoff is the delay before retry number retries (0 for the first), with
// its upper half jittered.
func (t Timing) backoff(retries int) time.Duration {
	d := t.BackoffMax
	if retries < 30 {
		d = min(t.BackoffMin<<retries, t.BackoffMax)
	}
	if half := d / 2; half > 0 {
		d = half + rand.N(half)
	}
	return d
}

// Provider is a KV store provider: Store's snapshots built by Build. Create
// it with New; it is used by one Run at a time.
type Provider struct {
	name   string
	what   string // the store, for messages: `consul agent 127.0.0.1:8500`
	store  Store
	opts   Options
	log    zerolog.Logger
	timing Timing
}

var _ provider.Provider = (*Provider)(nil)

// New returns the provider called name (its qualified-name suffix: "consul",
// "etcd") that reads store under opts.RootKey. what names the store in
// errors.
func New(name, what string, store Store, opts Options, log zerolog.Logger) *Provider {
	return &Provider{name: name, what: what, store: store, opts: opts,
		log: log.With().Str("provider", name).Logger(), timing: DefaultTiming}
}

// SetTiming replaces the retry timing (tests).
func (p *Provider) SetTiming(t Timing) { p.timing = t }

// Name returns the provider's name.
func (p *Provider) Name() string { return p.name }

// Run reads the store until ctx is done and sends one complete Message per
// snapshot, skipping one identical to the last sent. When the store cannot
// be read it sends one Message with Err per outage (the watcher keeps the
// last configuration serving and shows the error), retries with a capped
// backoff, and sends the next snapshot as soon as the store answers, even
// when it is unchanged (so the error clears). It returns nil when ctx is
// done, and closes the store.
func (p *Provider) Run(ctx context.Context, out chan<- provider.Message) error {
	defer p.store.Close()
	var (
		failing  bool
		retries  int
		sent     bool
		last     *config.Dynamic
		lastProb []string
		lastWarn []string
	)
	for {
		pairs, err := p.store.Next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", p.what, err)
			delay := p.timing.backoff(retries)
			ev := p.log.Debug()
			if !failing {
				ev = p.log.Warn() // the watcher logs the Err at error level
			}
			ev.Err(err).Dur("retry_in", delay).Msg("Cannot read the store; keeping the last configuration")
			if !failing && !send(ctx, out, provider.Message{ProviderName: p.name, Err: err}) {
				return nil
			}
			failing = true
			retries++
			if !sleep(ctx, delay) {
				return nil
			}
			continue
		}
		if failing {
			p.log.Info().Msg("Store readable again")
		}
		retries = 0
		res := Build(pairs, p.opts)
		var problems, warnings []string
		for _, pr := range res.Problems {
			if pr.Severity == provider.SeverityWarning {
				warnings = append(warnings, pr.String())
			} else {
				problems = append(problems, pr.String())
			}
		}
		if sent && !failing && reflect.DeepEqual(res.Configuration, last) &&
			reflect.DeepEqual(problems, lastProb) && reflect.DeepEqual(warnings, lastWarn) {
			continue
		}
		failing = false
		sent, last, lastProb, lastWarn = true, res.Configuration, problems, warnings
		if !send(ctx, out, provider.Message{ProviderName: p.name, Configuration: res.Configuration, Problems: problems, Warnings: warnings}) {
			return nil
		}
	}
}

// send delivers m unless ctx is done first, and reports whether it did.
func send(ctx context.Context, out chan<- provider.Message, m provider.Message) bool {
	select {
	case out <- m:
		return true
	case <-ctx.Done():
		return false
	}
}

// sleep waits for d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Sleep is sleep for the stores' packages: it waits for d or until ctx is
// done, and reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool { return sleep(ctx, d) }

// ErrNoEndpoint is returned by the stores' constructors for an empty
// endpoints list.
var ErrNoEndpoint = errors.New("no endpoint: set at least one host:port")
