package proxy

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
)

// cappedWithLimit is cappedConfig with an inFlightConn of amount 5 on the
// router, so that a queued connection's count shows in a limiter.
func cappedWithLimit(be string, maxConn, queueSize int, timeout time.Duration) *config.TCPConfiguration {
	cfg := cappedConfig(be, maxConn, queueSize, timeout)
	cfg.Middlewares = map[string]*config.TCPMiddleware{"five": limitMW(5)}
	cfg.Routers["r"].Middlewares = []string{"five"}
	return cfg
}

// Issue 41.4: a plain-TCP client that closes while its connection waits in
// a capped service's queue leaves the queue then, not at the queue timeout:
// its inFlightConn count drops to zero at once, and when the slot frees no
// connection is dialled to the backend for it (the next connection served
// is the backend's only new one).
func TestQueuedClientThatClosesLeaves(t *testing.T) {
	be := startBackend(t, "B")
	s := newTestServer(t, "tcp")
	apply(s, "file", cappedWithLimit(be.addr(), 1, 4, 10*time.Second))
	addr := s.addr("tcp")
	cp := func() CapacityState { return *s.State().Capacity("s@file") }
	l := limiterOf(s, "five@file")
	held := dialSrc(t, "127.0.5.1", addr)
	defer held.Close()
	if !greeted(held, 2*time.Second) {
		t.Fatal("the first connection was not served")
	}
	waiting := dialSrc(t, "127.0.5.2", addr)
	defer waiting.Close()
	waitFor(t, "the second connection queued and counted", func() bool {
		return cp().Queued == 1 && l.Count(mustAddr("127.0.5.2")) == 1
	})
	waiting.Close()
	start := time.Now()
	waitFor(t, "the closed client out of the queue, its count released", func() bool {
		return cp().Queued == 0 && l.Count(mustAddr("127.0.5.2")) == 0
	})
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the closed client left the queue after %v, want at once (the queue timeout is 10 s)", d)
	}
	before := be.accepted()
	held.Close()
	waitFor(t, "the slot freed", func() bool { return cp().Servers[0].Open == 0 })
	next := dialSrc(t, "127.0.5.3", addr)
	defer next.Close()
	if !greeted(next, 2*time.Second) {
		t.Fatal("a new connection was not served once the slot was free")
	}
	if got := be.accepted(); got != before+1 {
		t.Fatalf("the backend accepted %d connections after the slot freed, want 1 (none for the client that was gone)", got-before)
	}
	if n := l.Count(mustAddr("127.0.5.2")); n != 0 {
		t.Fatalf("the gone client still counts %d in inFlightConn", n)
	}
}

// A queued client that sent its request and shut its write side (a
// half-close) waits for the answer: it stays in the queue and is served
// when the slot frees, the request passed on and the end after it.
func TestQueuedClientThatHalfClosesIsServed(t *testing.T) {
	be := startBackend(t, "B")
	s := newTestServer(t, "tcp")
	apply(s, "file", cappedWithLimit(be.addr(), 1, 4, 10*time.Second))
	addr := s.addr("tcp")
	cp := func() CapacityState { return *s.State().Capacity("s@file") }
	held := dialSrc(t, "127.0.5.11", addr)
	defer held.Close()
	if !greeted(held, 2*time.Second) {
		t.Fatal("the first connection was not served")
	}
	c := dialSrc(t, "127.0.5.12", addr)
	defer c.Close()
	waitFor(t, "the second connection queued", func() bool { return cp().Queued == 1 })
	if _, err := io.WriteString(c, "request"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if !stillOpen(c, 300*time.Millisecond) || cp().Queued != 1 {
		t.Fatalf("a half-closed client with a request left the queue (%+v), want it waiting", cp())
	}
	held.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "Brequest" {
		t.Fatalf("the half-closed client read %q, %v; want the banner, its request echoed, then the end", got, err)
	}
}

// Issue 41.4: without an inFlightConn, one client IP cannot take the whole
// queue from the others. Alone it may fill it; a connection from another
// IP then takes the newest place of the IP holding the most (that one is
// refused, counted as evicted), and the clients are served in turn, not
// in the order their connections came.
func TestQueueIsFairBetweenClients(t *testing.T) {
	be := startBackend(t, "B")
	s := newTestServer(t, "tcp")
	apply(s, "file", cappedConfig(be.addr(), 1, 4, 10*time.Second))
	addr := s.addr("tcp")
	cp := func() CapacityState { return *s.State().Capacity("s@file") }
	var conns []net.Conn
	defer func() { closeAll(conns) }()
	held := dialSrc(t, "127.0.6.1", addr)
	conns = append(conns, held)
	if !greeted(held, 2*time.Second) {
		t.Fatal("the first connection was not served")
	}
	var hog []net.Conn
	for i := 0; i < 4; i++ {
		c := dialSrc(t, "127.0.6.2", addr)
		conns, hog = append(conns, c), append(hog, c)
		waitFor(t, fmt.Sprintf("the hog's connection %d queued", i+1), func() bool { return cp().Queued == i+1 })
	}
	other := dialSrc(t, "127.0.6.3", addr)
	conns = append(conns, other)
	waitFor(t, "the other client queued", func() bool {
		st := cp()
		return st.Queued == 4 && st.QueuedClients == 2 && st.Evicted == 1
	})
	if !closedSoon(hog[3], 2*time.Second) {
		t.Fatal("the hog's newest connection kept its place when the queue was full and another client came")
	}
	if !stillOpen(other, 100*time.Millisecond) {
		t.Fatal("the other client's connection was closed")
	}
	// Turns: the hog waited first, so its oldest is served first; the next
	// slot is the other client's, before the hog's second and third.
	held.Close()
	if !greeted(hog[0], 2*time.Second) {
		t.Fatal("the hog's oldest connection was not served first")
	}
	hog[0].Close()
	if !greeted(other, 2*time.Second) {
		t.Fatal("the other client was not served in its turn")
	}
	if greeted(hog[1], 50*time.Millisecond) || greeted(hog[2], 10*time.Millisecond) {
		t.Fatal("a second connection of the hog was served before the other client's turn ended")
	}
	other.Close()
	if !greeted(hog[1], 2*time.Second) {
		t.Fatal("the hog's second connection was not served once alone in the queue")
	}
	if st := cp(); st.RejectedFull != 0 {
		t.Fatalf("%d refused as queue full, want none (the place was made by eviction)", st.RejectedFull)
	}
	// Now the hog holds 1 place (its third connection). A client that
	// fills the rest (3 places) holds more than its share: a 4th of its own
	// is refused as the queue is full, and a new connection of the hog (1
	// place, two fewer) takes its newest place.
	var filler []net.Conn
	for i := 0; i < 3; i++ {
		c := dialSrc(t, "127.0.6.4", addr)
		conns, filler = append(conns, c), append(filler, c)
		waitFor(t, fmt.Sprintf("the filler's connection %d queued", i+1), func() bool { return cp().Queued == i+2 })
	}
	refused := dialSrc(t, "127.0.6.4", addr)
	conns = append(conns, refused)
	if !closedSoon(refused, 2*time.Second) {
		t.Fatal("a 4th connection of the client holding 3 of 4 places was not refused")
	}
	again := dialSrc(t, "127.0.6.2", addr)
	conns = append(conns, again)
	waitFor(t, "the hog's new connection queued in the filler's newest place", func() bool {
		st := cp()
		return st.Queued == 4 && st.Evicted == 2 && st.RejectedFull == 1
	})
	if !closedSoon(filler[2], 2*time.Second) {
		t.Fatal("the filler's newest connection kept its place")
	}
}

// testWaiter records what its place in the queue brought it.
type testWaiter struct {
	got   chan *capServer
	calls int
}

func (w *testWaiter) handSlot(_ *capacity, s *capServer) {
	w.calls++ // under cp.mu
	w.got <- s
}

// check holds the queue's bookkeeping to what it says: every client's
// count is its FIFO's length and they sum to queued, each client is in the
// list of its count and in the ring once, and most is the largest count.
func (cp *capacity) check(t *testing.T) {
	t.Helper()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	sum, most := 0, 0
	for k, cl := range cp.clients {
		n := 0
		for q := cl.head; q != nil; q = q.next {
			if q.cl != cl {
				t.Fatalf("a place of %s is filed under another client", k)
			}
			n++
		}
		if n != cl.n || n == 0 {
			t.Fatalf("client %s: %d places in its FIFO, counted %d", k, n, cl.n)
		}
		found := false
		for b := cp.byCount[n]; b != nil; b = b.bnext {
			found = found || b == cl
		}
		if !found {
			t.Fatalf("client %s holding %d is not in that list", k, n)
		}
		sum, most = sum+n, max(most, n)
	}
	if sum != cp.queued || most != cp.most {
		t.Fatalf("places %d, most %d; the queue says %d, %d", sum, most, cp.queued, cp.most)
	}
	ring := 0
	if r := cp.ring; r != nil {
		for cl := r; ; cl = cl.rnext {
			ring++
			if cl.rnext.rprev != cl || ring > len(cp.clients) {
				t.Fatal("the ring of clients is broken")
			}
			if cl.rnext == r {
				break
			}
		}
	}
	if ring != len(cp.clients) {
		t.Fatalf("%d clients in the ring, %d waiting", ring, len(cp.clients))
	}
}

// The queue's bookkeeping holds through a random mix of arrivals (which
// may evict), departures and released slots, and the clients are served
// in turn; its maps are given back once it is empty. Then many goroutines
// at once: every waiter is told exactly once, and every slot comes back.
func TestCapacityQueueBookkeeping(t *testing.T) {
	newCap := func(maxConn, size int) *capacity {
		cp := &capacity{name: "s"}
		lb := &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:1", MaxConn: maxConn}}, Queue: &config.TCPQueue{MaxSize: &size}}
		cp.update([]server{newServer("127.0.0.1:1")}, lb)
		return cp
	}
	cp := newCap(1, 8)
	holder, _ := cp.admit(&testWaiter{got: make(chan *capServer, 1)}, mustAddr("10.0.0.1"))
	if holder == nil {
		t.Fatal("no slot for the first connection")
	}
	r := rand.New(rand.NewPCG(1, 2))
	type entry struct {
		w *testWaiter
		q *qnode
	}
	var places []entry
	for i := 0; i < 5000; i++ {
		switch op := r.IntN(10); {
		case op < 6:
			w := &testWaiter{got: make(chan *capServer, 1)}
			s, q := cp.admit(w, netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(5))}))
			switch {
			case s != nil && holder != nil:
				t.Fatal("a second slot of a server capped at 1")
			case s != nil:
				holder = s
			case q != nil:
				places = append(places, entry{w, q})
			}
		case op < 8 && len(places) > 0:
			j := r.IntN(len(places))
			cp.leave(places[j].q)
			places = append(places[:j], places[j+1:]...)
		case holder != nil:
			cp.release(holder) // the slot goes to the next in turn, if any
			holder = nil
		}
		// What the places were told: a slot, or an eviction; once each.
		kept := places[:0]
		for _, e := range places {
			select {
			case s := <-e.w.got:
				if s != nil && holder != nil {
					t.Fatal("one slot handed to two waiters")
				}
				if s != nil {
					holder = s
				}
				if e.w.calls != 1 || cp.leave(e.q) {
					t.Fatal("a waiter told twice, or still in the queue once told")
				}
			default:
				kept = append(kept, e)
			}
		}
		places = kept
		cp.check(t)
		if open := cp.state().Servers[0].Open; open != 0 && holder == nil || open != 1 && holder != nil {
			t.Fatalf("%d open, holder %v", open, holder != nil)
		}
	}
	if cp.evicted.Load() == 0 {
		t.Fatal("the random mix never filled the queue to an eviction: it tested less than it says")
	}
	for _, e := range places {
		cp.leave(e.q)
	}
	cp.check(t)
	if cp.queued != 0 || cp.clients != nil || cp.byCount != nil || cp.ring != nil {
		t.Fatalf("an empty queue keeps %d places, maps %v %v", cp.queued, cp.clients, cp.byCount)
	}

	// Turns: clients a (3 waiting), b (1), c (2), arrived in that order, are
	// served a, b, c, a, c, a.
	cp = newCap(1, 10)
	slot, _ := cp.admit(&testWaiter{got: make(chan *capServer, 1)}, mustAddr("10.0.1.9"))
	who := map[*testWaiter]string{}
	for _, c := range "aaabcc" {
		w := &testWaiter{got: make(chan *capServer, 1)}
		who[w] = string(c)
		cp.admit(w, netip.AddrFrom4([4]byte{10, 0, 1, byte(c)}))
	}
	order := ""
	for cp.queued > 0 {
		cp.mu.Lock()
		w := cp.popNext().(*testWaiter)
		cp.mu.Unlock()
		order += who[w]
	}
	if order != "abcaca" {
		t.Fatalf("served in the order %s, want abcaca (in turn)", order)
	}
	cp.release(slot)

	// Concurrency: 8 goroutines, 500 connections each from 6 clients, on 2
	// slots and a queue of 5; each leaves at once half the times it waits.
	cp = newCap(2, 5)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				w := &testWaiter{got: make(chan *capServer, 1)}
				s, q := cp.admit(w, netip.AddrFrom4([4]byte{10, 0, 2, byte((g + i) % 6)}))
				if q != nil && i%2 == 0 && cp.leave(q) {
					continue
				}
				if q != nil {
					s = <-w.got
				}
				if s != nil {
					cp.release(s)
				}
			}
		}()
	}
	wg.Wait()
	cp.check(t)
	if st := cp.state(); st.Queued != 0 || st.Servers[0].Open != 0 {
		t.Fatalf("after every connection ended: %+v", st)
	}
}
