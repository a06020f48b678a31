// Package etcd is the etcd provider: the dynamic configuration as keys under
// a root key in etcd v3 (Traefik's layout, decoded by kv.Build), read with
// one range request and then followed with a watch on the prefix.
//
// The provider keeps the pairs it read at revision R and applies the watch's
// events from R+1 on, so every snapshot is complete and a change applies as
// soon as etcd reports it. When no endpoint is reachable (the gRPC connection
// goes to TRANSIENT_FAILURE) or the watch fails, it reports the error and
// retries; once a member answers again, the watch is resumed from the last
// revision it saw, so the changes made meanwhile are replayed rather than
// re-read. A compacted revision, or a store whose revision went backwards
// (restored, or a new cluster), is read again from scratch.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/kv"
)

// Name is the provider's name in qualified resource names (`db@etcd`).
const Name = "etcd"

// RequestTimeout bounds one range request: a member that accepts the
// connection but does not answer is reported like one that is down.
const RequestTimeout = 3 * time.Second

// client is what the provider uses of a clientv3.Client.
type client interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
	Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan
	// State is the gRPC connection's state; WaitForStateChange blocks until
	// it is no longer s, and reports false when ctx is done first.
	State() connectivity.State
	WaitForStateChange(ctx context.Context, s connectivity.State) bool
	Close() error
}

// New checks cfg and returns the provider. New does no I/O: an unreachable
// etcd is reported by Run. Errors name the option and the value.
func New(cfg *config.EtcdProvider, po provider.Options) (*kv.Provider, error) {
	if cfg == nil {
		cfg = &config.EtcdProvider{}
		cfg.SetDefaults()
	}
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("providers.etcd.endpoints: %w", kv.ErrNoEndpoint)
	}
	for _, ep := range cfg.Endpoints {
		if strings.TrimSpace(ep) == "" {
			return nil, errors.New("providers.etcd.endpoints: an empty endpoint")
		}
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("providers.etcd: set both username and password, or neither")
	}
	tc, err := provider.TLSConfig(cfg.TLS, "providers.etcd.tls")
	if err != nil {
		return nil, err
	}
	cc := clientv3.Config{
		Endpoints: cfg.Endpoints,
		Username:  cfg.Username,
		Password:  cfg.Password,
		TLS:       tc,
		Logger:    zap.NewNop(),
		// Authentication happens in clientv3.New: bound it.
		DialTimeout:          RequestTimeout,
		DialOptions:          dialOptions(),
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
	}
	opts := kv.Options{RootKey: cfg.RootKey}
	st := newStore(func() (client, error) {
		c, err := clientv3.New(cc)
		if err != nil {
			return nil, err
		}
		return etcdClient{c}, nil
	}, opts)
	return kv.New(Name, "etcd "+strings.Join(cfg.Endpoints, ", "), st, opts, po), nil
}

// dialOptions caps gRPC's reconnect backoff, which otherwise grows to 2
// minutes: after an outage the store must be read again within a second of
// coming back.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: RequestTimeout,
	})}
}

// etcdClient adapts a *clientv3.Client.
type etcdClient struct{ *clientv3.Client }

func (c etcdClient) State() connectivity.State { return c.ActiveConnection().GetState() }

func (c etcdClient) WaitForStateChange(ctx context.Context, s connectivity.State) bool {
	return c.ActiveConnection().WaitForStateChange(ctx, s)
}

// store is the etcd Store.
type store struct {
	dial   func() (client, error)
	cli    client
	prefix string

	listed bool
	pairs  map[string]string // at revision rev
	rev    int64

	watch       clientv3.WatchChan // nil: not watching
	stopWatch   context.CancelFunc
	stopMonitor context.CancelFunc
	lost        chan error
}

var _ kv.Store = (*store)(nil)

func newStore(dial func() (client, error), opts kv.Options) *store {
	root := strings.TrimRight(opts.RootKey, "/")
	if root == "" {
		root = kv.DefaultRootKey
	}
	return &store{dial: dial, prefix: root + "/", lost: make(chan error, 1)}
}

// Next returns the pairs: read at once the first time (or after a reset),
// else after the next watch events.
func (s *store) Next(ctx context.Context) ([]kv.Pair, error) {
	if s.cli == nil {
		c, err := s.dial()
		if err != nil {
			return nil, err
		}
		s.cli = c
		mctx, cancel := context.WithCancel(context.Background())
		s.stopMonitor = cancel
		go s.monitor(mctx)
	}
	for {
		if !s.listed {
			if err := s.list(ctx); err != nil {
				return nil, err
			}
			return s.snapshot(), nil
		}
		if s.watch == nil {
			// After an error: resume from the last revision seen, once a
			// member answers and still has it.
			gctx, cancel := context.WithTimeout(ctx, RequestTimeout)
			resp, err := s.cli.Get(clientv3.WithRequireLeader(gctx), s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			cancel()
			if err != nil {
				return nil, s.explain(err)
			}
			s.drainLost()
			if resp.Header.Revision < s.rev {
				s.listed = false // a restored or new store
				continue
			}
			s.startWatch()
			return s.snapshot(), nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-s.lost:
			if s.cli.State() != connectivity.TransientFailure {
				continue // a stale report: the connection is back
			}
			s.closeWatch()
			return nil, err
		case resp, ok := <-s.watch:
			if !ok {
				s.closeWatch()
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, errors.New("watch closed")
			}
			changed, err := s.apply(resp)
			if err != nil {
				return nil, err
			}
			// Take what else is already there, so that a burst of writes
			// is one snapshot.
			for more := true; more; {
				select {
				case resp, ok := <-s.watch:
					if !ok {
						more = false
						break
					}
					c, err := s.apply(resp)
					if err != nil {
						return nil, err
					}
					changed = changed || c
				default:
					more = false
				}
			}
			if s.listed && changed {
				return s.snapshot(), nil
			}
		}
	}
}

// list reads every pair under the prefix and starts the watch after it.
func (s *store) list(ctx context.Context) error {
	s.closeWatch()
	gctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	resp, err := s.cli.Get(clientv3.WithRequireLeader(gctx), s.prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return s.explain(err)
	}
	s.drainLost()
	s.pairs = make(map[string]string, len(resp.Kvs))
	for _, p := range resp.Kvs {
		s.pairs[string(p.Key)] = string(p.Value)
	}
	s.rev = resp.Header.Revision
	s.listed = true
	s.startWatch()
	return nil
}

// explain says why a request ran out of time: the client waits for a
// member to be reachable, so a timeout is mostly an unreachable etcd.
func (s *store) explain(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s (gRPC connection %s): %w", RequestTimeout, s.cli.State(), err)
	}
	return err
}

// startWatch watches the prefix from the revision after s.rev.
func (s *store) startWatch() {
	s.closeWatch()
	wctx, cancel := context.WithCancel(context.Background())
	s.stopWatch = cancel
	s.watch = s.cli.Watch(clientv3.WithRequireLeader(wctx), s.prefix, clientv3.WithPrefix(), clientv3.WithRev(s.rev+1))
}

func (s *store) closeWatch() {
	if s.stopWatch != nil {
		s.stopWatch()
	}
	s.watch, s.stopWatch = nil, nil
}

// apply applies one watch response to the pairs and reports whether they
// changed. A compacted revision clears s.listed (read again); another error
// stops the watch.
func (s *store) apply(resp clientv3.WatchResponse) (bool, error) {
	if resp.CompactRevision > 0 {
		s.listed = false
		s.closeWatch()
		return false, nil
	}
	if err := resp.Err(); err != nil {
		s.closeWatch()
		return false, err
	}
	for _, ev := range resp.Events {
		k := string(ev.Kv.Key)
		switch ev.Type {
		case clientv3.EventTypePut:
			s.pairs[k] = string(ev.Kv.Value)
		case clientv3.EventTypeDelete:
			delete(s.pairs, k)
		}
		if ev.Kv.ModRevision > s.rev {
			s.rev = ev.Kv.ModRevision
		}
	}
	return len(resp.Events) > 0, nil
}

// monitor reports the connection going to TRANSIENT_FAILURE (no member
// reachable): the watch alone would retry silently for ever.
func (s *store) monitor(ctx context.Context) {
	for {
		st := s.cli.State()
		if st == connectivity.TransientFailure {
			select {
			case s.lost <- fmt.Errorf("no member reachable (gRPC connection %s)", st):
			default:
			}
		}
		if !s.cli.WaitForStateChange(ctx, st) {
			return
		}
	}
}

// drainLost drops a loss reported before a member answered: the answer
// says the connection is back, so the report is stale.
func (s *store) drainLost() {
	select {
	case <-s.lost: //nolint:errcheck // the stale report is what is dropped
	default:
	}
}

func (s *store) snapshot() []kv.Pair {
	out := make([]kv.Pair, 0, len(s.pairs))
	for k, v := range s.pairs {
		out = append(out, kv.Pair{Key: k, Value: v})
	}
	return out
}

// Close stops the watch and closes the client.
func (s *store) Close() error {
	s.closeWatch()
	if s.stopMonitor != nil {
		s.stopMonitor()
	}
	if s.cli != nil {
		return s.cli.Close()
	}
	return nil
}
