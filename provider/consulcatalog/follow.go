package consulcatalog

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

// MaxNodeWatches is the most catalog nodes the provider follows one by one
// (a blocking query each, so as many long-lived connections to the agent,
// which allows 200 per client address by default: limits.http_max_conns_per_client).
// With more nodes it follows the whole catalog instead.
const MaxNodeWatches = 64

// follow is what Run reads the catalog with in watch mode: blocking
// queries, each kept waiting on the agent until what it reads changes, so
// that an unchanged catalog costs nothing (docs/performance.md, "Providers
// at scale"):
//
//   - the checks (/v1/health/state/any), for health changes;
//   - the node list (/v1/catalog/nodes);
//   - with at most MaxNodeWatches nodes, each node's instances
//     (/v1/catalog/node-services/<node>): the agent keeps an index per
//     node, so a change wakes the one query of the node it is on, whose
//     answer is that node's instances, and nothing else is read again but
//     the checks (a small answer: the node checks and the failing ones);
//   - with more nodes, the service list (/v1/catalog/services): a change
//     anywhere wakes it, and Run reads the whole catalog again (fetch).
//
// Each query is a blockingLoop. Their answers are kept here for Run's
// goroutine, which builds from them (instances).
type follow struct {
	c       catalog
	t       timing
	prefix  string
	outages *atomic.Uint64
	limit   int
	// wake is called when an answer changed; failed when a query failed.
	// Neither blocks.
	wake   func()
	failed func(what string, err error)

	ctx context.Context
	wg  sync.WaitGroup

	mu      sync.Mutex
	perNode bool                  // the node list is within limit: nodes are followed
	nodes   map[string]*nodeWatch // the nodes followed
	global  context.CancelFunc    // the service list's loop, when nodes are not followed
	// checks is the checks' query's last answer, its index, and the
	// outage count when it was read.
	checks      api.HealthChecks
	checksIndex uint64
	checksGen   uint64
}

// nodeWatch is one node's blocking query and its last answer.
type nodeWatch struct {
	cancel context.CancelFunc
	insts  []Instance
	index  uint64 // the answer's: the node's index
	// gen is the provider's outage count when insts was read: an answer
	// read before the last outage may be stale.
	gen  uint64
	read bool
}

// start runs the checks' and the node list's loops until ctx is done.
func (f *follow) start(ctx context.Context) {
	f.ctx = ctx
	f.nodes = map[string]*nodeWatch{}
	f.loop(ctx, "health checks", func(ctx context.Context, index uint64) (uint64, error) {
		checks, idx, err := f.c.Checks(ctx, index, f.t.wait)
		if err == nil {
			f.mu.Lock()
			f.checks, f.checksIndex, f.checksGen = checks, idx, f.outages.Load()
			f.mu.Unlock()
		}
		return idx, err
	}, f.wake)
	var list []string
	f.loop(ctx, "catalog nodes", func(ctx context.Context, index uint64) (uint64, error) {
		nodes, idx, err := f.c.Nodes(ctx, index, f.t.wait)
		if err == nil {
			list = nodes
		}
		return idx, err
	}, func() { f.setNodes(list) })
}

// wait returns once every loop has returned (after ctx is done).
func (f *follow) wait() { f.wg.Wait() }

// loop runs query as a blockingLoop on a goroutine of its own, calling
// changed on each new index.
func (f *follow) loop(ctx context.Context, what string, query func(context.Context, uint64) (uint64, error), changed func()) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		// A query that outlives its wait (plus the agent's jitter of
		// wait/16) is stuck on a dead connection: give up on it.
		limit := f.t.wait + f.t.wait/16 + 10*time.Second
		bounded := func(ctx context.Context, index uint64) (uint64, error) {
			ctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			return query(ctx, index)
		}
		blockingLoop(ctx, f.t, f.outages, bounded, changed, func(err error) { f.failed(what, err) })
	}()
}

// setNodes follows the nodes of list, one by one when they are within
// limit, else the whole catalog.
func (f *follow) setNodes(list []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx.Err() != nil {
		return
	}
	if len(list) > f.limit {
		f.perNode = false
		for name, nw := range f.nodes {
			nw.cancel()
			delete(f.nodes, name)
		}
		if f.global == nil {
			ctx, cancel := context.WithCancel(f.ctx)
			f.global = cancel
			f.loop(ctx, "catalog services", func(ctx context.Context, index uint64) (uint64, error) {
				_, idx, err := f.c.Services(ctx, index, f.t.wait)
				return idx, err
			}, f.wake)
		}
		f.wake()
		return
	}
	f.perNode = true
	if f.global != nil {
		f.global()
		f.global = nil
	}
	keep := make(map[string]bool, len(list))
	for _, name := range list {
		keep[name] = true
		if f.nodes[name] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(f.ctx)
		nw := &nodeWatch{cancel: cancel}
		f.nodes[name] = nw
		f.loop(ctx, "node "+name, func(ctx context.Context, index uint64) (uint64, error) {
			insts, idx, err := f.c.NodeInstances(ctx, name, index, f.t.wait)
			if err == nil && ctx.Err() == nil {
				f.mu.Lock()
				nw.insts, nw.index, nw.gen, nw.read = insts, idx, f.outages.Load(), true
				f.mu.Unlock()
			}
			return idx, err
		}, f.wake)
	}
	for name, nw := range f.nodes {
		if !keep[name] {
			nw.cancel()
			delete(f.nodes, name)
		}
	}
	f.wake() // a node that left takes its instances along
}

// instances returns the instances of the services that carry a tag under
// the prefix (as fetch reads them, Status empty, in node order), from the
// nodes' last answers, when nodes are followed one by one and each has
// answered since the last outage; ok is false otherwise (Run then reads
// the catalog). checks is the checks' query's last answer when it was read
// after every node answer (its index is not below theirs: the checks of
// every instance read are in it), else nil.
func (f *follow) instances() (insts []Instance, checks api.HealthChecks, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.perNode {
		return nil, nil, false
	}
	gen := f.outages.Load()
	tagged := map[string]bool{}
	var newest uint64
	for _, nw := range f.nodes {
		if !nw.read || nw.gen != gen {
			return nil, nil, false
		}
		newest = max(newest, nw.index)
		for _, in := range nw.insts {
			if !tagged[in.Name] && hasPrefixTag(in.Tags, f.prefix) {
				tagged[in.Name] = true
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.nodes)) {
		for _, in := range f.nodes[name].insts {
			if tagged[in.Name] {
				insts = append(insts, in)
			}
		}
	}
	if f.checksGen == gen && f.checksIndex >= newest && f.checks != nil {
		checks = f.checks
	}
	return insts, checks, true
}
