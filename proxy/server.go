// Package proxy is tollgate's data plane: entry points and the event loops
// that accept and serve their connections, the compiler that turns a
// configuration snapshot into routing tables, and the load balancers that
// dial backends (ARCHITECTURE.md, "The connection core").
package proxy

import (
	"context"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/internal/netpoll"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
	"github.com/tollgate-proxy/tollgate/proxy/tlsconf"
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

	refusals *tcp.Refusals // the record of recent refusals (Refusals)
}

// NewServer binds every entry point (or takes over the socket o.Inherited
// gives it) and builds the server's loops and state with o. On error the
// ones already bound are closed and the error names the entry point and
// address.
func NewServer(eps map[string]*config.EntryPoint, o Options) (*Server, error) {
	s := &Server{eps: map[string]*EntryPoint{}, state: NewState(o.Log, o.State), log: o.Log, refusals: tcp.NewRefusals(tcp.DefaultRefusals)}
	for name := range eps {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	for _, name := range s.names {
		ep, err := s.bind(name, eps[name], o)
		if err != nil {
			s.closeListeners()
			return nil, err
		}
		s.eps[name] = ep
	}
	loops := o.Loops
	if loops <= 0 {
		loops = runtime.GOMAXPROCS(0)
	}
	eng, err := newEngine(loops, o.Log)
	if err != nil {
		s.closeListeners()
		return nil, err
	}
	s.engine = eng
	for _, ep := range s.eps {
		ep.engine = eng
	}
	s.rt.Store(&Runtime{Routers: map[string]*RouterInfo{}, Services: map[string]*ServiceInfo{}, Middlewares: map[string]*MiddlewareInfo{}})
	return s, nil
}

// Inherited is a listening socket handed over by the process this one
// upgrades (docs/operations/upgrading.md): its name there (an entry
// point's, or an admin listener's key), the address it was configured with
// there, and the descriptor.
type Inherited struct {
	Name    string
	Address string
	FD      int
}

// bind makes the named entry point on the socket o.Inherited gives it when
// that binds its address (ListenKey), else on a socket of its own.
func (s *Server) bind(name string, cfg *config.EntryPoint, o Options) (*EntryPoint, error) {
	var ep *EntryPoint
	var err error
	if in, ok := o.Inherited[name]; ok && ListenKey(in.Address) == ListenKey(cfg.Address) {
		ep, err = NewEntryPointFrom(name, cfg, in.FD, o.Log)
		if ep != nil {
			ep.inherited = true
		}
	} else {
		ep, err = NewEntryPoint(name, cfg, o.Log)
	}
	if err != nil {
		return nil, err
	}
	ep.refusals, ep.refuse = s.refusals, o.Refuse
	return ep, nil
}

func (s *Server) closeListeners() {
	for _, e := range s.eps {
		e.closeListener()
	}
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
// inherited (Options.Inherited).
func (s *Server) Uses(name string) bool {
	ep := s.eps[name]
	return ep != nil && ep.inherited
}

// StopAccepting takes every entry point's listener out of the loops without
// closing it: connections wait in the kernel's queue (none is refused)
// until another process, which has the same sockets, accepts them, or
// Resume. Live connections are served on. Used by a handover (docs/operations/upgrading.md).
func (s *Server) StopAccepting() {
	for _, name := range s.names {
		ep := s.eps[name]
		s.engine.each(func(l *loop) { l.removeListener(ep) })
	}
}

// Resume puts the listeners back in the loops after StopAccepting (a
// handover that did not complete, or whose new process ended while this one
// drained), but those closed since (CloseListener).
func (s *Server) Resume() {
	for _, name := range s.names {
		ep := s.eps[name]
		if ep.listenerClosed.Load() {
			continue
		}
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

// Refusals is the process's record of recent refusals: every refusal of a
// connection of its entry points, by middleware, service or entry point,
// the latest tcp.DefaultRefusals entries (GET /api/refusals).
func (s *Server) Refusals() *tcp.Refusals { return s.refusals }

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
			ci := tlsconf.Info(leaf)
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
	tables, rt := compileNiced(cfg, s.names, s.state, s.log)
	s.compileTime.Store(int64(time.Since(start)))
	for name, ep := range s.eps {
		ep.SetTable(tables[name])
	}
	s.rt.Store(rt)
	for name, cr := range s.state.certResolvers() {
		cr.Want(rt.Wanted[name])
	}
	built := make(map[string]string, len(rt.Middlewares))
	for name, mi := range rt.Middlewares {
		if mi.kind != "" {
			built[name] = mi.kind
		}
	}
	s.state.mws.Sweep(built)
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
			s.statusEvent(ri.Status).Str("router", name).Strs("error", ri.Err).Msg("router " + ri.Status)
		}
	}
	for _, name := range sortedKeys(rt.Services) {
		if si := rt.Services[name]; si.Status != StatusEnabled {
			s.statusEvent(si.Status).Str("service", name).Strs("error", si.Err).Msg("service " + si.Status)
		}
	}
	for _, name := range sortedKeys(rt.Middlewares) {
		if mi := rt.Middlewares[name]; mi.Status != StatusEnabled {
			s.statusEvent(mi.Status).Str("middleware", name).Strs("error", mi.Err).Msg("middleware " + mi.Status)
		}
	}
	for _, name := range sortedKeys(rt.ServersTransports) {
		if ti := rt.ServersTransports[name]; ti.Status != StatusEnabled {
			s.statusEvent(ti.Status).Str("serversTransport", name).Strs("error", ti.Err).Msg("servers transport " + ti.Status)
		}
	}
	return rt
}

// statusEvent is the log level of a resource's status: error for one
// disabled, warning for one that serves with a warning (a deprecated
// field, as Traefik logs deprecations).
func (s *Server) statusEvent(status string) *zerolog.Event {
	if status == StatusWarning {
		return s.log.Warn()
	}
	return s.log.Error()
}

// compileNice is the nice value of the thread a compile runs on: a compile
// of 100,000 routers takes a core for a second or more, and the event
// loops, whose threads keep nice 0, must get the CPU first (the serving
// latency through other routers during such a compile:
// docs/performance.md, "Large configurations").
const compileNice = 10

// compileNiced is Compile on a thread of its own with compileNice; the
// thread ends with it (locked, never unlocked). Where the nice value
// cannot be set, the compile runs at the process's.
func compileNiced(cfg *config.TCPConfiguration, names []string, st *State, log zerolog.Logger) (tables map[string]*Table, rt *Runtime) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the niced thread exits with the goroutine
		_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), compileNice)
		tables, rt = Compile(cfg, names, st, log)
	}()
	<-done
	return tables, rt
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

// ListenKey is what addr binds, as a string two addresses share when they
// bind the same socket: upgrade.Match matches inherited sockets by it.
func ListenKey(addr string) string { return netpoll.ListenKey(addr) }
