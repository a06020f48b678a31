package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// upgrader is a binary upgrade (docs/operations/upgrading.md), from the old
// process's side: SIGUSR2 and POST /api/upgrade start one.
//
// At most two generations are alive: an upgrade is refused while one is
// under way, once this process has handed over, and while the process this
// one took over from (pred) still drains. After a handover this process
// drains here (drain), its listeners kept out of its loops but open; if the
// new process ends before the drain does, this one takes the listeners
// back and accepts again (resume): they are never left with no process.
type upgrader struct {
	self    upgrade.Command
	selfErr error
	srv     *proxy.Server
	w       *provider.Watcher
	admin   admins
	stats   *upgrade.Stats
	log     zerolog.Logger
	notify  func(state string) // sd_notify
	// st gives the entry points' grace times (the drain).
	st *config.Static
	// pred is the process this one took over from, nil for one started by
	// hand: while it drains, no upgrade starts.
	pred *upgrade.Predecessor
	// handedOver receives the successor once this process has drained
	// after handing over to it (or the grace times ran out): serve
	// then shuts this process down.
	handedOver chan *upgrade.Successor

	mu   sync.Mutex // held through the handover itself
	busy bool
	done bool // handed over, or shutting down: no more upgrades
	// stopping: shutting down (stop); a drain under way ends, no resume.
	stopping bool
	stopped  chan struct{} // closed by stop
	// After a handover, until the drain ends: the successor and what
	// resume undoes (the limiters whose budget went to it, its caps).
	succ     *upgrade.Successor
	exported []*inflightconn.Limiter
	capsLent bool
}

// state is the process's state word for the API.
func (u *upgrader) state() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.done:
		return "draining"
	case u.busy:
		return "upgrading"
	}
	return "serving"
}

// stop abandons an upgrade under way (before its handover) and refuses
// new ones: the process is shutting down. It returns the successor this
// process handed over to and is draining for (nil when it did not): the
// drain ends (the caller closes what is left) and is not undone.
func (u *upgrader) stop() *upgrade.Successor {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.done = true
	if !u.stopping {
		u.stopping = true
		if u.stopped != nil {
			close(u.stopped)
		}
	}
	return u.succ
}

// refusal says why an upgrade cannot start now, or "".
func (u *upgrader) refusal() string {
	switch {
	case u.done && u.succ != nil:
		return fmt.Sprintf("this process has handed over to PID %d and is draining its connections", u.succ.PID())
	case u.done:
		return "this process is shutting down"
	case u.busy:
		return "an upgrade is already under way"
	}
	if p := u.pred; p != nil {
		select {
		case <-p.Done():
		default:
			return fmt.Sprintf("the previous generation (PID %d) is still draining its connections: an upgrade now would leave three processes alive; retry once it has exited (GET /api/process: received.predecessorDone)", p.Hello.PID)
		}
	}
	return ""
}

// Upgrade starts the binary at this process's path as a new process and
// hands over to it once it is ready. Any failure leaves this process
// serving (it never stopped accepting, or accepts again) and is returned.
// One that cannot start now is refused with upgrade.ErrBusy and why.
func (u *upgrader) Upgrade(context.Context) (upgrade.Result, error) {
	u.mu.Lock()
	if why := u.refusal(); why != "" {
		u.mu.Unlock()
		u.stats.Refused.Add(1)
		u.log.Warn().Msg("upgrade refused: " + why)
		return upgrade.Result{}, fmt.Errorf("%w: %s", upgrade.ErrBusy, why)
	}
	u.busy = true
	u.mu.Unlock()
	res, err := u.upgrade()
	u.mu.Lock()
	u.busy = false
	u.mu.Unlock()
	u.stats.Attempts.Add(1)
	if err != nil {
		u.stats.Failures.Add(1)
		msg := err.Error()
		u.stats.LastError.Store(&msg)
		u.log.Error().Err(err).Msg("upgrade failed: this process serves on")
		return res, err
	}
	u.log.Info().Int("pid", res.PID).Uint64("generation", res.Generation).Int64("connections", res.Connections).
		Int64("clients", res.Keys).Msg("upgrade: the new process accepts")
	return res, nil
}

func (u *upgrader) upgrade() (upgrade.Result, error) {
	if u.selfErr != nil {
		return upgrade.Result{}, u.selfErr
	}
	gen := u.stats.Generation.Load() + 1
	hello, files, err := u.hello(gen)
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	if err != nil {
		return upgrade.Result{}, err
	}
	succ, err := upgrade.Start(u.self, hello, files, u.stats)
	if err != nil {
		return upgrade.Result{}, err
	}
	u.log.Info().Int("pid", succ.PID()).Str("path", u.self.Path).Msg("upgrade: new process started; waiting until it is ready")
	ready, err := succ.WaitReady(readyTimeout)
	if err != nil {
		return upgrade.Result{}, err
	}
	return u.handOver(succ, ready, gen)
}

// hello is what the new process of generation gen is started with: the
// listening sockets (duplicates, in files, which the caller closes), the
// servers' health, and the providers that delivered here (it is ready
// once each has delivered there).
func (u *upgrader) hello(gen uint64) (upgrade.Hello, []*os.File, error) {
	hello := upgrade.Hello{Version: upgrade.Version, Generation: gen, PID: os.Getpid(), RateLimits: true, Capacities: true}
	var files []*os.File
	for _, name := range u.srv.EntryPointNames() {
		addr, fd := u.srv.EntryPoint(name).Listener()
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return hello, files, fmt.Errorf("entry point %q: dup: %w", name, err)
		}
		files = append(files, os.NewFile(uintptr(dup), name))
		hello.Listeners = append(hello.Listeners, upgrade.Listener{Name: name, Address: addr})
	}
	for _, a := range u.admin {
		f, err := a.gate.File()
		if err != nil {
			return hello, files, fmt.Errorf("%s: %w", a.key, err)
		}
		files = append(files, f)
		hello.Listeners = append(hello.Listeners, upgrade.Listener{Name: a.key, Address: a.addr})
	}
	for _, h := range u.srv.State().Health() {
		hello.Health = append(hello.Health, upgrade.Health{Service: h.Service, Server: h.Server, Up: h.Up})
	}
	for _, p := range u.w.Statuses() {
		if !p.LastUpdate.IsZero() {
			hello.Providers = append(hello.Providers, p.Name)
		}
	}
	return hello, files, nil
}

// handOver is the handover to succ, ready: this process stops accepting,
// parks its unrouted connections, sends its counts, and, once succ
// accepts, hands it the parked connections, closes the listeners succ does
// not serve on and drains (drain). Any failure takes everything back
// (takeBack): never two processes accepting, never none. No shutdown
// begins meanwhile (stop waits).
func (u *upgrader) handOver(succ *upgrade.Successor, ready upgrade.Ready, gen uint64) (upgrade.Result, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		succ.Kill()
		return upgrade.Result{}, errors.New("shutting down: upgrade abandoned")
	}
	u.srv.StopAccepting()
	for _, a := range u.admin {
		a.gate.Pause()
	}
	// The connections not yet routed wait, unread, to be handed to a new
	// process that takes them, on the entry points it serves: it routes
	// them with the budgets it now holds.
	if ready.Connections {
		u.srv.Park(ready.Uses)
	}
	snap, limiters := u.snapshot(succ, ready)
	err := succ.SendSnapshot(snap)
	var started upgrade.Started
	if err == nil {
		started, err = succ.WaitStarted(startedTimeout)
	}
	if err != nil {
		u.takeBack(succ, limiters, ready.Capacities) // never two processes accepting
		return upgrade.Result{}, err
	}
	u.done = true
	u.succ, u.exported, u.capsLent = succ, limiters, ready.Capacities
	u.stats.SuccessorPID.Store(int64(succ.PID()))
	if ready.Connections {
		u.handOff(succ)
	}
	u.closeUnserved(ready.Uses)
	u.admin.pause()
	u.notify(fmt.Sprintf("MAINPID=%d\nREADY=1", started.PID))
	go u.drain(succ)
	return upgrade.Result{PID: succ.PID(), Generation: gen, PreviousPID: os.Getpid(),
		Limiters: u.stats.Sent.Limiters.Load(), Keys: u.stats.Sent.Keys.Load(), Connections: u.stats.Sent.Connections.Load(),
		Unrouted: u.stats.UnroutedSent.Load()}, nil
}

// snapshot exports this process's counts for succ: the limiters' (each
// then forwards its later releases to succ), the rate buckets and the
// capped servers' counts for a new process that reads them. It returns the
// limiters exported, for takeBack.
func (u *upgrader) snapshot(succ *upgrade.Successor, ready upgrade.Ready) (upgrade.Snapshot, []*inflightconn.Limiter) {
	var exs []inflightconn.Export
	var limiters []*inflightconn.Limiter
	inflightconn.Limiters(u.srv.State().Keepers()).Each(func(name string, l *inflightconn.Limiter) {
		exs = append(exs, l.Export(name, succ.Remote(len(exs))))
		limiters = append(limiters, l)
	})
	// The rate buckets go to a new process that reads them; one from
	// before they were handed over starts with every bucket full.
	snap := upgrade.Snapshot{Limiters: exs, WithRates: ready.RateLimits}
	if ready.RateLimits {
		ratelimit.Limiters(u.srv.State().Keepers()).Each(func(name string, l *ratelimit.Limiter) {
			snap.Rates = append(snap.Rates, l.Export(name))
		})
	}
	// The capped servers' counts go to a new process that reads them: from
	// now on this process passes a slot its connections free to its own
	// queue or lends it back, and reports each slot it still takes (for a
	// connection accepted before now and routed after). One from before
	// they were handed over counts only its own.
	if ready.Capacities {
		snap.WithCaps = true
		lend := &proxy.Lender{Released: succ.CapRelease, Acquired: func(i, j int) {
			succ.CapAcquire(i, j)
			u.stats.CapConnectionsSent.Add(1)
		}}
		for _, ex := range u.srv.State().ExportCapacities(lend) {
			c := upgrade.CapExport{Service: ex.Service}
			for _, sv := range ex.Servers {
				c.Servers = append(c.Servers, upgrade.CapCount{Address: sv.Address, Open: uint32(sv.Open)})
				u.stats.CapConnectionsSent.Add(int64(sv.Open))
			}
			snap.Caps = append(snap.Caps, c)
		}
	}
	return snap, limiters
}

// closeUnserved closes the listeners the new process does not serve on
// (uses: those it does; an entry point removed or moved): this process
// accepts on none any more. The others stay open, out of the loops, until
// the drain ends (resume).
func (u *upgrader) closeUnserved(uses []string) {
	use := map[string]bool{}
	for _, n := range uses {
		use[n] = true
	}
	for _, name := range u.srv.EntryPointNames() {
		if !use[name] {
			u.srv.EntryPoint(name).CloseListener()
		}
	}
}

// handOff gives the new process, which accepts now, the connections parked
// at the handover. One it cannot be given is reset (the new process does
// not have it: the socket is this process's alone).
func (u *upgrader) handOff(succ *upgrade.Successor) {
	var firstErr error
	n := u.srv.HandOff(func(h proxy.Handed) {
		err := succ.SendConn(upgrade.Conn{EntryPoint: h.EntryPoint, Read: h.Read, Answered: h.Answered,
			Deadline: h.Deadline, Silent: h.Silent}, h.FD)
		if err != nil {
			_ = unix.SetsockoptLinger(h.FD, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
			u.stats.UnroutedLost.Add(1)
			if firstErr == nil {
				firstErr = err
			}
		}
		_ = unix.Close(h.FD)
	})
	succ.EndConns()
	if firstErr != nil {
		u.log.Error().Err(firstErr).Int("connections", n).Int64("lost", u.stats.UnroutedLost.Load()).
			Msg("upgrade: connections not yet routed could not all be handed to the new process (reset)")
	} else if n > 0 {
		u.log.Info().Int("connections", n).Msg("upgrade: connections not yet routed handed to the new process")
	}
}

// drainTick is how often drain looks at the entry points' connections.
const drainTick = 20 * time.Millisecond

// drain waits, after a handover to succ, until each entry point's
// connections have ended or its grace time (transport.lifeCycle.graceTimeOut)
// has passed, then hands serve the successor, which shuts this
// process down and closes what is left. If succ dies first (killed, or
// exits with an error), this process takes the listeners back (resume) and
// serve never hears of it; if it exits cleanly (an operator stopped
// it), the drain goes on and this process exits after it. A stop ends it.
func (u *upgrader) drain(succ *upgrade.Successor) {
	start := time.Now()
	grace := map[string]time.Duration{}
	for name, ep := range u.st.EntryPoints {
		if ep != nil && ep.Transport != nil && ep.Transport.LifeCycle != nil {
			grace[name] = time.Duration(ep.Transport.LifeCycle.GraceTimeOut)
		}
	}
	tick := time.NewTicker(drainTick)
	defer tick.Stop()
	exited := succ.Exited()
	for {
		select {
		case <-exited:
			if succ.ExitedCleanly() {
				// The service is being stopped: new connections are
				// refused at once rather than queued for no one.
				for _, name := range u.srv.EntryPointNames() {
					u.srv.EntryPoint(name).CloseListener()
				}
				u.admin.stop()
				u.log.Warn().Int("pid", succ.PID()).Msg("upgrade: the new process exited (stopped) while this one was draining: this one ends its drain and exits too")
				exited = nil
				continue
			}
			u.resume(succ)
			return
		case <-u.stopped:
			return
		case <-tick.C:
		}
		drained := true
		for _, name := range u.srv.EntryPointNames() {
			if u.srv.EntryPoint(name).Open() > 0 && time.Since(start) < grace[name] {
				drained = false
			}
		}
		if drained {
			select {
			case <-exited: // died at the last moment: nothing else listens
				if !succ.ExitedCleanly() {
					u.resume(succ)
					return
				}
			default:
			}
			u.handedOver <- succ
			return
		}
	}
}

// resume undoes a handover after succ ended while this process drained:
// the budgets it held count here again, the listeners go back into the
// loops and the admin listeners' gates open, systemd is told this process
// is the main one again, and the log says why.
func (u *upgrader) resume(succ *upgrade.Successor) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stopping || u.succ != succ {
		return // shutting down anyway
	}
	why := succ.ExitReason()
	u.takeBack(succ, u.exported, u.capsLent)
	u.done, u.succ, u.exported, u.capsLent = false, nil, nil, false
	u.stats.SuccessorPID.Store(0)
	u.stats.Resumes.Add(1)
	msg := fmt.Sprintf("the new process (PID %d) ended (%s) while this one was draining", succ.PID(), why)
	u.stats.LastError.Store(&msg)
	u.notify(fmt.Sprintf("MAINPID=%d\nREADY=1", os.Getpid()))
	u.log.Error().Int("pid", succ.PID()).Str("exit", why).
		Msg("upgrade: the new process ended while this one was draining: this one takes its listeners back and accepts again")
}

// takeBack undoes a handover to succ, before it accepted or after it died:
// it is killed if it runs (and reaped, its channels closed), the budgets it
// was given count here again (limiters, capped servers), connections
// parked for it go back into the loops, and the listeners and the admin
// gates accept again.
func (u *upgrader) takeBack(succ *upgrade.Successor, limiters []*inflightconn.Limiter, caps bool) {
	succ.Kill()
	for _, l := range limiters {
		l.Unexport()
	}
	if caps {
		u.srv.State().UnexportCapacities()
		u.stats.CapConnectionsSent.Store(0)
	}
	u.srv.Unpark()
	u.srv.Resume()
	u.admin.resume()
}
