package inflightconn

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// newProc is the new process's side in these tests: the limiter the export
// went into, which receives the forwarded releases and answers acquires.
type newProc struct {
	l        *Limiter
	released atomic.Int64
}

func (p *newProc) Acquire(k netip.Addr, done func(bool)) { done(p.l.Acquire(k)) }
func (p *newProc) Release(k netip.Addr) {
	p.released.Add(1)
	p.l.Release(k)
}

// Releases racing with the export are either in the copy or forwarded, never
// both and never neither: after everything closes, the new process's
// counts are zero and it saw exactly one release per connection in the copy.
func TestExportReleasesAreInTheCopyOrForwarded(t *testing.T) {
	for round := 0; round < 20; round++ {
		old := NewLimiter(1000, false, 0)
		var keys []netip.Addr
		for i := 0; i < 64; i++ {
			k := netip.AddrFrom4([4]byte{10, 0, byte(i / 8), byte(i)})
			keys = append(keys, k)
			for j := 0; j < 5; j++ {
				if !old.Acquire(k) {
					t.Fatal("acquire under the amount failed")
				}
			}
		}
		var reg Registry
		p := &newProc{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		var mu sync.Mutex // the new side must import before releases apply: hold them
		var early []netip.Addr
		imported := false
		remote := remoteFunc{
			acquire: func(k netip.Addr, done func(bool)) { done(false) },
			release: func(k netip.Addr) {
				mu.Lock()
				defer mu.Unlock()
				if !imported {
					early = append(early, k)
					return
				}
				p.Release(k)
			},
		}
		for _, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for j := 0; j < 5; j++ {
					old.Release(k)
				}
			}()
		}
		close(start)
		ex := old.Export("m@file", remote)
		var inCopy int64
		for _, kc := range ex.Keys {
			inCopy += kc.Count
		}
		mu.Lock()
		p.l = reg.Import(&ex)
		imported = true
		for _, k := range early {
			p.Release(k)
		}
		mu.Unlock()
		wg.Wait()
		if got := p.released.Load(); got != inCopy {
			t.Fatalf("round %d: %d releases forwarded for %d connections in the copy", round, got, inCopy)
		}
		if st := p.l.Stats(); st.InFlight != 0 || p.l.Entries() != 0 {
			t.Fatalf("round %d: new process left with %+v after every old connection ended", round, st)
		}
		if old.Stats().InFlight != 0 {
			t.Fatalf("round %d: old process kept counts", round)
		}
	}
}

type remoteFunc struct {
	acquire func(netip.Addr, func(bool))
	release func(netip.Addr)
}

func (r remoteFunc) Acquire(k netip.Addr, done func(bool)) { r.acquire(k, done) }
func (r remoteFunc) Release(k netip.Addr)                  { r.release(k) }

// The imported counts are one budget with the new process's own: amount 5,
// 5 imported, nothing more admitted until one is released.
func TestImportCountsAgainstTheAmount(t *testing.T) {
	old := NewLimiter(5, false, 0)
	k := netip.MustParseAddr("127.0.0.2")
	for i := 0; i < 5; i++ {
		old.Acquire(k)
	}
	old.Acquire(k) // rejected: carried in the totals
	var reg Registry
	reg.Get("m@file", 5, false, 0)
	p := &newProc{}
	ex := old.Export("m@file", p)
	p.l = reg.Import(&ex)
	if p.l != reg.Lookup("m@file") {
		t.Fatal("the import did not go into the registered limiter")
	}
	if p.l.Acquire(k) {
		t.Fatal("the new process admitted a 6th connection with 5 imported")
	}
	if st := p.l.Stats(); st.InFlight != 5 || st.Admitted != 5 || st.Rejected != 2 {
		t.Fatalf("imported stats %+v, want 5 in flight, 5 admitted, 2 rejected", st)
	}
	old.Release(k) // forwarded
	if !p.l.Acquire(k) || p.l.Acquire(k) {
		t.Fatal("one release of an old connection must admit exactly one")
	}
}

// An export into a process whose limiter keys IPv6 clients differently
// joins the registered limiter, each exported key counted under the key it
// has here (as a reload's change of ipv6Subnet moves counts), and released
// by the same exported key; a name the new configuration lacks is
// registered, so that the counts stay until released.
func TestRegistryImportKeying(t *testing.T) {
	var reg Registry
	cur := reg.Get("v6@file", 1, false, 64)
	full := netip.MustParseAddr("2001:db8::1")
	l := reg.Import(&Export{Name: "v6@file", Amount: 1, V6Bits: 0, Keys: []KeyCount{{full, 1}}})
	if l != cur || reg.Lookup("v6@file") != cur || cur.Count(netip.MustParseAddr("2001:db8::")) != 1 {
		t.Fatalf("an export keyed by full address: into %p (registered %p), /64 count %d; want it counted under its /64 in the registered limiter",
			l, cur, cur.Count(netip.MustParseAddr("2001:db8::")))
	}
	if cur.Acquire(netip.MustParseAddr("2001:db8::2")) {
		t.Fatal("the /64 holding an imported connection admitted another with amount 1")
	}
	cur.ReleaseLocal(full) // the predecessor forwards its end by its key
	if cur.Stats().InFlight != 0 || cur.Entries() != 0 {
		t.Fatalf("after the imported connection's release: %+v, %d entries", cur.Stats(), cur.Entries())
	}
	g := reg.Import(&Export{Name: "gone@file", Amount: 3, Keys: []KeyCount{{netip.MustParseAddr("10.0.0.1"), 2}}})
	reg.Sweep(map[string]bool{})
	if reg.Lookup("gone@file") != g || g.Amount() != 3 {
		t.Fatal("an imported limiter with counts was not kept")
	}
	g.Release(netip.MustParseAddr("10.0.0.1"))
	g.Release(netip.MustParseAddr("10.0.0.1"))
	reg.Sweep(map[string]bool{})
	if reg.Lookup("gone@file") != nil {
		t.Fatal("an imported limiter at zero was kept")
	}
}

// After the export the middleware asks the remote: a grant is counted here
// too (its release is forwarded), a refusal is refused, and a grant whose
// connection ended before it was used is given back.
func TestMiddlewareAsksTheRemoteAfterExport(t *testing.T) {
	var reg Registry
	mw, l, _, err := newMiddleware("m@file", &config.TCPInFlightConn{Amount: 1}, &reg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	h := mw(tcp.HandlerFunc(func(c *tcp.Conn) { served++ }))
	var answer bool
	var released []netip.Addr
	var later []func()
	r := remoteFunc{
		acquire: func(_ netip.Addr, done func(bool)) { done(answer) },
		release: func(k netip.Addr) { released = append(released, k) },
	}
	l.Export("m@file", r)
	sock := &fakeSock{later: &later}
	k := netip.MustParseAddr("127.0.0.3")
	answer = true
	c := &tcp.Conn{Client: netip.AddrPortFrom(k, 1), Sock: sock}
	h.ServeTCP(c)
	if served != 0 || len(later) != 1 {
		t.Fatal("the connection did not wait for the remote's answer")
	}
	later[0]()
	if served != 1 || l.Count(k) != 1 {
		t.Fatalf("granted: served %d, counted %d", served, l.Count(k))
	}
	c.Finish()
	if len(released) != 1 || l.Count(k) != 0 {
		t.Fatalf("the end of a granted connection was not forwarded: %v", released)
	}
	answer = false
	h.ServeTCP(&tcp.Conn{Client: netip.AddrPortFrom(k, 2), Sock: sock})
	later[1]()
	if served != 1 || !sock.refused {
		t.Fatal("a connection the remote refused was served")
	}
	answer = true
	sock.drop = true
	h.ServeTCP(&tcp.Conn{Client: netip.AddrPortFrom(k, 3), Sock: sock})
	if len(released) != 2 || l.Count(k) != 0 {
		t.Fatalf("a grant for a connection that ended first was not given back: %v", released)
	}
	l.Unexport()
	if !l.Acquire(k) || l.Acquire(k) {
		t.Fatal("after Unexport the limiter must count by itself again, exactly")
	}
}

type fakeSock struct {
	later   *[]func()
	drop    bool
	refused bool
}

func (s *fakeSock) Refuse(bool)               { s.refused = true }
func (s *fakeSock) LocalAddr() netip.AddrPort { return netip.AddrPort{} }
func (s *fakeSock) Later(run, dropped func()) {
	if s.drop {
		dropped()
		return
	}
	*s.later = append(*s.later, run)
}
