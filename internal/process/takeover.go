package process

import (
	"fmt"
	"os"
	"sort"
	"syscall"

	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// accept starts accepting: at once for a process started by hand, after
// the takeover for one an upgrade started. The entry points and the admin
// listeners then serve, and the log says where.
func (p *proc) accept() error {
	if p.pred == nil {
		p.srv.Start()
		serveAdmin(p.admin, p.log)
	} else if err := p.takeOver(); err != nil {
		return err
	}
	p.started = true
	for _, name := range p.srv.EntryPointNames() {
		p.log.Info().Str("entrypoint", name).Str("address", p.srv.EntryPoint(name).Addr().String()).Msg("entry point listening")
	}
	if p.pred == nil {
		// A new process under systemd is not the main PID yet: the old one
		// names it (MAINPID) when it takes over.
		p.notify("READY=1")
	}
	return nil
}

// takeOver is the new process's side of an upgrade in place
// (docs/operations/upgrading.md): it is ready once the configuration the
// old process served is applied here; then the old process stops
// accepting and hands over its counts, and only then does this one accept.
// The connections the old process had not routed come next, to be routed
// here; the old process's sockets that no listener here took are closed.
func (p *proc) takeOver() error {
	if err := p.settle.wait(p.pred.Hello.Providers, readyTimeout); err != nil {
		return err
	}
	uses, epName := p.parkedOn()
	if err := p.pred.Ready(upgrade.Ready{PID: os.Getpid(), Uses: uses, RateLimits: true, Capacities: true, Connections: true}); err != nil {
		return fmt.Errorf("state channel: %w", err)
	}
	snap, err := p.pred.WaitSnapshot(readyTimeout)
	if err != nil {
		return err
	}
	p.importSnapshot(snap)
	p.srv.Start()
	serveAdmin(p.admin, p.log)
	p.accepting = true
	if err := p.pred.Started(os.Getpid()); err != nil {
		p.log.Warn().Err(err).Msg("state channel: cannot tell the old process this one accepts")
	}
	go p.pred.ServeConns(func(c upgrade.Conn, fd int) { p.adopt(c, fd, epName) }, func(err error) {
		p.log.Warn().Err(err).Msg("upgrade: the connections the old process hands over")
	})
	p.closeUntaken()
	p.log.Info().Int("pid", p.pred.Hello.PID).Uint64("generation", p.pred.Hello.Generation).
		Int64("connections", p.stats.Received.Connections.Load()).Int64("clients", p.stats.Received.Keys.Load()).Int64("rate_buckets", p.stats.Received.RateKeys.Load()).
		Msg("upgrade: took over from the old process; accepting")
	go p.followPredecessor()
	return nil
}

// parkedOn names the entry points the old process parks its unrouted
// connections on, to hand them over: those whose socket an entry point
// here took, by the old process's names, and each such name's name here.
// A socket an admin listener takes is not named: the old process routes
// what it accepted there itself (here it would be no entry point's).
func (p *proc) parkedOn() (uses []string, epName map[string]string) {
	epName = map[string]string{}
	for name, l := range p.inherited {
		if p.srv.Uses(name) {
			uses = append(uses, l.Name)
			epName[l.Name] = name
		}
	}
	sort.Strings(uses)
	return uses, epName
}

// importSnapshot puts the old process's counts into this one's limiters,
// rate buckets and capped servers.
func (p *proc) importSnapshot(snap upgrade.Snapshot) {
	st := p.srv.State()
	p.pred.Import(inflightconn.Limiters(st.Keepers()), snap.Limiters)
	p.pred.ImportRates(ratelimit.Limiters(st.Keepers()), snap.Rates)
	if !snap.WithCaps {
		return
	}
	var exs []proxy.CapacityExport
	for _, c := range snap.Caps {
		ex := proxy.CapacityExport{Service: c.Service}
		for _, sv := range c.Servers {
			ex.Servers = append(ex.Servers, proxy.CapacityCount{Address: sv.Address, Open: int(sv.Open)})
		}
		exs = append(exs, ex)
	}
	in, n := st.ImportCapacities(exs)
	p.stats.CapConnections.Store(int64(n))
	p.pred.ImportCaps(in.Release, in.Acquire, in.ReleaseAll)
}

// adopt routes here a connection the old process handed over, on its
// entry point's name here (epName: parkedOn's).
func (p *proc) adopt(c upgrade.Conn, fd int, epName map[string]string) {
	ep := c.EntryPoint
	if n, ok := epName[ep]; ok {
		ep = n // renamed here
	}
	h := proxy.Handed{EntryPoint: ep, FD: fd, Read: c.Read, Answered: c.Answered, Deadline: c.Deadline, Silent: c.Silent}
	if err := p.srv.Adopt(h); err != nil {
		p.log.Warn().Err(err).Msg("upgrade: a connection the old process handed over")
	}
}

// closeUntaken closes the old process's sockets that no listener here
// took: their entry point is gone or moved.
func (p *proc) closeUntaken() {
	served := map[int]bool{}
	for name, l := range p.inherited {
		served[l.FD] = p.srv.Uses(name) || p.admin.uses(name)
	}
	for _, l := range p.pred.Hello.Listeners {
		if !served[l.FD] {
			_ = syscall.Close(l.FD)
		}
	}
}

// followPredecessor relays the old process's releases until it ends, and
// logs how it ended.
func (p *proc) followPredecessor() {
	if err := p.pred.Run(); err != nil {
		p.log.Warn().Err(err).Int64("released", p.stats.ReleasedAtEnd.Load()).Msg("upgrade: the old process is gone; what it still counted here is released")
		return
	}
	p.log.Info().Int64("releases", p.stats.ReleasesReceived.Load()).Msg("upgrade: the old process drained and exited")
}
