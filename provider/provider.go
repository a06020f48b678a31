// Package provider is where dynamic configuration comes from and how it
// reaches the proxy: the Provider interface and its Message (provider.go);
// the runtime every provider runs on (runtime.go: Loop runs the provider's
// attempts to read its source, sends each complete snapshot once and one
// error per outage, retries with a capped Backoff, and makes a Build's
// Result into a Message), with the Options every constructor takes; the
// blocks the label, tag and KV providers' pure Builds are made of
// (configuration.go: names, router defaults, merging inputs, Problems); the
// Watcher, which keeps each provider's latest snapshot, qualifies and
// merges them (name@provider) and hands the result to the proxy
// (watcher.go); the Group the providers run in (group.go), their TLS client
// configuration (tls.go) and DeepCopy for their decode caches. The
// providers are the packages below it (file, http, docker, swarm,
// consulcatalog, kubernetescrd, and the KV stores under kv), each
// New(cfg, Options) (*Provider, error) (Consul KV: one per namespace) with a
// Run on Loop and, where `tollgate check` reads the same inputs, an
// exported pure Build.
package provider

import (
	"context"

	"github.com/tollgate-proxy/tollgate/config"
)

// Provider is a source of dynamic configuration.
//
// Run blocks until ctx is done. It is level-triggered: on every wake-up
// (event, timer, file change) it re-reads its whole source and sends one
// complete Message for itself, never a delta. It runs on Loop, which sends,
// dedupes, reports errors and retries the same way for every provider; it
// returns only when ctx is done or on an error that retrying cannot fix.
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
