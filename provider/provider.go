// Package provider defines how configuration sources (file, Docker, Consul)
// hand snapshots to the watcher, and holds the watcher that merges them.
package provider

import (
	"context"

	"github.com/tollgate-proxy/tollgate/config"
)

// Provider is a source of dynamic configuration.
//
// Run blocks until ctx is done. It is level-triggered: on every wake-up
// (event, timer, file change) it re-reads its whole source and sends one
// complete Message for itself, never a delta. Every send selects on
// ctx.Done(). Run owns its retries and backoff; it returns only when ctx is
// done or on an error that retrying cannot fix.
type Provider interface {
	Name() string
	Run(ctx context.Context, out chan<- Message) error
}

// Message is one provider's complete view, or news that it lost its source.
type Message struct {
	// ProviderName is the provider's name as used in qualified resource names:
	// "file", "docker", "consulcatalog".
	ProviderName string
	// Configuration is the provider's complete configuration with bare
	// (unqualified) names. Nil means the provider has nothing to route.
	// Ignored when Err is set.
	Configuration *config.Dynamic
	// Problems lists inputs the provider skipped, each naming the source and the
	// key (`container "db-1": label "traefik.tcp...amount": ...`). They show in
	// the API and the log; the rest of the configuration still applies.
	Problems []string
	// Warnings are about inputs that apply, or keep applying, but probably
	// not as meant (a file emptied in place keeps its last configuration).
	// They show in the API and the log at warning level.
	Warnings []string
	// Err, when set, says the provider cannot read its source right now (Docker
	// socket gone, Consul agent down, file unparsable). The watcher keeps the
	// provider's last good configuration serving and reports Err.
	Err error
}
