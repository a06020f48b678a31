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
// the rules). The provider follows the catalog with blocking queries (see
// follow): the checks, the node list and, with at most MaxNodeWatches nodes,
// each node's instances, so that a registration, a deregistration or a tag
// change is read from the node it happened on, and a health change from the
// checks alone; with more nodes, the service list, and a change makes it
// read the whole catalog again (see fetch: per node or per tagged service,
// whichever takes fewer requests, plus one checks query). An unchanged
// catalog is not read (the queries wait on the agent). Each change builds
// one complete Message (Build, with a DecodeCache: only the services whose
// instances changed are built again), sent unless it equals the last one
// sent. With watch=false it reads the whole catalog every refreshInterval
// instead. Each read is an attempt of the provider runtime (provider.Loop):
// when the agent cannot be read, the watcher is told (Message.Err) and
// keeps the last good configuration serving, the read is retried with the
// runtime's backoff, and a full snapshot, read whole, is sent as soon as
// the agent answers again.
package consulcatalog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
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
	maxNodes int              // MaxNodeWatches
	timing   timing           // the blocking queries'
	backoff  provider.Backoff // the reads' retries
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
func New(cfg *config.ConsulCatalogProvider, po provider.Options) (*Provider, error) {
	if cfg == nil {
		cfg = &config.ConsulCatalogProvider{}
		cfg.SetDefaults()
	}
	apiCfg, err := apiConfig(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if err := checkEndpoint(apiCfg.Address); err != nil {
		return nil, fmt.Errorf("providers.consulCatalog.endpoint.address=%q: %w", apiCfg.Address, err)
	}
	// Room for the per-service reads and the blocking queries (one per
	// node followed, and three more), so connections are reused instead of
	// reopened on every snapshot.
	if apiCfg.Transport != nil {
		apiCfg.Transport.MaxIdleConnsPerHost = DefaultParallelReads + MaxNodeWatches + 4
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
		log:     po.Log.With().Str("provider", Name).Logger(),
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
		maxNodes: MaxNodeWatches,
		timing:   timing,
		backoff:  po.Backoff,
	}, nil
}

// apiConfig is the Consul client's configuration of the endpoint option
// (nil: the defaults and the client's environment variables).
func apiConfig(ep *config.ConsulEndpoint) (*api.Config, error) {
	apiCfg := api.DefaultConfig()
	if ep != nil {
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
	return apiCfg, nil
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

// Run reads the catalog until ctx is done on the provider runtime
// (provider.Loop), one read per wake-up (a blocking query's change, the
// refresh tick without watch, a retry), and sends one complete Message for
// each read that differs from the last. It returns nil when ctx is done.
func (p *Provider) Run(ctx context.Context, out chan<- provider.Message) error {
	ctx, cancel := context.WithCancel(ctx)
	r := &reading{p: p}
	defer func() {
		cancel()
		if r.fol != nil {
			r.fol.wait()
		}
	}()
	wake := make(chan struct{}, 1) // a watched index moved, or a query failed
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if p.watch {
		r.fol = &follow{c: p.client, t: p.timing, prefix: p.opts.Prefix, outages: &r.outages, limit: p.maxNodes,
			wake: signal,
			failed: func(what string, err error) {
				p.log.Debug().Err(err).Str("watch", what).Msg("Blocking query failed")
				if !r.failing.Load() { // is the agent down? (while it is, the retries tell)
					r.verify.Store(true)
					signal()
				}
			}}
		r.fol.start(ctx)
	}
	// Without watch, the catalog is read every refreshInterval; with it,
	// only when a blocking query says it changed.
	var every time.Duration
	if !p.watch {
		every = p.refresh
	}
	provider.Loop{Name: Name, What: "Consul catalog", Log: p.log, Wake: wake, Every: every,
		Backoff: p.backoff, Attempt: r.attempt}.Run(ctx, out)
	return nil
}

// reading is one Run's state between its reads.
type reading struct {
	p   *Provider
	fol *follow // the blocking queries, with watch
	// outages counts the failed reads: the watches resync after one.
	outages atomic.Uint64
	// failing: the last read failed; verify: a blocking query failed since
	// the last read, which must then ask the agent itself.
	failing, verify atomic.Bool
	// last are the instances last built: a wake-up that reads the same (two
	// queries reporting one change) builds nothing.
	last  []Instance
	built bool
}

// attempt reads the catalog, and builds and sends it unless it reads as
// the last one built.
func (r *reading) attempt(ctx context.Context, s *provider.Sink) error {
	p := r.p
	fctx, cancel := context.WithTimeout(ctx, p.timing.fetchTimeout)
	insts, err := p.read(fctx, r.fol, r.failing.Load(), r.verify.Swap(false))
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.outages.Add(1)
		r.failing.Store(true)
		r.built = false // the snapshot after the outage is sent, even unchanged
		return fmt.Errorf("consul agent %s: %w", p.address, err)
	}
	r.failing.Store(false)
	if r.built && sameInstances(insts, r.last) {
		return nil // another query's news of a change already built
	}
	r.last, r.built = insts, true
	if !s.Result(ctx, Build(insts, p.opts)) {
		return ctx.Err()
	}
	return nil
}

// read reads the instances of the services tagged under the prefix, with
// their health: from the nodes' blocking queries when they are followed
// one by one (and the agent was not failing), with the checks' query's
// answer when it is at least as recent as theirs, else (or with verify) a
// fresh read of the checks, so that every instance read has its checks
// visible; else the whole catalog (fetch).
func (p *Provider) read(ctx context.Context, fol *follow, failing, verify bool) ([]Instance, error) {
	if fol != nil && !failing {
		if insts, checks, ok := fol.instances(); ok {
			if checks == nil || verify {
				var err error
				if checks, _, err = p.client.Checks(ctx, 0, 0); err != nil {
					return nil, fmt.Errorf("reading health checks: %w", err)
				}
			}
			applyChecks(insts, checks)
			return insts, nil
		}
	}
	return fetch(ctx, p.client, p.opts.Prefix, p.parallel)
}

// sameInstances reports whether a and b are the same instances, in the
// same order, with the same health.
func sameInstances(a, b []Instance) bool {
	return slices.EqualFunc(a, b, func(x, y Instance) bool {
		return x.Name == y.Name && x.ID == y.ID && x.Node == y.Node && x.NodeAddress == y.NodeAddress &&
			x.Address == y.Address && x.Port == y.Port && x.Status == y.Status && slices.Equal(x.Tags, y.Tags)
	})
}
