package zookeeper

import (
	"context"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tollgate-proxy/tollgate/provider/kv"
)

// fakeConn is a tree of znodes with one-shot watches, as ZooKeeper keeps
// them. hook, when set, runs before each call (to race a writer).
type fakeConn struct {
	mu     sync.Mutex
	nodes  map[string]string // path -> data
	dataW  map[string][]chan zk.Event
	childW map[string][]chan zk.Event
	hook   func(op, path string)
}

func newFakeConn() *fakeConn {
	return &fakeConn{nodes: map[string]string{"/": ""}, dataW: map[string][]chan zk.Event{}, childW: map[string][]chan zk.Event{}}
}

func (f *fakeConn) call(op, p string) {
	if f.hook != nil {
		f.hook(op, p)
	}
}

// create adds p (its parents must exist) and fires the watches a server
// would fire.
func (f *fakeConn) create(p, data string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes[p] = data
	f.fire(f.dataW, p, zk.EventNodeCreated)
	f.fire(f.childW, path.Dir(p), zk.EventNodeChildrenChanged)
}

func (f *fakeConn) fire(ws map[string][]chan zk.Event, p string, t zk.EventType) {
	for _, ch := range ws[p] {
		ch <- zk.Event{Type: t, Path: p}
		close(ch)
	}
	delete(ws, p)
}

func (f *fakeConn) watch(ws map[string][]chan zk.Event, p string) <-chan zk.Event {
	ch := make(chan zk.Event, 1)
	ws[p] = append(ws[p], ch)
	return ch
}

func (f *fakeConn) kids(p string) []string {
	var out []string
	for n := range f.nodes {
		if n != "/" && path.Dir(n) == p {
			out = append(out, path.Base(n))
		}
	}
	return out
}

func (f *fakeConn) State() zk.State { return zk.StateHasSession }

func (f *fakeConn) Get(p string) ([]byte, *zk.Stat, error) {
	f.call("get", p)
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.nodes[p]
	if !ok {
		return nil, nil, zk.ErrNoNode
	}
	return []byte(d), &zk.Stat{}, nil
}

func (f *fakeConn) GetW(p string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	f.call("getw", p)
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.nodes[p]
	if !ok {
		return nil, nil, nil, zk.ErrNoNode
	}
	return []byte(d), &zk.Stat{}, f.watch(f.dataW, p), nil
}

func (f *fakeConn) Children(p string) ([]string, *zk.Stat, error) {
	f.call("children", p)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.nodes[p]; !ok {
		return nil, nil, zk.ErrNoNode
	}
	return f.kids(p), &zk.Stat{}, nil
}

func (f *fakeConn) ChildrenW(p string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	f.call("childrenw", p)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.nodes[p]; !ok {
		return nil, nil, nil, zk.ErrNoNode
	}
	return f.kids(p), &zk.Stat{}, f.watch(f.childW, p), nil
}

func (f *fakeConn) ExistsW(p string) (bool, *zk.Stat, <-chan zk.Event, error) {
	f.call("existsw", p)
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.nodes[p]
	return ok, &zk.Stat{}, f.watch(f.dataW, p), nil
}

func (f *fakeConn) Close() {}

// The root znode created between the read that misses it and the exists
// watch: its children are read, and watched, at once. (Without that, the
// exists watch on a znode that now exists only fires on its own data, and
// the configuration written below it would go unnoticed.)
func TestRootCreatedWhileReading(t *testing.T) {
	f := newFakeConn()
	f.hook = func(op, p string) {
		if op == "existsw" && p == "/traefik" && f.hook != nil {
			f.hook = nil
			f.create("/traefik", "")
		}
	}
	st := newStore(kv.Options{})
	st.dial = func(func()) (conn, error) { return f, nil }
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pairs, err := st.Next(ctx)
	if err != nil || len(pairs) != 0 {
		t.Fatalf("first read: %v %v", pairs, err)
	}
	// The writer goes on below the root.
	go func() {
		f.create("/traefik/tcp", "")
		f.create("/traefik/tcp/routers", "")
		f.create("/traefik/tcp/routers/r", "")
		f.create("/traefik/tcp/routers/r/rule", "HostSNI(`*`)")
	}()
	for {
		pairs, err := st.Next(ctx)
		if err != nil {
			t.Fatalf("the keys written below a root created during the first read were not noticed: %v", err)
		}
		for _, p := range pairs {
			if p.Key == "traefik/tcp/routers/r/rule" && strings.Contains(p.Value, "HostSNI") {
				return
			}
		}
	}
}
