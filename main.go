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
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/api"
	"github.com/tollgate-proxy/tollgate/check"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/cmdline"
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
	cmd := config.NewCommand()
	root := cmdline.Root(cmd, func() error { return run(cmd) }, version())
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

func newLogger(cfg *config.Log) zerolog.Logger {
	var w io.Writer = os.Stdout
	if strings.EqualFold(cfg.Format, "console") {
		// Colours only on a terminal: escape codes in a file or `docker logs`
		// break grep and log shippers.
		fi, err := os.Stdout.Stat()
		noColor := err != nil || fi.Mode()&os.ModeCharDevice == 0
		w = zerolog.ConsoleWriter{Out: os.Stdout, TimeFormat: time.RFC3339, NoColor: noColor}
	}
	level, err := zerolog.ParseLevel(strings.ToLower(cfg.Level))
	if err != nil || cfg.Level == "" {
		level = zerolog.InfoLevel
	}
	if strings.EqualFold(cfg.Level, "WARN") || strings.EqualFold(cfg.Level, "WARNING") {
		level = zerolog.WarnLevel
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

func run(cmd *config.Command) error {
	st := &cmd.Static
	if err := st.Validate(); err != nil {
		return err
	}
	log := newLogger(st.Log)
	// Signals are ours from the start: a SIGTERM that arrives while the
	// entry points start must begin a drain, not kill the process.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	srv, err := proxy.NewServer(st.EntryPoints, log)
	if err != nil {
		return err
	}
	obs, err := connObservers(st)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	srv.State().SetConnObservers(obs)

	watcher := &provider.Watcher{
		Throttle: time.Duration(st.Providers.ProvidersThrottleDuration),
		Apply:    func(c *config.TCPConfiguration) { srv.Apply(c) },
		Log:      log,
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

	admin, err := adminListeners(st, srv, watcher, log)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs := make(chan provider.Message)
	go watcher.Run(ctx, msgs)
	var wg sync.WaitGroup
	for _, p := range providers {
		watcher.Expect(p.Name())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Run(ctx, msgs); err != nil {
				log.Error().Err(err).Str("provider", p.Name()).Msg("provider stopped")
				select {
				case msgs <- provider.Message{ProviderName: p.Name(), Err: err}:
				case <-ctx.Done():
				}
			}
		}()
	}

	srv.Start()
	for _, name := range srv.EntryPointNames() {
		log.Info().Str("entrypoint", name).Str("address", srv.EntryPoint(name).Addr().String()).Msg("entry point listening")
	}

	for sig := range sigs {
		if sig == syscall.SIGHUP {
			if fileProv != nil {
				log.Info().Str("provider", file.Name).Msg("SIGHUP: reloading files")
				fileProv.Reload()
			}
			continue
		}
		log.Info().Str("signal", sig.String()).Msg("shutting down: draining connections")
		break
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
				log.Warn().Str("signal", sig.String()).Msg("second signal: closing the connections still draining and exiting now")
				stopDrain()
				return
			}
		}
	}()
	cancel()
	for _, a := range admin {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		_ = a.Shutdown(sctx)
		scancel()
	}
	srv.Shutdown(drain)
	stopDrain()
	wg.Wait()
	log.Info().Msg("stopped")
	return nil
}

// adminListeners starts what --api and --metrics.prometheus expose:
//
//   - --api: the admin API (/ping, /api/...), plus /metrics with
//     --metrics.prometheus unless metrics have an address of their own;
//   - --metrics.prometheus without --api: /metrics and /ping only, on the
//     admin address (127.0.0.1:8080) or metrics.prometheus.address;
//   - metrics.prometheus.address: /metrics (and /ping) there, apart from the API.
//
// Each listener has the admin server's timeouts and connection bound.
func adminListeners(st *config.Static, srv *proxy.Server, w *provider.Watcher, log zerolog.Logger) ([]*http.Server, error) {
	var metrics http.Handler
	metricsAddr := ""
	if st.Metrics != nil && st.Metrics.Prometheus != nil {
		metrics = api.MetricsHandler(srv, w)
		metricsAddr = st.Metrics.Prometheus.Address
		if metricsAddr == "" && st.API == nil {
			metricsAddr = config.DefaultAPIAddress
		}
	}
	type listener struct {
		key, addr, what string
		h               http.Handler
	}
	var ls []listener
	if st.API != nil {
		src := api.Sources{Server: srv, Watcher: w}
		if metrics != nil && metricsAddr == "" {
			src.Metrics = metrics
		}
		ls = append(ls, listener{"api.address", st.API.Address, "admin API", api.Handler(src)})
	}
	if metrics != nil && metricsAddr != "" {
		ls = append(ls, listener{"metrics.prometheus.address", metricsAddr, "metrics (only /metrics and /ping)", api.MetricsOnly(metrics)})
	}
	var started []*http.Server
	for _, l := range ls {
		ln, err := api.Listen(l.addr)
		if err != nil {
			for _, s := range started {
				_ = s.Close()
			}
			return nil, fmt.Errorf("%s=%q: cannot listen: %w", l.key, l.addr, err)
		}
		hs := api.NewServer(l.h)
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Str("address", ln.Addr().String()).Msg(l.what + " stopped")
			}
		}()
		log.Info().Str("address", ln.Addr().String()).Msg(l.what + " listening")
		started = append(started, hs)
	}
	return started, nil
}

// labelProviders builds the Docker, Consul Catalog, Kubernetes CRD, Docker
// Swarm and KV store providers that the static configuration enables. A new provider (Swarm,
// KV) is one more case here (ARCHITECTURE.md).
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
	}
	return o, nil
}
