package health

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
)

// Health-check defaults for a loadBalancer's healthCheck section when it
// leaves interval or timeout unset (an empty `healthCheck: {}` too):
// Traefik's.
const (
	DefaultInterval = 30 * time.Second
	DefaultTimeout  = 5 * time.Second
)

// Spec is a validated TCP health check: every Interval (Unhealthy, while
// the server is DOWN), dial the server (on Port, when set), write Send, and
// expect a reply that starts with Expect, all within Timeout. It is
// comparable, so that a reload with the same check keeps the running
// checker.
type Spec struct {
	Interval, Unhealthy, Timeout time.Duration
	Port                         int
	Send, Expect                 string
}

// NewSpec validates hc and fills in the defaults. The error names the
// offending field and value; warn, when not nil, is about a value that
// applies otherwise than it reads (a FieldError).
func NewSpec(hc *config.TCPHealthCheck) (s Spec, warn, err error) {
	s = Spec{
		Interval: time.Duration(hc.Interval),
		Timeout:  time.Duration(hc.Timeout),
		Port:     hc.Port,
		Send:     hc.Send,
		Expect:   hc.Expect,
	}
	switch {
	case s.Interval < 0:
		return s, nil, config.FieldErrorf("loadBalancer.healthCheck.interval", "healthCheck.interval=%s: must not be negative", hc.Interval)
	case hc.UnhealthyInterval != nil && *hc.UnhealthyInterval < 0:
		return s, nil, config.FieldErrorf("loadBalancer.healthCheck.unhealthyInterval", "healthCheck.unhealthyInterval=%s: must not be negative", *hc.UnhealthyInterval)
	case s.Timeout < 0:
		return s, nil, config.FieldErrorf("loadBalancer.healthCheck.timeout", "healthCheck.timeout=%s: must not be negative", hc.Timeout)
	case s.Port < 0 || s.Port > 65535:
		return s, nil, config.FieldErrorf("loadBalancer.healthCheck.port", "healthCheck.port=%d: want 1-65535, or 0 for the server's own port", hc.Port)
	}
	if s.Interval == 0 {
		s.Interval = DefaultInterval
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	// Unset, a DOWN server is probed as often as an UP one; 0 means the
	// default interval, as in Traefik (not the service's interval).
	s.Unhealthy = s.Interval
	if u := hc.UnhealthyInterval; u != nil {
		s.Unhealthy = time.Duration(*u)
		if s.Unhealthy == 0 {
			s.Unhealthy = DefaultInterval
			warn = config.FieldErrorf("loadBalancer.healthCheck.unhealthyInterval", "healthCheck.unhealthyInterval=0s means the default, %s, as in Traefik: unset it to probe DOWN servers every interval (%s)", DefaultInterval, s.Interval)
		}
	}
	return s, warn, nil
}

// Next is the time until the probe after one that found the server up or
// down (Interval when Unhealthy is not set: never a probe loop without pause).
func (s Spec) Next(up bool) time.Duration {
	if !up && s.Unhealthy > 0 {
		return s.Unhealthy
	}
	return s.Interval
}

// Target returns the address the check dials for a server address.
func (s Spec) Target(addr string) (string, error) {
	if s.Port == 0 {
		return addr, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", config.FieldErrorf("loadBalancer.healthCheck.port", "healthCheck.port: server address %q is not host:port: %w", addr, err)
	}
	return net.JoinHostPort(host, strconv.Itoa(s.Port)), nil
}

// ErrExpect is a reply that does not start with the expected bytes.
var ErrExpect = errors.New("health check reply does not start with the expected bytes")

// Probe runs one check against target. Cancelling ctx interrupts it.
func (s Spec) Probe(ctx context.Context, target string) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// Reads and writes do not watch ctx: a cancel moves the deadline to now.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if s.Send != "" {
		if _, err := io.WriteString(conn, s.Send); err != nil {
			return err
		}
	}
	if s.Expect != "" {
		buf := make([]byte, len(s.Expect))
		if _, err := io.ReadFull(conn, buf); err != nil {
			return fmt.Errorf("reading the health check reply: %w", err)
		}
		if !bytes.Equal(buf, []byte(s.Expect)) {
			return fmt.Errorf("%w: got %q, want %q", ErrExpect, buf, s.Expect)
		}
	}
	return nil
}

// Registry owns the health checkers of every load balancer with a
// healthCheck, keyed by qualified service name and server address, so that
// a server's UP/DOWN survives reloads (a compiled server holds the registry's
// *atomic.Bool, not a copy). Compile acquires the checkers a configuration
// needs and then sweeps the ones it no longer names; Close stops them all.
// The zero value is ready to use.
type Registry struct {
	mu       sync.Mutex
	services map[string]*healthService
	gen      uint64 // the current Compile; bumped by sweep
	closed   bool
	// seed is the UP/DOWN a predecessor process handed over (proxy.StateOptions.Health),
	// by service and server: a new checker starts there instead of UP.
	seed map[string]map[string]bool
}

type healthService struct {
	gen     uint64              // last Compile that acquired it
	targets map[string]*Checker // by server address
}

// Checker is one server's checker: a goroutine owned by the registry,
// stopped by halt.
type Checker struct {
	up     *atomic.Bool // shared with compiled servers; survives restarts
	onUp   atomic.Pointer[func()]
	spec   Spec
	cancel context.CancelFunc
	done   chan struct{}
}

// Acquire returns the health of each of addrs (a service's servers, in
// order) and makes sure each is checked with spec: a running checker with the
// same spec is kept, one with another spec is restarted with its state, a new
// server starts UP and is probed at once, and a server no longer listed stops
// being checked.
//
// onUp, when not nil, is called when a server comes back UP.
func (r *Registry) Acquire(service string, spec Spec, addrs []string, log zerolog.Logger, onUp func()) []*atomic.Bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.services == nil {
		r.services = map[string]*healthService{}
	}
	svc := r.services[service]
	if svc == nil {
		svc = &healthService{targets: map[string]*Checker{}}
		r.services[service] = svc
	}
	svc.gen = r.gen
	listed := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		listed[a] = true
	}
	for addr, t := range svc.targets {
		if !listed[addr] {
			t.halt()
			delete(svc.targets, addr)
		}
	}
	ups := make([]*atomic.Bool, len(addrs))
	for i, addr := range addrs {
		t := svc.targets[addr]
		if t == nil || t.spec != spec {
			up := new(atomic.Bool)
			up.Store(true)
			if was, ok := r.seed[service][addr]; ok {
				up.Store(was)
				delete(r.seed[service], addr) // once: later checkers start UP
			}
			if t != nil {
				t.halt()
				up = t.up
			}
			t = &Checker{up: up, spec: spec}
			svc.targets[addr] = t
			if !r.closed {
				target, _ := spec.Target(addr) // the caller validated it
				t.start(target, log.With().Str("server", addr).Logger())
			}
		}
		if onUp != nil {
			t.onUp.Store(&onUp)
		} else {
			t.onUp.Store(nil)
		}
		ups[i] = t.up
	}
	return ups
}

// Sweep stops the checkers of every service the Compile that just ended did
// not acquire (removed, disabled, or no longer health-checked).
func (r *Registry) Sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, svc := range r.services {
		if svc.gen != r.gen {
			for _, t := range svc.targets {
				t.halt()
			}
			delete(r.services, name)
		}
	}
	r.gen++
}

// Close stops every checker and waits for them; later acquires start none.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, svc := range r.services {
		for _, t := range svc.targets {
			t.halt()
		}
	}
}

// Status returns the UP/DOWN of a health-checked service's servers, or nil.
func (r *Registry) Status(service string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	svc := r.services[service]
	if svc == nil {
		return nil
	}
	out := make(map[string]string, len(svc.targets))
	for addr, t := range svc.targets {
		out[addr] = UpDown(t.up)
	}
	return out
}

// UpDown says a server's health as the API does: UP (also for nil, a
// server without a check) or DOWN.
func UpDown(up *atomic.Bool) string {
	if up == nil || up.Load() {
		return "UP"
	}
	return "DOWN"
}

func (t *Checker) start(target string, log zerolog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	t.done = make(chan struct{})
	go t.run(ctx, target, log)
}

// halt stops the checker, if one runs, and waits for it: a probe in flight
// is interrupted, so this takes microseconds.
func (t *Checker) halt() {
	if t.cancel == nil {
		return
	}
	t.cancel()
	<-t.done
	t.cancel = nil
}

// run probes target at once and then interval after each probe ends, until
// ctx is cancelled, and records the result in t.up.
func (t *Checker) run(ctx context.Context, target string, log zerolog.Logger) {
	defer close(t.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		err := t.spec.Probe(ctx, target)
		if ctx.Err() != nil {
			return // halted mid-probe: the result says nothing about the server
		}
		up := err == nil
		if t.up.Swap(up) != up {
			if up {
				log.Info().Msg("server is UP: health check passed")
				if f := t.onUp.Load(); f != nil {
					(*f)()
				}
			} else {
				log.Warn().Err(err).Msg("server is DOWN: health check failed; it gets no new connections")
			}
		}
		timer.Reset(t.spec.Next(up))
	}
}

// Checker returns the checker of a service's server, or nil: for tests and
// the API's views.
func (r *Registry) Checker(service, addr string) *Checker {
	r.mu.Lock()
	defer r.mu.Unlock()
	if svc := r.services[service]; svc != nil {
		return svc.targets[addr]
	}
	return nil
}

// Up is the server's health, shared with every compiled server that
// dials it.
func (t *Checker) Up() *atomic.Bool { return t.up }

// Done is closed once the checker's goroutine has stopped.
func (t *Checker) Done() <-chan struct{} { return t.done }

// Running reports whether a goroutine was started for the checker and not
// halted.
func (t *Checker) Running() bool { return t.cancel != nil }

// Status is one health-checked server's state, as handed over to a new
// process at an upgrade.
type Status struct {
	Service string
	Server  string
	Up      bool
}

// All returns every health-checked server's UP/DOWN now, sorted.
func (r *Registry) All() []Status {
	r.mu.Lock()
	var out []Status
	for name, svc := range r.services {
		for addr, t := range svc.targets {
			out = append(out, Status{name, addr, t.up.Load()})
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Service != out[j].Service {
			return out[i].Service < out[j].Service
		}
		return out[i].Server < out[j].Server
	})
	return out
}

// Seed makes the checkers the first configuration starts begin where a
// predecessor's were instead of UP. Call it before the first Acquire.
func (r *Registry) Seed(hs []Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seed == nil {
		r.seed = map[string]map[string]bool{}
	}
	for _, h := range hs {
		if r.seed[h.Service] == nil {
			r.seed[h.Service] = map[string]bool{}
		}
		r.seed[h.Service][h.Server] = h.Up
	}
}
