package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// greeted reports whether c receives the backend's one-byte banner within d.
func greeted(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	var b [1]byte
	_, err := io.ReadFull(c, b[:])
	return err == nil && b[0] == 'B'
}

// closedSoon reports whether the proxy closes c within d.
func closedSoon(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func cappedConfig(be string, maxConn, queueSize int, timeout time.Duration) *config.TCPConfiguration {
	cfg := singleRouter(be, nil)
	lb := cfg.Services["s"].LoadBalancer
	lb.Servers[0].MaxConn = maxConn
	lb.Queue = &config.TCPQueue{MaxSize: &queueSize, Timeout: config.Duration(timeout)}
	return cfg
}

// Issue 17 acceptance: a server capped at 2 and a queue of 4. Six clients:
// 2 served, 4 wait; as each served one closes, the next waiting one is
// served, in the order they came; a 7th beyond the queue is closed at once;
// one that waits past the queue timeout is closed; nothing is left counted.
func TestServerCapQueuesInOrder(t *testing.T) {
	be := startBackend(t, "B")
	s := newTestServer(t, "tcp")
	apply(s, "file", cappedConfig(be.addr(), 2, 4, 10*time.Second))
	addr := s.addr("tcp")
	st := func() CapacityState { return *s.State().Capacity("s@file") }
	var conns []net.Conn
	defer func() { closeAll(conns) }()
	for i := 0; i < 6; i++ {
		c := dialSrc(t, fmt.Sprintf("127.0.1.%d", i+1), addr)
		conns = append(conns, c)
		want := min(i+1, 2)
		waitFor(t, fmt.Sprintf("client %d counted", i+1), func() bool {
			cs := st()
			return cs.Servers[0].Open == want && cs.Queued == i+1-want
		})
	}
	for i, c := range conns {
		if got := greeted(c, 200*time.Millisecond); got != (i < 2) {
			t.Fatalf("client %d greeted %v, want %v (2 served, 4 waiting)", i+1, got, i < 2)
		}
	}
	seventh := dialSrc(t, "127.0.1.7", addr)
	defer seventh.Close()
	if !closedSoon(seventh, time.Second) {
		t.Fatal("a 7th connection beyond the queue was not closed at once")
	}
	if cs := st(); cs.RejectedFull != 1 {
		t.Fatalf("queue-full refusals %d, want 1", cs.RejectedFull)
	}
	// Close the served ones one at a time: the waiting ones are served in order.
	for next := 2; next < 6; next++ {
		conns[next-2].Close()
		if !greeted(conns[next], 2*time.Second) {
			t.Fatalf("client %d not served after a slot was freed", next+1)
		}
		for later := next + 1; later < 6; later++ {
			if greeted(conns[later], 20*time.Millisecond) {
				t.Fatalf("client %d served before client %d: not in order", later+1, next+1)
			}
		}
	}
	closeAll(conns)
	conns = nil
	waitFor(t, "every slot and the queue to empty", func() bool {
		cs := st()
		return cs.Servers[0].Open == 0 && cs.Queued == 0 && s.EntryPoint("tcp").Open() == 0
	})

	// The queue timeout.
	apply(s, "file", cappedConfig(be.addr(), 1, 4, 300*time.Millisecond))
	n := 19
	queueTimesOut(t, s, "tcp", func() net.Conn { n++; return dialSrc(t, fmt.Sprintf("127.0.1.%d", n), addr) })
}

// queueTimesOut: with service s@file's one server capped at 1 and a queue
// timeout of 300 ms, a connection held through entry point ep is served, a
// second is closed at the timeout and counted, and everything is freed
// after.
func queueTimesOut(t *testing.T, s *Server, ep string, dial func() net.Conn) {
	t.Helper()
	st := func() CapacityState { return *s.State().Capacity("s@file") }
	held := dial()
	defer held.Close()
	if !greeted(held, 2*time.Second) {
		t.Fatal("the first connection was not served")
	}
	waiting := dial()
	defer waiting.Close()
	start := time.Now()
	if !closedSoon(waiting, 3*time.Second) {
		t.Fatal("a connection waiting past the queue timeout was not closed")
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("closed after %v, before the 300ms queue timeout", d)
	}
	if cs := st(); cs.TimedOut != 1 || cs.Queued != 0 {
		t.Fatalf("after the timeout: %+v", cs)
	}
	held.Close()
	waitFor(t, "the slot to be freed", func() bool { return st().Servers[0].Open == 0 && s.EntryPoint(ep).Open() == 0 })
}

// Queued connections count against their client's inFlightConn amount: one
// client cannot fill the queue.
func TestQueuedConnectionsCountInTheLimit(t *testing.T) {
	be := startBackend(t, "B")
	s := newTestServer(t, "tcp")
	cfg := cappedConfig(be.addr(), 1, 10, 10*time.Second)
	cfg.Middlewares = map[string]*config.TCPMiddleware{"two": limitMW(2)}
	cfg.Routers["r"].Middlewares = []string{"two"}
	apply(s, "file", cfg)
	addr := s.addr("tcp")
	busy := dialSrc(t, "127.0.2.1", addr)
	defer busy.Close()
	if !greeted(busy, 2*time.Second) {
		t.Fatal("not served")
	}
	var mine []net.Conn
	defer func() { closeAll(mine) }()
	for i := 0; i < 2; i++ {
		mine = append(mine, dialSrc(t, "127.0.2.2", addr))
	}
	waitFor(t, "two of one client's connections queued", func() bool { return s.State().Capacity("s@file").Queued == 2 })
	third := dialOrReset(t, "127.0.2.2", addr)
	if third != nil {
		defer third.Close()
		if !closedSoon(third, time.Second) {
			t.Fatal("a third connection of a client with amount 2 waited in the queue")
		}
	}
	if q := s.State().Capacity("s@file").Queued; q != 2 {
		t.Fatalf("%d queued, want 2", q)
	}
}

// A health-checked server that goes DOWN takes nothing new: the waiting
// connections are served by the servers still UP as their slots free.
func TestQueueDrainsToServersStillUp(t *testing.T) {
	a := startBackend(t, "B")
	b := startBackend(t, "B")
	s := newTestServer(t, "tcp")
	cfg := singleRouter(a.addr(), nil)
	q := 10
	cfg.Services["s"] = &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{
		Servers:     []config.TCPServer{{Address: a.addr(), MaxConn: 1}, {Address: b.addr(), MaxConn: 1}},
		Queue:       &config.TCPQueue{MaxSize: &q, Timeout: config.Duration(10 * time.Second)},
		HealthCheck: &config.TCPHealthCheck{Interval: config.Duration(50 * time.Millisecond), Timeout: config.Duration(100 * time.Millisecond)},
	}}
	apply(s, "file", cfg)
	addr := s.addr("tcp")
	st := func() CapacityState { return *s.State().Capacity("s@file") }
	var conns []net.Conn
	defer func() { closeAll(conns) }()
	for i := 0; i < 4; i++ {
		conns = append(conns, dialSrc(t, fmt.Sprintf("127.0.3.%d", i+1), addr))
		waitFor(t, "connection counted", func() bool {
			cs := st()
			return cs.Servers[0].Open+cs.Servers[1].Open+cs.Queued == i+1
		})
	}
	if !greeted(conns[0], 2*time.Second) || !greeted(conns[1], 2*time.Second) {
		t.Fatal("the first two were not served")
	}
	// Server a stops accepting: its health check fails and it is DOWN.
	a.Close()
	waitFor(t, "server a DOWN", func() bool { return s.State().ServerStatus("s@file")[a.addr()] == "DOWN" })
	// Close both served connections: only b's slot may take a waiting one.
	conns[0].Close()
	conns[1].Close()
	if !greeted(conns[2], 2*time.Second) {
		t.Fatal("the first waiting connection was not served by the server still UP")
	}
	if greeted(conns[3], 200*time.Millisecond) {
		t.Fatal("a second waiting connection was served: the DOWN server took it")
	}
	if cs := st(); cs.Servers[0].Open != 0 || cs.Servers[1].Open != 1 || cs.Queued != 1 {
		t.Fatalf("capacity %+v, want a: 0 open (DOWN), b: 1 open, 1 queued", cs)
	}
	conns[2].Close()
	if !greeted(conns[3], 2*time.Second) {
		t.Fatal("the last waiting connection was not served by the server still UP")
	}
}

// A handler that decides asynchronously (tcp.Conn.Later) goes on on the
// connection's loop once its answer is in; a connection that ended
// meanwhile gets dropped instead.
func TestLaterResumesOnTheLoop(t *testing.T) {
	be := startBackend(t, "B")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), nil))
	lb := s.EntryPoint("tcp").table.Load().routes[0].handler
	answer := make(chan bool)
	var dropped atomic.Int32
	s.EntryPoint("tcp").SetTable(&Table{routes: []*route{{
		name: "slow", rule: mustRule(t, "HostSNI(`*`)"), open: new(atomic.Int64),
		handler: tcp.HandlerFunc(func(c *tcp.Conn) {
			go func() {
				if <-answer {
					c.Later(func() { lb.ServeTCP(c) }, func() { dropped.Add(1) })
				}
			}()
		}),
	}}})
	c := dialSrc(t, "127.0.4.1", s.addr("tcp"))
	defer c.Close()
	if greeted(c, 100*time.Millisecond) {
		t.Fatal("served before the handler's answer")
	}
	answer <- true
	if !greeted(c, 2*time.Second) {
		t.Fatal("not served after the handler's answer")
	}
	// A connection still waiting when the entry point shuts down is dropped.
	c2 := dialSrc(t, "127.0.4.2", s.addr("tcp"))
	defer c2.Close()
	waitFor(t, "the second connection accepted", func() bool { return s.EntryPoint("tcp").Open() == 2 })
	go s.EntryPoint("tcp").Shutdown(t.Context())
	waitFor(t, "the waiting connection closed by the shutdown", func() bool { return s.EntryPoint("tcp").Open() <= 1 })
	answer <- true
	waitFor(t, "dropped to run for it", func() bool { return dropped.Load() == 1 })
}

// A connection whose router terminates TLS (served by goroutines) waits in
// a capped service's queue like a loop's: it is served when the slot frees,
// refused at once when the queue is full, leaves the queue when its client
// closes, and is closed at the queue timeout.
func TestTerminatedConnectionsQueue(t *testing.T) {
	ca := newTestCA(t)
	_, crt, key := ca.issue(t, leafOpts{}, "db.example")
	be := startBackend(t, "B")
	s := newServerWith(t, nil, "tls")
	capped := func(queueSize int, timeout time.Duration) {
		cfg := cappedConfig(be.addr(), 1, queueSize, timeout)
		cfg.Routers["r"] = terminating("HostSNI(`db.example`)", "s", "")
		mustEnabled(t, s.Apply(provider.Merge(map[string]*config.Dynamic{"file": {TCP: cfg,
			TLS: &config.TLSConfiguration{Certificates: []*config.CertAndStores{certEntry(crt, key)}}}})))
	}
	capped(1, 10*time.Second)
	addr := s.addr("tls")
	st := func() CapacityState { return *s.State().Capacity("s@file") }
	dial := func() net.Conn {
		c, err := tlsDial(t, addr, &tls.Config{ServerName: "db.example", RootCAs: ca.pool})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	first := dial()
	if !greeted(first, 2*time.Second) {
		t.Fatal("the first terminated connection was not served")
	}
	second := dial()
	waitFor(t, "the second terminated connection queued", func() bool { return st().Queued == 1 })
	if greeted(second, 200*time.Millisecond) {
		t.Fatal("a terminated connection over the cap was served")
	}
	third := dial() // the queue (1) is full
	if !closedSoon(third, time.Second) || st().RejectedFull != 1 {
		t.Fatalf("a terminated connection beyond the queue: not closed at once, or not counted (%+v)", st())
	}
	// A waiting client that closes leaves the queue then, not at the
	// timeout (10 s).
	second.Close()
	waitFor(t, "the closed client out of the queue", func() bool { return st().Queued == 0 })
	fourth := dial()
	waitFor(t, "the next terminated connection queued", func() bool { return st().Queued == 1 })
	first.Close()
	if !greeted(fourth, 2*time.Second) {
		t.Fatal("the queued terminated connection was not served when the slot freed")
	}
	fourth.Close()
	waitFor(t, "the slot and the queue to empty", func() bool {
		cs := st()
		return cs.Servers[0].Open == 0 && cs.Queued == 0 && s.EntryPoint("tls").Open() == 0
	})

	capped(1, 300*time.Millisecond)
	queueTimesOut(t, s, "tls", dial)
}

// At an upgrade's handover the old process's per-server counts go to the
// new process, which counts them against the caps until the old process
// releases them; the old process passes a slot its connections free to the
// next connection waiting there before lending it back, and reports a slot
// it takes. Two servers (two processes' States) and one backend capped at 2.
func TestCapacitiesHandedOver(t *testing.T) {
	be := startBackend(t, "B")
	old, next := newTestServer(t, "tcp"), newTestServer(t, "tcp")
	for _, s := range []*Server{old, next} {
		apply(s, "file", cappedConfig(be.addr(), 2, 4, 10*time.Second))
	}
	capOf := func(s *Server) CapacityState { return *s.State().Capacity("s@file") }
	var held []net.Conn
	defer func() { closeAll(held) }()
	for i := range 2 {
		c := dialSrc(t, fmt.Sprintf("127.0.3.%d", i+1), old.addr("tcp"))
		held = append(held, c)
		if !greeted(c, 2*time.Second) {
			t.Fatalf("connection %d not served by the old process", i+1)
		}
	}
	var lentBack, taken atomic.Int32
	exs := old.State().ExportCapacities(&Lender{
		Released: func(i, j int) {
			if i == 0 && j == 0 {
				lentBack.Add(1)
			}
		},
		Acquired: func(i, j int) {
			if i == 0 && j == 0 {
				taken.Add(1)
			}
		},
	})
	if len(exs) != 1 || exs[0].Service != "s@file" || len(exs[0].Servers) != 1 || exs[0].Servers[0].Open != 2 {
		t.Fatalf("export %+v, want s@file with 2 open on one server", exs)
	}
	in, counted := next.State().ImportCapacities(exs)
	if counted != 2 || capOf(next).Servers[0].Inherited != 2 {
		t.Fatalf("imported %d, state %+v; want 2 inherited", counted, capOf(next))
	}

	// The new process is at the cap: a connection waits.
	fresh := dialSrc(t, "127.0.3.10", next.addr("tcp"))
	defer fresh.Close()
	waitFor(t, "the new process's connection queued", func() bool { return capOf(next).Queued == 1 })
	// The old process is at the cap by its own count: a late connection
	// there waits too.
	late := dialSrc(t, "127.0.3.11", old.addr("tcp"))
	defer late.Close()
	waitFor(t, "the old process's late connection queued", func() bool { return capOf(old).Queued == 1 })
	if greeted(fresh, 100*time.Millisecond) || greeted(late, 10*time.Millisecond) {
		t.Fatal("a connection over the cap of the two processes together was served")
	}
	// An old connection ends: its slot goes to the old process's waiting one.
	held[0].Close()
	if !greeted(late, 2*time.Second) {
		t.Fatal("the old process's waiting connection did not get the slot its own connection freed")
	}
	if n := lentBack.Load(); n != 0 {
		t.Fatalf("%d slots lent back while a connection waited in the old process", n)
	}
	// Another ends with nobody waiting there: the slot is lent back, and the
	// new process's release serves its waiting connection.
	held[1].Close()
	waitFor(t, "the slot lent back", func() bool { return lentBack.Load() == 1 })
	if !in.Release(0, 0) {
		t.Fatal("Release of an inherited connection found none")
	}
	if !greeted(fresh, 2*time.Second) {
		t.Fatal("the new process's waiting connection was not served once a slot came back")
	}
	// The old process, below the cap by its own count (only late is
	// open there), serves a second late connection: the slot is reported,
	// and the new process counts it.
	late2 := dialSrc(t, "127.0.3.12", old.addr("tcp"))
	defer late2.Close()
	if !greeted(late2, 2*time.Second) {
		t.Fatal("the old process did not serve a late connection below its own count")
	}
	waitFor(t, "the slot taken reported", func() bool { return taken.Load() == 1 })
	if !in.Acquire(0, 0) || capOf(next).Servers[0].Inherited != 2 {
		t.Fatalf("after the old process's acquire: %+v, want 2 inherited", capOf(next))
	}
	in.ReleaseAll() // the old process is gone: its connections count no more
	if st := capOf(next); st.Servers[0].Inherited != 0 || st.Servers[0].Open != 1 {
		t.Fatalf("after ReleaseAll: %+v, want 1 open, none inherited", st)
	}
	if in.Release(0, 0) || in.Release(3, 0) {
		t.Fatal("Release freed a connection that was not counted")
	}
}
