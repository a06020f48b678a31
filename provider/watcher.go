package provider

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/config"
)

// Status is what the API shows about a provider.
type Status struct {
	Name       string    `json:"name"`
	State      string    `json:"state"` // "starting", "ok" or "error"
	LastUpdate time.Time `json:"lastUpdate,omitzero"`
	LastError  string    `json:"lastError,omitempty"`
	ErrorSince time.Time `json:"errorSince,omitzero"`
	Problems   []string  `json:"problems,omitempty"`
	Warnings   []string  `json:"warnings,omitempty"`
	Updates    uint64    `json:"updates"`
	Errors     uint64    `json:"errors"` // error reports received, ever
}

// Watcher merges provider messages into one qualified configuration and
// hands it to Apply: latest message wins per provider, applies are at most
// one per throttle period (the first change after a quiet period applies at
// once), and a merged configuration equal to the last applied one is skipped.
//
// Messages are received while a merge or an Apply runs (a compile of a large
// configuration takes seconds): no provider waits behind it, and the next
// apply takes every provider's latest configuration, however many came
// meanwhile, never each in turn.
type Watcher struct {
	// Throttle is the minimum time between two applies.
	Throttle time.Duration
	// Apply receives each new merged configuration. It runs on a goroutine
	// of the watcher's, one call at a time, and must not keep cfg's maps
	// for writing.
	Apply func(cfg *config.TCPConfiguration)
	// Log receives provider errors and problems.
	Log zerolog.Logger
	// Limits bound each provider's configuration (nil: the defaults): one
	// over a limit is refused as a provider error, and the provider's last
	// good configuration stays.
	Limits *config.Limits

	mu       sync.Mutex
	configs  map[string]*config.Dynamic
	statuses map[string]*Status
	last     *config.TCPConfiguration
	applied  bool
	// mergeProblems are MergeReport's problems for the configurations
	// last merged.
	mergeProblems []string
}

// Expect registers a provider so that it shows as "starting" until it first reports.
func (w *Watcher) Expect(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	if _, ok := w.statuses[name]; !ok {
		w.statuses[name] = &Status{Name: name, State: "starting"}
	}
}

func (w *Watcher) init() {
	if w.configs == nil {
		w.configs = map[string]*config.Dynamic{}
		w.statuses = map[string]*Status{}
	}
}

// Statuses returns a copy of every provider's status, sorted by name.
func (w *Watcher) Statuses() []Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Status, 0, len(w.statuses))
	for _, s := range w.statuses {
		c := *s
		c.Problems = append([]string(nil), s.Problems...)
		c.Warnings = append([]string(nil), s.Warnings...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Applied returns the merged configuration last handed to Apply (nil
// before the first). It is shared: callers must not modify it.
func (w *Watcher) Applied() *config.TCPConfiguration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// MergeProblems returns the problems of the last merge (MergeReport):
// resources that several providers define and that therefore do not apply.
func (w *Watcher) MergeProblems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.mergeProblems...)
}

// Run consumes messages until ctx is done, and returns once the apply in
// progress, if any, has returned.
func (w *Watcher) Run(ctx context.Context, in <-chan Message) {
	w.mu.Lock()
	w.init()
	w.mu.Unlock()
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.applier(ctx, wake)
	}()
	defer func() { <-done }()
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-in:
			if !w.record(m) {
				continue
			}
			select {
			case wake <- struct{}{}:
			default: // an apply is already due: it reads the latest
			}
		}
	}
}

// applier applies the merged configuration after each wake-up, at most once
// per throttle period (the first change after a quiet period at once). A
// wake-up while it merges or applies makes one more apply, of the
// configurations recorded by then.
//
// It runs on a thread of its own at a lower priority (LowPriority): merging
// and compiling a large configuration take a core for seconds, and the
// proxy's event loops must get the CPU first.
func (w *Watcher) applier(ctx context.Context, wake <-chan struct{}) {
	LowPriority()
	var lastApply time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
		if !Sleep(ctx, w.Throttle-time.Since(lastApply)) {
			return
		}
		select {
		case <-wake: // recorded before the merge below: it is in it
		default:
		}
		lastApply = time.Now()
		w.applyMerged()
	}
}

// lowNice is the nice value LowPriority gives a thread.
const lowNice = 10

// LowPriority locks the calling goroutine to its thread and lowers that
// thread's priority (nice 10), for the goroutines that read, merge and
// compile configurations: the thread ends with the goroutine, never
// returning to the runtime's pool. Where the priority cannot be set, the
// goroutine runs as before.
func LowPriority() {
	runtime.LockOSThread()
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), lowNice)
}

// record stores m and reports whether the configuration may have changed.
func (w *Watcher) record(m Message) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	st, ok := w.statuses[m.ProviderName]
	if !ok {
		st = &Status{Name: m.ProviderName}
		w.statuses[m.ProviderName] = st
	}
	log := w.Log.With().Str("provider", m.ProviderName).Logger()
	if m.Err == nil {
		if err := w.Limits.Resolved().Check(m.Configuration); err != nil {
			m.Err = err
		}
	}
	if m.Err != nil {
		st.Errors++
		if st.State != "error" {
			st.ErrorSince = time.Now()
		}
		st.State = "error"
		st.LastError = m.Err.Error()
		if _, have := w.configs[m.ProviderName]; have {
			log.Error().Err(m.Err).Msg("provider error: keeping its last good configuration")
		} else {
			log.Error().Err(m.Err).Msg("provider error: it has delivered no configuration yet, so nothing from it is served")
		}
		return false
	}
	if st.State == "error" {
		log.Info().Msg("provider recovered")
	}
	st.State = "ok"
	st.LastError = ""
	st.ErrorSince = time.Time{}
	st.LastUpdate = time.Now()
	st.Updates++
	if !reflect.DeepEqual(st.Problems, m.Problems) {
		for _, p := range m.Problems {
			log.Error().Msg(p)
		}
	}
	st.Problems = m.Problems
	if !reflect.DeepEqual(st.Warnings, m.Warnings) {
		for _, w := range m.Warnings {
			log.Warn().Msg(w)
		}
	}
	st.Warnings = m.Warnings
	w.configs[m.ProviderName] = m.Configuration
	return true
}

func (w *Watcher) applyMerged() {
	// Merged outside the lock: record goes on meanwhile.
	w.mu.Lock()
	configs := make(map[string]*config.Dynamic, len(w.configs))
	for k, v := range w.configs {
		configs[k] = v
	}
	last, applied := w.last, w.applied
	w.mu.Unlock()
	merged, problems := MergeReport(configs)
	same := applied && reflect.DeepEqual(merged, last)
	w.mu.Lock()
	if !reflect.DeepEqual(problems, w.mergeProblems) {
		for _, p := range problems {
			w.Log.Error().Msg(p)
		}
		w.mergeProblems = problems
	}
	if !same {
		w.last = merged
		w.applied = true
	}
	w.mu.Unlock()
	if same {
		return
	}
	w.Apply(merged)
}

// Merge qualifies every provider's resources as `name@provider` and merges
// them. References without `@` are resolved against the referencing
// resource's own provider; `name@other` crosses providers. Provider configs
// are not modified. It is MergeReport without the problems.
func Merge(configs map[string]*config.Dynamic) *config.TCPConfiguration {
	out, _ := MergeReport(configs)
	return out
}

// DefaultTLSName is the name of the TLS options and of the TLS store that
// are not qualified with their provider (Traefik's `default`): the options
// a router without `tls.options` uses, the store whose default
// certificate is served when no certificate matches.
const DefaultTLSName = "default"

// MergeReport is Merge, with the problems of the merge itself: TLS options
// or a TLS store named `default` in more than one provider.
//
// Qualified as `name@provider`: routers, services, middlewares, servers
// transports, TLS options and stores but `default`; and the references
// to them (a router's service, middlewares and tls.options — `default`
// stays as it is —, a weighted service's members, a load balancer's
// serversTransport). Certificates are pooled from every provider.
//
// The merged TLS section is nil when no provider has one. Otherwise its
// options hold `default` (empty when no provider defines it), except when
// several providers define it: then, as in Traefik, it is left out with a
// problem, so that the routers using it fail rather than silently take
// other settings. The same holds for the `default` store.
func MergeReport(configs map[string]*config.Dynamic) (*config.TCPConfiguration, []string) {
	var routers, services, middlewares int
	for _, d := range configs {
		if d != nil && d.TCP != nil {
			routers, services, middlewares = routers+len(d.TCP.Routers), services+len(d.TCP.Services), middlewares+len(d.TCP.Middlewares)
		}
	}
	out := &config.TCPConfiguration{ // sized: growing maps of 100,000 entries is a tenth of a merge
		Routers:     make(map[string]*config.TCPRouter, routers),
		Services:    make(map[string]*config.TCPService, services),
		Middlewares: make(map[string]*config.TCPMiddleware, middlewares),
	}
	var defaultOptions, defaultStores []string
	for _, prov := range sortedProviders(configs) {
		d := configs[prov]
		if d == nil {
			continue
		}
		if d.TCP != nil {
			mergeTCP(out, d.TCP, prov)
		}
		if d.TLS != nil {
			if out.TLS == nil {
				out.TLS = &config.TLSConfiguration{Options: map[string]config.TLSOptions{}, Stores: map[string]config.TLSStore{}}
			}
			for _, c := range d.TLS.Certificates {
				if c == nil {
					continue
				}
				cp := *c
				cp.Stores = append([]string(nil), c.Stores...)
				out.TLS.Certificates = append(out.TLS.Certificates, &cp)
			}
			for name, o := range d.TLS.Options {
				if name == DefaultTLSName {
					defaultOptions = append(defaultOptions, prov)
				} else {
					name = Qualify(name, prov)
				}
				out.TLS.Options[name] = o
			}
			for name, st := range d.TLS.Stores {
				if name == DefaultTLSName {
					defaultStores = append(defaultStores, prov)
				} else {
					name = Qualify(name, prov)
				}
				out.TLS.Stores[name] = st
			}
		}
	}
	var problems []string
	if out.TLS != nil {
		switch {
		case len(defaultOptions) == 0:
			out.TLS.Options[DefaultTLSName] = config.TLSOptions{}
		case len(defaultOptions) > 1:
			delete(out.TLS.Options, DefaultTLSName)
			problems = append(problems, fmt.Sprintf("TLS options %q defined in several providers (%s): none of them applies, and the routers that use them are disabled", DefaultTLSName, strings.Join(defaultOptions, ", ")))
		}
		if len(defaultStores) > 1 {
			delete(out.TLS.Stores, DefaultTLSName)
			problems = append(problems, fmt.Sprintf("TLS store %q defined in several providers (%s): none of them applies", DefaultTLSName, strings.Join(defaultStores, ", ")))
		}
	}
	return out, problems
}

func sortedProviders(configs map[string]*config.Dynamic) []string {
	names := make([]string, 0, len(configs))
	for p := range configs {
		names = append(names, p)
	}
	sort.Strings(names)
	return names
}

// mergeTCP adds one provider's tcp section to out, qualified; it copies
// what it changes.
func mergeTCP(out *config.TCPConfiguration, tcp *config.TCPConfiguration, prov string) {
	for name, r := range tcp.Routers {
		if r == nil {
			out.Routers[Qualify(name, prov)] = nil
			continue
		}
		cp := *r // EntryPoints shared: neither the provider nor Compile writes a configuration
		if r.Service != "" {
			cp.Service = Qualify(r.Service, prov)
		}
		cp.Middlewares = nil
		if len(r.Middlewares) > 0 {
			cp.Middlewares = make([]string, len(r.Middlewares))
			for i, m := range r.Middlewares {
				cp.Middlewares[i] = Qualify(m, prov)
			}
		}
		if r.TLS != nil {
			t := *r.TLS
			if t.Options != "" && t.Options != DefaultTLSName {
				t.Options = Qualify(t.Options, prov)
			}
			cp.TLS = &t
		}
		out.Routers[Qualify(name, prov)] = &cp
	}
	for name, s := range tcp.Services {
		if s != nil && s.Weighted != nil {
			cp := *s
			w := *s.Weighted
			w.Services = make([]config.TCPWRRService, len(s.Weighted.Services))
			for i, m := range s.Weighted.Services {
				m.Name = Qualify(m.Name, prov)
				w.Services[i] = m
			}
			cp.Weighted = &w
			s = &cp
		}
		if s != nil && s.LoadBalancer != nil && s.LoadBalancer.ServersTransport != "" {
			cp := *s
			lb := *s.LoadBalancer
			lb.ServersTransport = Qualify(lb.ServersTransport, prov)
			cp.LoadBalancer = &lb
			s = &cp
		}
		out.Services[Qualify(name, prov)] = s
	}
	for name, m := range tcp.Middlewares {
		out.Middlewares[Qualify(name, prov)] = m
	}
	for name, st := range tcp.ServersTransports {
		if out.ServersTransports == nil {
			out.ServersTransports = map[string]*config.TCPServersTransport{}
		}
		out.ServersTransports[Qualify(name, prov)] = st
	}
}

// Qualify returns name@provider unless name already names a provider.
func Qualify(name, provider string) string {
	if strings.Contains(name, "@") {
		return name
	}
	return name + "@" + provider
}
