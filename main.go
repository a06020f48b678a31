// Command tollgate is a TCP edge proxy: Traefik-style routing from Docker
// labels, Consul tags and files, with per-client-IP connection limits.
//
// main.go is wiring only: static configuration -> providers -> watcher ->
// proxy server; signals; shutdown.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	// Trusted roots when the system has none: the FROM scratch image has no
	// /etc/ssl/certs, and an ACME CA (Let's Encrypt), a Consul agent or a KV
	// store over https must still verify.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/tollgate-proxy/tollgate/check"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/acme"
	"github.com/tollgate-proxy/tollgate/internal/cmdline"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/consulcatalog"
	"github.com/tollgate-proxy/tollgate/provider/docker"
	"github.com/tollgate-proxy/tollgate/provider/file"
	"github.com/tollgate-proxy/tollgate/provider/kubernetescrd"
	kvconsul "github.com/tollgate-proxy/tollgate/provider/kv/consul"
	kvetcd "github.com/tollgate-proxy/tollgate/provider/kv/etcd"
	kvredis "github.com/tollgate-proxy/tollgate/provider/kv/redis"
	kvzookeeper "github.com/tollgate-proxy/tollgate/provider/kv/zookeeper"
	"github.com/tollgate-proxy/tollgate/provider/swarm"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	// Before the command line is read: the variable is not configuration.
	handover, herr := upgrade.TakeEnv()
	cmd := config.NewCommand()
	root := cmdline.Root(cmd, func(ignored []cmdline.IgnoredVariable) error {
		if herr != nil {
			return herr
		}
		return run(cmd, handover, ignored)
	}, version())
	_ = root.AddCommand(check.Command())
	os.Exit(cmdline.Execute(root))
}

func version() string {
	v := Version
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return v
}

// newLogger is tollgate's log: stdout, or log.filePath (appended to, and
// kept open until the process exits).
func newLogger(cfg *config.Log) (zerolog.Logger, error) {
	out := os.Stdout
	if cfg.FilePath != "" {
		f, err := os.OpenFile(cfg.FilePath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return zerolog.Logger{}, fmt.Errorf("log.filePath=%q: %w", cfg.FilePath, err)
		}
		out = f
	}
	var w io.Writer = out
	if strings.EqualFold(cfg.Format, "console") {
		// Colours only on a terminal: escape codes in a file or `docker logs`
		// break grep and log shippers.
		fi, err := out.Stat()
		noColor := cfg.NoColor || err != nil || fi.Mode()&os.ModeCharDevice == 0
		w = zerolog.ConsoleWriter{Out: out, TimeFormat: time.RFC3339, NoColor: noColor}
	}
	level, err := zerolog.ParseLevel(strings.ToLower(cfg.Level))
	if err != nil || cfg.Level == "" {
		level = zerolog.InfoLevel
	}
	if strings.EqualFold(cfg.Level, "WARN") || strings.EqualFold(cfg.Level, "WARNING") {
		level = zerolog.WarnLevel
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// Timeouts of a binary upgrade (README, "Upgrading in place").
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
)

// run is tollgate. handoverFD is the state channel's descriptor when this
// process was started by an upgrade, else -1; ignored are the environment's
// TOLLGATE_ and TRAEFIK_ variables that configure nothing, logged at start.
func run(cmd *config.Command, handoverFD int, ignored []cmdline.IgnoredVariable) (err error) {
	st := &cmd.Static
	stats := &upgrade.Stats{}
	stats.Generation.Store(1)
	var pred *upgrade.Predecessor
	accepting := false
	if handoverFD >= 0 {
		if pred, err = upgrade.Inherit(handoverFD, stats); err != nil {
			return err
		}
		defer func() {
			if err != nil && !accepting {
				pred.Fail(err) // the old process serves on and reports this
			}
		}()
	}
	if err := st.Validate(); err != nil {
		// A variable that configures nothing may be why (a misspelled
		// TOLLGATE_ENTRYPOINTS_... leaves no entry point): say it here,
		// where no log exists yet.
		for _, v := range ignored {
			err = fmt.Errorf("%w; %s %s", err, v.Name, v.Why)
		}
		return err
	}
	log, err := newLogger(st.Log)
	if err != nil {
		return err
	}
	traefikOnly(st, log)
	for _, v := range ignored {
		log.Warn().Str("variable", v.Name).Msg(v.Why)
	}
	self, selfErr := upgrade.Resolve() // now: argv[0] means what it meant at start
	// Signals are ours from the start: a SIGTERM that arrives while the
	// entry points start must begin a drain, not kill the process, and
	// SIGUSR2's default action would end it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	// The old process's listening sockets, each given to the listener here
	// with its name and address, or else its address (upgrade.Match, the
	// addresses compared by what they bind: proxy.ListenKey); keyed by the
	// name here.
	inherited := map[string]upgrade.Listener{}
	epsInherited := map[string]proxy.Inherited{}
	if pred != nil {
		want := map[string]string{}
		for name, ep := range st.EntryPoints {
			if ep != nil {
				want[name] = ep.Address
			}
		}
		for _, p := range planAdmin(st) {
			want[p.key] = p.addr
		}
		inherited = upgrade.Match(pred.Hello.Listeners, want, proxy.ListenKey)
		for name, l := range inherited {
			if l.Name != name || l.Address != want[name] {
				log.Info().Str("was", l.Name).Str("was_address", l.Address).Str("now", name).Str("address", want[name]).Msg("upgrade: a listening socket is taken over under another name or spelling of its address (the same socket)")
			}
			if _, ok := st.EntryPoints[name]; ok {
				epsInherited[name] = proxy.Inherited{Name: l.Name, Address: l.Address, FD: l.FD}
			}
		}
	}
	var defaultTransport *config.TCPServersTransport
	if t := st.TCPServersTransport; t != nil {
		defaultTransport = t.Transport()
		if err := proxy.CheckTransport("tcpServersTransport", defaultTransport); err != nil {
			return err
		}
	}
	proxy.SpareP() // one loop per CPU, and a P to spare (ARCHITECTURE.md)
	srv, err := proxy.NewServerFrom(st.EntryPoints, epsInherited, log)
	if err != nil {
		return err
	}
	srv.State().SetDefaultTransport(defaultTransport)
	var asDefault []string
	for name, ep := range st.EntryPoints {
		if ep != nil && ep.AsDefault {
			asDefault = append(asDefault, name)
		}
	}
	sort.Strings(asDefault)
	srv.State().SetDefaultEntryPoints(asDefault)
	if pred != nil {
		var hs []proxy.HealthStatus
		for _, h := range pred.Hello.Health {
			hs = append(hs, proxy.HealthStatus{Service: h.Service, Server: h.Server, Up: h.Up})
		}
		srv.State().SeedHealth(hs)
	}
	obs, err := connObservers(st)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	srv.State().SetConnObservers(obs)
	stores, err := sharedStores(st.Stores, log)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	defer closeStores(stores) // after the drain: the last releases reach the store
	srv.State().Limiters.SetStores(stores)
	resolvers, err := certResolvers(st, log)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	for name, r := range resolvers {
		if r == nil {
			srv.State().SetCertResolver(name, nil)
			continue
		}
		defer r.Close()
		srv.State().SetCertResolver(name, r)
	}

	settle := &settled{}
	watcher := &provider.Watcher{
		Throttle: time.Duration(st.Providers.ProvidersThrottleDuration),
		Apply: func(c *config.TCPConfiguration) {
			srv.Apply(c)
			settle.applied(c)
		},
		Log: log,
	}

	var providers []provider.Provider
	var fileProv *file.Provider
	if st.Providers.File != nil {
		fileProv = file.New(st.Providers.File, log)
		providers = append(providers, fileProv)
	}
	more, err := labelProviders(st.Providers, log)
	if err != nil {
		return err
	}
	providers = append(providers, more...)
	if len(providers) == 0 {
		log.Warn().Msg("no provider configured: nothing will be routed (set --providers.file.filename, --providers.docker or --providers.consulCatalog)")
	}

	up := &upgrader{self: self, selfErr: selfErr, srv: srv, w: watcher, stats: stats, log: log,
		handedOver: make(chan *upgrade.Successor, 1)}
	admin, err := adminListeners(st, srv, watcher, up, inherited, log)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	up.admin = admin

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs := make(chan provider.Message)
	go watcher.Run(ctx, msgs)
	fromProviders := make(chan provider.Message)
	go settle.relay(ctx, fromProviders, msgs)
	var wg sync.WaitGroup
	for _, p := range providers {
		watcher.Expect(p.Name())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Run(ctx, fromProviders); err != nil {
				log.Error().Err(err).Str("provider", p.Name()).Msg("provider stopped")
				select {
				case fromProviders <- provider.Message{ProviderName: p.Name(), Err: err}:
				case <-ctx.Done():
				}
			}
		}()
	}
	// Until this process accepts, an error return must stop what started.
	started := false
	defer func() {
		if !started {
			cancel()
			for _, a := range admin {
				_ = a.gate.Close()
			}
			srv.Shutdown(context.Background())
			wg.Wait()
		}
	}()

	if pred == nil {
		srv.Start()
		serveAdmin(admin, up, log)
	} else {
		// An upgrade: ready once the configuration the old process served is
		// applied here, then the old process stops accepting and hands over
		// its counts, and only then does this one accept.
		if err := settle.wait(pred.Hello.Providers, readyTimeout); err != nil {
			return err
		}
		// The old process parks the connections it has not routed on the
		// entry points named here, by its names, and hands them over; a
		// socket an admin listener takes is not named: the old process
		// routes what it accepted there itself (here it would be no entry
		// point's).
		var uses []string
		epName := map[string]string{} // the old process's entry point name -> the name here
		for name, l := range inherited {
			if srv.Uses(name) {
				uses = append(uses, l.Name)
				epName[l.Name] = name
			}
		}
		sort.Strings(uses)
		if err := pred.Ready(upgrade.Ready{PID: os.Getpid(), Uses: uses, RateLimits: true, Capacities: true, Connections: true}); err != nil {
			return fmt.Errorf("state channel: %w", err)
		}
		snap, err := pred.WaitSnapshot(readyTimeout)
		if err != nil {
			return err
		}
		pred.Import(&srv.State().Limiters, snap.Limiters)
		pred.ImportRates(&srv.State().RateLimiters, snap.Rates)
		if snap.WithCaps {
			var exs []proxy.CapacityExport
			for _, c := range snap.Caps {
				ex := proxy.CapacityExport{Service: c.Service}
				for _, sv := range c.Servers {
					ex.Servers = append(ex.Servers, proxy.CapacityCount{Address: sv.Address, Open: int(sv.Open)})
				}
				exs = append(exs, ex)
			}
			in, n := srv.State().ImportCapacities(exs)
			stats.CapConnections.Store(int64(n))
			pred.ImportCaps(in.Release, in.Acquire, in.ReleaseAll)
		}
		srv.Start()
		serveAdmin(admin, up, log)
		accepting = true
		if err := pred.Started(os.Getpid()); err != nil {
			log.Warn().Err(err).Msg("state channel: cannot tell the old process this one accepts")
		}
		// The connections the old process had not routed come next, to be
		// routed here.
		go pred.ServeConns(func(c upgrade.Conn, fd int) {
			ep := c.EntryPoint
			if n, ok := epName[ep]; ok {
				ep = n // renamed here
			}
			h := proxy.Handed{EntryPoint: ep, FD: fd, Read: c.Read, Answered: c.Answered, Deadline: c.Deadline, Silent: c.Silent}
			if err := srv.Adopt(h); err != nil {
				log.Warn().Err(err).Msg("upgrade: a connection the old process handed over")
			}
		}, func(err error) {
			log.Warn().Err(err).Msg("upgrade: the connections the old process hands over")
		})
		served := map[int]bool{}
		for name, l := range inherited {
			served[l.FD] = srv.Uses(name) || admin.uses(name)
		}
		for _, l := range pred.Hello.Listeners {
			if !served[l.FD] {
				_ = syscall.Close(l.FD) // its entry point is gone or moved
			}
		}
		log.Info().Int("pid", pred.Hello.PID).Uint64("generation", pred.Hello.Generation).
			Int64("connections", stats.Received.Connections.Load()).Int64("clients", stats.Received.Keys.Load()).Int64("rate_buckets", stats.Received.RateKeys.Load()).
			Msg("upgrade: took over from the old process; accepting")
		go func() {
			if err := pred.Run(); err != nil {
				log.Warn().Err(err).Int64("released", stats.ReleasedAtEnd.Load()).Msg("upgrade: the old process is gone; what it still counted here is released")
				return
			}
			log.Info().Int64("releases", stats.ReleasesReceived.Load()).Msg("upgrade: the old process drained and exited")
		}()
	}
	started = true
	for _, name := range srv.EntryPointNames() {
		log.Info().Str("entrypoint", name).Str("address", srv.EntryPoint(name).Addr().String()).Msg("entry point listening")
	}
	if pred == nil {
		// A new process under systemd is not the main PID yet: the old one
		// names it (MAINPID) when it takes over.
		notify(log, "READY=1")
	}

	var succ *upgrade.Successor
loop:
	for {
		select {
		case sig := <-sigs:
			switch sig {
			case syscall.SIGHUP:
				if fileProv != nil {
					log.Info().Str("provider", file.Name).Msg("SIGHUP: reloading files")
					fileProv.Reload()
				}
				continue
			case syscall.SIGUSR2:
				log.Info().Msg("SIGUSR2: upgrading in place")
				go func() { _, _ = up.Upgrade(context.Background()) }()
				continue
			}
			log.Info().Str("signal", sig.String()).Msg("shutting down: draining connections")
			notify(log, "STOPPING=1")
			up.stop() // an upgrade under way is abandoned; none starts
			select {
			case succ = <-up.handedOver: // it handed over just before
			default:
			}
			break loop
		case succ = <-up.handedOver:
			log.Info().Int("pid", succ.PID()).Msg("upgrade: handed over to the new process; draining connections")
			break loop
		}
	}
	// Signals keep being handled during the drain: SIGHUP's default action
	// would end the process and cut the connections being drained, and a
	// second SIGTERM or SIGINT says to stop waiting.
	drain, stopDrain := context.WithCancel(context.Background())
	defer stopDrain()
	go func() {
		for {
			select {
			case <-drain.Done():
				return
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					log.Info().Msg("SIGHUP while draining: ignored")
					continue
				}
				if sig == syscall.SIGUSR2 {
					log.Info().Msg("SIGUSR2 while draining: ignored (no upgrade)")
					continue
				}
				log.Warn().Str("signal", sig.String()).Msg("second signal: closing the connections still draining and exiting now")
				stopDrain()
				return
			}
		}
	}()
	cancel()
	admin.stop()
	if succ == nil {
		// Stopped by a signal: each entry point accepts on for its
		// requestAcceptGraceTimeout first (a second signal ends that too).
		for name, ep := range st.EntryPoints {
			if lc := ep.Transport.LifeCycle; lc != nil && lc.RequestAcceptGraceTimeout > 0 {
				log.Info().Str("entrypoint", name).Dur("for", time.Duration(lc.RequestAcceptGraceTimeout)).Msg("still accepting (requestAcceptGraceTimeout)")
			}
		}
		srv.Stop(drain)
	} else {
		srv.Shutdown(drain) // the new process accepts now
	}
	if pred != nil {
		// This process relays its predecessor's releases to its own
		// successor: it ends after that one.
		select {
		case <-pred.Done():
		case <-drain.Done():
		case <-time.After(predecessorWait):
			log.Warn().Int("pid", pred.Hello.PID).Msg("upgrade: the process this one took over from is still draining; exiting before it")
		}
	}
	if succ != nil {
		succ.Close() // the last releases, then bye
	}
	admin.shutdown(time.Second)
	stopDrain()
	wg.Wait()
	log.Info().Msg("stopped")
	return nil
}

func labelProviders(cfg *config.Providers, log zerolog.Logger) ([]provider.Provider, error) {
	var out []provider.Provider
	add := func(p provider.Provider, err error) error {
		if err != nil {
			return err // names the option already
		}
		out = append(out, p)
		return nil
	}
	if c := cfg.Docker; c != nil {
		if err := add(docker.New(c, log)); err != nil {
			return nil, err
		}
	}
	if c := cfg.ConsulCatalog; c != nil {
		if err := add(consulcatalog.New(c, log)); err != nil {
			return nil, err
		}
	}
	if c := cfg.KubernetesCRD; c != nil {
		if err := add(kubernetescrd.New(c, log)); err != nil {
			return nil, err
		}
	}
	if c := cfg.Swarm; c != nil {
		if err := add(swarm.New(c, log)); err != nil {
			return nil, err
		}
	}
	// KV stores: one provider each (Consul: one per namespace).
	if c := cfg.Consul; c != nil {
		ps, err := kvconsul.New(c, log)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			out = append(out, p)
		}
	}
	if c := cfg.Etcd; c != nil {
		if err := add(kvetcd.New(c, log)); err != nil {
			return nil, err
		}
	}
	if c := cfg.Redis; c != nil {
		if err := add(kvredis.New(c, log)); err != nil {
			return nil, err
		}
	}
	if c := cfg.ZooKeeper; c != nil {
		if err := add(kvzookeeper.New(c, log)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// certResolvers builds the certificatesResolvers: an ACME client for each
// with acme.tlsChallenge or acme.httpChallenge, nil for the others (their
// routers are served from the TLS store, with a warning here and in their
// status).
func certResolvers(st *config.Static, log zerolog.Logger) (map[string]*acme.Resolver, error) {
	out := map[string]*acme.Resolver{}
	entryPoints := slices.Sorted(maps.Keys(st.EntryPoints))
	for _, name := range slices.Sorted(maps.Keys(st.CertificatesResolvers)) {
		r := st.CertificatesResolvers[name]
		out[name] = nil
		switch {
		case r != nil && r.ACME != nil:
			warnings, err := acme.Check(name, r.ACME, entryPoints)
			if errors.Is(err, acme.ErrNoChallenge) {
				log.Warn().Str("resolver", name).Msg(err.Error() + "; until then the routers naming it are served from the TLS store's certificates")
				continue
			}
			if err != nil {
				return nil, err
			}
			for _, w := range warnings {
				log.Warn().Str("resolver", name).Msg(w)
			}
			res, err := acme.New(name, r.ACME, entryPoints, log.With().Str("component", "acme").Logger())
			if err != nil {
				for _, made := range out {
					if made != nil {
						made.Close()
					}
				}
				return nil, err
			}
			out[name] = res
		case r != nil && r.Tailscale != nil:
			log.Warn().Str("resolver", name).Msg("certificatesResolvers." + name + ".tailscale is not supported: routers naming this resolver are served from the TLS store's certificates")
		}
	}
	return out, nil
}

// connObservers returns what closed connections report to: the access log
// (--accessLog) and per-router metrics (--metrics.prometheus). The access log
// file stays open until the process exits: connections cut by the shutdown
// drain end (and are logged) after Server.Shutdown returns. Each line is one
// unbuffered write, so nothing is lost at exit.
func connObservers(st *config.Static) (proxy.ConnObservers, error) {
	var o proxy.ConnObservers
	o.Metrics = st.Metrics != nil && st.Metrics.Prometheus != nil
	if st.AccessLog != nil {
		var w io.Writer = os.Stdout
		if path := st.AccessLog.FilePath; path != "" {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return o, fmt.Errorf("accessLog.filePath=%q: %w", path, err)
			}
			w = f
		}
		l := zerolog.New(w).With().Timestamp().Logger()
		o.AccessLog = &l
		if f := st.AccessLog.Fields; f != nil {
			o.AccessFields = proxy.NewAccessFields(f.DefaultMode, f.Names)
		}
		if f := st.AccessLog.Filters; f != nil {
			o.AccessMinDuration = time.Duration(f.MinDuration)
		}
	}
	return o, nil
}

// traefikOnly says, at start, what of Traefik's static options that were
// given tollgate does differently (README, "Static configuration").
func traefikOnly(st *config.Static, log zerolog.Logger) {
	if a := st.API; a != nil {
		if a.Dashboard {
			log.Info().Msg("api.dashboard: tollgate has no dashboard; the admin API serves its data as JSON (/api/rawdata, /api/tcp/...)")
		}
		if a.Insecure {
			log.Warn().Str("address", a.Address).Msg("api.insecure: the admin API (configuration, client IPs, upgrade) listens on " + a.Address + ", reachable from other hosts unless that address is local")
		}
	}
	if c := st.Core; c != nil && strings.EqualFold(c.DefaultRuleSyntax, "v2") {
		log.Warn().Msg("core.defaultRuleSyntax v2 is deprecated (as in Traefik v3): rules are read in v3 syntax, which reads single-value HostSNI and ClientIP the same; several values in one matcher (v2 only) disable their router, and a v2 {name:regexp} HostSNIRegexp pattern is read as a Go regexp")
	}
	if al := st.AccessLog; al != nil && al.Format != "" && !strings.EqualFold(al.Format, "json") {
		log.Warn().Str("format", al.Format).Msg("accessLog.format: tollgate writes JSON lines, one per closed connection, whatever the format")
	}
	if al := st.AccessLog; al != nil && al.Filters != nil && (len(al.Filters.StatusCodes) > 0 || al.Filters.RetryAttempts) {
		log.Warn().Msg("accessLog.filters.statusCodes and retryAttempts are HTTP filters: every closed TCP connection is logged (filters.minDuration applies)")
	}
	for _, name := range st.InternalEntryPoints() {
		log.Info().Str("entrypoint", name).Msg("entryPoints." + name + ": internal, as in Traefik (named by ping.entryPoint or metrics.prometheus.entryPoint, traefik by default): it serves /ping or /metrics and proxies nothing")
	}
	for _, name := range st.UDPEntryPoints() {
		log.Warn().Str("entrypoint", name).Msg("entryPoints." + name + ": a UDP entry point (its address ends in /udp): tollgate routes TCP only and does not listen on it")
	}
	for _, name := range slices.Sorted(maps.Keys(st.EntryPoints)) {
		ep := st.EntryPoints[name]
		h := ep.HTTP
		if h == nil {
			h = &config.EntryPointHTTP{}
		}
		var ignored []string
		for key, set := range map[string]bool{
			"http.middlewares": len(h.Middlewares) > 0, "http.tls": h.TLS != nil, "http.encodeQuerySemicolons": h.EncodeQuerySemicolons,
			"http.sanitizePath": h.SanitizePath != nil, "http.maxHeaderBytes": h.MaxHeaderBytes != 0,
			"http2": ep.HTTP2 != nil, "http3": ep.HTTP3 != nil, "udp": ep.UDP != nil,
		} {
			if set {
				ignored = append(ignored, "entryPoints."+name+"."+key)
			}
		}
		if len(ignored) > 0 {
			slices.Sort(ignored)
			log.Warn().Str("entrypoint", name).Msg(strings.Join(ignored, ", ") + ": settings of Traefik's HTTP routers and of HTTP/2, HTTP/3 and UDP, ignored: tollgate routes TCP, and its TCP routers never used them")
		}
		if r := ep.Redirect(); r != nil {
			to := r.Scheme + " on its default port"
			if r.Port != 0 {
				to = fmt.Sprintf("%s on port %d", r.Scheme, r.Port)
			}
			log.Info().Str("entrypoint", name).Msg("entryPoints." + name + ".http.redirections: plain HTTP requests that no TCP router takes are redirected to " + to)
		}
	}
	if p := st.Providers; p != nil {
		for key, set := range map[string]bool{"kubernetesIngress": p.KubernetesIngress != nil, "kubernetesGateway": p.KubernetesGateway != nil} {
			if set {
				log.Warn().Msg("providers." + key + ": Traefik's provider of HTTP routes, not read: tollgate reads TCP routes from IngressRouteTCP (providers.kubernetesCRD)")
			}
		}
	}
	if p := st.Metrics; p != nil && p.Prometheus != nil && len(p.Prometheus.Buckets) > 0 {
		log.Warn().Msg("metrics.prometheus.buckets: Traefik's buckets are for HTTP request durations; tollgate_router_connection_duration_seconds has its own, from 5 ms to 4 h")
	}
}

// sharedStores connects (in the background) to the stores of the static
// configuration that inFlightConn middlewares name (README, "Running
// several replicas"). A store that cannot be configured is a static
// configuration error naming its option.
func sharedStores(cfgs map[string]*config.Store, log zerolog.Logger) (map[string]*inflightconn.Store, error) {
	stores := map[string]*inflightconn.Store{}
	names := make([]string, 0, len(cfgs))
	for n := range cfgs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		c := cfgs[name]
		if c == nil || c.Redis == nil {
			closeStores(stores)
			return nil, fmt.Errorf("stores.%s: no store type: set stores.%s.redis.endpoints", name, name)
		}
		tc, err := provider.TLSConfig(c.Redis.TLS, "stores."+name+".redis.tls")
		if err != nil {
			closeStores(stores)
			return nil, err
		}
		s, err := inflightconn.NewRedisStore(name, c.Redis, tc, log)
		if err != nil {
			closeStores(stores)
			return nil, err
		}
		stores[name] = s
	}
	return stores, nil
}

func closeStores(stores map[string]*inflightconn.Store) {
	for _, s := range stores {
		s.Close()
	}
}
