package proxy

import (
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// A load balancer whose servers have a maxConn keeps at most that many
// connections open to each, as HAProxy's maxconn does: a connection over the
// caps waits in the service's queue for the first slot any server frees,
// instead of being refused (a PostgreSQL kept below max_connections makes a
// client wait, not fail). The caps, the counts and the queue belong to the
// service, not to a configuration generation: they live in the state
// registry by qualified service name, so connections opened under one
// generation count under the next, and a queued connection keeps its place
// through a reload.
//
// The queue is fair between clients by itself, without an inFlightConn in
// front: each client key (its address; IPv6 by its entry point's
// ipv6Subnet prefix) waits in a FIFO of its own, and the clients with
// connections waiting are served in turn, one connection each, in the order
// they started waiting. A client alone may fill the queue; once it is full,
// a connection from a client holding at least two places fewer than the
// client holding the most takes the newest place of that one (whose
// connection is refused as if it had found the queue full, counted as
// evicted), so under contention each client holds an equal share of the
// places and is served at an equal rate, whatever it opens. Every operation
// is O(1) under the capacity's lock.

// DefaultQueueSize and DefaultQueueTimeout are a capped service's queue when
// its loadBalancer has no queue section.
const (
	DefaultQueueSize    = 100
	DefaultQueueTimeout = 5 * time.Second
)

// capacity is one capped service's servers and queue.
type capacity struct {
	name string

	mu      sync.Mutex
	servers []*capServer // in the service's order, as of the last compile
	retired []*capServer // servers no longer listed that still have connections
	next    int          // round-robin position
	maxSize int
	timeout time.Duration

	// The queue: queued connections waiting, in the FIFOs of clients (by
	// key, those with one waiting), served in turn from ring (nil when none
	// waits); byCount[n] lists the clients holding n places (n >= 1), most
	// is the largest such n.
	queued  int
	clients map[netip.Addr]*qclient
	ring    *qclient
	byCount []*qclient
	most    int

	full, expired atomic.Uint64 // refused: the queue was full / the wait timed out
	evicted       atomic.Uint64 // refused: a client with fewer places took the place
	log           ratelog.Limiter

	// After an upgrade's handover (State.ExportCapacities): a slot this
	// process's connections free goes to the next connection waiting here,
	// or back to the new process (lend.released); a slot it takes for a
	// connection it accepted before the handover is reported
	// (lend.acquired). nil while this process is the one accepting.
	lend     *Lender
	exported int
	lentIdx  map[*capServer]int
}

// waiter is a connection in a capacity's queue: a loop's, or one served by
// goroutines. handSlot gives it the slot s, or tells it with s nil that it
// lost its place to a client holding fewer (it is refused then); it runs
// under cp.mu and must not block.
type waiter interface {
	handSlot(cp *capacity, s *capServer)
}

// qnode is a waiter's place in the queue: in its client's FIFO. A place
// that has left the queue has no client (leave reports false for it).
type qnode struct {
	w          waiter
	cl         *qclient
	prev, next *qnode
}

// qclient is a client key's places in the queue: its FIFO, its place in
// the ring of clients served in turn, and in the list of the clients that
// hold as many places as it does.
type qclient struct {
	key          netip.Addr
	head, tail   *qnode
	n            int
	rprev, rnext *qclient
	bprev, bnext *qclient
}

// capServer is one server of a capped service.
type capServer struct {
	srv       server
	max       int // 0: no cap
	open      int // connections open or being dialled (capacity.mu)
	inherited int // the old process's connections after an upgrade, until it releases them
}

// CapacityServer is one server's slots, for the API and metrics.
type CapacityServer struct {
	Address string `json:"address"`
	Open    int    `json:"open"`
	Max     int    `json:"max,omitempty"`
	// Inherited are the old process's connections to the server after an
	// upgrade, counted against Max until they end.
	Inherited int `json:"inherited,omitempty"`
}

// CapacityState is a capped service's live state.
type CapacityState struct {
	Servers      []CapacityServer `json:"servers"`
	Queued       int              `json:"queued"`
	QueueMax     int              `json:"queueMaxSize"`
	QueueTimeout string           `json:"queueTimeout"`
	RejectedFull uint64           `json:"queueFullTotal"`
	TimedOut     uint64           `json:"queueTimeoutTotal"`
	// QueuedClients is the distinct client keys waiting; Evicted counts the
	// connections that lost their place to a client holding fewer.
	QueuedClients int    `json:"queuedClients"`
	Evicted       uint64 `json:"queueEvictedTotal"`
}

// update takes a new generation's servers (with health) and queue settings.
// A server still open keeps its count; one no longer listed is retired until
// its last connection ends.
func (cp *capacity) update(servers []server, lb *config.TCPServersLoadBalancer) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	old := map[string]*capServer{}
	for _, s := range append(cp.servers, cp.retired...) {
		old[s.srv.address] = s
	}
	cp.servers, cp.retired = nil, nil
	for i, srv := range servers {
		s := old[srv.address]
		if s == nil {
			s = &capServer{}
		}
		delete(old, srv.address)
		s.srv, s.max = srv, lb.Servers[i].MaxConn
		cp.servers = append(cp.servers, s)
	}
	for _, s := range old {
		if s.open > 0 {
			s.max = -1 // takes nothing new
			cp.retired = append(cp.retired, s)
		}
	}
	cp.maxSize, cp.timeout = DefaultQueueSize, DefaultQueueTimeout
	if q := lb.Queue; q != nil {
		if q.MaxSize != nil {
			cp.maxSize = *q.MaxSize
		}
		if q.Timeout > 0 {
			cp.timeout = time.Duration(q.Timeout)
		}
	}
}

// free reports whether s can take one more connection now.
func (s *capServer) free() bool {
	return (s.srv.up == nil || s.srv.up.Load()) && (s.max == 0 || s.max > 0 && s.open+s.inherited < s.max)
}

// take finds a server with a free slot, round-robin, and counts the
// connection on it; nil when every server is at its cap or down.
func (cp *capacity) take() *capServer {
	n := len(cp.servers)
	for i := 0; i < n; i++ {
		s := cp.servers[(cp.next+i)%n]
		if s.free() {
			cp.next = (cp.next + i + 1) % n
			s.open++
			if cp.lend != nil { // handed over: the new process counts it too
				if j, ok := cp.lentIdx[s]; ok {
					cp.lend.Acquired(cp.exported, j)
				}
			}
			return s
		}
	}
	return nil
}

// admit gives w, a connection of client key, a slot, or queues it. It
// returns the slot, or nil and w's place in the queue (w waits: dispatch
// hands it a slot later), or nil and nil when the queue is full and its
// client holds its share of it.
func (cp *capacity) admit(w waiter, key netip.Addr) (*capServer, *qnode) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.queued == 0 { // nobody may pass those already waiting
		if s := cp.take(); s != nil {
			return s, nil
		}
	}
	cl := cp.clients[key]
	if cp.queued >= cp.maxSize {
		n := 0
		if cl != nil {
			n = cl.n
		}
		if cp.maxSize <= 0 || n+2 > cp.most {
			return nil, nil
		}
		// The client holding the most places gives its newest one up.
		v := cp.byCount[cp.most].tail
		cp.unlink(v)
		cp.evicted.Add(1)
		v.w.handSlot(cp, nil)
	}
	if cl == nil {
		cl = &qclient{key: key}
		if cp.clients == nil {
			cp.clients = map[netip.Addr]*qclient{}
		}
		cp.clients[key] = cl
		if r := cp.ring; r == nil { // served last in turn: just before the next one
			cl.rprev, cl.rnext, cp.ring = cl, cl, cl
		} else {
			cl.rprev, cl.rnext = r.rprev, r
			r.rprev.rnext, r.rprev = cl, cl
		}
	}
	q := &qnode{w: w, cl: cl, prev: cl.tail}
	if cl.tail != nil {
		cl.tail.next = q
	} else {
		cl.head = q
	}
	cl.tail = q
	cp.recount(cl, cl.n+1)
	cp.queued++
	return nil, q
}

// recount moves cl, holding cl.n places (0: none yet), to the clients
// holding n, which differs from cl.n by one.
func (cp *capacity) recount(cl *qclient, n int) {
	if cl.n > 0 { // out of its list
		if cl.bprev != nil {
			cl.bprev.bnext = cl.bnext
		} else {
			cp.byCount[cl.n] = cl.bnext
		}
		if cl.bnext != nil {
			cl.bnext.bprev = cl.bprev
		}
		cl.bprev, cl.bnext = nil, nil
	}
	cl.n = n
	if n > 0 {
		for len(cp.byCount) <= n {
			cp.byCount = append(cp.byCount, nil)
		}
		if h := cp.byCount[n]; h != nil {
			h.bprev, cl.bnext = cl, h
		}
		cp.byCount[n] = cl
	}
	if n > cp.most {
		cp.most = n
	}
	for cp.most > 0 && cp.byCount[cp.most] == nil { // one step at most: counts move by one
		cp.most--
	}
}

// unlink takes q out of the queue; its client leaves the ring when it has
// no other place.
func (cp *capacity) unlink(q *qnode) {
	cl := q.cl
	if q.prev != nil {
		q.prev.next = q.next
	} else {
		cl.head = q.next
	}
	if q.next != nil {
		q.next.prev = q.prev
	} else {
		cl.tail = q.prev
	}
	q.cl, q.prev, q.next = nil, nil, nil
	cp.queued--
	cp.recount(cl, cl.n-1)
	if cl.n > 0 {
		return
	}
	delete(cp.clients, cl.key)
	if cl.rnext == cl {
		cp.ring = nil
	} else {
		cl.rprev.rnext, cl.rnext.rprev = cl.rnext, cl.rprev
		if cp.ring == cl {
			cp.ring = cl.rnext
		}
	}
	cl.rprev, cl.rnext = nil, nil
	if cp.queued == 0 { // the queue is empty: give back what a burst grew
		cp.clients, cp.byCount = nil, nil
	}
}

// popNext takes the connection to serve next out of the queue: the oldest
// of the client whose turn it is, which goes to the end of the turn.
func (cp *capacity) popNext() waiter {
	cl := cp.ring
	cp.ring = cl.rnext
	q := cl.head
	w := q.w
	cp.unlink(q)
	q.w = nil
	return w
}

// leave takes the place q out of the queue; false when it is no longer
// there (a slot, or its eviction, is on its way to its waiter).
func (cp *capacity) leave(q *qnode) bool {
	if q == nil {
		return false
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if q.cl == nil {
		return false
	}
	cp.unlink(q)
	q.w = nil
	return true
}

// release gives back s's slot and hands free slots to the connections
// waiting, in order.
func (cp *capacity) release(s *capServer) {
	cp.mu.Lock()
	if cp.lend != nil {
		if cp.queued > 0 {
			// Handed over: the slot passes to the next connection waiting here.
			cp.popNext().handSlot(cp, s)
			cp.mu.Unlock()
			return
		}
		cp.lendBack(s)
	}
	s.open--
	if s.max < 0 && s.open == 0 {
		for i, r := range cp.retired {
			if r == s {
				cp.retired = append(cp.retired[:i], cp.retired[i+1:]...)
				break
			}
		}
	}
	cp.dispatchLocked()
	cp.mu.Unlock()
}

// kick hands free slots to waiting connections (after a reload raised a cap
// or a server came back UP).
func (cp *capacity) kick() {
	cp.mu.Lock()
	cp.dispatchLocked()
	cp.mu.Unlock()
}

func (cp *capacity) dispatchLocked() {
	for cp.queued > 0 {
		s := cp.take()
		if s == nil {
			return
		}
		cp.popNext().handSlot(cp, s)
	}
}

// What a connection a capped service could not take is refused with, per
// reason (tcp.ReasonQueue*).
const (
	whyQueueFull    = "every server of the service is at its maxConn and its queue is full"
	whyQueueTimeout = "every server of the service is at its maxConn and it waited the queue timeout"
	whyQueueEvicted = "every server of the service is at its maxConn and " + evictedWhy
)

// logRefusal records, and logs at a bounded rate per reason, a connection
// the service could not take for its caps (why: tcp.ReasonQueue*).
func (cp *capacity) logRefusal(lb *loadBalancer, c *tcp.Conn, why tcp.Reason) {
	msg := whyQueueEvicted
	switch why {
	case tcp.ReasonQueueFull:
		msg = whyQueueFull
	case tcp.ReasonQueueTimeout:
		msg = whyQueueTimeout
	}
	c.NoteRefusal(why, lb.name, msg)
	if ok, suppressed := cp.log.Allow(uint64(why)); ok {
		ev := lb.log.Warn().Str("service", lb.name).Str("router", c.Router).Str("client_ip", c.Client.Addr().String())
		if suppressed > 0 {
			ev = ev.Uint64("suppressed", suppressed)
		}
		ev.Msg("Connection refused: " + msg)
	}
}

// state is the live view for the API and metrics.
func (cp *capacity) state() CapacityState {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	st := CapacityState{Queued: cp.queued, QueueMax: cp.maxSize, QueueTimeout: cp.timeout.String(),
		RejectedFull: cp.full.Load(), TimedOut: cp.expired.Load(), QueuedClients: len(cp.clients), Evicted: cp.evicted.Load()}
	for _, s := range append(cp.servers, cp.retired...) {
		st.Servers = append(st.Servers, CapacityServer{Address: s.srv.address, Open: s.open, Max: max(s.max, 0), Inherited: s.inherited})
	}
	return st
}

// capped reports whether some server of lb has a maxConn.
func capped(lb *config.TCPServersLoadBalancer) bool {
	for _, s := range lb.Servers {
		if s.MaxConn > 0 {
			return true
		}
	}
	return false
}

// Capacity returns the live state of a capped service, or nil.
func (s *State) Capacity(service string) *CapacityState {
	s.mu.Lock()
	cp := s.capacities[service]
	s.mu.Unlock()
	if cp == nil {
		return nil
	}
	st := cp.state()
	return &st
}

// EachCapacity calls f for every capped service, for metrics.
func (s *State) EachCapacity(f func(service string, st CapacityState)) {
	s.mu.Lock()
	cps := make(map[string]*capacity, len(s.capacities))
	for n, c := range s.capacities {
		cps[n] = c
	}
	s.mu.Unlock()
	for n, c := range cps {
		f(n, c.state())
	}
}

// allCapacities returns the capped services' capacities, in no order.
func (s *State) allCapacities() []*capacity {
	s.mu.Lock()
	defer s.mu.Unlock()
	cps := make([]*capacity, 0, len(s.capacities))
	for _, c := range s.capacities {
		cps = append(cps, c)
	}
	return cps
}

// kickCapacities hands the slots a new configuration freed (a raised cap, a
// new server) to the connections waiting for them.
func (s *State) kickCapacities() {
	for _, c := range s.allCapacities() {
		c.kick()
	}
}

// sweepCapacities forgets the capacities of services a configuration no
// longer caps, once nothing counts in them.
func (s *State) sweepCapacities(keep map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, c := range s.capacities {
		if keep[name] {
			continue
		}
		c.mu.Lock()
		busy := c.queued > 0 || len(c.retired) > 0
		for _, sv := range c.servers {
			busy = busy || sv.open > 0 || sv.inherited > 0
		}
		c.mu.Unlock()
		if !busy {
			delete(s.capacities, name)
		}
	}
}

func (s *State) capacity(service string) *capacity {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capacities == nil {
		s.capacities = map[string]*capacity{}
	}
	cp := s.capacities[service]
	if cp == nil {
		cp = &capacity{name: service}
		s.capacities[service] = cp
	}
	return cp
}

// Capacities at an upgrade (docs/operations/upgrading.md). The old process
// hands its per-server counts to the new one, which counts them against the
// caps until each of those connections ends. From then on the old process
// passes a slot its connections free to its own queue first, and reports
// every change of its count (a connection that ended with nobody waiting,
// a slot taken for a connection it accepted before the handover), so the
// new process always counts both processes' connections. The one overshoot
// left: a connection the old process routes after the handover takes a
// slot by the old process's own count.

// CapacityExport is one capped service's per-server counts at a handover.
type CapacityExport struct {
	Service string
	Servers []CapacityCount
}

// CapacityCount is a server's connections counted in the old process
// (its own, and any it inherited in turn).
type CapacityCount struct {
	Address string
	Open    int
}

// lendBack tells the new process that one of s's connections counted in
// the export ended (cp.mu held).
func (cp *capacity) lendBack(s *capServer) {
	if j, ok := cp.lentIdx[s]; ok {
		cp.lend.Released(cp.exported, j)
	}
}

// Lender is where a handed-over process reports what changes its count of
// server j of export i: a connection that ended (Released), one it opened
// (Acquired). Both are called with the capacity's lock held and must not
// block.
type Lender struct {
	Released, Acquired func(i, j int)
}

// ExportCapacities hands every capped service over: it returns their
// counts (every server, none left out, so that the indexes cover each),
// and from now on each slot freed with nobody waiting here is reported to
// lend.Released, and each slot taken (for a connection accepted before the
// handover and routed after it) to lend.Acquired, with the indexes in what
// it returned. UnexportCapacities undoes it.
func (s *State) ExportCapacities(lend *Lender) []CapacityExport {
	s.mu.Lock()
	names := make([]string, 0, len(s.capacities))
	for n := range s.capacities {
		names = append(names, n)
	}
	sort.Strings(names)
	cps := make([]*capacity, len(names))
	for i, n := range names {
		cps[i] = s.capacities[n]
	}
	s.mu.Unlock()
	var out []CapacityExport
	for i, cp := range cps {
		cp.mu.Lock()
		ex := CapacityExport{Service: names[i]}
		cp.lentIdx = map[*capServer]int{}
		for _, sv := range append(cp.servers, cp.retired...) {
			cp.lentIdx[sv] = len(ex.Servers)
			ex.Servers = append(ex.Servers, CapacityCount{Address: sv.srv.address, Open: sv.open + sv.inherited})
		}
		cp.lend, cp.exported = lend, len(out)
		cp.mu.Unlock()
		out = append(out, ex)
	}
	return out
}

// UnexportCapacities makes this process the one that takes slots again
// (the upgrade failed), and serves its queues.
func (s *State) UnexportCapacities() {
	for _, cp := range s.allCapacities() {
		cp.mu.Lock()
		cp.lend, cp.lentIdx = nil, nil
		cp.dispatchLocked()
		cp.mu.Unlock()
	}
}

// InheritedSlots is what a new process counts for its predecessor's
// connections: per export and server, the capacity slot and how many are
// still open there.
type InheritedSlots struct {
	mu    sync.Mutex
	cps   []*capacity
	slots [][]*capServer // nil: no such service or server here
	left  [][]int
}

// ImportCapacities counts the old process's connections in this process's
// capacities of the same services and server addresses (a service or
// server this configuration does not cap counts nothing) until Release or
// ReleaseAll. It returns them and how many it counted.
func (s *State) ImportCapacities(exs []CapacityExport) (*InheritedSlots, int) {
	in := &InheritedSlots{}
	counted := 0
	for _, ex := range exs {
		s.mu.Lock()
		cp := s.capacities[ex.Service]
		s.mu.Unlock()
		in.cps = append(in.cps, cp)
		slots := make([]*capServer, len(ex.Servers))
		left := make([]int, len(ex.Servers))
		if cp != nil {
			cp.mu.Lock()
			for j, c := range ex.Servers {
				for _, sv := range cp.servers {
					if sv.srv.address == c.Address {
						sv.inherited += c.Open
						slots[j], left[j] = sv, c.Open
						counted += c.Open
						break
					}
				}
			}
			cp.mu.Unlock()
		}
		in.slots, in.left = append(in.slots, slots), append(in.left, left)
	}
	return in, counted
}

// Release frees one inherited connection of server j of export i: a slot
// for the connections waiting here, or, when this process has handed over
// in turn, one lent back to its own successor. It reports false for
// indexes it does not know or a server with none left (nothing is freed).
func (in *InheritedSlots) Release(i, j int) bool {
	in.mu.Lock()
	if i < 0 || i >= len(in.slots) || j < 0 || j >= len(in.slots[i]) || in.slots[i][j] == nil || in.left[i][j] == 0 {
		in.mu.Unlock()
		return false
	}
	in.left[i][j]--
	cp, sv := in.cps[i], in.slots[i][j]
	in.mu.Unlock()
	cp.mu.Lock()
	sv.inherited--
	if cp.lend != nil {
		cp.lendBack(sv)
	}
	cp.dispatchLocked()
	cp.mu.Unlock()
	return true
}

// Acquire counts one more connection of the old process to server j of
// export i (it took a slot by its own count, for a connection it accepted
// before the handover), passing it on when this process has handed over in
// turn. It reports false for indexes it does not know.
func (in *InheritedSlots) Acquire(i, j int) bool {
	in.mu.Lock()
	if i < 0 || i >= len(in.slots) || j < 0 || j >= len(in.slots[i]) || in.slots[i][j] == nil {
		in.mu.Unlock()
		return false
	}
	in.left[i][j]++
	cp, sv := in.cps[i], in.slots[i][j]
	in.mu.Unlock()
	cp.mu.Lock()
	sv.inherited++
	if cp.lend != nil {
		if k, ok := cp.lentIdx[sv]; ok {
			cp.lend.Acquired(cp.exported, k)
		}
	}
	cp.mu.Unlock()
	return true
}

// ReleaseAll frees every inherited connection still counted (the old
// process is gone: its connections ended with it).
func (in *InheritedSlots) ReleaseAll() {
	for i := range in.slots {
		for j := range in.slots[i] {
			for in.Release(i, j) {
			}
		}
	}
}
