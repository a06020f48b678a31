// Package consulcatalog is the Consul Catalog provider: it turns the tags of
// the services registered in Consul into tollgate's dynamic configuration.
//
// A service instance tagged
//
//	traefik.tcp.routers.db.rule=HostSNI(`*`)
//	traefik.tcp.middlewares.test-inflightconn.inflightconn.amount=10
//
// becomes a router, a middleware and a service with one server per healthy
// instance, decoded by the same labels.Decode as Docker labels (see Build for
// the rules). The provider watches the catalog with blocking queries on
// /v1/catalog/services and /v1/health/state/any (so registrations,
// deregistrations, tag changes and health changes all wake it), re-reads the
// whole catalog on each wake-up (see fetch: per node or per tagged service,
// whichever takes fewer requests, plus one checks query) and sends one
// complete Message, unless it equals the last one sent. With watch=false it
// polls every refreshInterval instead; with watch=true refreshInterval is a
// resync period. When the agent cannot be read it sends a Message with Err
// (the watcher keeps the last good configuration serving), backs off (100 ms
// doubling to 1 s), and sends a full snapshot as soon as the agent answers
// again.
package consulcatalog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Name is the provider's name in qualified resource names (`db@consulcatalog`).
const Name = "consulcatalog"

// DefaultParallelReads bounds the per-node or per-service reads in flight
// during one snapshot.
const DefaultParallelReads = 16

// Provider is the Consul Catalog provider. Create it with New; it is used by
// one Run at a time.
type Provider struct {
	log      zerolog.Logger
	client   catalog
	address  string // agent address, for messages
	opts     Options
	watch    bool
	refresh  time.Duration
	parallel int
	timing   timing
}

var _ provider.Provider = (*Provider)(nil)

// healthStates are the values strictChecks accepts.
var healthStates = []string{api.HealthPassing, api.HealthWarning, api.HealthCritical, api.HealthMaint}

// New checks cfg and builds the provider. A nil cfg means the defaults
// (config.ConsulCatalogProvider.SetDefaults). The endpoint address is
// cfg.Endpoint.Address, else CONSUL_HTTP_ADDR, else 127.0.0.1:8500; the token
// is cfg.Endpoint.Token, else CONSUL_HTTP_TOKEN (the Consul client's own
// environment variables are honoured). New does no I/O: an unreachable agent
// is reported by Run. Errors name the option and the value.
func New(cfg *config.ConsulCatalogProvider, log zerolog.Logger) (*Provider, error) {
	if cfg == nil {
		cfg = &config.ConsulCatalogProvider{}
		cfg.SetDefaults()
	}
	apiCfg := api.DefaultConfig()
	if ep := cfg.Endpoint; ep != nil {
		if ep.Address != "" {
			apiCfg.Address = ep.Address
		}
		if ep.Token != "" {
			apiCfg.Token = ep.Token
		}
		if ep.Datacenter != "" {
			apiCfg.Datacenter = ep.Datacenter
		}
		switch ep.Scheme {
		case "":
			if ep.TLS != nil && !strings.Contains(apiCfg.Address, "://") {
				apiCfg.Scheme = "https"
			}
		case "http", "https":
			apiCfg.Scheme = ep.Scheme
		default:
			return nil, fmt.Errorf("providers.consulCatalog.endpoint.scheme=%q: use http or https", ep.Scheme)
		}
		if t := ep.TLS; t != nil {
			// The files are read here, so that a bad one is an error naming
			// its option at start (the client reads them again).
			if _, err := provider.TLSConfig(t, "providers.consulCatalog.endpoint.tls"); err != nil {
				return nil, err
			}
			apiCfg.TLSConfig = api.TLSConfig{CAFile: t.CA, CertFile: t.Cert, KeyFile: t.Key, InsecureSkipVerify: t.InsecureSkipVerify}
		}
		if a := ep.HTTPAuth; a != nil {
			apiCfg.HttpAuth = &api.HttpBasicAuth{Username: a.Username, Password: a.Password}
		}
		if ep.EndpointWaitTime < 0 {
			return nil, fmt.Errorf("providers.consulCatalog.endpoint.endpointWaitTime=%s: must not be negative", ep.EndpointWaitTime)
		}
	}
	if err := checkEndpoint(apiCfg.Address); err != nil {
		return nil, fmt.Errorf("providers.consulCatalog.endpoint.address=%q: %w", apiCfg.Address, err)
	}
	// Room for the per-service reads and the two blocking queries, so
	// connections are reused instead of reopened on every snapshot.
	if apiCfg.Transport != nil {
		apiCfg.Transport.MaxIdleConnsPerHost = DefaultParallelReads + 4
	}
	address := apiCfg.Address // NewClient strips the scheme
	client, err := api.NewClient(apiCfg)
	if err != nil {
		return nil, fmt.Errorf("providers.consulCatalog.endpoint: %w", err)
	}

	strict := cfg.StrictChecks
	if len(strict) == 0 {
		strict = DefaultStrictChecks()
	}
	var states []string
	for _, s := range strict {
		s = strings.ToLower(strings.TrimSpace(s))
		ok := false
		for _, h := range healthStates {
			ok = ok || s == h
		}
		if !ok {
			return nil, fmt.Errorf("providers.consulCatalog.strictChecks: %q is not a health state (use %s)", s, strings.Join(healthStates, ", "))
		}
		states = append(states, s)
	}

	match, err := parseConstraints(cfg.Constraints)
	if err != nil {
		return nil, fmt.Errorf("providers.consulCatalog.constraints=%q: %w", cfg.Constraints, err)
	}

	refresh := time.Duration(cfg.RefreshInterval)
	if refresh < 0 {
		return nil, fmt.Errorf("providers.consulCatalog.refreshInterval=%s: must not be negative", cfg.RefreshInterval)
	}
	if refresh == 0 {
		refresh = 15 * time.Second
	}

	timing := defaultTiming
	if ep := cfg.Endpoint; ep != nil && ep.EndpointWaitTime > 0 {
		timing.wait = time.Duration(ep.EndpointWaitTime)
	}
	return &Provider{
		log:     log.With().Str("provider", Name).Logger(),
		client:  consulClient{c: client, q: api.QueryOptions{AllowStale: cfg.Stale, UseCache: cfg.Cache, RequireConsistent: cfg.RequireConsistent}},
		address: address,
		opts: Options{
			Prefix:           cfg.Prefix,
			ExposedByDefault: cfg.ExposedByDefault,
			StrictChecks:     states,
			Match:            match,
			Cache:            &DecodeCache{},
		},
		watch:    cfg.Watch,
		refresh:  refresh,
		parallel: DefaultParallelReads,
		timing:   timing,
	}, nil
}

// checkEndpoint accepts "[scheme://]host:port" (scheme http, https or unix;
// unix takes a path).
func checkEndpoint(addr string) error {
	rest := addr
	if scheme, after, ok := strings.Cut(addr, "://"); ok {
		switch scheme {
		case "http", "https":
			rest = after
		case "unix":
			if after == "" {
				return errors.New("unix:// needs a socket path")
			}
			return nil
		default:
			return fmt.Errorf("scheme %q is not http, https or unix", scheme)
		}
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return fmt.Errorf("not [scheme://]host:port: %w", err)
	}
	if host == "" || port == "" {
		return errors.New("not [scheme://]host:port: host and port are required")
	}
	return nil
}

// Name returns "consulcatalog".
func (p *Provider) Name() string { return Name }

// Run reads the catalog until ctx is done and sends one complete Message per
// wake-up (blocking-query change, refresh tick, retry), skipping a snapshot
// identical to the last one sent. It returns nil when ctx is done.
func (p *Provider) Run(ctx context.Context, out chan<- provider.Message) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()

	wake := make(chan struct{}, 1) // a watched index moved
	lost := make(chan struct{}, 1) // a blocking query failed
	var outages atomic.Uint64      // failed reads: the watches resync
	signal := func(ch chan struct{}) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	if p.watch {
		watches := []struct {
			what  string
			query func(context.Context, uint64) (uint64, error)
		}{
			{"catalog services", func(ctx context.Context, index uint64) (uint64, error) {
				_, idx, err := p.client.Services(ctx, index, p.timing.wait)
				return idx, err
			}},
			{"health checks", func(ctx context.Context, index uint64) (uint64, error) {
				return p.client.HealthIndex(ctx, index, p.timing.wait)
			}},
		}
		for _, w := range watches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A query that outlives its wait (plus the agent's jitter
				// of wait/16) is stuck on a dead connection: give up on it.
				limit := p.timing.wait + p.timing.wait/16 + 10*time.Second
				query := func(ctx context.Context, index uint64) (uint64, error) {
					ctx, cancel := context.WithTimeout(ctx, limit)
					defer cancel()
					return w.query(ctx, index)
				}
				blockingLoop(ctx, p.timing, &outages, query,
					func() { signal(wake) },
					func(err error) {
						p.log.Debug().Err(err).Str("watch", w.what).Msg("Blocking query failed")
						signal(lost)
					})
			}()
		}
	}

	ticker := time.NewTicker(p.refresh)
	defer ticker.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()

	var (
		failing  bool
		retries  int
		sent     bool
		last     *config.Dynamic
		lastProb []string
	)
	refresh := func() bool {
		fctx, cancel := context.WithTimeout(ctx, p.timing.fetchTimeout)
		insts, err := fetch(fctx, p.client, p.opts.Prefix, p.parallel)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			err = fmt.Errorf("consul agent %s: %w", p.address, err)
			outages.Add(1)
			ev := p.log.Debug()
			if !failing {
				ev = p.log.Warn() // the watcher logs the Err at error level
			}
			delay := p.timing.backoff(retries)
			ev.Err(err).Dur("retry_in", delay).Msg("Cannot read the Consul catalog; keeping the last configuration")
			// One Err per outage: the watcher keeps the last configuration
			// and shows the error until the next snapshot; the retries that
			// follow would only repeat it (they are logged at debug level).
			report := !failing
			failing = true
			retries++
			retry.Reset(delay)
			if !report {
				return true
			}
			return send(ctx, out, provider.Message{ProviderName: Name, Err: err})
		}
		if failing {
			p.log.Info().Msg("Consul catalog readable again")
		}
		retry.Stop()
		retries = 0
		conf, problems := build(insts, p.opts)
		if sent && !failing && reflect.DeepEqual(conf, last) && reflect.DeepEqual(problems, lastProb) {
			return true
		}
		if !reflect.DeepEqual(problems, lastProb) {
			// The watcher logs problems when they change; these are for
			// debugging the provider alone.
			for _, pr := range problems {
				p.log.Debug().Msg(pr)
			}
		}
		failing = false
		sent, last, lastProb = true, conf, problems
		return send(ctx, out, provider.Message{ProviderName: Name, Configuration: conf, Problems: problems})
	}

	if !refresh() {
		return nil
	}
	for {
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			ok = refresh()
		case <-lost:
			ok = failing || refresh()
		case <-ticker.C:
			ok = refresh()
		case <-retry.C:
			ok = refresh()
		}
		if !ok {
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
