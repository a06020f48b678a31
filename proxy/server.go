// Package proxy is tollgate's data plane: entry points and the event loops
// that accept and serve their connections, the compiler that turns a
// configuration snapshot into routing tables, and the load balancers that
// dial backends (ARCHITECTURE.md, "The connection core").
package proxy

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
)

// Server owns the entry points and applies configuration snapshots to them.
type Server struct {
	eps    map[string]*EntryPoint
	engine *engine
	names  []string
	state  *State
	rt     atomic.Pointer[Runtime]
	mu     sync.Mutex // serialises Apply
	down   sync.Once  // Shutdown runs once
	log    zerolog.Logger

	reloads     atomic.Uint64
	lastReload  atomic.Int64 // unix nanoseconds
	compileTime atomic.Int64 // nanoseconds of the last Compile
}

// NewServer binds every entry point. On error the ones already bound are
// closed and the error names the entry point and address.
func NewServer(eps map[string]*config.EntryPoint, log zerolog.Logger) (*Server, error) {
	return NewServerFrom(eps, nil, log)
}

// Inherited is a listening socket handed over by the process this one
// upgrades (README, "Upgrading in place"): its name there (an entry
// point's, or an admin listener's key), the address it was configured with
// there, and the descriptor.
type Inherited struct {
	Name    string
	Address string
	FD      int
}

// NewServerFrom is NewServer for a process that inherited listening
// sockets, keyed by the entry point that takes each over (its name here; the
// caller pairs them, by name or by address: upgrade.Match): an entry point
// whose address binds its socket's (ListenKey) is not bound again (connections waiting in
// its queue are kept), any other is bound as usual. The caller keeps the
// inherited sockets that Uses does not report.
func NewServerFrom(eps map[string]*config.EntryPoint, inherited map[string]Inherited, log zerolog.Logger) (*Server, error) {
	s := &Server{eps: map[string]*EntryPoint{}, state: NewState(log), log: log}
	for name := range eps {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	for _, name := range s.names {
		var ep *EntryPoint
		var err error
		if in, ok := inherited[name]; ok && ListenKey(in.Address) == ListenKey(eps[name].Address) {
			ep, err = NewEntryPointFrom(name, eps[name], in.FD, log)
			if ep != nil {
				ep.inherited = true
			}
		} else {
			ep, err = NewEntryPoint(name, eps[name], log)
		}
		if err != nil {
			for _, e := range s.eps {
				e.closeListener()
			}
			return nil, err
		}
		s.eps[name] = ep
	}
	eng, err := newEngine(loops(), log)
	if err != nil {
		for _, e := range s.eps {
			e.closeListener()
		}
		return nil, err
	}
	s.engine = eng
	for _, ep := range s.eps {
		ep.engine = eng
	}
	s.rt.Store(&Runtime{Routers: map[string]*RouterInfo{}, Services: map[string]*ServiceInfo{}, Middlewares: map[string]*MiddlewareInfo{}})
	return s, nil
}

// Start runs the event loops and puts every entry point's listener in them.
func (s *Server) Start() {
	s.engine.start()
	for _, name := range s.names {
		ep := s.eps[name]
		s.engine.each(func(l *loop) {
			if err := l.addListener(ep); err != nil {
				ep.log.Error().Err(err).Msg("entry point cannot accept")
			}
		})
	}
}

// Uses reports whether the named entry point serves on a socket it
// inherited (NewServerFrom).
func (s *Server) Uses(name string) bool {
	ep := s.eps[name]
	return ep != nil && ep.inherited
}

// StopAccepting takes every entry point's listener out of the loops without
// closing it: connections wait in the kernel's queue (none is refused)
// until another process, which has the same sockets, accepts them, or
// Resume. Live connections are served on. Used by a handover (README,
// "Upgrading in place").
func (s *Server) StopAccepting() {
	for _, name := range s.names {
		ep := s.eps[name]
		s.engine.each(func(l *loop) { l.removeListener(ep) })
	}
}

// Resume puts the listeners back in the loops after StopAccepting (a
// handover that did not complete).
func (s *Server) Resume() {
	for _, name := range s.names {
		ep := s.eps[name]
		s.engine.each(func(l *loop) {
			if err := l.addListener(ep); err != nil {
				ep.log.Error().Err(err).Msg("entry point cannot accept")
			}
		})
	}
}

// EntryPoint returns the named entry point, or nil.
func (s *Server) EntryPoint(name string) *EntryPoint { return s.eps[name] }

// EntryPointNames returns the entry point names, sorted.
func (s *Server) EntryPointNames() []string { return s.names }

// State returns the state shared across generations.
func (s *Server) State() *State { return s.state }

// Runtime returns the runtime view of the configuration last applied.
func (s *Server) Runtime() *Runtime { return s.rt.Load() }

// ResolverCertificates lists what the certificate resolvers hold, by
// resolver and name: each certificate, and each wanted name without one,
// with why (for GET /api/tls/certificates).
func (s *Server) ResolverCertificates() []CertificateInfo {
	out := []CertificateInfo{}
	byName := s.state.certResolvers()
	for _, res := range sortedKeys(byName) {
		certs, missing := byName[res].Held()
		for _, n := range sortedKeys(certs) {
			leaf := certs[n].Leaf
			if leaf == nil {
				continue
			}
			ci := certInfo(leaf)
			ci.Stores, ci.Source, ci.Resolver = []string{}, "certificatesResolvers."+res, res
			out = append(out, ci)
		}
		for _, n := range sortedKeys(missing) {
			out = append(out, CertificateInfo{SANs: []string{n}, Stores: []string{}, Source: "certificatesResolvers." + res, Resolver: res, Error: missing[n]})
		}
	}
	return out
}

// Reloads returns how many configurations were applied and when the last was.
func (s *Server) Reloads() (n uint64, last time.Time, compile time.Duration) {
	return s.reloads.Load(), time.Unix(0, s.lastReload.Load()), time.Duration(s.compileTime.Load())
}

// Apply compiles cfg (merged, qualified names) and swaps the new tables in.
// Live connections keep the tables they were routed with.
func (s *Server) Apply(cfg *config.TCPConfiguration) *Runtime {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	tables, rt := Compile(cfg, s.names, s.state, s.log)
	s.compileTime.Store(int64(time.Since(start)))
	for name, ep := range s.eps {
		ep.SetTable(tables[name])
	}
	s.rt.Store(rt)
	for name, cr := range s.state.certResolvers() {
		cr.Want(rt.Wanted[name])
	}
	keep, keepRate := map[string]bool{}, map[string]bool{}
	for name, mi := range rt.Middlewares {
		if mi.limiter != nil {
			keep[name] = true
		}
		if mi.rateLimiter != nil {
			keepRate[name] = true
		}
	}
	s.state.Limiters.Sweep(keep)
	s.state.RateLimiters.Sweep(keepRate)
	keepCaps := map[string]bool{}
	for name, si := range rt.Services {
		if si.TCPService != nil && si.LoadBalancer != nil && capped(si.LoadBalancer) {
			keepCaps[name] = true
		}
	}
	s.state.sweepCapacities(keepCaps)
	s.state.kickCapacities()
	s.reloads.Add(1)
	s.lastReload.Store(time.Now().UnixNano())
	for _, name := range sortedKeys(rt.Routers) {
		if ri := rt.Routers[name]; ri.Status != StatusEnabled {
			s.log.Error().Str("router", name).Strs("error", ri.Err).Msg("router " + ri.Status)
		}
	}
	for _, name := range sortedKeys(rt.Services) {
		if si := rt.Services[name]; si.Status != StatusEnabled {
			s.log.Error().Str("service", name).Strs("error", si.Err).Msg("service " + si.Status)
		}
	}
	for _, name := range sortedKeys(rt.Middlewares) {
		if mi := rt.Middlewares[name]; mi.Status != StatusEnabled {
			s.log.Error().Str("middleware", name).Strs("error", mi.Err).Msg("middleware " + mi.Status)
		}
	}
	return rt
}

// Shutdown stops every entry point from accepting, drains live connections
// for each entry point's grace timeout (bounded by ctx) and closes the rest.
// Later calls return at once.
func (s *Server) Shutdown(ctx context.Context) {
	s.down.Do(func() { s.shutdown(ctx, false) })
}

// Stop is Shutdown for a stop signal: each entry point first accepts on
// for its requestAcceptGraceTimeout (until ctx ends), as Traefik's do.
func (s *Server) Stop(ctx context.Context) {
	s.down.Do(func() { s.shutdown(ctx, true) })
}

func (s *Server) shutdown(ctx context.Context, keepAccepting bool) {
	var wg sync.WaitGroup
	for _, ep := range s.eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep.shutdown(ctx, keepAccepting)
		}()
	}
	wg.Wait()
	s.engine.stop()
	s.state.Close() // stop health checkers
}
