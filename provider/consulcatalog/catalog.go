package consulcatalog

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tollgate-proxy/tollgate/labels"
)

// catalog is the part of the Consul HTTP API the provider uses. The real
// implementation is consulClient; tests use fakes. A call with index > 0 is
// a blocking query: it returns when the index of what it reads moves past
// index, or after wait, with the index of its answer.
type catalog interface {
	// Services lists the catalog's service names with the union of their
	// instances' tags (/v1/catalog/services). Its index moves with any
	// instance of any service.
	Services(ctx context.Context, index uint64, wait time.Duration) (map[string][]string, uint64, error)
	// Checks reads the checks that can make an instance anything but
	// passing: every node-level check and every service check that is not
	// passing (/v1/health/state/any with a filter). A service check left out
	// is passing, which never changes an aggregated status. The filter
	// only trims the answer: its index is that of every check in the
	// datacenter.
	Checks(ctx context.Context, index uint64, wait time.Duration) (api.HealthChecks, uint64, error)
	// Nodes lists the catalog's node names (/v1/catalog/nodes). Its index
	// moves when a node joins, leaves or changes, not with their services.
	Nodes(ctx context.Context, index uint64, wait time.Duration) ([]string, uint64, error)
	// NodeInstances reads every service instance registered on one node
	// (/v1/catalog/node-services/<node>). Its index is that node's alone:
	// it moves when one of the node's instances (or the node) changes.
	// Status is left empty.
	NodeInstances(ctx context.Context, node string, index uint64, wait time.Duration) ([]Instance, uint64, error)
	// ServiceInstances reads every instance of one service
	// (/v1/catalog/service/<name>). Status is left empty.
	ServiceInstances(ctx context.Context, name string) ([]Instance, error)
}

// consulClient is catalog over *api.Client.
type consulClient struct {
	c *api.Client
	q api.QueryOptions // the read modes (stale, cache, consistent) of every query
}

// opts are the query options of one read: c.q's modes, and the rest.
func (cc consulClient) opts(ctx context.Context, index uint64, wait time.Duration, filter string) *api.QueryOptions {
	q := cc.q
	q.WaitIndex, q.WaitTime, q.Filter = index, wait, filter
	return q.WithContext(ctx)
}

var _ catalog = consulClient{}

// checksFilter keeps what Checks promises. The filter is applied by the
// agent, so a datacenter of passing services costs one small answer.
const checksFilter = `ServiceID == "" or Status != "passing"`

func (cc consulClient) Services(ctx context.Context, index uint64, wait time.Duration) (map[string][]string, uint64, error) {
	q := cc.opts(ctx, index, wait, "")
	svcs, meta, err := cc.c.Catalog().Services(q)
	if err != nil {
		return nil, 0, err
	}
	return svcs, meta.LastIndex, nil
}

func (cc consulClient) Checks(ctx context.Context, index uint64, wait time.Duration) (api.HealthChecks, uint64, error) {
	checks, meta, err := cc.c.Health().State(api.HealthAny, cc.opts(ctx, index, wait, checksFilter))
	if err != nil {
		return nil, 0, err
	}
	return checks, meta.LastIndex, nil
}

func (cc consulClient) Nodes(ctx context.Context, index uint64, wait time.Duration) ([]string, uint64, error) {
	nodes, meta, err := cc.c.Catalog().Nodes(cc.opts(ctx, index, wait, ""))
	if err != nil {
		return nil, 0, err
	}
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.Node)
	}
	return out, meta.LastIndex, nil
}

// nodeServiceList is the part of /v1/catalog/node-services' answer the
// provider reads: decoding it into the client's full types (proxy, connect,
// weights, ...) costs half as much again for a node of a thousand services.
type nodeServiceList struct {
	Node *struct {
		Node, Address string
	}
	Services []*struct {
		ID, Service, Address string
		Port                 int
		Tags                 []string
	}
}

func (cc consulClient) NodeInstances(ctx context.Context, node string, index uint64, wait time.Duration) ([]Instance, uint64, error) {
	var list nodeServiceList
	meta, err := cc.c.Raw().Query("/v1/catalog/node-services/"+node, &list, cc.opts(ctx, index, wait, ""))
	if err != nil {
		return nil, 0, err
	}
	if list.Node == nil { // the node left since Nodes
		return nil, meta.LastIndex, nil
	}
	out := make([]Instance, 0, len(list.Services))
	for _, s := range list.Services {
		if s == nil {
			continue
		}
		out = append(out, Instance{
			Name: s.Service, ID: s.ID, Node: list.Node.Node, NodeAddress: list.Node.Address,
			Address: s.Address, Port: s.Port, Tags: s.Tags,
		})
	}
	return out, meta.LastIndex, nil
}

func (cc consulClient) ServiceInstances(ctx context.Context, name string) ([]Instance, error) {
	entries, _, err := cc.c.Catalog().Service(name, "", cc.opts(ctx, 0, 0, ""))
	if err != nil {
		return nil, err
	}
	out := make([]Instance, 0, len(entries))
	for _, e := range entries {
		if e == nil {
			continue
		}
		out = append(out, Instance{
			Name: e.ServiceName, ID: e.ServiceID, Node: e.Node, NodeAddress: e.Address,
			Address: e.ServiceAddress, Port: e.ServicePort, Tags: e.ServiceTags,
		})
	}
	return out, nil
}

// fetch reads every instance of every service that carries at least one tag
// under prefix (services without one cannot expose anything), then the
// checks, and gives each instance its aggregated health status.
//
// Instances are read with as few requests as the catalog allows, at most
// parallel at a time: one per node (/v1/catalog/node-services) when there are
// fewer nodes than tagged services, else one per tagged service. Each request
// costs the agent far more than the bytes it returns, so on a catalog of
// 1,000 services on a few nodes this is a few requests instead of 1,000.
// Checks are read last, so every instance read has its checks visible.
//
// The first error cancels the other reads and is returned.
func fetch(ctx context.Context, c catalog, prefix string, parallel int) ([]Instance, error) {
	svcs, _, err := c.Services(ctx, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("listing catalog services: %w", err)
	}
	tagged := make(map[string]bool, len(svcs))
	for name, tags := range svcs {
		if hasPrefixTag(tags, prefix) {
			tagged[name] = true
		}
	}
	if len(tagged) == 0 {
		return nil, nil
	}
	nodes, _, err := c.Nodes(ctx, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("listing catalog nodes: %w", err)
	}

	var (
		keys []string
		read func(context.Context, string) ([]Instance, error)
		what string
	)
	if len(nodes) < len(tagged) {
		keys, what = nodes, "node"
		read = func(ctx context.Context, node string) ([]Instance, error) {
			insts, _, err := c.NodeInstances(ctx, node, 0, 0)
			return insts, err
		}
	} else {
		keys, read, what = slices.Sorted(maps.Keys(tagged)), c.ServiceInstances, "service"
	}
	sort.Strings(keys)
	results := make([][]Instance, len(keys))
	err = forEach(ctx, len(keys), parallel, func(ctx context.Context, i int) error {
		insts, err := read(ctx, keys[i])
		if err != nil {
			return fmt.Errorf("reading consul %s %q: %w", what, keys[i], err)
		}
		results[i] = insts
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Instance
	for _, r := range results {
		for _, in := range r {
			if tagged[in.Name] {
				out = append(out, in)
			}
		}
	}

	checks, _, err := c.Checks(ctx, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("reading health checks: %w", err)
	}
	applyChecks(out, checks)
	return out, nil
}

// applyChecks gives each instance its aggregated status: its node's checks
// and its own (checks holds every node check and every service check that
// is not passing, as Checks reads them).
func applyChecks(insts []Instance, checks api.HealthChecks) {
	nodeChecks := map[string]api.HealthChecks{}
	svcChecks := map[string]api.HealthChecks{}
	for _, hc := range checks {
		if hc == nil {
			continue
		}
		if hc.ServiceID == "" {
			nodeChecks[hc.Node] = append(nodeChecks[hc.Node], hc)
		} else {
			k := hc.Node + "\x00" + hc.ServiceID
			svcChecks[k] = append(svcChecks[k], hc)
		}
	}
	for i := range insts {
		in := &insts[i]
		hcs := append(append(api.HealthChecks(nil), nodeChecks[in.Node]...), svcChecks[in.Node+"\x00"+in.ID]...)
		in.Status = hcs.AggregatedStatus()
	}
}

// forEach runs f(0..n-1) with at most parallel calls at a time. The first
// error cancels the context the other calls get and is returned; so is the
// context's own error.
func forEach(ctx context.Context, n, parallel int, f func(context.Context, int) error) error {
	if n == 0 {
		return nil
	}
	parallel = min(max(parallel, 1), n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
		next     = make(chan int)
	)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					once.Do(func() {
						firstErr = err
						cancel()
					})
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// hasPrefixTag reports whether some tag starts with prefix + "."
// (case-insensitively) and holds a "=", the only tags TagsToLabels keeps.
func hasPrefixTag(tags []string, prefix string) bool {
	if prefix == "" {
		prefix = labels.Root
	}
	lead := prefix + "."
	for _, t := range tags {
		if len(t) >= len(lead) && strings.EqualFold(t[:len(lead)], lead) && strings.Contains(t, "=") {
			return true
		}
	}
	return false
}
