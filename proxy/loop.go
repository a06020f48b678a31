package proxy

import (
	"errors"
	"math"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/proxy/internal/netpoll"
)

// The data plane runs on event loops, not on goroutines per connection
// (ARCHITECTURE.md, "The connection core"). Each loop owns an epoll set of
// its own (not Go's poller) and the connections it accepted: their sockets
// are raw descriptors that never become net.Conns. A connection costs a
// small struct while idle and runs code only while bytes move; a connection
// refused from its source address alone is decided right after netpoll.Accept and
// closed before it enters any poller.
//
// One loop per CPU (Options.Loops: GOMAXPROCS as the process found it; main
// adds a P for everything else). Every listener is in every loop's epoll set with
// EPOLLEXCLUSIVE, so the kernel wakes one loop per incoming connection,
// and a loop far more loaded than the others stops accepting for a while
// (rebalance): no connection is handed between loops. A loop with nothing to
// do blocks in epoll_wait on its own thread; run says how it keeps clear
// of the Go scheduler otherwise.

// Event tags: what an epoll event's 64-bit data says.
const (
	tagWake     = 0 // the loop's eventfd: commands are waiting
	tagListener = 1 // a listener; slot indexes loop.listeners
	tagClient   = 2 // a connection's client socket
	tagBackend  = 3 // a connection's backend socket
)

func eventData(tag int, slot, gen uint32) uint64 {
	return uint64(gen)<<32 | uint64(slot)<<2 | uint64(tag)
}

func splitData(d uint64) (tag int, slot, gen uint32) {
	return int(d & 3), uint32(d>>2) & (1<<30 - 1), uint32(d >> 32)
}

// engine is a Server's set of loops.
type engine struct {
	loops   []*loop
	wg      sync.WaitGroup
	started bool
	once    sync.Once
	balance sync.Mutex // serializes the loops' shed decisions (loop.rebalance)

	// goWork counts what goroutines did for the engine's connections
	// (goserve.go): a connection taken off the loops, a read by a copy
	// goroutine. While it moves, the loops wait in Go's poller (loop.wait).
	goWork atomic.Uint64
}

func newEngine(n int, log zerolog.Logger) (*engine, error) {
	e := &engine{}
	for i := 0; i < n; i++ {
		l, err := newLoop(i, log)
		if err != nil {
			e.close()
			return nil, err
		}
		e.loops = append(e.loops, l)
	}
	for _, l := range e.loops {
		l.peers, l.balance, l.goWork = e.loops, &e.balance, &e.goWork
	}
	return e, nil
}

func (e *engine) start() {
	e.started = true
	for _, l := range e.loops {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			l.run()
		}()
	}
}

// each runs f on every loop and waits until all have (before start, here:
// nothing else touches the loops yet).
func (e *engine) each(f func(*loop)) {
	if !e.started {
		for _, l := range e.loops {
			f(l)
		}
		return
	}
	var wg sync.WaitGroup
	for _, l := range e.loops {
		wg.Add(1)
		l.post(func(l *loop) {
			defer wg.Done()
			f(l)
		})
	}
	wg.Wait()
}

// stop ends the loops and waits for them; later calls do nothing.
func (e *engine) stop() {
	e.once.Do(func() {
		if e.started {
			for _, l := range e.loops {
				l.post(func(l *loop) { l.stopping = true })
			}
			e.wg.Wait()
		}
		e.close()
	})
}

func (e *engine) close() {
	for _, l := range e.loops {
		l.leavePoller()
		l.poll.Close()
	}
}

// loop is one event loop. Everything in it but post is touched by its own
// goroutine only.
type loop struct {
	id   int
	poll netpoll.Poller // the loop's epoll set
	log  zerolog.Logger

	mu   sync.Mutex // guards cmds (post is called from any goroutine)
	cmds []func(*loop)

	events    []unix.EpollEvent
	listeners []*listenerSlot
	conns     []*rconn // by slot; nil when free
	free      []uint32
	spare     []*rconn // ended connections' rconns, for the next ones (recycle)
	gen       uint32
	timers    timerHeap
	base      time.Time // mono() counts from here
	scratch   []byte    // reads of small transfers land here
	pipes     []*netpoll.Pipe
	pipeSize  int // the size asked of new pipes
	stopping  bool
	live      int // connections on this loop

	// Waiting in Go's poller (wait): goWork is the engine's count of
	// goroutines' work, goWorkSeen its value at the last wait; pollerUntil is
	// the loop clock until which the loop waits in the poller; poller is a
	// duplicate of the epoll set registered there meanwhile, with its RawConn and
	// read deadline.
	goWork      *atomic.Uint64
	goWorkSeen  uint64
	pollerUntil int64
	poller      *os.File
	pollerRaw   syscall.RawConn
	deadline    time.Time

	// Balance (rebalance): load is live, published for the other loops;
	// shed says this loop has taken its listeners out of its set so that
	// less loaded loops take the next connections. Written by this loop's
	// goroutine only; read by the others under balance.
	peers   []*loop // every loop of the engine, this one included
	balance *sync.Mutex
	load    atomic.Int64
	shed    atomic.Bool
	minSeen int64  // the least other loop's load at the last look
	accepts uint32 // accepts since the loop started (a look every 64)
}

// listenerSlot is an entry point's listener in one loop's epoll set.
type listenerSlot struct {
	ep      *EntryPoint
	slot    int
	paused  bool // taken out of the set after an accept error (back-off)
	backoff acceptBackoff
}

const scratchSize = 64 << 10

func newLoop(id int, log zerolog.Logger) (*loop, error) {
	poll, err := netpoll.OpenPoller(eventData(tagWake, 0, 0))
	if err != nil {
		return nil, err
	}
	l := &loop{id: id, poll: poll, log: log, events: make([]unix.EpollEvent, 256),
		base: time.Now(), scratch: make([]byte, scratchSize), pipeSize: netpoll.PipeSize}
	return l, nil
}

func (l *loop) ctl(op, fd int, events uint32, data uint64) error {
	return l.poll.Ctl(op, fd, events, data)
}

// post runs f on the loop's goroutine, soon. It never blocks.
func (l *loop) post(f func(*loop)) {
	l.mu.Lock()
	l.cmds = append(l.cmds, f)
	first := len(l.cmds) == 1
	l.mu.Unlock()
	if first {
		l.poll.Wake()
	}
}

// mono is the loop's clock: nanoseconds since the loop was made, monotonic.
func (l *loop) mono() int64 { return int64(time.Since(l.base)) }

// Waiting. A loop with nothing to do waits in one of two ways, chosen
// anew before each wait:
//
//   - It blocks in epoll_wait on its own thread, the P it leaves not taken
//     from it while a spare one is idle (Options.Loops), so it resumes without a
//     hand-off. This is the cheaper way while the loops do all the work:
//     measured against the poller, the same connection rate and less CPU per
//     small round trip and per bulk gigabyte
//     (bench/results/2026-12-01-1625-amd-epyc.md).
//   - While goroutines work for the engine's connections (TLS handshakes
//     and the copies of TLS connections: goserve.go), and for pollerFor after
//     they last did, it waits in Go's poller on a duplicate of its epoll
//     descriptor instead, holding no P. Goroutines then want the Ps the
//     blocked loops hold: the runtime's monitor takes them from the loops'
//     threads every 20 µs and the loops take them back through the
//     scheduler, a thread hand-off each time. In the poller, the loops leave their
//     Ps to the handshakes: more handshakes per second at less CPU each, and
//     a third fewer context switches
//     (bench/results/2026-12-03-0836-amd-epyc.md). An idle TLS
//     connection does not keep the loops there.
//
// The duplicate is in Go's poller only while the loop waits there: left in it,
// it wakes the runtime's poller for every batch of the loop's events (0.83x
// the round trips at 1.3x the CPU each, measured).
const pollerFor = time.Second

// wait returns the next batch of events, or none when the next timer is
// due.
func (l *loop) wait() (int, error) {
	now := l.mono()
	if l.goWork != nil {
		if w := l.goWork.Load(); w != l.goWorkSeen {
			l.goWorkSeen, l.pollerUntil = w, now+int64(pollerFor)
		}
	}
	if now < l.pollerUntil {
		if n, err, ok := l.waitInPoller(); ok {
			return n, err
		}
		l.pollerUntil = 0 // the poller cannot watch it: block, until goroutines work again
	} else if l.poller != nil {
		l.leavePoller()
	}
	timeout := -1
	if len(l.timers) > 0 {
		d := l.timers[0].at - now
		if d <= 0 {
			timeout = 0
		} else {
			timeout = int((d + int64(time.Millisecond) - 1) / int64(time.Millisecond))
		}
	}
	return l.poll.Wait(l.events, timeout)
}

// waitInPoller waits for the next batch of events (or the next timer) in
// Go's poller; ok is false when the epoll descriptor cannot be put there.
func (l *loop) waitInPoller() (n int, err error, ok bool) {
	if l.poller == nil && !l.joinPoller() {
		return 0, nil, false
	}
	var dl time.Time
	if len(l.timers) > 0 {
		dl = l.base.Add(time.Duration(l.timers[0].at))
	}
	if !dl.Equal(l.deadline) {
		_ = l.poller.SetReadDeadline(dl)
		l.deadline = dl
	}
	var werr error
	rerr := l.pollerRaw.Read(func(uintptr) bool {
		n, werr = l.poll.Now(l.events)
		return n > 0 || werr != nil && werr != unix.EINTR
	})
	if errors.Is(rerr, os.ErrDeadlineExceeded) {
		l.deadline = time.Time{} // expired: set again next time
		_ = l.poller.SetReadDeadline(time.Time{})
		return 0, nil, true
	}
	if rerr != nil {
		return 0, rerr, true
	}
	return n, werr, true
}

// joinPoller registers a duplicate of the loop's epoll descriptor in Go's poller.
func (l *loop) joinPoller() bool {
	f, raw, err := l.poll.Dup()
	if err != nil {
		return false
	}
	l.poller, l.pollerRaw, l.deadline = f, raw, time.Time{}
	return true
}

// leavePoller takes the duplicate out of Go's poller and closes it.
func (l *loop) leavePoller() {
	if l.poller != nil {
		_ = l.poller.Close()
		l.poller, l.pollerRaw = nil, nil
	}
}

// yieldEvery bounds how long a busy loop runs without passing through the
// scheduler. A loop that keeps finding events polls without blocking and
// does not otherwise yield; after 10 ms on one scheduler tick the runtime
// would preempt it with a signal and take its P, and its monitor thread
// would then poll every 20 µs. Yielding first keeps that from happening.
// A yield wakes a thread for the idle P (runtime.Gosched does), so as
// seldom as is safe: 8 ms, leaving 2 ms for a batch of events.
const yieldEvery = 8 * time.Millisecond

func (l *loop) run() {
	busy := false     // the last batch had events
	var yielded int64 // loop clock of the last yield
	for !l.stopping {
		var n int
		var err error
		if busy {
			// More is likely ready: take it without the scheduler's
			// system-call bookkeeping (the raw call cannot block).
			n, err = l.poll.Now(l.events)
		}
		if !busy || n == 0 && err == nil {
			n, err = l.wait()
		}
		busy = n > 0
		if busy {
			if now := l.mono(); now-yielded >= int64(yieldEvery) {
				yielded = now
				runtime.Gosched()
			}
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			l.log.Error().Err(err).Msg("epoll_wait failed")
			time.Sleep(10 * time.Millisecond) // not expected; never spin
			continue
		}
		for i := 0; i < n; i++ {
			ev := &l.events[i]
			tag, slot, gen := splitData(netpoll.DataOf(ev))
			switch tag {
			case tagWake:
				l.runCommands()
			case tagListener:
				if int(slot) < len(l.listeners) && l.listeners[slot] != nil {
					l.accept(l.listeners[slot])
				}
			default:
				if int(slot) < len(l.conns) {
					if rc := l.conns[slot]; rc != nil && rc.gen == gen {
						rc.event(tag, ev.Events)
					}
				}
			}
		}
		l.runTimers()
	}
}

func (l *loop) runCommands() {
	l.poll.Woken()
	l.mu.Lock()
	cmds := l.cmds
	l.cmds = nil
	l.mu.Unlock()
	for _, f := range cmds {
		f(l)
	}
}

// inSet reports whether a listener is in the loop's epoll set: unless it
// is backing off after a failed accept, or the loop sheds.
func (l *loop) inSet(ls *listenerSlot) bool { return !ls.paused && !l.shed.Load() }

func (l *loop) listen(ls *listenerSlot) error {
	return l.ctl(unix.EPOLL_CTL_ADD, ls.ep.lfd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE, eventData(tagListener, uint32(ls.slot), 0))
}

// addListener puts ep's listener in the loop's epoll set (or files it for
// when the loop stops shedding).
func (l *loop) addListener(ep *EntryPoint) error {
	slot := len(l.listeners)
	ls := &listenerSlot{ep: ep, slot: slot}
	l.listeners = append(l.listeners, ls)
	if !l.inSet(ls) {
		return nil
	}
	return l.listen(ls)
}

// removeListener takes ep's listener out of the loop's epoll set.
func (l *loop) removeListener(ep *EntryPoint) {
	for i, ls := range l.listeners {
		if ls != nil && ls.ep == ep {
			if l.inSet(ls) {
				l.poll.Remove(ep.lfd)
			}
			l.listeners[i] = nil
		}
	}
}

// Balance. Every loop waits on every listener with EPOLLEXCLUSIVE, and the
// kernel wakes the first loop in the listener's queue that is waiting: under
// a burst of connections the loop that is already awake takes most of them.
// Short connections even out; long ones do not (32 persistent connections
// opened at once landed 32 to 0, or 28 to 4, on two loops), and one loop
// then serves every byte while the other CPU idles. So a loop that holds
// more than shedAbove connections beyond the least loaded loop takes its
// listeners out of its set, and the others take the next connections (as
// nginx's ngx_accept_disabled keeps a full worker from accepting); it puts
// them back once it is within shedBelow of the least loaded. One loop
// always accepts, or is about to: a loop that sheds while every other one
// does tells the least loaded to accept again (its listeners are back as
// soon as it runs the command; meanwhile connections wait in the kernel's
// queue).
const (
	shedAbove = 8
	shedBelow = 4
)

// minPeer returns the least loaded other loop, or nil without one.
func (l *loop) minPeer() *loop {
	var m *loop
	for _, p := range l.peers {
		if p != l && (m == nil || p.load.Load() < m.load.Load()) {
			m = p
		}
	}
	return m
}

// rebalance runs after each accept: it sheds the loop's listeners when it
// holds too many connections beyond the least loaded loop.
func (l *loop) rebalance() {
	if len(l.peers) < 2 || l.shed.Load() {
		return
	}
	// The other loops' loads are written by them on every connection: an
	// accept reads them only when this loop may be over (against the last
	// look) and otherwise every 64 accepts, so that on many cores an accept
	// does not read every other core's counter.
	live := int64(l.live)
	l.accepts++
	if live <= l.minSeen+shedAbove && l.accepts%64 != 0 {
		return
	}
	l.minSeen = math.MaxInt64
	for _, p := range l.peers {
		if p != l {
			l.minSeen = min(l.minSeen, p.load.Load())
		}
	}
	if live <= l.minSeen+shedAbove {
		return
	}
	l.balance.Lock()
	m := l.minPeer()
	if live <= m.load.Load()+shedAbove {
		l.balance.Unlock()
		return
	}
	wake := true // no other loop accepts: the least loaded must again
	for _, p := range l.peers {
		if p != l && !p.shed.Load() {
			wake = false
			break
		}
	}
	l.shed.Store(true)
	l.balance.Unlock()
	if wake {
		m.post(func(m *loop) { m.unshed() })
	}
	for _, ls := range l.listeners {
		if ls != nil && !ls.paused {
			l.poll.Remove(ls.ep.lfd)
		}
	}
}

// relieve runs after a connection ends: a shedding loop accepts again once
// it is within shedBelow of the least loaded loop.
func (l *loop) relieve() {
	if !l.shed.Load() {
		return
	}
	m := l.minPeer()
	if m == nil || int64(l.live) <= m.load.Load()+shedBelow {
		l.unshed()
	}
}

// unshed puts the loop's listeners back in its set.
func (l *loop) unshed() {
	l.balance.Lock()
	was := l.shed.Swap(false)
	l.balance.Unlock()
	if !was {
		return
	}
	for _, ls := range l.listeners {
		if ls != nil && !ls.paused {
			_ = l.listen(ls)
		}
	}
}

// pauseListener takes a listener out of the set after a failed accept (a
// level-triggered listener whose connection cannot be accepted would wake
// the loop at once, again and again) and puts it back after the back-off.
func (l *loop) pauseListener(ls *listenerSlot, pause time.Duration) {
	slot := ls.slot
	if ls.paused {
		return
	}
	if l.inSet(ls) {
		l.poll.Remove(ls.ep.lfd)
	}
	ls.paused = true
	l.after(pause, func() {
		if l.listeners[slot] != ls { // removed meanwhile
			return
		}
		ls.paused = false
		if l.inSet(ls) {
			_ = l.listen(ls)
		}
	})
}

// acceptBatch is how many connections one event of a listener accepts. One,
// as nginx does without multi_accept: the listener is level-triggered, so
// while connections wait it is in every batch of events the loop takes, and
// no accept is spent learning that none is left (EAGAIN).
const acceptBatch = 1

// accept takes the connections waiting on a listener. A failed accept that
// is about the process (out of descriptors or memory) pauses the listener
// on this loop (see acceptBackoff), counted and logged at a bounded rate;
// one about a single connection (aborted before it was taken) is skipped.
func (l *loop) accept(ls *listenerSlot) {
	ep := ls.ep
	for i := 0; i < acceptBatch; i++ {
		fd, peer, err := netpoll.Accept(ep.lfd)
		if err != nil {
			switch err {
			case unix.EAGAIN:
				return
			case unix.EINTR, unix.ECONNABORTED, unix.EPROTO, unix.EPERM:
				continue
			}
			ep.acceptErrors.Add(1)
			werr := &net.OpError{Op: "accept", Net: "tcp", Addr: ep.Addr(), Err: os.NewSyscallError("accept4", err)}
			pause := ls.backoff.failed(werr, time.Now())
			if ok, suppressed := ep.acceptLog.Allow(ratelog.String(werr.Error())); ok {
				ev := ep.log.Error().Err(werr).Dur("retry_in", pause)
				if suppressed > 0 {
					ev = ev.Uint64("suppressed", suppressed)
				}
				ev.Msg("accept failed")
			}
			l.pauseListener(ls, pause)
			return
		}
		ep.accepted.Add(1)
		ep.serve(ep.newConn(l, fd, peer), nil)
		l.rebalance()
	}
}

// closeAll ends every connection of ep on this loop (the end of a drain).
func (l *loop) closeAll(ep *EntryPoint) {
	for _, rc := range l.conns {
		if rc != nil && rc.ep == ep {
			rc.abort()
		}
	}
}

// slotFor files rc in the loop's slab and gives it a fresh generation.
func (l *loop) slotFor(rc *rconn) {
	l.gen++
	rc.gen = l.gen
	if n := len(l.free); n > 0 {
		rc.slot = l.free[n-1]
		l.free = l.free[:n-1]
		l.conns[rc.slot] = rc
	} else {
		rc.slot = uint32(len(l.conns))
		l.conns = append(l.conns, rc)
	}
	l.live++
	l.load.Store(int64(l.live))
}

// Recycling. An rconn is a connection's one allocation (with its tcp.Conn).
// At thousands of connections a second, collecting them was the garbage
// collector's whole work: a cycle every half second, 2-4% of the loops' CPU
// and a stop-the-world pause of milliseconds that every loop waits out
// (bench/results/2026-12-02-0445-intel-xeon.md). So a loop keeps the rconns
// of its ended connections and files the next ones it accepts in them: none
// is allocated while the loop keeps up. Only a connection nothing else holds is kept: one that was
// pinned (a closure posted back to the loop, a queue, goroutines) is left to
// the collector. An rconn is zeroed when it is reused, not when it is kept:
// the call that ended it may still read it on its way out.

// maxSpare bounds the rconns a loop keeps (about 0.8 KiB each): enough for
// a steady rate, not the whole of a burst that has ended.
const maxSpare = 256

// newRconn returns an rconn for a new connection, to be overwritten whole.
func (l *loop) newRconn() *rconn {
	if n := len(l.spare); n > 0 {
		rc := l.spare[n-1]
		l.spare[n-1] = nil
		l.spare = l.spare[:n-1]
		return rc
	}
	return new(rconn)
}

// recycle keeps an ended connection's rconn for the next one, unless it is
// pinned (or already kept).
func (l *loop) recycle(rc *rconn) {
	if rc.pinned || rc.recycled || len(l.spare) >= maxSpare {
		return
	}
	rc.recycled = true
	l.spare = append(l.spare, rc)
}

func (l *loop) release(rc *rconn) {
	if l.conns[rc.slot] == rc {
		l.conns[rc.slot] = nil
		l.free = append(l.free, rc.slot)
		l.live--
		l.load.Store(int64(l.live))
		l.relieve()
	}
}

// Timers. Each connection has at most one pending deadline (rconn.timerAt),
// kept in the loop's heap with its position (rconn.timerIdx), so that moving
// or clearing it updates the heap in place: no stale entry stays behind for
// a connection that ended or moved on. Loop-level timers (listener
// back-off) are the few entries with fn set.

type timerEntry struct {
	at int64
	rc *rconn // nil for a loop-level timer
	fn func()
}

type timerHeap []timerEntry

// The heap is written out for timerEntry rather than through container/heap,
// whose any-typed Push and Pop would allocate for every deadline set.

func (h timerHeap) set(i int, e timerEntry) {
	h[i] = e
	if e.rc != nil {
		e.rc.timerIdx = i
	}
}

// up moves entry i towards the root while it is due before its parent.
func (h timerHeap) up(i int) {
	e := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= e.at {
			break
		}
		h.set(i, h[p])
		i = p
	}
	h.set(i, e)
}

// down moves entry i towards the leaves while a child is due before it; it
// reports whether the entry moved.
func (h timerHeap) down(i int) bool {
	e, i0, n := h[i], i, len(h)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].at < h[c].at {
			c = r
		}
		if e.at <= h[c].at {
			break
		}
		h.set(i, h[c])
		i = c
	}
	h.set(i, e)
	return i > i0
}

func (h *timerHeap) push(e timerEntry) {
	*h = append(*h, e)
	h.up(len(*h) - 1)
}

// remove takes entry i out and returns it.
func (h *timerHeap) remove(i int) timerEntry {
	old := *h
	e, last := old[i], len(old)-1
	if i != last {
		old.set(i, old[last])
	}
	old[last] = timerEntry{}
	*h = old[:last]
	if i != last {
		h.fix(i)
	}
	if e.rc != nil {
		e.rc.timerIdx = -1
	}
	return e
}

// fix restores the order after entry i's time changed.
func (h timerHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// arm sets rc's deadline to at (loop clock); zero clears it.
func (l *loop) arm(rc *rconn, at int64) {
	rc.timerAt = at
	switch {
	case rc.timerIdx >= 0 && at == 0:
		l.timers.remove(rc.timerIdx)
	case rc.timerIdx >= 0:
		l.timers[rc.timerIdx].at = at
		l.timers.fix(rc.timerIdx)
	case at != 0:
		l.timers.push(timerEntry{at: at, rc: rc})
	}
}

// after runs f on the loop after d.
func (l *loop) after(d time.Duration, f func()) {
	l.timers.push(timerEntry{at: l.mono() + int64(d), fn: f})
}

func (l *loop) runTimers() {
	now := l.mono()
	for len(l.timers) > 0 && l.timers[0].at <= now {
		e := l.timers.remove(0)
		if e.fn != nil {
			e.fn()
			continue
		}
		e.rc.timerAt = 0
		e.rc.timeout()
	}
}

// Splice pipes, kept per loop: a pipe is held only while bytes sit in it.

const maxPooledPipes = 64

func (l *loop) getPipe() *netpoll.Pipe {
	if n := len(l.pipes); n > 0 {
		p := l.pipes[n-1]
		l.pipes = l.pipes[:n-1]
		return p
	}
	return netpoll.NewPipe(l.pipeSize)
}

func (l *loop) putPipe(p *netpoll.Pipe) {
	if len(l.pipes) < maxPooledPipes {
		l.pipes = append(l.pipes, p)
		return
	}
	p.Close()
}

// spliceChunk is the most one splice moves from a socket into a pipe. Larger
// reads (1 MiB, 256 KiB, 128 KiB were measured) make Linux drop segments at
// the proxy's full receive queues, and a drop can cost its sender seconds of
// retransmission backoff: a bulk stream stalls (ARCHITECTURE.md, "The
// connection core").
const spliceChunk = 64 << 10
