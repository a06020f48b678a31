// Package crowdsec is a bouncer for a CrowdSec Local API (LAPI) that decides
// at accept, from the peer address alone, whether a client is banned:
// config.go is the crowdSec block (Config) and its one validation (the URL,
// the key or key file, TLS and client certificates, the interval, the
// failure mode), every error and warning a *config.FieldError naming its
// field; stream.go reads the LAPI's decision stream one decision at a time;
// store.go keeps the bans in maps keyed by netip.Prefix, one per prefix
// length present, published as an immutable table that Decide reads in
// constant time without allocating; this file is the Bouncer (a startup
// pull, then the changes at each interval, the last decisions kept through
// an outage, failureMode open or closed until the first pull succeeds, a
// Status for the API and metrics) and the Registry that keeps one bouncer
// per middleware name across configuration generations; wire.go is the
// kind as the middleware registry knows it (Build: the Registry's bouncer
// in its Keeper, the handler, middleware.AddrGate, its counts, its log).
package crowdsec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/middleware/internal/registry"
)

// requestTimeout bounds one pull (connection, TLS, and the whole body).
const requestTimeout = 30 * time.Second

// purgeEvery is how often the bans that have ended are dropped from memory
// (Decide ignores them from their end on).
const purgeEvery = time.Minute

// Reason says why Decide decided as it did.
type Reason uint8

const (
	ReasonNone         Reason = iota // no ban covers the client
	ReasonBanned                     // a ban covers the client
	ReasonNotReady                   // no pull has succeeded yet, failureMode closed
	ReasonNotReadyOpen               // no pull has succeeded yet, failureMode open: admitted
)

// String is the reason's name, for metrics labels and logs.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "not_banned"
	case ReasonBanned:
		return "banned"
	case ReasonNotReady:
		return "lapi_unreachable"
	case ReasonNotReadyOpen:
		return "lapi_unreachable_open"
	}
	return "invalid"
}

// Decision is Decide's answer: whether the client may connect, why, and the
// banned address or range that covers it.
type Decision struct {
	Allow  bool
	Reason Reason
	Ban    netip.Prefix
}

// String says the decision in words (it allocates; Decide does not).
func (d Decision) String() string {
	switch d.Reason {
	case ReasonBanned:
		return "denied: banned by CrowdSec (" + d.Ban.String() + ")"
	case ReasonNotReady:
		return "denied: the CrowdSec LAPI has not answered yet (crowdSec.failureMode closed)"
	case ReasonNotReadyOpen:
		return "allowed: the CrowdSec LAPI has not answered yet (crowdSec.failureMode open)"
	}
	return "allowed: not banned"
}

// Status is a bouncer's state for the API and metrics.
type Status struct {
	LapiURL     string `json:"lapiURL"`
	FailureMode string `json:"failureMode"`
	// Ready: a pull has succeeded (or the bouncer took over its
	// predecessor's decisions); until then failureMode applies.
	Ready       bool      `json:"ready"`
	LastPull    time.Time `json:"lastPull,omitzero"` // the last successful pull
	LastAttempt time.Time `json:"lastAttempt,omitzero"`
	LastError   string    `json:"lastError,omitempty"` // of the last pull, empty when it succeeded
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	Pulls       uint64    `json:"pulls"`    // successful
	Failures    uint64    `json:"failures"` // failed pulls, in all
	// IPs and Ranges are the bans in force.
	IPs    int `json:"ips"`
	Ranges int `json:"ranges"`
	// Ignored counts decisions that are not bans on an Ip or a Range
	// (captcha, Country scope...); Invalid those whose value did not parse.
	Ignored uint64 `json:"ignored"`
	Invalid uint64 `json:"invalid"`
}

// Bouncer pulls a LAPI's decisions and answers Decide from them. Decide is
// safe for concurrent use and never blocks on the LAPI; the pulls run on the
// bouncer's own goroutine between Start and Stop.
type Bouncer struct {
	name   string
	cfg    Config
	s      *settings
	client *http.Client
	log    zerolog.Logger
	base   time.Time // the monotonic clock's origin

	tab   atomic.Pointer[table]
	ready atomic.Bool

	// the pulling goroutine's own
	bans      bans
	lastPurge time.Duration
	resync    bool // the next pull is a startup pull

	mu     sync.Mutex
	status Status

	startOnce, stopOnce sync.Once
	stop, done          chan struct{}
}

// New validates the crowdSec block named name (qualified) and returns its
// bouncer, not started. A block that applies but perhaps not as meant comes
// with warnings; one that cannot apply is an error naming the field (a
// *config.FieldError): its middleware, and so its routers, then fail
// closed. TLS files and the key file are read here (an error names the
// file); the LAPI is not contacted.
func New(name string, cfg *Config, log zerolog.Logger) (*Bouncer, []error, error) {
	if cfg == nil {
		return nil, nil, errors.New(Key + ": no configuration")
	}
	s, warns, err := validate(cfg)
	if err != nil {
		return nil, nil, err
	}
	tc, err := s.tlsConfig()
	if err != nil {
		return nil, nil, err
	}
	if _, err := s.apiKey(); err != nil {
		return nil, nil, err
	}
	tr := &http.Transport{
		TLSClientConfig:       tc,
		MaxIdleConns:          1,
		IdleConnTimeout:       2 * s.interval,
		ResponseHeaderTimeout: requestTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ForceAttemptHTTP2:     false,
	}
	mode := FailClosed
	if s.failOpen {
		mode = FailOpen
	}
	b := &Bouncer{
		name:   name,
		cfg:    *cfg,
		s:      s,
		client: &http.Client{Transport: tr, Timeout: requestTimeout},
		log:    log.With().Str("middleware", name).Str("middlewareType", "CrowdSec").Logger(),
		base:   time.Now(),
		resync: true,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	b.tab.Store(&table{})
	b.status = Status{LapiURL: cfg.LapiURL, FailureMode: mode}
	return b, warns, nil
}

// Name is the middleware's qualified name.
func (b *Bouncer) Name() string { return b.name }

// Interval is the time between two pulls.
func (b *Bouncer) Interval() time.Duration { return b.s.interval }

// now is the bouncer's monotonic clock.
func (b *Bouncer) now() int64 { return int64(time.Since(b.base)) }

// Decide says whether a client connecting from a may pass. It reads nothing
// from the client, does not block, and does not allocate: one map read per
// ban prefix length present. IPv4-mapped IPv6 addresses are taken as IPv4.
func (b *Bouncer) Decide(a netip.Addr) Decision {
	if !b.ready.Load() {
		if b.s.failOpen {
			return Decision{Allow: true, Reason: ReasonNotReadyOpen}
		}
		return Decision{Reason: ReasonNotReady}
	}
	a = a.Unmap().WithZone("")
	if p, ok := b.tab.Load().lookup(a, b.now()); ok {
		return Decision{Reason: ReasonBanned, Ban: p}
	}
	return Decision{Allow: true}
}

// Status returns the bouncer's state.
func (b *Bouncer) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.status
	s.Ready = b.ready.Load()
	return s
}

// Start starts pulling: at once (a startup pull), then every interval. It
// does nothing the second time.
func (b *Bouncer) Start() {
	b.startOnce.Do(func() { go b.run() })
}

// Stop stops pulling and waits for the pull under way; the decisions stay
// as they were (Decide goes on answering from them).
func (b *Bouncer) Stop() {
	b.stopOnce.Do(func() { close(b.stop) })
	started := true
	b.startOnce.Do(func() { started = false; close(b.done) })
	if started {
		<-b.done
	}
}

func (b *Bouncer) run() {
	defer close(b.done)
	defer b.client.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		b.pullOnce(ctx)
		t.Reset(b.s.interval)
	}
}

// pullOnce asks the LAPI for its decisions (all of them after a start or a
// failure, else what changed) and applies them. A failure leaves the
// decisions as they were.
func (b *Bouncer) pullOnce(ctx context.Context) {
	start := time.Now()
	startup := b.resync
	n, err := b.pull(ctx, startup)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.status.LastAttempt = start
	if err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		first := b.status.LastError == ""
		b.status.LastError, b.status.LastErrorAt = err.Error(), time.Now()
		b.status.Failures++
		b.resync = true
		if first {
			ev := b.log.Warn().Err(err)
			if !b.ready.Load() {
				ev.Str("failureMode", b.status.FailureMode).Msg("CrowdSec LAPI unreachable: no decision yet, failureMode applies")
			} else {
				ev.Msg("CrowdSec LAPI unreachable: the last decisions stay in force")
			}
		}
		return
	}
	if b.status.LastError != "" || !b.ready.Load() {
		b.log.Info().Bool("startup", startup).Int("decisions", n).Msg("CrowdSec LAPI pulled")
	}
	b.resync = false
	b.status.LastError, b.status.LastErrorAt = "", time.Time{}
	b.status.LastPull = start
	b.status.Pulls++
	b.status.IPs, b.status.Ranges = b.bans.count(b.now())
	b.ready.Store(true)
}

// pull does one request and applies its answer; it returns the number of
// decisions the answer held.
func (b *Bouncer) pull(ctx context.Context, startup bool) (int, error) {
	key, err := b.s.apiKey()
	if err != nil {
		return 0, err
	}
	u := *b.s.url
	u.RawQuery = "startup=" + fmt.Sprint(startup) + "&scopes=ip,range"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, err
	}
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	req.Header.Set("User-Agent", "tollgate-crowdsec-bouncer")
	req.Header.Set("Accept", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("pulling decisions from %s: %w", b.status.LapiURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		hint := ""
		if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
			hint = ": the LAPI refused the bouncer's credentials (apiKey: cscli bouncers add; tls.cert: its OU must be allowed)"
		}
		return 0, fmt.Errorf("pulling decisions from %s: %s %s%s", b.status.LapiURL, resp.Status, strings.TrimSpace(string(msg)), hint)
	}
	return b.apply(resp.Body, startup)
}

// apply reads a stream answer into the bans and publishes them. A startup
// answer replaces them all; one that does not decode whole changes nothing.
func (b *Bouncer) apply(r io.Reader, startup bool) (int, error) {
	type change struct {
		deleted bool
		p       netip.Prefix
		dur     time.Duration
		noDur   bool
	}
	var changes []change
	var ignored, invalid uint64
	n := 0
	err := decodeStream(r, func(deleted bool, d *streamDecision) {
		n++
		p, dur, err := parseDecision(d)
		switch {
		case errors.Is(err, errDuration) && !deleted:
			changes = append(changes, change{p: p, noDur: true})
		case errors.Is(err, errDuration):
			changes = append(changes, change{deleted: true, p: p})
		case errors.Is(err, errValue):
			invalid++
		case err != nil:
			ignored++
		default:
			changes = append(changes, change{deleted: deleted, p: p, dur: dur})
		}
	})
	if err != nil {
		return 0, fmt.Errorf("reading the decisions from %s: %w", b.status.LapiURL, err)
	}
	now := b.now()
	if startup {
		b.bans.reset()
	}
	for _, c := range changes {
		if c.deleted {
			b.bans.del(c.p)
		}
	}
	// Within one answer a value's longest ban holds.
	seen := map[netip.Prefix]bool{}
	for _, c := range changes {
		if c.deleted {
			continue
		}
		end := int64(noExpiry)
		if !c.noDur {
			if c.dur <= 0 {
				continue // ended already
			}
			end = now + int64(c.dur)
		}
		if cur, ok := b.bans.get(c.p); ok && seen[c.p] && cur >= end {
			continue
		}
		seen[c.p] = true
		b.bans.set(c.p, end)
	}
	if time.Duration(now)-b.lastPurge >= purgeEvery {
		b.bans.purge(now)
		b.lastPurge = time.Duration(now)
	}
	b.tab.Store(b.bans.publish(b.tab.Load()))
	b.mu.Lock()
	b.status.Ignored += ignored
	b.status.Invalid += invalid
	b.mu.Unlock()
	return n, nil
}

// Registry keeps one running Bouncer per qualified middleware name across
// configuration generations: a middleware whose block did not change keeps
// its bouncer (and its decisions, and its connection to the LAPI); a changed
// one gets a new bouncer that starts from its predecessor's decisions when
// the LAPI is the same. The zero value is ready to use; it is safe for
// concurrent use.
type Registry struct {
	reg registry.Registry[*Bouncer]
}

// Get returns the running bouncer for name and cfg. Errors and warnings are
// New's.
func (r *Registry) Get(name string, cfg *Config, log zerolog.Logger) (*Bouncer, []error, error) {
	if cfg == nil {
		return nil, nil, errors.New(Key + ": no configuration")
	}
	var shared []error
	r.reg.Each(func(other string, ob *Bouncer) {
		if other != name {
			if f := sameCredentials(&ob.cfg, cfg); f != "" {
				shared = append(shared, fieldErr(Key+"."+f, "the same LAPI and credentials as middleware %s: the LAPI hands each change to one pull per bouncer, so each would miss some; give each its own (cscli bouncers add)", other))
			}
		}
	})
	var warns []error
	var err error
	b := r.reg.Update(name, func(cur *Bouncer, ok bool) (*Bouncer, bool) {
		if ok && reflect.DeepEqual(cur.cfg, *cfg) {
			_, warns, err = validate(cfg)
			return cur, false
		}
		nb, w, e := New(name, cfg, log)
		if e != nil {
			warns, err = nil, e
			return nil, false
		}
		warns = w
		if ok {
			cur.Stop()
			if cur.cfg.LapiURL == cfg.LapiURL && cur.ready.Load() {
				nb.takeOver(cur)
			}
		}
		nb.Start()
		return nb, true
	})
	if err != nil {
		return nil, nil, err
	}
	return b, append(warns, shared...), nil
}

// sameCredentials names the field by which a and b are the same bouncer of
// the same LAPI, or returns "".
func sameCredentials(a, b *Config) string {
	if a.LapiURL != b.LapiURL {
		return ""
	}
	switch {
	case a.APIKey != "" && a.APIKey == b.APIKey:
		return "apiKey"
	case a.APIKeyFile != "" && a.APIKeyFile == b.APIKeyFile:
		return "apiKeyFile"
	case a.TLS != nil && b.TLS != nil && a.TLS.Cert != "" && a.TLS.Cert == b.TLS.Cert:
		return "tls.cert"
	}
	return ""
}

// takeOver starts b from old's decisions (old is stopped).
func (b *Bouncer) takeOver(old *Bouncer) {
	b.base = old.base
	for f := range old.bans.by {
		for _, m := range old.bans.by[f] {
			for p, end := range m {
				b.bans.set(p, end)
			}
		}
	}
	b.tab.Store(b.bans.publish(nil))
	b.ready.Store(true)
}

// Lookup returns the bouncer registered under name.
func (r *Registry) Lookup(name string) (*Bouncer, bool) { return r.reg.Lookup(name) }

// Each calls f for every bouncer, by name.
func (r *Registry) Each(f func(name string, b *Bouncer)) { r.reg.Each(f) }

// Sweep stops the bouncers whose names are not in keep. A middleware still
// holding one goes on answering from its last decisions.
func (r *Registry) Sweep(keep map[string]bool) {
	r.reg.Sweep(keep, func(*Bouncer) bool { return true }, func(b *Bouncer) { b.Stop() })
}

// Close stops every bouncer.
func (r *Registry) Close() { r.Sweep(nil) }
