package upgrade

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
)

// helloTimeout bounds the wait for the old process's hello: it sends it
// right after starting this one.
const helloTimeout = 10 * time.Second

// Predecessor is the new process's handle on the old process that started
// it: the hello it sent, and the state channel. After the snapshot is
// imported, Run applies the old process's releases and answers its acquires
// until the channel ends; then whatever it still counts here is released
// (its connections ended with it).
type Predecessor struct {
	Hello Hello

	conn  *net.UnixConn
	conns connChannel // the connection channel (conns.go); fd -1 when none
	r     *bufio.Reader
	w     *bufio.Writer
	wmu   sync.Mutex // w: Run's grants and relayed ones
	st    *Stats
	// ready is what this process said it reads (Ready).
	ready Ready

	mu          sync.Mutex
	limiters    []*inflightconn.Limiter
	outstanding []map[netip.Addr]int64 // per limiter: the old process's connections counted here
	done        chan struct{}
	sayBye      bool // the old process said bye before the channel ended
	ended       bool // Run released what was left: nothing more is counted

	// The capped servers' counts (ImportCaps): a release of server j of
	// service i, and the release of all that is left when the old process
	// is gone.
	capRelease    func(i, j int) bool
	capAcquire    func(i, j int) bool
	capReleaseAll func()
}

// Inherit takes the state channel on descriptor fd (TakeEnv) and reads the
// old process's hello.
func Inherit(fd int, st *Stats) (*Predecessor, error) {
	f := os.NewFile(uintptr(fd), "handover")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s=%d: not a state channel: %w", EnvFD, fd, err)
	}
	conn, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return nil, fmt.Errorf("%s=%d: not a unix socket", EnvFD, fd)
	}
	p := &Predecessor{conn: conn, conns: connChannel{fd: -1}, st: st, r: bufio.NewReaderSize(conn, 64<<10), w: bufio.NewWriterSize(conn, 64<<10), done: make(chan struct{})}
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	typ, b, err := readFrame(p.r)
	if err == nil && typ != msgHello {
		err = fmt.Errorf("%w: type %d where a hello was expected", errFrame, typ)
	}
	if err == nil {
		p.Hello, err = decodeHello(b)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("state channel: %w", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	if fd := p.Hello.ConnsFD; fd != 0 {
		unix.CloseOnExec(fd)
		p.conns.fd = fd
	}
	st.Generation.Store(p.Hello.Generation)
	st.PredecessorPID.Store(int64(p.Hello.PID))
	return p, nil
}

// Fail tells the old process why this one gives up, and closes the channel.
func (p *Predecessor) Fail(err error) {
	p.wmu.Lock()
	_ = writeFrame(p.w, msgFail, []byte(err.Error()))
	_ = p.w.Flush()
	p.wmu.Unlock()
	p.conn.Close()
	p.conns.close()
}

// Ready tells the old process this one is ready, and which snapshot
// sections it reads.
func (p *Predecessor) Ready(r Ready) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.conns.fd < 0 {
		r.Connections = false // none offered
	} else if !r.Connections {
		p.conns.close()
	}
	p.ready = r
	return writeJSON(p.w, msgReady, r)
}

// WaitSnapshot waits, at most timeout, for the old process to stop
// accepting and send its counts (and its rate buckets, when Ready said this
// process reads them).
func (p *Predecessor) WaitSnapshot(timeout time.Duration) (Snapshot, error) {
	_ = p.conn.SetReadDeadline(time.Now().Add(timeout))
	defer func() { _ = p.conn.SetReadDeadline(time.Time{}) }()
	typ, b, err := readFrame(p.r)
	if errors.Is(err, io.EOF) {
		return Snapshot{}, errors.New("the old process ended the upgrade (the state channel closed before the snapshot)")
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("state channel: waiting for the snapshot: %w", err)
	}
	if typ != msgSnapshot {
		return Snapshot{}, fmt.Errorf("state channel: %w: type %d where the snapshot was expected", errFrame, typ)
	}
	// A section comes when the old process sends it and this one said it
	// reads it.
	return decodeSnapshot(b, p.Hello.RateLimits && p.ready.RateLimits, p.Hello.Capacities && p.ready.Capacities)
}

// Import puts the snapshot's counts in the registry's limiters and
// remembers them, so that they are released as the old process's
// connections end, or all at once if it dies.
func (p *Predecessor) Import(reg *inflightconn.Registry, exs []inflightconn.Export) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keys, conns int64
	for i := range exs {
		ex := &exs[i]
		l := reg.Import(ex)
		out := make(map[netip.Addr]int64, len(ex.Keys))
		for _, kc := range ex.Keys {
			out[kc.Key] += kc.Count
			conns += kc.Count
		}
		keys += int64(len(ex.Keys))
		p.limiters = append(p.limiters, l)
		p.outstanding = append(p.outstanding, out)
	}
	p.st.Received.Limiters.Store(int64(len(exs)))
	p.st.Received.Keys.Store(keys)
	p.st.Received.Connections.Store(conns)
	p.st.Outstanding.Store(conns)
}

// ImportRates puts the snapshot's rate buckets into the registry's limiters
// of the same names (ratelimit.Registry.Import). Nothing is forwarded
// afterwards: the old process admits no connection by itself any more.
func (p *Predecessor) ImportRates(reg *ratelimit.Registry, rates []ratelimit.Export) {
	var limiters, keys int64
	for i := range rates {
		if l, n := reg.Import(&rates[i]); l != nil {
			limiters++
			keys += int64(n)
		}
	}
	p.st.Received.RateLimiters.Store(limiters)
	p.st.Received.RateKeys.Store(keys)
}

// ImportCaps takes what counts the old process's capped-server
// connections here (the snapshot's Caps, imported by the caller): release
// frees one of server j of service i, and reports false for one not
// counted; acquire counts one more; releaseAll frees what is left once the
// old process is gone.
func (p *Predecessor) ImportCaps(release, acquire func(i, j int) bool, releaseAll func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.capRelease, p.capAcquire, p.capReleaseAll = release, acquire, releaseAll
}

// Started tells the old process this one accepts.
func (p *Predecessor) Started(pid int) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return writeJSON(p.w, msgStarted, Started{PID: pid})
}

// Done is closed when the old process is gone and everything it counted
// here is released.
func (p *Predecessor) Done() <-chan struct{} { return p.done }

// Run applies the old process's releases and answers its acquires until
// the channel ends, then releases what is left. It returns why the channel
// ended (nil after a bye).
func (p *Predecessor) Run() error {
	err := p.serve()
	p.conn.Close()
	p.mu.Lock()
	p.ended = true
	var left int64
	for i, out := range p.outstanding {
		for k, n := range out {
			for ; n > 0; n-- {
				p.limiters[i].ReleaseLocal(k)
				left++
			}
			delete(out, k)
		}
	}
	bye, capsLeft := p.sayBye, p.capReleaseAll
	p.capRelease, p.capAcquire, p.capReleaseAll = nil, nil, nil
	p.mu.Unlock()
	if capsLeft != nil {
		capsLeft()
	}
	p.st.Outstanding.Store(0)
	p.st.ReleasedAtEnd.Add(left)
	if !bye {
		p.st.PredecessorLost.Store(true)
	}
	p.st.PredecessorDone.Store(true)
	close(p.done)
	if err == nil && left > 0 {
		err = fmt.Errorf("the old process said bye with %d connections still counted here (released)", left)
	}
	return err
}

func (p *Predecessor) serve() error {
	for {
		typ, b, err := readFrame(p.r)
		if errors.Is(err, io.EOF) {
			return errors.New("the old process ended without saying bye (killed?): its connections ended with it")
		}
		if err != nil {
			return fmt.Errorf("state channel: %w", err)
		}
		switch typ {
		case msgReleases:
			if err := decodeReleases(b, p.release); err != nil {
				return err
			}
		case msgAcquires:
			var grants []byte
			var waits sync.WaitGroup
			var gmu sync.Mutex
			err := decodeAcquires(b, func(m acquire) {
				waits.Add(1)
				p.acquire(m, func(ok bool) {
					gmu.Lock()
					grants = appendGrant(grants, grant{m.seq, ok})
					gmu.Unlock()
					waits.Done()
				})
			})
			if err != nil {
				return err
			}
			// Answers relayed to a process this one handed over to come
			// later: send each batch when it is whole, off this loop.
			go func() {
				waits.Wait()
				p.wmu.Lock()
				defer p.wmu.Unlock()
				if writeFrame(p.w, msgGrants, grants) == nil {
					_ = p.w.Flush()
				}
			}()
		case msgCapReleases:
			if err := decodeCapReleases(b, p.releaseCap); err != nil {
				return err
			}
		case msgCapAcquires:
			if err := decodeCapReleases(b, p.acquireCap); err != nil {
				return err
			}
		case msgBye:
			p.mu.Lock()
			p.sayBye = true
			p.mu.Unlock()
			return nil
		default:
			return fmt.Errorf("state channel: %w: unexpected message type %d from the old process", errFrame, typ)
		}
	}
}

func (p *Predecessor) release(m release) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if int(m.idx) >= len(p.limiters) {
		return fmt.Errorf("state channel: %w: release for %s limiter %d of %d", errFrame, inflightconn.Name, m.idx, len(p.limiters))
	}
	p.st.ReleasesReceived.Add(1)
	out := p.outstanding[m.idx]
	n := out[m.key]
	if n <= 0 {
		p.st.ReleasesUnmatched.Add(1) // never release what the old process did not count here
		return nil
	}
	if n == 1 {
		delete(out, m.key)
	} else {
		out[m.key] = n - 1
	}
	p.st.Outstanding.Add(-1)
	p.limiters[m.idx].ReleaseLocal(m.key) // the old process releases its own count in a shared store
	return nil
}

// releaseCap frees one of the old process's connections to a capped server.
func (p *Predecessor) releaseCap(m capRelease) error {
	p.mu.Lock()
	release := p.capRelease
	p.mu.Unlock()
	if release == nil {
		return fmt.Errorf("state channel: %w: a capacity release without capacities in the snapshot", errFrame)
	}
	p.st.CapReleasesReceived.Add(1)
	if !release(int(m.svc), int(m.srv)) {
		p.st.ReleasesUnmatched.Add(1) // never free what the old process did not count here
	}
	return nil
}

// acquireCap counts one more connection of the old process to a capped
// server.
func (p *Predecessor) acquireCap(m capRelease) error {
	p.mu.Lock()
	acquire := p.capAcquire
	p.mu.Unlock()
	if acquire == nil {
		return fmt.Errorf("state channel: %w: a capacity acquire without capacities in the snapshot", errFrame)
	}
	if acquire(int(m.svc), int(m.srv)) {
		p.st.CapConnections.Add(1)
	}
	return nil
}

// acquire decides an acquire of the old process: here, or, when this
// process has handed its budget on in turn, where it went.
func (p *Predecessor) acquire(m acquire, done func(bool)) {
	p.mu.Lock()
	if int(m.idx) >= len(p.limiters) {
		p.mu.Unlock()
		done(false)
		return
	}
	l := p.limiters[m.idx]
	p.mu.Unlock()
	counted := func() {
		p.mu.Lock()
		ended := p.ended
		if !ended {
			p.outstanding[m.idx][m.key]++
		}
		p.mu.Unlock()
		if ended { // answered after the old process was gone: nobody holds it
			l.ReleaseLocal(m.key)
			return
		}
		p.st.Outstanding.Add(1)
	}
	if r := l.Remote(); r != nil {
		r.Acquire(m.key, func(ok bool) {
			if ok {
				l.Import(m.key, 1)
				counted()
			}
			done(ok)
		})
		return
	}
	ok := l.AcquireLocal(m.key) // the old process counts it in a shared store, if any
	if ok {
		counted()
	}
	p.st.AcquiresAnswered.Add(1)
	done(ok)
}

// FailReason is err as one line, for a fail message.
func FailReason(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
