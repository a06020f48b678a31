package proxy

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// A load balancer whose servers have a maxConn keeps at most that many
// connections open to each, as HAProxy's maxconn does: a connection over the
// caps waits in the service's FIFO queue for the first slot any server
// frees, instead of being refused (a PostgreSQL kept below max_connections
// makes a client wait, not fail). The caps, the counts and the queue belong
// to the service, not to a configuration generation: they live in the
// state registry by qualified service name, so connections opened under one
// generation count under the next, and a queued connection keeps its place
// through a reload.

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
	queue   []waiter     // FIFO; head at 0
	maxSize int
	timeout time.Duration

	full, expired atomic.Uint64 // refused: the queue was full / the wait timed out
	log           ratelog.Limiter
}

// waiter is a connection in a capacity's queue: a loop's, or one served by
// goroutines. handSlot gives it the slot s; it runs under cp.mu and must
// not block.
type waiter interface {
	handSlot(cp *capacity, s *capServer)
}

// capServer is one server of a capped service.
type capServer struct {
	srv  server
	max  int // 0: no cap
	open int // connections open or being dialled (capacity.mu)
}

// CapacityServer is one server's slots, for the API and metrics.
type CapacityServer struct {
	Address string `json:"address"`
	Open    int    `json:"open"`
	Max     int    `json:"max,omitempty"`
}

// CapacityState is a capped service's live state.
type CapacityState struct {
	Servers      []CapacityServer `json:"servers"`
	Queued       int              `json:"queued"`
	QueueMax     int              `json:"queueMaxSize"`
	QueueTimeout string           `json:"queueTimeout"`
	RejectedFull uint64           `json:"queueFullTotal"`
	TimedOut     uint64           `json:"queueTimeoutTotal"`
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
	return (s.srv.up == nil || s.srv.up.Load()) && (s.max == 0 || s.max > 0 && s.open < s.max)
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
			return s
		}
	}
	return nil
}

// admit gives w a slot, or queues it. It returns the slot, or nil with
// queued true (w waits: dispatch hands it a slot later), or nil and false
// when the queue is full.
func (cp *capacity) admit(w waiter) (s *capServer, queued bool) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if len(cp.queue) == 0 { // FIFO: nobody may pass those already waiting
		if s := cp.take(); s != nil {
			return s, false
		}
	}
	if len(cp.queue) >= cp.maxSize {
		return nil, false
	}
	cp.queue = append(cp.queue, w)
	return nil, true
}

// leave takes w out of the queue; false when it is no longer there (a
// slot is on its way to it).
func (cp *capacity) leave(w waiter) bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for i, q := range cp.queue {
		if q == w {
			cp.queue = append(cp.queue[:i], cp.queue[i+1:]...)
			return true
		}
	}
	return false
}

// release gives back s's slot and hands free slots to the connections
// waiting, in order.
func (cp *capacity) release(s *capServer) {
	cp.mu.Lock()
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
	for len(cp.queue) > 0 {
		s := cp.take()
		if s == nil {
			return
		}
		w := cp.queue[0]
		cp.queue[0] = nil
		cp.queue = cp.queue[1:]
		w.handSlot(cp, s)
	}
}

// logRefusal logs, at a bounded rate per reason, a connection the service
// could not take for its caps.
func (cp *capacity) logRefusal(lb *loadBalancer, c *tcp.Conn, why string) {
	if ok, suppressed := cp.log.Allow(ratelog.String(why)); ok {
		ev := lb.log.Warn().Str("service", lb.name).Str("router", c.Router).Str("client_ip", c.Client.Addr().String())
		if suppressed > 0 {
			ev = ev.Uint64("suppressed", suppressed)
		}
		ev.Msg("Connection refused: every server of the service is at its maxConn and " + why)
	}
}

// state is the live view for the API and metrics.
func (cp *capacity) state() CapacityState {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	st := CapacityState{Queued: len(cp.queue), QueueMax: cp.maxSize, QueueTimeout: cp.timeout.String(),
		RejectedFull: cp.full.Load(), TimedOut: cp.expired.Load()}
	for _, s := range append(cp.servers, cp.retired...) {
		st.Servers = append(st.Servers, CapacityServer{Address: s.srv.address, Open: s.open, Max: max(s.max, 0)})
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

// kickCapacities hands the slots a new configuration freed (a raised cap, a
// new server) to the connections waiting for them.
func (s *State) kickCapacities() {
	s.mu.Lock()
	cps := make([]*capacity, 0, len(s.capacities))
	for _, c := range s.capacities {
		cps = append(cps, c)
	}
	s.mu.Unlock()
	for _, c := range cps {
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
		busy := len(c.queue) > 0 || len(c.retired) > 0
		for _, sv := range c.servers {
			busy = busy || sv.open > 0
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
