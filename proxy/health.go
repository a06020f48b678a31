package proxy

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
// leaves interval or timeout unset.
const (
	DefaultHealthCheckInterval = 10 * time.Second
	DefaultHealthCheckTimeout  = 3 * time.Second
)

// healthSpec is a validated TCP health check: every interval, dial the
// server (on port, when set), write send, and expect a reply that starts
// with expect, all within timeout. It is comparable, so that a reload with
// the same check keeps the running checker.
type healthSpec struct {
	interval, timeout time.Duration
	port              int
	send, expect      string
}

// newHealthSpec validates hc and fills in the defaults. The error names the
// offending field and value.
func newHealthSpec(hc *config.TCPHealthCheck) (healthSpec, error) {
	s := healthSpec{
		interval: time.Duration(hc.Interval),
		timeout:  time.Duration(hc.Timeout),
		port:     hc.Port,
		send:     hc.Send,
		expect:   hc.Expect,
	}
	switch {
	case s.interval < 0:
		return s, config.FieldErrorf("loadBalancer.healthCheck.interval", "healthCheck.interval=%s: must not be negative", hc.Interval)
	case s.timeout < 0:
		return s, config.FieldErrorf("loadBalancer.healthCheck.timeout", "healthCheck.timeout=%s: must not be negative", hc.Timeout)
	case s.port < 0 || s.port > 65535:
		return s, config.FieldErrorf("loadBalancer.healthCheck.port", "healthCheck.port=%d: want 1-65535, or 0 for the server's own port", hc.Port)
	}
	if s.interval == 0 {
		s.interval = DefaultHealthCheckInterval
	}
	if s.timeout == 0 {
		s.timeout = DefaultHealthCheckTimeout
	}
	return s, nil
}

// target returns the address the check dials for a server address.
func (s healthSpec) target(addr string) (string, error) {
	if s.port == 0 {
		return addr, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", config.FieldErrorf("loadBalancer.healthCheck.port", "healthCheck.port: server address %q is not host:port: %w", addr, err)
	}
	return net.JoinHostPort(host, strconv.Itoa(s.port)), nil
}

var errHealthExpect = errors.New("health check reply does not start with the expected bytes")

// probe runs one check against target. Cancelling ctx interrupts it.
func (s healthSpec) probe(ctx context.Context, target string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
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
	if s.send != "" {
		if _, err := io.WriteString(conn, s.send); err != nil {
			return err
		}
	}
	if s.expect != "" {
		buf := make([]byte, len(s.expect))
		if _, err := io.ReadFull(conn, buf); err != nil {
			return fmt.Errorf("reading the health check reply: %w", err)
		}
		if !bytes.Equal(buf, []byte(s.expect)) {
			return fmt.Errorf("%w: got %q, want %q", errHealthExpect, buf, s.expect)
		}
	}
	return nil
}

// healthRegistry owns the health checkers of every load balancer with a
// healthCheck, keyed by qualified service name and server address, so that
// a server's UP/DOWN survives reloads (a compiled server holds the registry's
// *atomic.Bool, not a copy). Compile acquires the checkers a configuration
// needs and then sweeps the ones it no longer names; Close stops them all.
// The zero value is ready to use.
type healthRegistry struct {
	mu       sync.Mutex
	services map[string]*healthService
	gen      uint64 // the current Compile; bumped by sweep
	closed   bool
	// seed is the UP/DOWN a predecessor process handed over (SeedHealth),
	// by service and server: a new checker starts there instead of UP.
	seed map[string]map[string]bool
}

type healthService struct {
	gen     uint64                   // last Compile that acquired it
	targets map[string]*healthTarget // by server address
}

// healthTarget is one server's checker: a goroutine owned by the registry,
// stopped by halt.
type healthTarget struct {
	up     *atomic.Bool // shared with compiled servers; survives restarts
	onUp   atomic.Pointer[func()]
	spec   healthSpec
	cancel context.CancelFunc
	done   chan struct{}
}

// acquire returns the health of each of addrs (a service's servers, in
// order) and makes sure each is checked with spec: a running checker with the
// same spec is kept, one with another spec is restarted with its state, a new
// server starts UP and is probed at once, and a server no longer listed stops
// being checked.
//
// onUp, when not nil, is called when a server comes back UP.
func (r *healthRegistry) acquire(service string, spec healthSpec, addrs []string, log zerolog.Logger, onUp func()) []*atomic.Bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.services == nil {
		r.services = map[string]*healthService{}
	}
	svc := r.services[service]
	if svc == nil {
		svc = &healthService{targets: map[string]*healthTarget{}}
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
			t = &healthTarget{up: up, spec: spec}
			svc.targets[addr] = t
			if !r.closed {
				target, _ := spec.target(addr) // loadBalancer validated it
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

// sweep stops the checkers of every service the Compile that just ended did
// not acquire (removed, disabled, or no longer health-checked).
func (r *healthRegistry) sweep() {
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

// close stops every checker and waits for them; later acquires start none.
func (r *healthRegistry) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, svc := range r.services {
		for _, t := range svc.targets {
			t.halt()
		}
	}
}

// status returns the UP/DOWN of a health-checked service's servers, or nil.
func (r *healthRegistry) status(service string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	svc := r.services[service]
	if svc == nil {
		return nil
	}
	out := make(map[string]string, len(svc.targets))
	for addr, t := range svc.targets {
		out[addr] = upDown(t.up)
	}
	return out
}

func upDown(up *atomic.Bool) string {
	if up == nil || up.Load() {
		return "UP"
	}
	return "DOWN"
}

func (t *healthTarget) start(target string, log zerolog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	t.done = make(chan struct{})
	go t.run(ctx, target, log)
}

// halt stops the checker, if one runs, and waits for it: a probe in flight
// is interrupted, so this takes microseconds.
func (t *healthTarget) halt() {
	if t.cancel == nil {
		return
	}
	t.cancel()
	<-t.done
	t.cancel = nil
}

// run probes target at once and then interval after each probe ends, until
// ctx is cancelled, and records the result in t.up.
func (t *healthTarget) run(ctx context.Context, target string, log zerolog.Logger) {
	defer close(t.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		err := t.spec.probe(ctx, target)
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
		timer.Reset(t.spec.interval)
	}
}

// ServerStatus returns the live UP/DOWN of each server of the named
// (qualified) load-balancer service with a health check, or nil for a
// service without one (its servers are always UP). Runtime.Services holds
// the status as of the last reload; this is the status now.
func (s *State) ServerStatus(service string) map[string]string {
	return s.health.status(service)
}

// HealthStatus is one health-checked server's state, as handed over to a
// new process at an upgrade.
type HealthStatus struct {
	Service string
	Server  string
	Up      bool
}

// Health returns every health-checked server's UP/DOWN now, sorted.
func (s *State) Health() []HealthStatus {
	r := &s.health
	r.mu.Lock()
	var out []HealthStatus
	for name, svc := range r.services {
		for addr, t := range svc.targets {
			out = append(out, HealthStatus{name, addr, t.up.Load()})
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

// SeedHealth makes the checkers the first configuration starts begin where
// a predecessor's were (a server DOWN there gets no connection here before
// its first check passes) instead of UP. Call it before the first Apply.
func (s *State) SeedHealth(hs []HealthStatus) {
	r := &s.health
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

// Close stops the work State owns in the background (health checkers) and
// waits for it. Compiling with a closed State starts no checker.
func (s *State) Close() { s.health.close() }
