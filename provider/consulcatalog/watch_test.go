package consulcatalog

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

var fastTiming = timing{
	wait:         time.Second,
	minInterval:  5 * time.Millisecond,
	jitter:       time.Millisecond,
	backoffMin:   2 * time.Millisecond,
	backoffMax:   10 * time.Millisecond,
	fetchTimeout: time.Second,
}

// TestBlockingLoop scripts a query's answers and checks the indexes the loop
// asks for, when it reports a change, and how it backs off.
func TestBlockingLoop(t *testing.T) {
	type answer struct {
		index uint64
		err   error
	}
	boom := errors.New("connection refused")
	script := []answer{
		{index: 5},  // first: change
		{index: 5},  // wait ran out: no change
		{index: 9},  // change
		{err: boom}, // failure: back off, ask with 0 next
		{err: boom}, // second failure: longer backoff
		{index: 9},  // agent back with the same index: no change
		{index: 3},  // went backwards: reset to 0, no change yet
		{index: 3},  // asked with 0: change
		{index: 0},  // went backwards to 0: reset
		{index: 4},  // change
		{err: boom}, // backoff starts again from the minimum
		{index: 2},  // asked with 0 after the error, lower index: change
	}
	wantAsked := []uint64{0, 5, 5, 9, 0, 0, 9, 0, 3, 0, 4, 0}
	const wantChanges = 5

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		asked    []uint64
		starts   []time.Time
		changes  int
		failures []error
	)
	done := make(chan struct{})
	query := func(ctx context.Context, index uint64) (uint64, error) {
		if len(asked) == len(script) {
			cancel()
			close(done)
			return 0, ctx.Err()
		}
		a := script[len(asked)]
		asked = append(asked, index)
		starts = append(starts, time.Now())
		return a.index, a.err
	}
	tm := timing{wait: time.Second, minInterval: 30 * time.Millisecond, backoffMin: 40 * time.Millisecond, backoffMax: 60 * time.Millisecond}
	go blockingLoop(ctx, tm, nil, query, func() { changes++ }, func(err error) { failures = append(failures, err) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("loop did not run the script within 5s")
	}
	if !reflect.DeepEqual(asked, wantAsked) {
		t.Errorf("indexes asked: got %v, want %v", asked, wantAsked)
	}
	if changes != wantChanges {
		t.Errorf("changes: got %d, want %d", changes, wantChanges)
	}
	if len(failures) != 3 {
		t.Errorf("failures: got %d, want 3", len(failures))
	}
	// Successful answers are spaced by at least minInterval (except after
	// the first); failures by at least half the backoff.
	for i := 1; i < len(starts); i++ {
		gap := starts[i].Sub(starts[i-1])
		prev := script[i-1]
		min := tm.minInterval
		if prev.err != nil {
			min = tm.backoffMin / 2
		}
		if i == 1 {
			min = 0
		}
		// The loop spaces its own start times; these are taken inside query,
		// a few scheduling delays later, so allow some slack.
		const slack = 8 * time.Millisecond
		if gap < min-slack {
			t.Errorf("query %d started %v after query %d, want at least %v (less %v slack)", i, gap, i-1, min, slack)
		}
	}
	// The second failure in a row waited longer than the minimum backoff's
	// lower bound: at least backoffMin (2*backoffMin capped at 60ms, halved).
	if gap := starts[5].Sub(starts[4]); gap < 30*time.Millisecond {
		t.Errorf("second retry after %v, want >= 30ms (exponential backoff)", gap)
	}
}

// TestBlockingLoopResyncsOnOthersOutage: the agent restarted (with a lower
// index) while the loop sat between two queries, so the loop saw no error of
// its own; the provider's read failed meanwhile. The next query must ask with
// 0, not block on the old index above the restarted agent's.
func TestBlockingLoopResyncsOnOthersOutage(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var outages atomic.Uint64
	script := []uint64{7, 7, 2, 3}
	var asked []uint64
	changes := 0
	done := make(chan struct{})
	query := func(ctx context.Context, index uint64) (uint64, error) {
		if len(asked) == len(script) {
			cancel()
			close(done)
			return 0, ctx.Err()
		}
		if len(asked) == 1 {
			outages.Add(1) // another reader failed before the second query
		}
		got := script[len(asked)]
		asked = append(asked, index)
		return got, nil
	}
	go blockingLoop(ctx, fastTiming, &outages, query, func() { changes++ }, func(err error) { t.Errorf("failed(%v) with no error answered", err) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("loop did not run the script within 5s")
	}
	// 7 (first: change); the outage moved before the second query was
	// asked, so the third asks with 0 (the second had already started with
	// 7) and sees 2 (a change); then it waits past 2.
	if want := []uint64{0, 7, 0, 2}; !reflect.DeepEqual(asked, want) {
		t.Errorf("indexes asked: got %v, want %v", asked, want)
	}
	if changes != 3 {
		t.Errorf("changes: got %d, want 3 (7, 2, 3)", changes)
	}
}

func TestBlockingLoopStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		blockingLoop(ctx, fastTiming, nil, func(ctx context.Context, index uint64) (uint64, error) {
			<-ctx.Done() // a blocking query that never returns on its own
			return 0, ctx.Err()
		}, func() {}, func(error) { t.Error("cancellation reported as a failure") })
	}()
	cancel()
	select {
	case <-returned:
	case <-time.After(2 * time.Second):
		t.Fatal("loop did not return within 2s of cancel")
	}
}

func TestBackoffCapped(t *testing.T) {
	tm := timing{backoffMin: 100 * time.Millisecond, backoffMax: time.Second}
	for r := range 100 {
		d := tm.backoff(r)
		want := min(tm.backoffMin<<min(r, 20), tm.backoffMax)
		if d < want/2 || d > want {
			t.Fatalf("backoff(%d) = %v, want in [%v, %v]", r, d, want/2, want)
		}
	}
}

// fakeCatalog is an in-memory catalog with blocking queries.
type fakeCatalog struct {
	mu       sync.Mutex
	index    uint64
	services map[string][]Instance
	down     bool
	changed  chan struct{} // closed on every change

	delay     time.Duration // per Instances call
	inflight  atomic.Int64
	maxIn     atomic.Int64
	reads     atomic.Int64 // per-node and per-service reads
	nodeReads atomic.Int64
	nodeRead  sync.Map     // node -> *atomic.Int64: its reads
	svcLists  atomic.Int64 // Services answers

	// nodeIdx is each node's own index, as Consul keeps one: the index of
	// the last change of its instances (never above index, which a test
	// may move back as a restarted agent would).
	nodeIdx map[string]uint64
}

func newFake() *fakeCatalog {
	return &fakeCatalog{index: 1, services: map[string][]Instance{}, changed: make(chan struct{}), nodeIdx: map[string]uint64{}}
}

func (f *fakeCatalog) set(name string, insts ...Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	// The nodes whose instances of name change.
	onNode := func(list []Instance, node string) (out []Instance) {
		for _, in := range list {
			if in.Node == node {
				out = append(out, in)
			}
		}
		return out
	}
	for _, in := range append(slices.Clone(f.services[name]), insts...) {
		if !reflect.DeepEqual(onNode(f.services[name], in.Node), onNode(insts, in.Node)) {
			f.nodeIdx[in.Node] = f.index
		}
	}
	if len(insts) == 0 {
		delete(f.services, name)
	} else {
		f.services[name] = insts
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// nodeIndex is node's index (f.mu held).
func (f *fakeCatalog) nodeIndex(node string) uint64 {
	return min(max(f.nodeIdx[node], 1), f.index)
}

// nodeReadsOf is how many times node's instances were read.
func (f *fakeCatalog) nodeReadsOf(node string) int64 {
	n, _ := f.nodeRead.LoadOrStore(node, &atomic.Int64{})
	return n.(*atomic.Int64).Load()
}

func (f *fakeCatalog) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
	close(f.changed)
	f.changed = make(chan struct{})
}

var errDown = errors.New("dial tcp 127.0.0.1:8500: connect: connection refused")

func (f *fakeCatalog) block(ctx context.Context, index uint64, wait time.Duration) (uint64, error) {
	for {
		f.mu.Lock()
		down, cur, ch := f.down, f.index, f.changed
		f.mu.Unlock()
		if down {
			return 0, errDown
		}
		// Like Consul: a blocking query returns once the index moves past
		// the one asked for, so an index above the current one blocks.
		if index == 0 || cur > index {
			return cur, nil
		}
		select {
		case <-ch:
		case <-time.After(wait):
			return cur, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (f *fakeCatalog) Services(ctx context.Context, index uint64, wait time.Duration) (map[string][]string, uint64, error) {
	idx, err := f.block(ctx, index, wait)
	if err != nil {
		return nil, 0, err
	}
	f.svcLists.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for name, insts := range f.services {
		for _, in := range insts {
			out[name] = append(out[name], in.Tags...)
		}
	}
	return out, idx, nil
}

// read tracks a per-node or per-service read: concurrency, count, delay,
// outage.
func (f *fakeCatalog) read(ctx context.Context) error {
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		m := f.maxIn.Load()
		if n <= m || f.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	f.reads.Add(1)
	if f.delay > 0 {
		if !provider.Sleep(ctx, f.delay) {
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errDown
	}
	return nil
}

func (f *fakeCatalog) Nodes(ctx context.Context, index uint64, wait time.Duration) ([]string, uint64, error) {
	idx, err := f.block(ctx, index, wait)
	if err != nil {
		return nil, 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, insts := range f.services {
		for _, in := range insts {
			if !seen[in.Node] {
				seen[in.Node] = true
				out = append(out, in.Node)
			}
		}
	}
	return out, idx, nil
}

// NodeInstances blocks on the node's own index, as Consul's
// /v1/catalog/node-services does.
func (f *fakeCatalog) NodeInstances(ctx context.Context, node string, index uint64, wait time.Duration) ([]Instance, uint64, error) {
	var idx uint64
	for {
		f.mu.Lock()
		down, ch := f.down, f.changed
		idx = f.nodeIndex(node)
		f.mu.Unlock()
		if down {
			return nil, 0, errDown
		}
		if index == 0 || idx > index {
			break
		}
		select {
		case <-ch:
			continue
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		break
	}
	if err := f.read(ctx); err != nil {
		return nil, 0, err
	}
	f.nodeReads.Add(1)
	n, _ := f.nodeRead.LoadOrStore(node, &atomic.Int64{})
	n.(*atomic.Int64).Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Instance
	for _, insts := range f.services {
		for _, in := range insts {
			if in.Node == node {
				in.Status = ""
				out = append(out, in)
			}
		}
	}
	return out, idx, nil
}

func (f *fakeCatalog) ServiceInstances(ctx context.Context, name string) ([]Instance, error) {
	if err := f.read(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Instance
	for _, in := range f.services[name] {
		in.Status = ""
		out = append(out, in)
	}
	return out, nil
}

// Checks turns each instance's Status into the service check that gives it
// (none for passing), as the agent's filtered answer would.
func (f *fakeCatalog) Checks(ctx context.Context, index uint64, wait time.Duration) (api.HealthChecks, uint64, error) {
	idx, err := f.block(ctx, index, wait)
	if err != nil {
		return nil, 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out api.HealthChecks
	for _, insts := range f.services {
		for _, in := range insts {
			hc := &api.HealthCheck{Node: in.Node, ServiceID: in.ID, ServiceName: in.Name, CheckID: in.ID + "-check", Status: in.Status}
			switch in.Status {
			case api.HealthPassing:
				continue
			case api.HealthMaint:
				hc.CheckID, hc.Status = api.ServiceMaintPrefix+in.ID, api.HealthCritical
			case "":
				hc.Status = "unknown"
			}
			out = append(out, hc)
		}
	}
	return out, idx, nil
}

func testProvider(t *testing.T, c catalog, mutate func(*config.ConsulCatalogProvider)) *Provider {
	t.Helper()
	cfg := &config.ConsulCatalogProvider{}
	cfg.SetDefaults()
	cfg.Endpoint.Address = "127.0.0.1:1"
	if mutate != nil {
		mutate(cfg)
	}
	p, err := New(cfg, provider.Options{Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	if c != nil {
		p.client = c
	}
	p.timing = fastTiming
	p.backoff = provider.Backoff{Min: fastTiming.backoffMin, Max: fastTiming.backoffMax}
	return p
}

// runProvider runs p until the test ends and returns its messages.
func runProvider(t *testing.T, p *Provider) <-chan provider.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan provider.Message, 64)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v, want nil on cancel", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return within 5s of cancel")
		}
	})
	return out
}

// next waits for the next message that satisfies ok, failing after within.
func next(t *testing.T, msgs <-chan provider.Message, within time.Duration, what string, ok func(provider.Message) bool) provider.Message {
	t.Helper()
	deadline := time.After(within)
	var last *provider.Message
	for {
		select {
		case m := <-msgs:
			if ok(m) {
				return m
			}
			last = &m
		case <-deadline:
			if last == nil {
				t.Fatalf("no message with %s within %v (no message at all)", what, within)
			}
			var tcp *config.TCPConfiguration
			if last.Configuration != nil {
				tcp = last.Configuration.TCP
			}
			t.Fatalf("no message with %s within %v; last: err=%v problems=%q tcp=%+v", what, within, last.Err, last.Problems, tcp)
		}
	}
}

func servers(m provider.Message, service string) []string {
	if m.Configuration == nil || m.Configuration.TCP == nil {
		return nil
	}
	s := m.Configuration.TCP.Services[service]
	if s == nil || s.LoadBalancer == nil {
		return nil
	}
	var out []string
	for _, srv := range s.LoadBalancer.Servers {
		out = append(out, srv.Address)
	}
	return out
}

func TestRunFollowsChangesAndOutages(t *testing.T) {
	f := newFake()
	f.set("db", inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...))
	p := testProvider(t, f, nil)
	msgs := runProvider(t, p)

	m := next(t, msgs, 2*time.Second, "the first snapshot", func(m provider.Message) bool { return true })
	if m.ProviderName != "consulcatalog" || m.Err != nil || len(servers(m, "db")) != 1 {
		t.Fatalf("first message: %+v", m)
	}

	// A change wakes it without waiting for the 15s refresh.
	start := time.Now()
	f.set("db", inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...), inst("db", "db-2", "127.0.0.2", 5432, "passing", design7...))
	next(t, msgs, time.Second, "two db servers", func(m provider.Message) bool { return len(servers(m, "db")) == 2 })
	t.Logf("change -> snapshot in %v", time.Since(start))

	// Health: the instance's status goes critical.
	f.set("db", inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...), inst("db", "db-2", "127.0.0.2", 5432, "critical", design7...))
	next(t, msgs, time.Second, "one db server", func(m provider.Message) bool { return len(servers(m, "db")) == 1 })

	// Outage: an Err message, never an empty configuration.
	f.setDown(true)
	m = next(t, msgs, time.Second, "an Err", func(m provider.Message) bool {
		if m.Err == nil {
			t.Errorf("got a configuration while the agent is down: %+v", m)
		}
		return m.Err != nil
	})
	if m.Configuration != nil || !strings.Contains(m.Err.Error(), "connection refused") || !strings.Contains(m.Err.Error(), "127.0.0.1:1") {
		t.Errorf("outage message: %+v", m)
	}

	// Back, with a change made meanwhile: reconverges.
	f.mu.Lock()
	f.services["db"] = []Instance{inst("db", "db-9", "127.0.0.9", 5432, "passing", design7...)}
	f.index = 1 // index went backwards (restarted agent)
	f.mu.Unlock()
	start = time.Now()
	f.setDown(false)
	m = next(t, msgs, time.Second, "the new configuration", func(m provider.Message) bool { return m.Err == nil })
	if got := servers(m, "db"); !reflect.DeepEqual(got, []string{"127.0.0.9:5432"}) {
		t.Errorf("after the outage: servers %v", got)
	}
	t.Logf("outage end -> snapshot in %v", time.Since(start))

	// The restarted agent's index (2 now) is still below the one the
	// watches saw before the outage: a change must wake them all the same.
	f.set("db", inst("db", "db-9", "127.0.0.9", 5432, "passing", design7...), inst("db", "db-10", "127.0.0.10", 5432, "passing", design7...))
	next(t, msgs, time.Second, "two servers after the restart", func(m provider.Message) bool { return len(servers(m, "db")) == 2 })
}

func TestRunSendsSnapshotAfterOutageEvenIfUnchanged(t *testing.T) {
	f := newFake()
	f.set("db", inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...))
	p := testProvider(t, f, nil)
	msgs := runProvider(t, p)
	first := next(t, msgs, 2*time.Second, "the first snapshot", func(m provider.Message) bool { return true })
	f.setDown(true)
	next(t, msgs, time.Second, "an Err", func(m provider.Message) bool { return m.Err != nil })
	f.setDown(false)
	m := next(t, msgs, time.Second, "a snapshot", func(m provider.Message) bool { return m.Err == nil })
	if !reflect.DeepEqual(m.Configuration, first.Configuration) {
		t.Errorf("snapshot after outage differs: %+v", m.Configuration.TCP)
	}
}

// TestRunReportsAnOutageOnce checks that an outage is one Err message, while
// the provider keeps retrying.
func TestRunReportsAnOutageOnce(t *testing.T) {
	f := newFake()
	f.set("db", inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...))
	msgs := runProvider(t, testProvider(t, f, nil))
	next(t, msgs, 2*time.Second, "the first snapshot", func(m provider.Message) bool { return true })
	f.setDown(true)
	next(t, msgs, time.Second, "an Err", func(m provider.Message) bool { return m.Err != nil })
	reads := f.reads.Load()
	quiet := time.After(200 * time.Millisecond) // 20 backoffs of at most 10ms
	for {
		select {
		case m := <-msgs:
			t.Fatalf("second message during one outage: %+v", m)
		case <-quiet:
			f.mu.Lock()
			f.down = false
			f.mu.Unlock()
			next(t, msgs, time.Second, "a snapshot after the outage", func(m provider.Message) bool { return m.Err == nil })
			if f.reads.Load() == reads {
				t.Error("no read after the outage ended")
			}
			return
		}
	}
}

// TestRunAgentThatNeverAnswers: an agent that accepts connections and never
// answers is an outage too, reported once the read times out.
func TestRunAgentThatNeverAnswers(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	p := testProvider(t, nil, func(c *config.ConsulCatalogProvider) {
		c.Endpoint.Address = strings.TrimPrefix(srv.URL, "http://")
	})
	p.timing.fetchTimeout = 200 * time.Millisecond
	start := time.Now()
	m := next(t, runProvider(t, p), 2*time.Second, "an Err", func(m provider.Message) bool { return m.Err != nil })
	if d := time.Since(start); d < 150*time.Millisecond || !strings.Contains(m.Err.Error(), "deadline exceeded") {
		t.Errorf("after %v: %v, want a deadline error after the 200ms fetch timeout", d, m.Err)
	}
}

func TestRunSkipsIdenticalSnapshots(t *testing.T) {
	f := newFake()
	f.set("db", inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...))
	p := testProvider(t, f, func(c *config.ConsulCatalogProvider) { c.RefreshInterval = config.Duration(10 * time.Millisecond) })
	msgs := runProvider(t, p)
	next(t, msgs, 2*time.Second, "the first snapshot", func(m provider.Message) bool { return true })
	// A change elsewhere (a service without tags) and 30 refresh ticks.
	f.set("other", inst("other", "o", "127.0.0.1", 1, "passing"))
	deadline := time.After(300 * time.Millisecond)
	for {
		select {
		case m := <-msgs:
			t.Fatalf("unexpected message for an unchanged configuration: %+v", m)
		case <-deadline:
			if f.reads.Load() < 2 {
				t.Fatalf("only %d reads: the refresh ticker did not run", f.reads.Load())
			}
			return
		}
	}
}

func TestRunWithoutWatchPolls(t *testing.T) {
	f := newFake()
	p := testProvider(t, f, func(c *config.ConsulCatalogProvider) {
		c.Watch = false
		c.RefreshInterval = config.Duration(50 * time.Millisecond)
	})
	msgs := runProvider(t, p)
	m := next(t, msgs, 2*time.Second, "the first snapshot", func(m provider.Message) bool { return true })
	if len(m.Configuration.TCP.Routers) != 0 {
		t.Fatalf("first snapshot: %+v", m.Configuration.TCP)
	}
	f.set("db", inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...))
	next(t, msgs, time.Second, "db", func(m provider.Message) bool { return len(servers(m, "db")) == 1 })
}

func TestRunReportsProblems(t *testing.T) {
	f := newFake()
	f.set("bad", inst("bad", "bad-1", "127.0.0.1", 1, "passing", "traefik.tcp.routers.b.rule=HostSNI(`*`)", "traefik.tcp.middlewares.m.inflightconn.amount=abc"))
	f.set("db", inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...))
	msgs := runProvider(t, testProvider(t, f, nil))
	m := next(t, msgs, 2*time.Second, "the first snapshot", func(m provider.Message) bool { return true })
	if len(m.Problems) != 1 || !strings.Contains(m.Problems[0], `consul service "bad"`) || !strings.Contains(m.Problems[0], `traefik.tcp.middlewares.m.inflightconn.amount`) {
		t.Errorf("problems: %q", m.Problems)
	}
	// The tag drops its middleware alone (issue 42; it used to leave out
	// the instance): the instance's router, which does not use it, applies.
	if len(servers(m, "db")) != 1 || m.Configuration.TCP.Routers["b"] == nil || m.Configuration.TCP.Middlewares["m"] != nil {
		t.Errorf("configuration: %+v", m.Configuration.TCP)
	}
}

func TestFetchReadsPerServiceBounded(t *testing.T) {
	f := newFake()
	for i := range 100 {
		name := fmt.Sprintf("svc%03d", i)
		in := inst(name, name, "127.0.0.1", 1000+i, "passing", "traefik.tcp.routers."+name+".rule=HostSNI(`*`)")
		in.Node = fmt.Sprintf("node%03d", i) // as many nodes as services
		f.services[name] = []Instance{in}
	}
	f.services["untagged"] = []Instance{{Name: "untagged", ID: "u", Node: "node000", Port: 1, Status: "passing", Tags: []string{"primary"}}}
	f.delay = 2 * time.Millisecond
	insts, err := fetch(context.Background(), f, "traefik", 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 100 {
		t.Errorf("got %d instances, want 100", len(insts))
	}
	if got := f.reads.Load(); got != 100 || f.nodeReads.Load() != 0 {
		t.Errorf("%d reads (%d per node), want 100 per-service reads (the untagged service is not read)", got, f.nodeReads.Load())
	}
	if m := f.maxIn.Load(); m > 8 || m < 2 {
		t.Errorf("max reads in flight %d, want 2..8", m)
	}
}

func TestFetchReadsPerNodeWhenFewerNodes(t *testing.T) {
	f := newFake()
	statuses := []string{"passing", "warning", "critical", "maintenance"}
	for i := range 40 {
		name := fmt.Sprintf("svc%03d", i)
		for j := range 3 {
			in := inst(name, fmt.Sprintf("%s-%d", name, j), "127.0.0.1", 1000+i, statuses[(i+j)%4], "traefik.tcp.routers."+name+".rule=HostSNI(`*`)")
			in.Node = fmt.Sprintf("node%d", j)
			f.services[name] = append(f.services[name], in)
		}
	}
	f.services["untagged"] = []Instance{{Name: "untagged", ID: "u", Node: "node0", Port: 1, Status: "passing", Tags: []string{"primary"}}}
	insts, err := fetch(context.Background(), f, "traefik", 8)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.nodeReads.Load(); got != 3 || f.reads.Load() != 3 {
		t.Errorf("%d node reads of %d, want 3 (one per node)", got, f.reads.Load())
	}
	if len(insts) != 120 {
		t.Fatalf("got %d instances, want 120 (untagged left out)", len(insts))
	}
	for _, in := range insts {
		want := ""
		for _, orig := range f.services[in.Name] {
			if orig.ID == in.ID {
				want = orig.Status
			}
		}
		if in.Status != want {
			t.Errorf("%s: status %q, want %q", in.ID, in.Status, want)
		}
	}
}

// TestFetchNodeChecks checks that a node-level check applies to every
// instance on its node.
func TestFetchNodeChecks(t *testing.T) {
	insts := []Instance{
		{Name: "a", ID: "a1", Node: "n1", Port: 1, Tags: []string{"traefik.tcp.routers.a.rule=HostSNI(`*`)"}},
		{Name: "a", ID: "a2", Node: "n2", Port: 1, Tags: []string{"traefik.tcp.routers.a.rule=HostSNI(`*`)"}},
	}
	c := checksCatalog{insts: insts, checks: api.HealthChecks{
		{Node: "n1", CheckID: "serfHealth", Status: api.HealthCritical},
		{Node: "n2", CheckID: "serfHealth", Status: api.HealthPassing},
		{Node: "n2", CheckID: "disk", Status: api.HealthWarning},
	}}
	got, err := fetch(context.Background(), c, "traefik", 4)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, in := range got {
		status[in.ID] = in.Status
	}
	if status["a1"] != "critical" || status["a2"] != "warning" {
		t.Errorf("statuses %v, want a1 critical (node down), a2 warning (node check)", status)
	}
}

// checksCatalog serves fixed instances (one service) and checks.
type checksCatalog struct {
	insts  []Instance
	checks api.HealthChecks
}

func (c checksCatalog) Services(context.Context, uint64, time.Duration) (map[string][]string, uint64, error) {
	return map[string][]string{c.insts[0].Name: c.insts[0].Tags}, 1, nil
}
func (c checksCatalog) Nodes(context.Context, uint64, time.Duration) ([]string, uint64, error) {
	return []string{"n1", "n2"}, 1, nil
}
func (c checksCatalog) NodeInstances(_ context.Context, node string, _ uint64, _ time.Duration) ([]Instance, uint64, error) {
	var out []Instance
	for _, in := range c.insts {
		if in.Node == node {
			out = append(out, in)
		}
	}
	return out, 1, nil
}
func (c checksCatalog) ServiceInstances(context.Context, string) ([]Instance, error) {
	return c.insts, nil
}
func (c checksCatalog) Checks(context.Context, uint64, time.Duration) (api.HealthChecks, uint64, error) {
	return c.checks, 1, nil
}

func TestFetchFailsWhole(t *testing.T) {
	f := newFake()
	for i := range 20 {
		name := fmt.Sprintf("svc%02d", i)
		in := inst(name, name, "127.0.0.1", 1, "passing", "traefik.tcp.routers.r.rule=HostSNI(`*`)")
		in.Node = name
		f.services[name] = []Instance{in}
	}
	f.delay = time.Millisecond
	go func() { time.Sleep(3 * time.Millisecond); f.setDown(true) }()
	_, err := fetch(context.Background(), f, "traefik", 2)
	if err == nil || !strings.Contains(err.Error(), "reading consul service") {
		t.Fatalf("fetch during an outage: err %v, want a read error naming the service", err)
	}
}

func TestNew(t *testing.T) {
	log := zerolog.Nop()
	t.Run("defaults with CONSUL_HTTP_ADDR and CONSUL_HTTP_TOKEN", func(t *testing.T) {
		var token atomic.Value
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token.Store(r.Header.Get("X-Consul-Token"))
			w.Header().Set("X-Consul-Index", "42")
			fmt.Fprint(w, `{"db":["traefik.enable=true"]}`)
		}))
		defer srv.Close()
		addr := strings.TrimPrefix(srv.URL, "http://")
		t.Setenv("CONSUL_HTTP_ADDR", addr)
		t.Setenv("CONSUL_HTTP_TOKEN", "secret")
		p, err := New(nil, provider.Options{Log: log})
		if err != nil {
			t.Fatal(err)
		}
		if p.address != addr || !p.watch || p.refresh != 15*time.Second || p.opts.Prefix != "traefik" ||
			!p.opts.ExposedByDefault || !reflect.DeepEqual(p.opts.StrictChecks, []string{"passing", "warning"}) || p.Name() != "consulcatalog" {
			t.Errorf("provider: %+v", p)
		}
		svcs, idx, err := p.client.Services(context.Background(), 0, 0)
		if err != nil || idx != 42 || len(svcs["db"]) != 1 {
			t.Fatalf("Services: %v %d %v", svcs, idx, err)
		}
		if got := token.Load(); got != "secret" {
			t.Errorf("token sent: %q, want CONSUL_HTTP_TOKEN", got)
		}
	})
	t.Run("endpoint overrides the environment", func(t *testing.T) {
		t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.7:8555")
		cfg := &config.ConsulCatalogProvider{}
		cfg.SetDefaults()
		cfg.Endpoint.Address = "http://127.0.0.8:8500"
		p, err := New(cfg, provider.Options{Log: log})
		if err != nil {
			t.Fatal(err)
		}
		if p.address != "http://127.0.0.8:8500" {
			t.Errorf("address %q", p.address)
		}
	})
	for _, tc := range []struct {
		name    string
		mutate  func(*config.ConsulCatalogProvider)
		wantErr string
	}{
		{"bad strictChecks", func(c *config.ConsulCatalogProvider) { c.StrictChecks = []string{"passing", "healthy"} }, `providers.consulCatalog.strictChecks: "healthy" is not a health state`},
		{"bad address", func(c *config.ConsulCatalogProvider) { c.Endpoint.Address = "localhost" }, `providers.consulCatalog.endpoint.address="localhost"`},
		{"bad scheme", func(c *config.ConsulCatalogProvider) { c.Endpoint.Address = "ftp://x:1" }, `scheme "ftp"`},
		{"bad constraints", func(c *config.ConsulCatalogProvider) { c.Constraints = "Label(`a`, `b`)" }, `providers.consulCatalog.constraints="Label(` + "`a`, `b`" + `)"`},
		{"negative refresh", func(c *config.ConsulCatalogProvider) { c.RefreshInterval = -1 }, `providers.consulCatalog.refreshInterval`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.ConsulCatalogProvider{}
			cfg.SetDefaults()
			tc.mutate(cfg)
			_, err := New(cfg, provider.Options{Log: log})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}
