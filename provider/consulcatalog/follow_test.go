package consulcatalog

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// fleet registers services s0..s(n-1), one instance of each on each of the
// nodes n0..n(nodes-1).
func fleet(f *fakeCatalog, n, nodes int) {
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		var insts []Instance
		for j := range nodes {
			in := inst(name, fmt.Sprintf("%s-%d", name, j), fmt.Sprintf("127.0.%d.1", j), 1000+i, "passing", "traefik.tcp.routers."+name+".rule=HostSNI(`*`)")
			in.Node = fmt.Sprintf("n%d", j)
			insts = append(insts, in)
		}
		f.set(name, insts...)
	}
}

// addInstance registers one more instance id of service svc on node.
func addInstance(f *fakeCatalog, svc, id, node string) {
	in := inst(svc, id, "127.0.9.9", 1000, "passing", "traefik.tcp.routers."+svc+".rule=HostSNI(`*`)")
	in.Node = node
	f.mu.Lock()
	insts := slices.Clone(f.services[svc])
	f.mu.Unlock()
	f.set(svc, append(insts, in)...)
}

// settle waits until the fake has answered no read for 200 ms: the
// provider is done with the changes so far.
func settle(t *testing.T, f *fakeCatalog) {
	t.Helper()
	count := func() int64 { return f.reads.Load() + f.svcLists.Load() }
	last, since := count(), time.Now()
	itest.Eventually(t, 5*time.Second, func() bool {
		if n := count(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= 200*time.Millisecond
	}, "the provider keeps reading the catalog")
}

// TestRunFollowsNodesOneByOne: with few nodes, a registration is read from
// the one node it is on (its blocking query's answer), not by reading the
// whole catalog again; a node that joins is followed; a health change needs
// no instance read; nothing is read while nothing changes.
func TestRunFollowsNodesOneByOne(t *testing.T) {
	f := newFake()
	fleet(f, 20, 3)
	msgs := runProvider(t, testProvider(t, f, nil))
	next(t, msgs, 2*time.Second, "the first snapshot", func(m provider.Message) bool { return len(servers(m, "s19")) == 3 })
	// The node queries answer once each after the first read.
	itest.Eventually(t, 2*time.Second, func() bool {
		return f.nodeReadsOf("n0") >= 2 && f.nodeReadsOf("n1") >= 2 && f.nodeReadsOf("n2") >= 2
	}, "the nodes were not read by their blocking queries")
	settle(t, f)
	reads := []int64{f.nodeReadsOf("n0"), f.nodeReadsOf("n1"), f.nodeReadsOf("n2")}
	lists := f.svcLists.Load()

	// A new instance on n1.
	addInstance(f, "s3", "s3-extra", "n1")
	next(t, msgs, time.Second, "four s3 servers", func(m provider.Message) bool { return len(servers(m, "s3")) == 4 })
	if got := []int64{f.nodeReadsOf("n0"), f.nodeReadsOf("n1"), f.nodeReadsOf("n2")}; got[0] != reads[0] || got[1] != reads[1]+1 || got[2] != reads[2] {
		t.Errorf("node reads %v after %v: want n1's alone, once", got, reads)
	}
	if n := f.svcLists.Load(); n != lists {
		t.Errorf("the service list was read %d times for a registration on a followed node", n-lists)
	}

	// A node that joins.
	addInstance(f, "s0", "s0-n3", "n3")
	next(t, msgs, time.Second, "four s0 servers", func(m provider.Message) bool { return len(servers(m, "s0")) == 4 })

	// A health change: no instance is read again.
	reads = []int64{f.nodeReadsOf("n0"), f.nodeReadsOf("n1"), f.nodeReadsOf("n2"), f.nodeReadsOf("n3")}
	f.mu.Lock()
	f.services["s5"][0].Status = "critical"
	f.index++
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	next(t, msgs, time.Second, "two s5 servers", func(m provider.Message) bool { return len(servers(m, "s5")) == 2 })
	if got := []int64{f.nodeReadsOf("n0"), f.nodeReadsOf("n1"), f.nodeReadsOf("n2"), f.nodeReadsOf("n3")}; !slices.Equal(got, reads) {
		t.Errorf("node reads %v after %v for a health change: want none", got, reads)
	}

	// At rest: nothing is read.
	before := f.reads.Load()
	time.Sleep(300 * time.Millisecond)
	if n := f.reads.Load(); n != before {
		t.Errorf("%d reads in 300ms without a change", n-before)
	}
}

// TestRunFollowsTheCatalogBeyondTheNodeLimit: with more nodes than
// MaxNodeWatches, the service list's blocking query wakes the provider and
// it reads the catalog again (fetch); it follows the nodes one by one again
// once they are few enough.
func TestRunFollowsTheCatalogBeyondTheNodeLimit(t *testing.T) {
	f := newFake()
	fleet(f, 10, 3)
	p := testProvider(t, f, nil)
	p.maxNodes = 2
	msgs := runProvider(t, p)
	next(t, msgs, 2*time.Second, "the first snapshot", func(m provider.Message) bool { return len(servers(m, "s9")) == 3 })
	itest.Eventually(t, 2*time.Second, func() bool { return f.svcLists.Load() >= 2 }, "the service list is not followed")
	f.set("s10", inst("s10", "s10-0", "127.0.0.1", 2000, "passing", "traefik.tcp.routers.s10.rule=HostSNI(`*`)"))
	next(t, msgs, time.Second, "s10", func(m provider.Message) bool { return len(servers(m, "s10")) == 1 })

	// Down to one node: followed node by node again.
	for i := range 11 {
		name := fmt.Sprintf("s%d", i)
		f.set(name, inst(name, name+"-0", "127.0.0.1", 1000+i, "passing", "traefik.tcp.routers."+name+".rule=HostSNI(`*`)"))
	}
	next(t, msgs, time.Second, "one server each", func(m provider.Message) bool { return len(servers(m, "s0")) == 1 && len(servers(m, "s9")) == 1 })
	itest.Eventually(t, 2*time.Second, func() bool { return f.nodeReadsOf("node1") >= 1 }, "node1 is not followed")
	settle(t, f)
	lists := f.svcLists.Load()
	f.set("s11", inst("s11", "s11-0", "127.0.0.1", 2001, "passing", "traefik.tcp.routers.s11.rule=HostSNI(`*`)"))
	next(t, msgs, time.Second, "s11", func(m provider.Message) bool { return len(servers(m, "s11")) == 1 })
	if n := f.svcLists.Load(); n != lists {
		t.Errorf("the service list was read %d times with one node followed", n-lists)
	}
}
