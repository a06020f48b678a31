package upgrade

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
)

// EnvFD names the variable that tells a new process which descriptor is its
// state channel. It does not start with TOLLGATE_ (those are static
// configuration) and is removed from the environment as soon as it is read
// (TakeEnv).
const EnvFD = "TOLLGATEHANDOVER_FD"

// channelFD is the state channel's descriptor in the new process: the first
// of exec.Cmd's ExtraFiles. The listeners follow it.
const channelFD = 3

// Command is how this process is started again: argv[0] resolved to an
// absolute path when the process started (so that a binary replaced at
// that path is the one started; /proc/self/exe would name the old, deleted
// file), the same arguments, and the environment as it was.
type Command struct {
	Path string
	Args []string
	Env  []string
}

// Resolve returns this process's Command. Call it at start: a relative
// argv[0] or a PATH lookup means what it meant then.
func Resolve() (Command, error) {
	path, err := exec.LookPath(os.Args[0])
	if err == nil {
		path, err = filepath.Abs(path)
	}
	if err != nil {
		if path, err = os.Executable(); err != nil {
			return Command{}, fmt.Errorf("cannot tell which binary to start for an upgrade: %w", err)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvFD+"=") {
			env = append(env, kv)
		}
	}
	return Command{Path: path, Args: append([]string(nil), os.Args...), Env: env}, nil
}

// TakeEnv returns the state channel's descriptor when this process was
// started by an upgrade (-1 when not) and removes the variable, so that
// nothing else reads it as configuration.
func TakeEnv() (int, error) {
	v, ok := os.LookupEnv(EnvFD)
	if !ok {
		return -1, nil
	}
	_ = os.Unsetenv(EnvFD)
	var fd int
	if _, err := fmt.Sscanf(v, "%d", &fd); err != nil || fd < 3 {
		return -1, fmt.Errorf("%s=%q: not a descriptor number", EnvFD, v)
	}
	return fd, nil
}

// Successor is the old process's handle on the new process it started:
// the process and the old end of the state channel.
type Successor struct {
	cmd  *exec.Cmd
	conn *net.UnixConn
	// conns is the connection channel (conns.go); connsOK: the new
	// process said it reads it.
	conns   *connChannel
	connsOK bool
	r       *bufio.Reader
	w       *bufio.Writer
	st      *Stats

	exited  chan struct{} // closed when the process has ended
	exitErr error
	ready   chan Ready
	failed  chan string
	started chan Started
	gone    chan struct{} // closed when the channel has ended
	goneErr error

	mu       sync.Mutex
	wake     chan struct{}
	queue    []byte // releases, encoded, waiting for the writer
	nqueued  int
	acq      []byte // acquires, encoded
	caps     []byte // capacity releases, encoded
	capsUp   []byte // capacity acquires, encoded
	pending  map[uint32]func(bool)
	seq      uint32
	writing  bool // the snapshot is sent: the writer runs
	closing  bool
	dead     bool
	writerWG sync.WaitGroup
}

// Start starts cmd as a new process with the listeners (files[i] is
// hello.Listeners[i]; each is duplicated for the child and stays the
// caller's) and a state channel, and sends hello. The process's output
// goes where this process's goes.
func Start(c Command, hello Hello, files []*os.File, st *Stats) (*Successor, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "handover"), os.NewFile(uintptr(fds[1]), "handover")
	defer theirs.Close()
	nc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, fmt.Errorf("state channel: %w", err)
	}
	conn := nc.(*net.UnixConn)
	conns, theirConns, err := newConnChannel()
	if err != nil {
		conn.Close()
		return nil, err
	}
	defer theirConns.Close()
	extra := []*os.File{theirs}
	for i, f := range files {
		hello.Listeners[i].FD = channelFD + 1 + i
		extra = append(extra, f)
	}
	hello.ConnsFD = channelFD + 1 + len(files)
	extra = append(extra, theirConns)
	cmd := &exec.Cmd{
		Path:       c.Path,
		Args:       c.Args,
		Env:        append(append([]string(nil), c.Env...), fmt.Sprintf("%s=%d", EnvFD, channelFD)),
		Stdin:      os.Stdin,
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		ExtraFiles: extra,
	}
	err = cmd.Start()
	// The listeners are this process's too, and its loops accept without
	// blocking: whatever starting a process did to the shared file status
	// flags, they stay non-blocking.
	for _, f := range files {
		if rc, e := f.SyscallConn(); e == nil {
			_ = rc.Control(func(fd uintptr) { _ = unix.SetNonblock(int(fd), true) })
		}
	}
	if err != nil {
		conn.Close()
		conns.close()
		return nil, fmt.Errorf("starting %s: %w", c.Path, err)
	}
	s := &Successor{
		cmd: cmd, conn: conn, conns: conns, st: st,
		r: bufio.NewReaderSize(conn, 64<<10), w: bufio.NewWriterSize(conn, 64<<10),
		exited: make(chan struct{}), ready: make(chan Ready, 1), failed: make(chan string, 1),
		started: make(chan Started, 1), gone: make(chan struct{}),
		wake: make(chan struct{}, 1), pending: map[uint32]func(bool){},
	}
	go func() {
		s.exitErr = cmd.Wait()
		close(s.exited)
	}()
	go s.read()
	if err := writeJSON(s.w, msgHello, hello); err != nil {
		s.Kill()
		return nil, fmt.Errorf("state channel: sending hello: %w", err)
	}
	return s, nil
}

// PID is the new process's.
func (s *Successor) PID() int { return s.cmd.Process.Pid }

// Exited is closed when the new process has ended, however it ended (the
// old process is its parent, and reaps it).
func (s *Successor) Exited() <-chan struct{} { return s.exited }

// ExitedCleanly reports, once Exited is closed, whether the new process
// exited with status 0 (stopped on purpose, not killed or failed).
func (s *Successor) ExitedCleanly() bool {
	<-s.exited
	return s.exitErr == nil
}

// ExitReason says how the new process ended ("exit status 3", "signal:
// killed"), once Exited is closed.
func (s *Successor) ExitReason() string {
	<-s.exited
	if s.exitErr != nil {
		return s.exitErr.Error()
	}
	return "exit status 0"
}

// WaitReady waits until the new process says it is ready (its configuration
// applied, its listeners in hand, not accepting), at most timeout. Any other
// outcome (it said why it failed, it exited, the channel broke, the time ran
// out) kills the process and returns why.
func (s *Successor) WaitReady(timeout time.Duration) (Ready, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-s.ready:
		return r, nil
	case why := <-s.failed:
		s.Kill()
		return Ready{}, fmt.Errorf("the new process (PID %d) failed: %s", s.PID(), why)
	case <-s.exited:
		return Ready{}, s.exitError()
	case <-s.gone:
		// The channel ends when the process does: say how it ended.
		select {
		case why := <-s.failed:
			s.Kill()
			return Ready{}, fmt.Errorf("the new process (PID %d) failed: %s", s.PID(), why)
		case <-s.exited:
			return Ready{}, s.exitError()
		case <-time.After(time.Second):
		}
		s.Kill()
		return Ready{}, fmt.Errorf("the new process (PID %d) closed the state channel before it was ready: %v", s.PID(), s.goneErr)
	case <-t.C:
		s.Kill()
		return Ready{}, fmt.Errorf("the new process (PID %d) was not ready within %s (killed)", s.PID(), timeout)
	}
}

func (s *Successor) exitError() error {
	<-s.exited
	// Its channel ends with it: a reason it wrote before exiting is read
	// by then.
	select {
	case <-s.gone:
	case <-time.After(time.Second):
	}
	select {
	case why := <-s.failed:
		return fmt.Errorf("the new process (PID %d) failed: %s", s.PID(), why)
	default:
	}
	what := "exited"
	if s.exitErr != nil {
		what = s.exitErr.Error() // "exit status 3", "signal: killed"
	}
	return fmt.Errorf("the new process (PID %d, %s) ended before it was ready: %s", s.PID(), s.cmd.Path, what)
}

// Remote returns the inflightconn.Remote of the limiter at index idx of
// the snapshot: its releases and acquires go to the new process in order
// after the snapshot.
func (s *Successor) Remote(idx int) inflightconn.Remote { return remote{s, uint16(idx)} }

type remote struct {
	s   *Successor
	idx uint16
}

func (r remote) Release(k netip.Addr) { r.s.release(release{r.idx, k}) }
func (r remote) Acquire(k netip.Addr, done func(bool)) {
	r.s.acquire(r.idx, k, done)
}

func (s *Successor) release(m release) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return
	}
	s.queue = appendRelease(s.queue, m)
	s.nqueued++
	s.mu.Unlock()
	s.kick()
}

// CapRelease tells the new process that one of this process's connections
// to server srv of capped service svc (indexes in the snapshot's Caps)
// ended, in order after the snapshot.
func (s *Successor) CapRelease(svc, srv int) { s.capMessage(&s.caps, svc, srv) }

// CapAcquire tells the new process that this process opened a connection
// to server srv of capped service svc (for a connection it accepted before
// the handover), in order after the snapshot.
func (s *Successor) CapAcquire(svc, srv int) { s.capMessage(&s.capsUp, svc, srv) }

func (s *Successor) capMessage(q *[]byte, svc, srv int) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return
	}
	*q = appendCapRelease(*q, capRelease{uint16(svc), uint16(srv)})
	s.mu.Unlock()
	s.kick()
}

func (s *Successor) acquire(idx uint16, k netip.Addr, done func(bool)) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		done(false)
		return
	}
	s.seq++
	s.pending[s.seq] = done
	s.acq = appendAcquire(s.acq, acquire{s.seq, idx, k})
	s.mu.Unlock()
	s.st.AcquiresAsked.Add(1)
	s.kick()
}

func (s *Successor) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// SendSnapshot sends the limiters' counts (snap.Limiters[i] exported with
// Remote(i)) and the rate buckets, and starts sending the releases and
// acquires queued since.
func (s *Successor) SendSnapshot(snap Snapshot) error {
	exs := snap.Limiters
	b, err := encodeSnapshot(snap)
	if err != nil {
		return err
	}
	if err := writeFrame(s.w, msgSnapshot, b); err != nil {
		return fmt.Errorf("state channel: sending the snapshot: %w", err)
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("state channel: sending the snapshot: %w", err)
	}
	var keys, conns int64
	for _, ex := range exs {
		keys += int64(len(ex.Keys))
		for _, kc := range ex.Keys {
			conns += kc.Count
		}
	}
	s.st.Sent.Limiters.Store(int64(len(exs)))
	s.st.Sent.Keys.Store(keys)
	s.st.Sent.Connections.Store(conns)
	var rateKeys int64
	for _, ex := range snap.Rates {
		rateKeys += int64(len(ex.Keys))
	}
	s.st.Sent.RateLimiters.Store(int64(len(snap.Rates)))
	s.st.Sent.RateKeys.Store(rateKeys)
	s.mu.Lock()
	s.writing = true
	s.mu.Unlock()
	s.writerWG.Add(1)
	go s.write()
	return nil
}

// WaitStarted waits until the new process says it accepts, at most
// timeout; otherwise it kills the process (so that it never accepts beside
// this one) and returns why.
func (s *Successor) WaitStarted(timeout time.Duration) (Started, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case st := <-s.started:
		return st, nil
	case <-s.gone:
		s.Kill()
		return Started{}, fmt.Errorf("the new process (PID %d) closed the state channel before it started accepting: %v", s.PID(), s.goneErr)
	case <-t.C:
		s.Kill()
		return Started{}, fmt.Errorf("the new process (PID %d) did not start accepting within %s (killed)", s.PID(), timeout)
	}
}

// Kill ends the new process, waits until it has ended, and closes the
// channel: pending acquires are answered no. For an upgrade that failed.
func (s *Successor) Kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.markDead()
	s.conn.Close()
	s.conns.close()
	s.writerWG.Wait()
}

// Close is the end of the old process's drain: every release queued is
// sent, then bye, then the channel is closed. The new process goes on.
func (s *Successor) Close() {
	s.mu.Lock()
	s.closing = true
	writing := s.writing
	s.mu.Unlock()
	s.kick()
	if writing {
		s.writerWG.Wait()
	}
	s.markDead()
	s.conn.Close()
	s.conns.close()
}

func (s *Successor) markDead() {
	s.mu.Lock()
	s.dead = true
	pending := s.pending
	s.pending = map[uint32]func(bool){}
	s.queue, s.acq, s.caps, s.capsUp = nil, nil, nil, nil
	s.mu.Unlock()
	s.kick() // the writer ends
	for _, done := range pending {
		done(false)
	}
}

// write sends the queued releases and acquires in batches, in order after
// the snapshot, until Close (then bye) or a write error.
func (s *Successor) write() {
	defer s.writerWG.Done()
	for {
		<-s.wake
		s.mu.Lock()
		rel, n, acq, caps, capsUp, closing, dead := s.queue, s.nqueued, s.acq, s.caps, s.capsUp, s.closing, s.dead
		s.queue, s.nqueued, s.acq, s.caps, s.capsUp = nil, 0, nil, nil, nil
		s.mu.Unlock()
		if dead {
			return
		}
		err := s.writeBatches(msgReleases, rel)
		if err == nil {
			s.st.ReleasesForwarded.Add(int64(n))
			err = s.writeBatches(msgAcquires, acq)
		}
		if err == nil { // acquires first: a release may follow its own acquire in the same batch
			err = s.writeBatches(msgCapAcquires, capsUp)
		}
		if err == nil {
			err = s.writeBatches(msgCapReleases, caps)
			s.st.CapReleasesForwarded.Add(int64(len(caps) / 4))
		}
		if err == nil && closing {
			err = writeFrame(s.w, msgBye, nil)
		}
		if err == nil {
			err = s.w.Flush()
		}
		if err != nil || closing {
			if err != nil {
				s.markDead()
			}
			return
		}
	}
}

// writeBatches writes b (whole records) in frames of at most 1 MiB.
func (s *Successor) writeBatches(typ byte, b []byte) error {
	const chunk = 1 << 20
	for len(b) > 0 {
		n := len(b)
		if n > chunk {
			n = recordEnd(typ, b, chunk)
		}
		if err := writeFrame(s.w, typ, b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// recordEnd returns the end of the last whole record at or before limit.
func recordEnd(typ byte, b []byte, limit int) int {
	pos := 0
	for pos < len(b) {
		var size int
		switch typ {
		case msgAcquires:
			size = 4 + 2 + 1 + int(b[pos+6])
		case msgCapReleases, msgCapAcquires:
			size = 4 // service, server
		default:
			size = 2 + 1 + int(b[pos+2]) // release: idx, key length, key
		}
		if pos+size > limit {
			break
		}
		pos += size
	}
	return pos
}

// read takes the new process's messages until the channel ends.
func (s *Successor) read() {
	defer close(s.gone)
	for {
		typ, p, err := readFrame(s.r)
		if err != nil {
			s.goneErr = err
			s.markDead()
			return
		}
		switch typ {
		case msgReady:
			var r Ready
			if err := json.Unmarshal(p, &r); err != nil {
				s.goneErr = fmt.Errorf("%w: ready: %v", errFrame, err)
				s.markDead()
				return
			}
			s.connsOK = r.Connections // before WaitReady returns r
			select {
			case s.ready <- r:
			default:
			}
		case msgFail:
			select {
			case s.failed <- strings.Join(strings.Fields(string(p)), " "):
			default:
			}
		case msgStarted:
			var st Started
			_ = json.Unmarshal(p, &st)
			select {
			case s.started <- st:
			default:
			}
		case msgGrants:
			err := decodeGrants(p, func(g grant) {
				s.mu.Lock()
				done := s.pending[g.seq]
				delete(s.pending, g.seq)
				s.mu.Unlock()
				if done != nil {
					if g.ok {
						s.st.AcquiresGranted.Add(1)
					}
					done(g.ok)
				}
			})
			if err != nil {
				s.goneErr = err
				s.markDead()
				return
			}
		default:
			s.goneErr = fmt.Errorf("%w: unexpected message type %d from the new process", errFrame, typ)
			s.markDead()
			return
		}
	}
}
