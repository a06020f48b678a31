package kv

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/provider"
)

// Store is one KV store as the provider drives it: the store's real client
// behind the calls the provider makes.
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

// Provider is a KV store provider: Store's snapshots built by Build, on
// the provider runtime (provider.Loop). Create it with New; it is used by
// one Run at a time.
type Provider struct {
	name    string
	what    string // the store, for messages: `consul agent 127.0.0.1:8500`
	store   Store
	opts    Options
	log     zerolog.Logger
	backoff provider.Backoff
}

var _ provider.Provider = (*Provider)(nil)

// New returns the provider called name (its qualified-name suffix: "consul",
// "etcd") that reads store under opts.RootKey, with po's logger and backoff:
// what each store's New(cfg, provider.Options) returns. what names the store
// in errors. Without opts.Cache, the provider gets a DecodeCache of its own:
// a change decodes only the resources whose keys changed.
func New(name, what string, store Store, opts Options, po provider.Options) *Provider {
	if opts.Cache == nil {
		opts.Cache = &DecodeCache{}
	}
	return &Provider{name: name, what: what, store: store, opts: opts,
		log: po.Log.With().Str("provider", name).Logger(), backoff: po.Backoff}
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.name }

// Run reads the store until ctx is done, one Next per attempt of the
// runtime, and sends each snapshot that differs from the last (problems and
// warnings apart, Result.Message). When the store cannot be read, the
// runtime sends one Err per outage (the watcher keeps the last
// configuration serving and shows the error), retries with its backoff,
// and sends the next snapshot as soon as the store answers, even when it is
// unchanged (so the error clears). It returns nil when ctx is done, and
// closes the store.
func (p *Provider) Run(ctx context.Context, out chan<- provider.Message) error {
	provider.Loop{Name: p.name, What: p.what, Log: p.log, Backoff: p.backoff, Close: p.store.Close,
		Attempt: func(ctx context.Context, s *provider.Sink) error {
			pairs, err := p.store.Next(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", p.what, err)
			}
			if !s.Result(ctx, Build(pairs, p.opts)) {
				return ctx.Err()
			}
			return nil
		}}.Run(ctx, out)
	return nil
}

// ErrNoEndpoint is returned by the stores' constructors for an empty
// endpoints list.
var ErrNoEndpoint = errors.New("no endpoint: set at least one host:port")
