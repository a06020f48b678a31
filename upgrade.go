package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy"
	"golang.org/x/sys/unix"
)

// notify tells systemd (Type=notify) about the process's state; without
// $NOTIFY_SOCKET it does nothing.
func notify(log zerolog.Logger, state string) {
	if err := upgrade.Notify(state); err != nil {
		log.Warn().Err(err).Str("state", state).Msg("sd_notify failed")
	}
}

// settled knows when a new process serves the configuration its
// predecessor served: each provider that had delivered there has delivered
// here, and what was applied is the merge of everything delivered since.
// It sees the providers' messages on their way to the watcher and the
// watcher's applies.
type settled struct {
	mu      sync.Mutex
	latest  map[string]*config.Dynamic
	lastErr map[string]error
	last    *config.TCPConfiguration
	ok      bool // a configuration was applied
}

func (s *settled) relay(ctx context.Context, in <-chan provider.Message, out chan<- provider.Message) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-in:
			s.mu.Lock()
			if s.latest == nil {
				s.latest, s.lastErr = map[string]*config.Dynamic{}, map[string]error{}
			}
			if m.Err != nil {
				s.lastErr[m.ProviderName] = m.Err
			} else {
				s.latest[m.ProviderName] = m.Configuration
			}
			s.mu.Unlock()
			select {
			case out <- m:
			case <-ctx.Done():
				return
			}
		}
	}
}

func (s *settled) applied(c *config.TCPConfiguration) {
	s.mu.Lock()
	s.last, s.ok = c, true
	s.mu.Unlock()
}

// wait returns once every provider of need has delivered and the merge of
// all delivered configurations is the one applied, or an error: a provider
// of need reported an error before it delivered (it would serve nothing of
// what the old process serves), or the time ran out.
func (s *settled) wait(need []string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		s.mu.Lock()
		missing, failed := "", error(nil)
		for _, name := range need {
			if _, ok := s.latest[name]; !ok {
				missing = name
				if e := s.lastErr[name]; e != nil {
					failed = fmt.Errorf("provider %s: %w (the old process serves its last configuration from it; this one has none)", name, e)
				}
				break
			}
		}
		done := missing == "" && (len(need) == 0 || s.ok && reflect.DeepEqual(provider.Merge(s.latest), s.last))
		s.mu.Unlock()
		switch {
		case failed != nil:
			return failed
		case done:
			return nil
		case time.Now().After(deadline):
			if missing != "" {
				return fmt.Errorf("provider %s delivered no configuration within %s", missing, within)
			}
			return fmt.Errorf("the configuration was not applied within %s", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// upgrader is a binary upgrade (README, "Upgrading in place"), from the old
// process's side: SIGUSR2 and POST /api/upgrade start one.
type upgrader struct {
	self    upgrade.Command
	selfErr error
	srv     *proxy.Server
	w       *provider.Watcher
	admin   admins
	stats   *upgrade.Stats
	log     zerolog.Logger
	// handedOver receives the successor once it accepts: the main loop
	// then drains this process.
	handedOver chan *upgrade.Successor

	mu   sync.Mutex // held through the handover itself
	busy bool
	done bool // handed over, or shutting down: no more upgrades
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
// new ones: the process is shutting down.
func (u *upgrader) stop() {
	u.mu.Lock()
	u.done = true
	u.mu.Unlock()
}

// Upgrade starts the binary at this process's path as a new process and
// hands over to it once it is ready. Any failure leaves this process
// serving (it never stopped accepting, or accepts again) and is returned.
func (u *upgrader) Upgrade(context.Context) (upgrade.Result, error) {
	u.mu.Lock()
	if u.done || u.busy {
		what := "an upgrade is already under way"
		if u.done {
			what = "this process has handed over or is shutting down"
		}
		u.mu.Unlock()
		return upgrade.Result{}, fmt.Errorf("%w: %s", upgrade.ErrBusy, what)
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
	hello := upgrade.Hello{Version: upgrade.Version, Generation: gen, PID: os.Getpid(), RateLimits: true, Capacities: true}
	var files []*os.File
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	for _, name := range u.srv.EntryPointNames() {
		addr, fd := u.srv.EntryPoint(name).Listener()
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return upgrade.Result{}, fmt.Errorf("entry point %q: dup: %w", name, err)
		}
		files = append(files, os.NewFile(uintptr(dup), name))
		hello.Listeners = append(hello.Listeners, upgrade.Listener{Name: name, Address: addr})
	}
	for _, a := range u.admin {
		f, err := a.gate.File()
		if err != nil {
			return upgrade.Result{}, fmt.Errorf("%s: %w", a.key, err)
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
	succ, err := upgrade.Start(u.self, hello, files, u.stats)
	if err != nil {
		return upgrade.Result{}, err
	}
	u.log.Info().Int("pid", succ.PID()).Str("path", u.self.Path).Msg("upgrade: new process started; waiting until it is ready")
	ready, err := succ.WaitReady(readyTimeout)
	if err != nil {
		return upgrade.Result{}, err
	}

	// The handover. From here to the end no shutdown begins (stop waits).
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
	use := map[string]bool{}
	for _, n := range ready.Uses {
		use[n] = true
	}
	if ready.Connections {
		u.srv.Park(ready.Uses)
	}
	reg := &u.srv.State().Limiters
	var exs []inflightconn.Export
	var limiters []*inflightconn.Limiter
	reg.Each(func(name string, l *inflightconn.Limiter) {
		exs = append(exs, l.Export(name, succ.Remote(len(exs))))
		limiters = append(limiters, l)
	})
	// The rate buckets go to a new process that reads them; one from
	// before they were handed over starts with every bucket full.
	snap := upgrade.Snapshot{Limiters: exs, WithRates: ready.RateLimits}
	if ready.RateLimits {
		u.srv.State().RateLimiters.Each(func(name string, l *ratelimit.Limiter) {
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
	err = succ.SendSnapshot(snap)
	var started upgrade.Started
	if err == nil {
		started, err = succ.WaitStarted(startedTimeout)
	}
	if err != nil {
		succ.Kill() // never two processes accepting
		for _, l := range limiters {
			l.Unexport()
		}
		if ready.Capacities {
			u.srv.State().UnexportCapacities()
			u.stats.CapConnectionsSent.Store(0)
		}
		u.srv.Unpark()
		u.srv.Resume()
		for _, a := range u.admin {
			a.gate.Resume()
		}
		return upgrade.Result{}, err
	}
	u.done = true
	u.stats.SuccessorPID.Store(int64(succ.PID()))
	if ready.Connections {
		u.handOff(succ)
	}
	// Listeners the new process does not serve on (entry point removed or
	// moved) close now: this process accepts on none any more.
	for _, name := range u.srv.EntryPointNames() {
		if !use[name] {
			u.srv.EntryPoint(name).CloseListener()
		}
	}
	u.admin.stop()
	notify(u.log, fmt.Sprintf("MAINPID=%d\nREADY=1", started.PID))
	u.handedOver <- succ
	return upgrade.Result{PID: succ.PID(), Generation: gen, PreviousPID: os.Getpid(),
		Limiters: u.stats.Sent.Limiters.Load(), Keys: u.stats.Sent.Keys.Load(), Connections: u.stats.Sent.Connections.Load(),
		Unrouted: u.stats.UnroutedSent.Load()}, nil
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
