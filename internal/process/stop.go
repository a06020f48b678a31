package process

import (
	"context"
	"syscall"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/provider/file"
)

// serve handles the signals while the process serves, until one says to
// stop or the process has handed over to a new one and drained: SIGHUP
// reloads the files, SIGUSR2 starts an upgrade, SIGUSR1 reopens the log
// files, and SIGINT or SIGTERM abandons an upgrade under way and starts
// the drain. It returns the successor this process handed over to, or nil.
func (p *proc) serve() *upgrade.Successor {
	for {
		select {
		case sig := <-p.o.Signals:
			switch sig {
			case syscall.SIGHUP:
				if p.fileProv != nil {
					p.log.Info().Str("provider", file.Name).Msg("SIGHUP: reloading files")
					p.fileProv.Reload()
				}
				continue
			case syscall.SIGUSR2:
				p.log.Info().Msg("SIGUSR2: upgrading in place")
				go func() { _, _ = p.up.Upgrade(context.Background()) }()
				continue
			case syscall.SIGUSR1:
				p.reopen()
				continue
			}
			// An upgrade under way is abandoned; none starts. After a
			// handover, the drain ends (as a second signal ends one).
			if succ := p.up.stop(); succ != nil {
				p.log.Warn().Str("signal", sig.String()).Msg("signal while draining after a handover: closing the connections still draining and exiting now")
				return succ
			}
			p.log.Info().Str("signal", sig.String()).Msg("shutting down: draining connections")
			p.notify("STOPPING=1")
			return nil
		case succ := <-p.up.handedOver:
			p.log.Info().Int("pid", succ.PID()).Msg("upgrade: handed over to the new process and drained; exiting")
			return succ
		}
	}
}

// drain stops the process: the providers are told to stop and the admin
// listeners stop accepting; the entry points drain (after a signal, each
// accepts on for its requestAcceptGraceTimeout, then waits out its grace
// time; after a handover, what is left closes at once: the upgrader
// drained already); a process that took over waits for the one it took
// over from, whose releases it relays to its own successor; then the last
// releases go to the successor, the admin servers end, and the providers
// are waited for.
func (p *proc) drain(succ *upgrade.Successor) {
	drain, stopDrain := context.WithCancel(context.Background())
	defer stopDrain()
	go p.signalsWhileDraining(drain, stopDrain)
	p.cancel()
	providersStopBy := time.Now().Add(providerStopWait)
	p.admin.stop()
	if succ == nil {
		for name, ep := range p.st.EntryPoints {
			if lc := ep.Transport.LifeCycle; lc != nil && lc.RequestAcceptGraceTimeout > 0 {
				p.log.Info().Str("entrypoint", name).Dur("for", time.Duration(lc.RequestAcceptGraceTimeout)).Msg("still accepting (requestAcceptGraceTimeout)")
			}
		}
		p.srv.Stop(drain)
	} else {
		p.srv.Shutdown(drained())
	}
	if p.pred != nil {
		select {
		case <-p.pred.Done():
		case <-drain.Done():
		case <-time.After(predecessorWait):
			p.log.Warn().Int("pid", p.pred.Hello.PID).Msg("upgrade: the process this one took over from is still draining; exiting before it")
		}
	}
	if succ != nil {
		succ.Close() // the last releases, then bye
	}
	p.admin.shutdown(time.Second)
	stopDrain()
	waitProviders(&p.provs, providersStopBy, p.log)
	p.log.Info().Msg("stopped")
}

// signalsWhileDraining handles the signals during the drain, until drain
// is done: SIGHUP's default action would end the process and cut the
// connections being drained, and a second SIGTERM or SIGINT says to stop
// waiting (stopDrain).
func (p *proc) signalsWhileDraining(drain context.Context, stopDrain context.CancelFunc) {
	for {
		select {
		case <-drain.Done():
			return
		case sig := <-p.o.Signals:
			switch sig {
			case syscall.SIGHUP:
				p.log.Info().Msg("SIGHUP while draining: ignored")
				continue
			case syscall.SIGUSR2:
				p.log.Info().Msg("SIGUSR2 while draining: ignored (no upgrade)")
				continue
			case syscall.SIGUSR1:
				p.reopen()
				continue
			}
			p.log.Warn().Str("signal", sig.String()).Msg("second signal: closing the connections still draining and exiting now")
			stopDrain()
			return
		}
	}
}

// drained is the context the drain shuts the server down with after a
// handover: the upgrader has waited out the grace times already (or a
// signal cut that short), so what is left closes at once.
func drained() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
