package process

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/api"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/acme"
	"github.com/tollgate-proxy/tollgate/internal/logs"
	"github.com/tollgate-proxy/tollgate/internal/preflight"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/metrics"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	// The built-in middleware kinds (middleware.Register).
	_ "github.com/tollgate-proxy/tollgate/middleware/standard"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/file"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// open builds what a start builds, in this order, and accepts nothing
// yet: the checked configuration and the log, the proxy server (on the
// sockets an upgrade handed over), the metrics exporters, the providers
// and their watcher, the admin listeners; then it starts the providers.
func (p *proc) open() error {
	rep, err := preflight.Check(p.st, p.o.Start)
	if err != nil {
		return err
	}
	if err := p.openLog(rep); err != nil {
		return err
	}
	if err := p.newServer(rep.ACME, p.takeListeners()); err != nil {
		return err
	}
	if err := p.startExporters(); err != nil {
		return err
	}
	if err := p.newProviders(); err != nil {
		return err
	}
	p.up = &upgrader{self: p.o.Self, selfErr: p.o.SelfErr, srv: p.srv, w: p.watcher, stats: p.stats, log: p.log, st: p.st,
		pred: p.pred, notify: p.notify, handedOver: make(chan *upgrade.Successor, 1), stopped: make(chan struct{})}
	if p.st.API != nil {
		p.hist = api.NewHistory(p.srv)
	}
	admin, err := p.adminListeners()
	if err != nil {
		return err
	}
	p.admin, p.up.admin = admin, admin
	p.startProviders()
	return nil
}

// openLog opens the log (log.filePath, else Stdout) and logs what
// preflight said about the configuration.
func (p *proc) openLog(rep preflight.Report) error {
	f, err := logs.New(p.st.Log, p.o.Stdout)
	if err != nil {
		return err
	}
	p.logFile, p.log = f, f.Logger
	for _, n := range rep.Notices {
		ev := p.log.Info()
		if n.Warn {
			ev = p.log.Warn()
		}
		if n.Field != "" {
			ev = ev.Str(n.Field, n.Value)
		}
		ev.Msg(n.Msg)
	}
	return nil
}

// reopen reopens the log files after logrotate moved them: SIGUSR1, as
// Traefik's reopens its access log (logrotate's postrotate `kill -USR1`).
func (p *proc) reopen() {
	if err := p.logFile.Reopen(); err != nil {
		p.log.Error().Err(err).Msg("SIGUSR1: reopening log.filePath")
	}
	if p.accessFile != nil {
		if err := p.accessFile.Reopen(); err != nil {
			p.log.Error().Err(err).Msg("SIGUSR1: reopening accessLog.filePath")
		}
	}
	p.log.Info().Msg("SIGUSR1: log files reopened")
}

// takeListeners pairs the old process's listening sockets, at an upgrade,
// with the listeners configured here (p.inherited; upgrade.Match, the
// addresses compared by what they bind: proxy.ListenKey), and returns
// those the entry points take, for the proxy server.
func (p *proc) takeListeners() map[string]proxy.Inherited {
	p.inherited = map[string]upgrade.Listener{}
	if p.pred == nil {
		return nil
	}
	want := map[string]string{}
	for name, ep := range p.st.EntryPoints {
		if ep != nil {
			want[name] = ep.Address
		}
	}
	for _, pl := range planAdmin(p.st) {
		want[pl.key] = pl.addr
	}
	p.inherited = upgrade.Match(p.pred.Hello.Listeners, want, proxy.ListenKey)
	eps := map[string]proxy.Inherited{}
	for name, l := range p.inherited {
		if l.Name != name || l.Address != want[name] {
			p.log.Info().Str("was", l.Name).Str("was_address", l.Address).Str("now", name).Str("address", want[name]).Msg("upgrade: a listening socket is taken over under another name or spelling of its address (the same socket)")
		}
		if _, ok := p.st.EntryPoints[name]; ok {
			eps[name] = proxy.Inherited{Name: l.Name, Address: l.Address, FD: l.FD}
		}
	}
	return eps
}

// newServer builds the proxy server with what the static configuration
// and the old process at an upgrade say (proxy.Options): the access log
// and metrics observers, the shared stores, an ACME client for each
// resolver of withACME, the entry points on the sockets of inherited.
func (p *proc) newServer(withACME []string, inherited map[string]proxy.Inherited) error {
	obs, accessFile, err := connObservers(p.st, p.o.Stdout)
	if err != nil {
		return err
	}
	p.accessFile = accessFile
	stores, err := sharedStores(p.st.Stores, p.log)
	if err != nil {
		return err
	}
	p.atExit = append(p.atExit, func() { closeStores(stores) })
	resolvers, err := p.certResolvers(withACME)
	if err != nil {
		return err
	}
	so := proxy.StateOptions{DefaultEntryPoints: asDefault(p.st), ProviderPrecedence: p.st.Providers.Precedence,
		Observers: obs, Stores: middleware.StoresOf(stores), CertResolvers: resolvers}
	if t := p.st.TCPServersTransport; t != nil {
		so.DefaultTransport = t.Transport() // checked by preflight
	}
	if p.pred != nil {
		for _, h := range p.pred.Hello.Health {
			so.Health = append(so.Health, proxy.HealthStatus{Service: h.Service, Server: h.Server, Up: h.Up})
		}
	}
	p.srv, err = proxy.NewServer(p.st.EntryPoints, proxy.Options{Log: p.log, Loops: p.o.Loops, Inherited: inherited, Refuse: p.o.Refuse, State: so})
	return err
}

// asDefault are the entry points marked asDefault, sorted.
func asDefault(st *config.Static) []string {
	var out []string
	for name, ep := range st.EntryPoints {
		if ep != nil && ep.AsDefault {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// certResolvers returns every certificatesResolver, with an ACME client for
// each of withACME (preflight's) and nil for the others (their routers are
// served from the TLS store, with a warning at start and in their status).
// The clients are closed at exit.
func (p *proc) certResolvers(withACME []string) (map[string]proxy.CertResolver, error) {
	out := map[string]proxy.CertResolver{}
	for name := range p.st.CertificatesResolvers {
		out[name] = nil
	}
	entryPoints := slices.Sorted(maps.Keys(p.st.EntryPoints))
	for _, name := range withACME {
		r, err := acme.New(name, p.st.CertificatesResolvers[name].ACME, entryPoints, p.log.With().Str("component", "acme").Logger())
		if err != nil {
			return nil, err
		}
		p.atExit = append(p.atExit, r.Close)
		out[name] = r
	}
	return out, nil
}

// startExporters starts the push exporters (metrics.datadog, .statsD,
// .influxDB2, .otlp), stopped at exit, after the drain, with a last push.
func (p *proc) startExporters() error {
	exporters, err := metrics.Start(context.Background(), p.st.Metrics, p.o.Version, func() metrics.Snapshot { return metrics.Read(p.srv) }, p.log)
	if err != nil {
		return err
	}
	p.atExit = append(p.atExit, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := exporters.Stop(ctx); err != nil {
			p.log.Warn().Err(err).Msg("metrics: the last push")
		}
	})
	return nil
}

// newProviders builds the watcher, which applies to the server, and the
// providers the static configuration enables.
func (p *proc) newProviders() error {
	p.settle = &settled{}
	p.watcher = &provider.Watcher{
		Throttle: time.Duration(p.st.Providers.ProvidersThrottleDuration),
		Apply: func(c *config.TCPConfiguration) {
			p.srv.Apply(c)
			p.settle.applied(c)
		},
		Log:    p.log,
		Limits: p.st.Limits,
	}
	po := provider.Options{Log: p.log, Limits: p.st.Limits}
	if c := p.st.Providers.File; c != nil {
		fp, err := file.New(c, po)
		if err != nil {
			return err
		}
		p.fileProv = fp
		p.providers = append(p.providers, fp)
	}
	more, err := labelProviders(p.st.Providers, po)
	if err != nil {
		return err
	}
	p.providers = append(p.providers, more...)
	if len(p.providers) == 0 {
		p.log.Warn().Msg("no provider configured: nothing will be routed (set --providers.file.filename, --providers.docker or --providers.consulCatalog)")
	}
	return nil
}

// startProviders starts the providers, the watcher and the history: the
// providers' messages go through settle on their way to the watcher (an
// upgrade waits there for the configuration the old process served).
func (p *proc) startProviders() {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.atExit = append(p.atExit, cancel)
	if p.hist != nil {
		go p.hist.Run(ctx)
	}
	msgs := make(chan provider.Message)
	go p.watcher.Run(ctx, msgs)
	fromProviders := make(chan provider.Message)
	go p.settle.relay(ctx, fromProviders, msgs)
	for _, pr := range p.providers {
		p.watcher.Expect(pr.Name())
		p.provs.Go(pr.Name(), func() {
			if err := pr.Run(ctx, fromProviders); err != nil {
				p.log.Error().Err(err).Str("provider", pr.Name()).Msg("provider stopped")
				select {
				case fromProviders <- provider.Message{ProviderName: pr.Name(), Err: err}:
				case <-ctx.Done():
				}
			}
		})
	}
}

// connObservers returns what closed connections report to: the access log
// (--accessLog, to its file or else to stdout) and per-router metrics
// (--metrics.prometheus), but for the entry points whose observability
// leaves them out; and the access log's file, if it has one, for SIGUSR1
// to reopen. The access log file stays open until the process exits:
// connections cut by the shutdown drain end (and are logged) after
// Server.Shutdown returns. Each line is one unbuffered write, so nothing is
// lost at exit.
func connObservers(st *config.Static, stdout io.Writer) (proxy.ConnObservers, *logs.File, error) {
	var o proxy.ConnObservers
	var file *logs.File
	o.Metrics = st.Metrics != nil && st.Metrics.Prometheus != nil && st.Metrics.Prometheus.AddRoutersLabels
	for name, ep := range st.EntryPoints {
		accessLogs, metrics := ep.Observability.Observes()
		if !accessLogs {
			if o.Unlogged == nil {
				o.Unlogged = map[string]bool{}
			}
			o.Unlogged[name] = true
		}
		if !metrics {
			if o.Uncounted == nil {
				o.Uncounted = map[string]bool{}
			}
			o.Uncounted[name] = true
		}
	}
	if st.AccessLog != nil {
		w := stdout
		if path := st.AccessLog.FilePath; path != "" {
			f, err := logs.OpenFile("accessLog.filePath", path)
			if err != nil {
				return o, nil, err
			}
			file, w = f, f
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
	return o, file, nil
}

// sharedStores connects (in the background) to the stores of the static
// configuration that inFlightConn middlewares name
// (docs/operations/replicas.md). A store that cannot be configured is a
// static configuration error naming its option.
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
