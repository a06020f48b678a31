// Package process is one tollgate process from its start to its exit. Run
// checks the static configuration and logs what it says about it
// (internal/preflight), builds the proxy server, the metrics exporters,
// the providers and their watcher, and the admin listeners; accepts at
// once, or, when an upgrade in place started it, once it serves what the
// old process served and holds the budgets it handed over (takeover.go);
// serves until a signal or its own handover to a new process (upgrader.go);
// then drains and stops what it started (stop.go).
//
// main gives it everything it reads of the process's environment
// (Options): nothing here reads a variable or the command line.
package process

import (
	"context"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/api"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/cmdline"
	"github.com/tollgate-proxy/tollgate/internal/logs"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/file"
	"github.com/tollgate-proxy/tollgate/proxy"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Options are what main gives a process: the configuration the command
// line decoded, and what it read of the process's environment.
type Options struct {
	// Static is the static configuration as the command line decoded it;
	// Run validates it.
	Static *config.Static
	// Start is what the command line found about its sources: the
	// variables and file keys that configure nothing.
	Start cmdline.Start
	// Handover is the state channel's descriptor when an upgrade started
	// this process (upgrade.TakeEnv), else -1.
	Handover int
	// Self is how this process is started again for an upgrade
	// (upgrade.Resolve, at start); when SelfErr is set it cannot be, and
	// an upgrade fails with SelfErr.
	Self    upgrade.Command
	SelfErr error
	// Signals are the process's SIGINT, SIGTERM, SIGHUP, SIGUSR1 and
	// SIGUSR2, caught from the start (a SIGTERM while the entry points
	// start begins a drain).
	Signals <-chan os.Signal
	// Loops is how many event loops the proxy runs (proxy.Options.Loops).
	Loops int
	// Refuse is how connections a limit refuses are closed
	// (proxy.Options.Refuse).
	Refuse tcp.RefusePolicy
	// NotifySocket is systemd's notification socket ($NOTIFY_SOCKET): ""
	// when not run by systemd with Type=notify.
	NotifySocket string
	// Stdout is where the log and the access log go when they have no
	// file of their own (the log's colours: when it is a terminal).
	Stdout *os.File
	// Version and Started are the process's, for the API and the metrics.
	Version string
	Started time.Time
}

// Timeouts of a binary upgrade (docs/operations/upgrading.md).
const (
	// readyTimeout bounds the new process's start: its providers deliver
	// and its first configuration is applied.
	readyTimeout = 30 * time.Second
	// startedTimeout bounds the handover itself: from the snapshot to the
	// new process accepting (milliseconds, normally).
	startedTimeout = 10 * time.Second
	// predecessorWait bounds how long a process that handed over waits,
	// after its own drain, for the process it took over from to end (it
	// relays that one's releases). Past it, that one's connections still
	// open are counted nowhere.
	predecessorWait = time.Minute
	// providerStopWait bounds how long the shutdown waits for the
	// providers to return once they are told to stop (the wait runs
	// alongside the drain): one that has not by then is busy in a call
	// that cannot be interrupted.
	providerStopWait = 2 * time.Second
)

// proc is a running process: what open built, in the order it built it.
type proc struct {
	o     Options
	st    *config.Static
	stats *upgrade.Stats
	// pred is the process this one took over from, nil for one started by
	// hand.
	pred *upgrade.Predecessor

	log        zerolog.Logger
	logFile    *logs.Log
	accessFile *logs.File // nil without accessLog.filePath
	// inherited are pred's listening sockets, each given to the listener
	// here with its name and address, or else its address (upgrade.Match),
	// keyed by the name here.
	inherited map[string]upgrade.Listener

	srv       *proxy.Server
	watcher   *provider.Watcher
	settle    *settled
	fileProv  *file.Provider // nil without providers.file
	providers []provider.Provider
	up        *upgrader
	admin     admins
	hist      *api.History // the per-second counts of the API and the dashboard; nil without --api

	cancel context.CancelFunc // stops the providers, the watcher and the history
	provs  provider.Group

	// accepting: this process accepts (an error after that does not fail
	// the upgrade that started it); started: so do its admin listeners,
	// and the drain stops what open built.
	accepting, started bool
	atExit             []func() // run in reverse order at exit
}

// Run is tollgate: it returns when the process has drained after a signal
// or a handover, or with the error that kept it from starting (an
// upgrade's old process is told it, and serves on).
func Run(o Options) (err error) {
	p := &proc{o: o, st: o.Static, stats: &upgrade.Stats{}}
	p.stats.Generation.Store(1)
	if o.Handover >= 0 {
		if p.pred, err = upgrade.Inherit(o.Handover, p.stats); err != nil {
			return err
		}
		defer func() {
			if err != nil && !p.accepting {
				p.pred.Fail(err) // the old process serves on and reports this
			}
		}()
	}
	defer p.exit()
	if err := p.open(); err != nil {
		return err
	}
	if err := p.accept(); err != nil {
		return err
	}
	p.drain(p.serve())
	return nil
}

// exit stops what open started when the process never accepted, then
// runs atExit in reverse order: the metrics' last push, the certificate
// resolvers, the shared stores (after the drain: the last releases reach
// them).
func (p *proc) exit() {
	if !p.started {
		p.abort()
	}
	for i := len(p.atExit) - 1; i >= 0; i-- {
		p.atExit[i]()
	}
}

// abort stops what open started, for a process that never accepted.
func (p *proc) abort() {
	if p.cancel != nil {
		p.cancel()
	}
	closeAdmins(p.admin)
	if p.srv != nil {
		p.srv.Shutdown(context.Background())
	}
	waitProviders(&p.provs, time.Now().Add(providerStopWait), p.log)
}

// notify tells systemd (Type=notify) about the process's state; without a
// notification socket it does nothing.
func (p *proc) notify(state string) { notify(p.o.NotifySocket, p.log, state) }

func notify(socket string, log zerolog.Logger, state string) {
	if err := upgrade.Notify(socket, state); err != nil {
		log.Warn().Err(err).Str("state", state).Msg("sd_notify failed")
	}
}

// waitProviders waits for the providers until deadline and names in the log
// those the process exits under.
func waitProviders(provs *provider.Group, deadline time.Time, log zerolog.Logger) {
	if stuck := provs.Wait(deadline); len(stuck) > 0 {
		log.Warn().Strs("providers", stuck).Dur("waited", providerStopWait).Msg("shutdown: providers still busy (in a call that cannot be interrupted) are not waited for")
	}
}
