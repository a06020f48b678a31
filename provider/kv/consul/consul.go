// Package consul is the Consul KV provider: the dynamic configuration as
// keys under a root key in Consul's KV store (Traefik's layout, decoded by
// kv.Build), watched with blocking queries on the root key's prefix.
//
// One blocking query (GET /v1/kv/<root>/?recurse&index=N) returns the whole
// prefix as soon as any key under it is written or deleted, so a change
// applies within milliseconds and every snapshot is complete. The first query,
// and the first after an error, asks without an index and returns at once: a
// restarted agent (whose index may be lower) or a change made while the agent
// was unreachable is read as soon as the agent answers. An index that goes
// backwards resets the watch. On an error the next query goes to the next
// endpoint, when there are several. A token that may not read every key
// under the root key is an error (the agent would hide those keys, and a
// partial configuration would apply as if they had been deleted).
package consul

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/kv"
)

// Name is the provider's name in qualified resource names (`db@consul`);
// with namespaces each is `consul-<namespace>`.
const Name = "consul"

// DefaultWait is how long one blocking query may block on the agent.
const DefaultWait = 5 * time.Minute

// kvAPI is the one call the provider makes: a (blocking) recursive list.
type kvAPI interface {
	List(prefix string, q *api.QueryOptions) (api.KVPairs, *api.QueryMeta, error)
}

// New checks cfg and returns one provider, or one per namespace when
// cfg.Namespaces is set (Consul Enterprise; names qualified
// `@consul-<namespace>`). New does no I/O: an unreachable agent is reported
// by Run. Errors name the option and the value.
func New(cfg *config.ConsulKVProvider, po provider.Options) ([]*kv.Provider, error) {
	if cfg == nil {
		cfg = &config.ConsulKVProvider{}
		cfg.SetDefaults()
	}
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("providers.consul.endpoints: %w", kv.ErrNoEndpoint)
	}
	if _, err := provider.TLSConfig(cfg.TLS, "providers.consul.tls"); err != nil {
		return nil, err
	}
	var clients []kvAPI
	var addrs []string
	for _, ep := range cfg.Endpoints {
		c, err := client(ep, cfg)
		if err != nil {
			return nil, fmt.Errorf("providers.consul.endpoints: %q: %w", ep, err)
		}
		clients = append(clients, c)
		addrs = append(addrs, ep)
	}
	opts := kv.Options{RootKey: cfg.RootKey}
	what := "consul agent " + strings.Join(addrs, ", ")
	if len(cfg.Namespaces) == 0 {
		return []*kv.Provider{kv.New(Name, what, newStore(clients, opts, ""), opts, po)}, nil
	}
	var out []*kv.Provider
	for _, ns := range cfg.Namespaces {
		if ns == "" {
			return nil, errors.New("providers.consul.namespaces: an empty namespace")
		}
		out = append(out, kv.New(Name+"-"+ns, what+" (namespace "+ns+")", newStore(clients, opts, ns), opts, po))
	}
	return out, nil
}

// client returns the API client of one endpoint.
func client(ep string, cfg *config.ConsulKVProvider) (kvAPI, error) {
	if err := checkEndpoint(ep); err != nil {
		return nil, err
	}
	c := api.DefaultConfig()
	c.Address = ep
	if cfg.Token != "" {
		c.Token = cfg.Token
	}
	if t := cfg.TLS; t != nil {
		if !strings.Contains(ep, "://") {
			c.Scheme = "https"
		}
		c.TLSConfig = api.TLSConfig{CAFile: t.CA, CertFile: t.Cert, KeyFile: t.Key, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	cl, err := api.NewClient(c)
	if err != nil {
		return nil, err
	}
	return cl.KV(), nil
}

// checkEndpoint accepts "[scheme://]host:port" (scheme http or https).
func checkEndpoint(addr string) error {
	rest := addr
	if scheme, after, ok := strings.Cut(addr, "://"); ok {
		if scheme != "http" && scheme != "https" {
			return fmt.Errorf("scheme %q is not http or https", scheme)
		}
		rest = after
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("not [scheme://]host:port")
	}
	return nil
}

// store is the Consul KV Store: blocking queries on the root key's prefix.
type store struct {
	clients []kvAPI
	cur     int
	prefix  string
	ns      string
	wait    time.Duration
	index   uint64
	resync  bool // ask without an index: first query, or first after an error
}

var _ kv.Store = (*store)(nil)

func newStore(clients []kvAPI, opts kv.Options, ns string) *store {
	root := strings.TrimRight(opts.RootKey, "/")
	if root == "" {
		root = kv.DefaultRootKey
	}
	return &store{clients: clients, prefix: root + "/", ns: ns, wait: DefaultWait, resync: true}
}

// Next runs blocking queries until the prefix's index moves (or at once on
// a resync) and returns the pairs of the last one.
func (s *store) Next(ctx context.Context) ([]kv.Pair, error) {
	for {
		q := &api.QueryOptions{Namespace: s.ns}
		if !s.resync {
			q.WaitIndex, q.WaitTime = s.index, s.wait
		}
		// A query that outlives its wait (plus the agent's jitter of wait/16)
		// is stuck on a dead connection: give up on it.
		qctx, cancel := context.WithTimeout(ctx, s.wait+s.wait/16+10*time.Second)
		pairs, meta, err := s.clients[s.cur].List(s.prefix, q.WithContext(qctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			s.resync = true
			s.cur = (s.cur + 1) % len(s.clients)
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // the URL repeats the root key and the index
			}
			return nil, err
		}
		if meta.ResultsFilteredByACLs {
			// A partial configuration would apply as if the hidden keys
			// had been deleted: keep the last one instead.
			s.resync = true
			return nil, fmt.Errorf("the ACL token may not read every key under %s (results filtered by ACLs): set providers.consul.token to a token with key_prefix %q read", s.prefix, s.prefix)
		}
		idx := meta.LastIndex
		if idx == 0 {
			idx = 1 // Consul: an index of 0 is never a valid wait index
		}
		switch {
		case s.resync:
			s.resync = false
		case idx == s.index:
			continue // the wait ran out: nothing changed
		case idx < s.index:
			// The agent was restarted or restored: read again at once.
			s.resync = true
			continue
		}
		s.index = idx
		out := make([]kv.Pair, 0, len(pairs))
		for _, p := range pairs {
			if p != nil {
				out = append(out, kv.Pair{Key: p.Key, Value: string(p.Value)})
			}
		}
		return out, nil
	}
}

// Close does nothing: the HTTP client holds no resources worth closing.
func (s *store) Close() error { return nil }
