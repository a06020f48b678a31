package consulcatalog

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/tollgate-proxy/tollgate/provider"
)

// timing tunes the blocking-query loops and their retries (the reads'
// retries are the runtime's, provider.Backoff). The zero value is not
// usable: Provider uses defaultTiming, tests shorten it.
type timing struct {
	// wait is how long one blocking query may block on the agent.
	wait time.Duration
	// minInterval is the least time between the starts of two queries of one
	// loop, plus up to jitter, so a catalog that changes constantly cannot
	// turn a loop into a busy one (consul-template's minDelayBetweenUpdates).
	minInterval time.Duration
	jitter      time.Duration
	// backoffMin and backoffMax bound the capped exponential backoff after a
	// failed query; it resets on the next success.
	backoffMin time.Duration
	backoffMax time.Duration
	// fetchTimeout bounds one full read of the catalog, so that an agent
	// that accepts connections but never answers is reported like one that
	// is down.
	fetchTimeout time.Duration
}

// defaultTiming keeps propagation well under the 200 ms the issue asks for
// (a change wakes the loop at once; minInterval only spaces back-to-back
// changes) and reconnects within a second of the agent coming back.
var defaultTiming = timing{
	wait:         5 * time.Minute,
	minInterval:  100 * time.Millisecond,
	jitter:       20 * time.Millisecond,
	backoffMin:   100 * time.Millisecond,
	backoffMax:   time.Second,
	fetchTimeout: time.Minute,
}

// backoff is the delay before retry number retries (0 for the first): the
// runtime's capped exponential backoff (provider.Backoff) between
// backoffMin and backoffMax.
func (t timing) backoff(retries int) time.Duration {
	return provider.Backoff{Min: t.backoffMin, Max: t.backoffMax}.Delay(retries)
}

// blockingLoop runs query as a blocking query until ctx is done, the way
// consul-template's watch.View does:
//
//   - the first query has index 0 and returns at once;
//   - each next query waits for an index above the last one seen;
//   - a query that returns the same index (the wait ran out) is not a change;
//   - an index that goes backwards (agent restarted, snapshot restored) resets
//     the index to 0, so the next query re-reads at once;
//   - queries start at least minInterval (+ jitter) apart, except the first;
//   - an error calls failed and retries after a capped exponential backoff
//     that resets on the next success.
//
// One departure: the first query after an error asks with index 0. The agent
// may have restarted with a lower index, and a blocking query whose index is
// above the agent's current one blocks until the next write (or the whole
// wait) instead of returning: a registration made while the loop was backing
// off would go unnoticed. The answer counts as a change if its index differs
// from the last one seen.
//
// The same holds when the agent failed for another reader and this loop saw
// none of it (it was between two queries while the agent restarted): each
// failure the provider sees adds one to outages, and a loop that finds it
// moved since its last query resyncs as after an error of its own. A nil
// outages is a loop on its own.
//
// changed is called on every new index, including the first. Neither callback
// may block.
func blockingLoop(ctx context.Context, t timing, outages *atomic.Uint64, query func(ctx context.Context, index uint64) (uint64, error), changed func(), failed func(error)) {
	var (
		index   uint64
		retries int
		first   = true
		resync  bool
		seen    uint64
	)
	if outages != nil {
		seen = outages.Load()
	}
	for ctx.Err() == nil {
		if outages != nil {
			if n := outages.Load(); n != seen {
				seen, resync = n, true
			}
		}
		start := time.Now()
		ask := index
		if resync {
			ask = 0
		}
		got, err := query(ctx, ask)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failed(err)
			resync = true
			if !provider.Sleep(ctx, t.backoff(retries)) {
				return
			}
			retries++
			continue
		}
		retries = 0
		if !first {
			if rest := t.minInterval - time.Since(start); rest > 0 {
				if t.jitter > 0 {
					rest += rand.N(t.jitter)
				}
				if !provider.Sleep(ctx, rest) {
					return
				}
			}
		}
		first = false
		if resync {
			resync = false
			if got != index {
				index = got
				changed()
			}
			continue
		}
		switch {
		case got == index:
			continue
		case got < index:
			index = 0
			continue
		}
		index = got
		changed()
	}
}
