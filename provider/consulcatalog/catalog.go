package consulcatalog

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tollgate-proxy/tollgate/labels"
)

// catalog is the part of the Consul HTTP API the provider uses. The real
// implementation is consulClient; tests use fakes.
type catalog interface {
	// Services lists the catalog's service names with the union of their
	// instances' tags (/v1/catalog/services). With index > 0 it is a blocking
	// query: it returns when the catalog index moves past index or after wait.
	Services(ctx context.Context, index uint64, wait time.Duration) (map[string][]string, uint64, error)
	// HealthIndex is a blocking query on every health check in the
	// datacenter (/v1/health/state/any); only its index is used, to wake the
	// provider when a check changes state.
	HealthIndex(ctx context.Context, index uint64, wait time.Duration) (uint64, error)
	// Instances reads every instance of one service with its node and checks
	// (/v1/health/service/<name>), without blocking.
	Instances(ctx context.Context, name string) ([]Instance, error)
}

// consulClient is catalog over *api.Client.
type consulClient struct {
	c *api.Client
}

var _ catalog = consulClient{}

func (cc consulClient) Services(ctx context.Context, index uint64, wait time.Duration) (map[string][]string, uint64, error) {
	q := (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(ctx)
	svcs, meta, err := cc.c.Catalog().Services(q)
	if err != nil {
		return nil, 0, err
	}
	return svcs, meta.LastIndex, nil
}

func (cc consulClient) HealthIndex(ctx context.Context, index uint64, wait time.Duration) (uint64, error) {
	q := (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(ctx)
	_, meta, err := cc.c.Health().State(api.HealthAny, q)
	if err != nil {
		return 0, err
	}
	return meta.LastIndex, nil
}

func (cc consulClient) Instances(ctx context.Context, name string) ([]Instance, error) {
	q := (&api.QueryOptions{}).WithContext(ctx)
	entries, _, err := cc.c.Health().Service(name, "", false, q)
	if err != nil {
		return nil, err
	}
	out := make([]Instance, 0, len(entries))
	for _, e := range entries {
		if e.Service == nil || e.Node == nil {
			continue
		}
		out = append(out, Instance{
			Name:        e.Service.Service,
			ID:          e.Service.ID,
			Node:        e.Node.Node,
			NodeAddress: e.Node.Address,
			Address:     e.Service.Address,
			Port:        e.Service.Port,
			Tags:        e.Service.Tags,
			Status:      e.Checks.AggregatedStatus(),
		})
	}
	return out, nil
}

// fetch reads every instance of every service that carries at least one
// tag under prefix (services without one cannot expose anything), with at
// most parallel per-service reads in flight. The first error cancels the
// other reads and is returned.
func fetch(ctx context.Context, c catalog, prefix string, parallel int) ([]Instance, error) {
	svcs, _, err := c.Services(ctx, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("listing catalog services: %w", err)
	}
	names := make([]string, 0, len(svcs))
	for name, tags := range svcs {
		if hasPrefixTag(tags, prefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, nil
	}
	if parallel < 1 {
		parallel = 1
	}
	parallel = min(parallel, len(names))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([][]Instance, len(names))
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		next     = make(chan int)
	)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				insts, err := c.Instances(ctx, names[i])
				if err != nil {
					errOnce.Do(func() {
						firstErr = fmt.Errorf("reading consul service %q: %w", names[i], err)
						cancel()
					})
					continue
				}
				results[i] = insts
			}
		}()
	}
feed:
	for i := range names {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var n int
	for _, r := range results {
		n += len(r)
	}
	out := make([]Instance, 0, n)
	for _, r := range results {
		out = append(out, r...)
	}
	return out, nil
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
