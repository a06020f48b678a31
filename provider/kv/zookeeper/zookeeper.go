// Package zookeeper is the ZooKeeper provider: the dynamic configuration as
// znodes under /<root key> (Traefik's layout, decoded by kv.Build: the znode
// /traefik/tcp/routers/r/rule holds the rule), watched with ZooKeeper's own
// watches.
//
// Every read walks the tree under the root znode and leaves a data watch on
// every znode and a child watch on every znode that has children, each set
// once until it fires; any watch that fires (a value written, a znode created
// or deleted) reads the tree again, so every snapshot is complete. A znode
// without children is a key (its data the value); a znode with children is a
// folder (data on it, other than empty, is a key too and reported by Build).
// When the session is disconnected the provider reports the error, and reads
// the tree again as soon as the client is connected again.
package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/kv"
)

// Name is the provider's name in qualified resource names (`db@zookeeper`).
const Name = "zookeeper"

// SessionTimeout is the ZooKeeper session timeout the client asks for.
const SessionTimeout = 10 * time.Second

// ConnectTimeout bounds the wait for a session after an error.
const ConnectTimeout = 3 * time.Second

// conn is what the provider uses of a *zk.Conn.
type conn interface {
	State() zk.State
	Get(path string) ([]byte, *zk.Stat, error)
	GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error)
	Children(path string) ([]string, *zk.Stat, error)
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	ExistsW(path string) (bool, *zk.Stat, <-chan zk.Event, error)
	Close()
}

// New checks cfg and returns the provider. New does no I/O: an unreachable
// ensemble is reported by Run. Errors name the option and the value.
func New(cfg *config.ZooKeeperProvider, po provider.Options) (*kv.Provider, error) {
	if cfg == nil {
		cfg = &config.ZooKeeperProvider{}
		cfg.SetDefaults()
	}
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("providers.zooKeeper.endpoints: %w", kv.ErrNoEndpoint)
	}
	for _, ep := range cfg.Endpoints {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return nil, fmt.Errorf("providers.zooKeeper.endpoints: %q is not host:port", ep)
		}
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("providers.zooKeeper: set both username and password, or neither")
	}
	opts := kv.Options{RootKey: strings.TrimLeft(cfg.RootKey, "/")}
	st := newStore(opts)
	st.dial = func(events func()) (conn, error) {
		c, _, err := zk.Connect(cfg.Endpoints, SessionTimeout, zk.WithLogger(quiet{}),
			zk.WithEventCallback(func(zk.Event) { events() }))
		if err != nil {
			return nil, err
		}
		if cfg.Username != "" {
			if err := c.AddAuth("digest", []byte(cfg.Username+":"+cfg.Password)); err != nil {
				c.Close()
				return nil, err
			}
		}
		return c, nil
	}
	return kv.New(Name, "zookeeper "+strings.Join(cfg.Endpoints, ", "), st, opts, po), nil
}

// quiet drops the client's own log lines: the provider reports what matters.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// store is the ZooKeeper Store.
type store struct {
	dial func(events func()) (conn, error)
	c    conn
	root string // the root znode, "/traefik"

	state   chan struct{} // a session event happened
	fired   chan struct{} // a watch fired
	read    bool          // the tree was read since the last error
	dataW   map[string]bool
	childW  map[string]bool
	watches chan watchEvent
	done    chan struct{} // closed by Close: the watch goroutines end
	closed  bool
}

var _ kv.Store = (*store)(nil)

type watchEvent struct {
	path     string
	children bool
	ev       zk.Event
}

func newStore(opts kv.Options) *store {
	root := strings.TrimRight(opts.RootKey, "/")
	if root == "" {
		root = kv.DefaultRootKey
	}
	return &store{root: "/" + root, state: make(chan struct{}, 1), fired: make(chan struct{}, 1),
		dataW: map[string]bool{}, childW: map[string]bool{}, watches: make(chan watchEvent, 1024), done: make(chan struct{})}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Next returns the pairs: read at once the first time and after an error,
// else after a watch fires.
func (s *store) Next(ctx context.Context) ([]kv.Pair, error) {
	if s.c == nil {
		c, err := s.dial(func() { signal(s.state) })
		if err != nil {
			return nil, err
		}
		s.c = c
	}
	if !s.read {
		if err := s.waitSession(ctx); err != nil {
			return nil, err
		}
		pairs, err := s.readTree()
		if err != nil {
			return nil, err
		}
		s.read = true
		return pairs, nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.state:
			if st := s.c.State(); st != zk.StateHasSession {
				s.read = false
				return nil, fmt.Errorf("disconnected (session %s)", stateName(st))
			}
		case w := <-s.watches:
			s.forget(w)
			// Take the other watches that fired with it: one read for a burst.
			for more := true; more; {
				select {
				case w := <-s.watches:
					s.forget(w)
				default:
					more = false
				}
			}
			pairs, err := s.readTree()
			if err != nil {
				s.read = false
				return nil, err
			}
			return pairs, nil
		}
	}
}

// forget marks the watch that fired as gone; a watch dropped because the
// session was lost (EventNotWatching) drops them all.
func (s *store) forget(w watchEvent) {
	if w.ev.Type == zk.EventNotWatching {
		s.dataW, s.childW = map[string]bool{}, map[string]bool{}
		return
	}
	if w.children {
		delete(s.childW, w.path)
	} else {
		delete(s.dataW, w.path)
	}
}

// waitSession waits until the client has a session.
func (s *store) waitSession(ctx context.Context) error {
	deadline := time.NewTimer(ConnectTimeout)
	defer deadline.Stop()
	for {
		st := s.c.State()
		if st == zk.StateHasSession {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("no session after %s (%s)", ConnectTimeout, stateName(st))
		case <-s.state:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func stateName(st zk.State) string {
	switch st {
	case zk.StateDisconnected:
		return "disconnected"
	case zk.StateConnecting:
		return "connecting"
	case zk.StateExpired:
		return "expired"
	}
	return strings.ToLower(strings.TrimPrefix(st.String(), "State"))
}

// readTree reads every znode under the root and arms the watches that are
// not armed yet.
func (s *store) readTree() ([]kv.Pair, error) {
	var out []kv.Pair
	var walk func(p string) error
	walk = func(p string) error {
		var (
			data []byte
			err  error
			ch   <-chan zk.Event
		)
		if s.dataW[p] {
			data, _, err = s.c.Get(p)
		} else {
			data, _, ch, err = s.c.GetW(p)
		}
		if errors.Is(err, zk.ErrNoNode) {
			if p != s.root || s.dataW[p] {
				// Deleted while reading: its parent's watch fires, or the
				// root's own.
				return nil
			}
			// No configuration yet: watch for the root to appear.
			exists, _, ch, err := s.c.ExistsW(p)
			if err != nil {
				return err
			}
			s.arm(p, false, ch)
			if exists {
				// Created since GetW: the watch just set is the root's data
				// watch, and its children need reading (and a child watch)
				// now, or their creation would go unnoticed.
				return walk(p)
			}
			return nil
		}
		if err != nil {
			return err
		}
		s.arm(p, false, ch)
		var kids []string
		if s.childW[p] {
			kids, _, err = s.c.Children(p)
		} else {
			kids, _, ch, err = s.c.ChildrenW(p)
			if err == nil {
				s.arm(p, true, ch)
			}
		}
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(kids) == 0 || len(data) > 0 {
			if p != s.root {
				out = append(out, kv.Pair{Key: strings.TrimPrefix(p, "/"), Value: string(data)})
			}
		}
		for _, k := range kids {
			if err := walk(path.Join(p, k)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(s.root); err != nil {
		return nil, err
	}
	return out, nil
}

// arm records a new watch on p and forwards its event.
func (s *store) arm(p string, children bool, ch <-chan zk.Event) {
	if ch == nil {
		return
	}
	if children {
		s.childW[p] = true
	} else {
		s.dataW[p] = true
	}
	// One goroutine per armed watch (a znode has at most one of each
	// kind): it ends when the watch fires, or when the store is closed.
	go func() {
		var ev zk.Event
		select {
		case e, ok := <-ch:
			if ev = e; !ok {
				ev = zk.Event{Type: zk.EventNotWatching}
			}
		case <-s.done:
			return
		}
		select {
		case s.watches <- watchEvent{path: p, children: children, ev: ev}:
		case <-s.done:
		}
	}()
}

// Close closes the client (which ends the watches).
func (s *store) Close() error {
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	if s.c != nil {
		s.c.Close()
	}
	return nil
}
