// Package engine is what the Docker and Swarm providers share about the
// Docker engine: where it is and the client that talks to it (New), and how
// one connection to it is followed (Follow): ping, subscribe to events, list,
// then list again on every event, poll and retry.
package engine

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// DefaultEndpoint is used when neither the provider's endpoint option nor
// DOCKER_HOST is set.
const DefaultEndpoint = "unix:///var/run/docker.sock"

// Auth is how the client reaches an engine behind TLS or a proxy:
// Traefik's tls and username/password of the Docker and Swarm providers.
type Auth struct {
	TLS                *tls.Config // nil: none (unless DOCKER_CERT_PATH)
	Username, Password string      // HTTP basic authentication, when Username is set
}

// New returns a client for endpoint, else DOCKER_HOST, else DefaultEndpoint,
// and the endpoint it chose. The API version is negotiated with the engine
// on the first request; New itself does not contact the engine. The error
// is about a malformed endpoint.
func New(endpoint string, auth Auth) (*client.Client, string, error) {
	if endpoint == "" {
		endpoint = os.Getenv(client.EnvOverrideHost)
	}
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	opts := []client.Opt{client.FromEnv}
	if auth.TLS != nil {
		// A transport of its own with the TLS settings; WithHost then sets
		// its dialer for the endpoint, and the client speaks https.
		opts = append(opts, client.WithHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: auth.TLS}, CheckRedirect: client.CheckRedirect}))
	}
	if auth.Username != "" {
		cred := base64.StdEncoding.EncodeToString([]byte(auth.Username + ":" + auth.Password))
		opts = append(opts, client.WithHTTPHeaders(map[string]string{"Authorization": "Basic " + cred}))
	}
	opts = append(opts, client.WithHost(endpoint), client.WithAPIVersionNegotiation())
	cl, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, endpoint, err
	}
	return cl, endpoint, nil
}

// API is the part of the client that Follow uses.
type API interface {
	Ping(ctx context.Context) (types.Ping, error)
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
}

// Follow is one connection to the engine, level-triggered: every event is a
// wake-up, and a resync lists what the provider reads and sends one
// complete snapshot. The zero durations mean "never".
type Follow struct {
	API      API
	Endpoint string // for error messages
	// Timeout bounds the ping.
	Timeout time.Duration
	// Events, when set, are the filters of the event stream to follow; nil
	// follows none (the provider's watch option off).
	Events *filters.Args
	// Wakes, when set, says which events call for a resync (each event is
	// given to it once, as it arrives); nil: every event.
	Wakes func(events.Message) bool
	// Refresh is the period of a resync without an event: the safety net.
	Refresh time.Duration
	// Resync lists the engine and sends the snapshot; woken is true when an
	// event called for it (and for the first one). It returns how soon to
	// resync again without an event (0: not before the next event or
	// Refresh), or why the connection is lost.
	Resync func(ctx context.Context, woken bool) (again time.Duration, err error)
	// Connected, when set, is called once the first resync has succeeded.
	Connected func()
}

// Coalescing of the events that come together: after an event, the next
// ones are taken as long as each comes within coalesceQuiet of the last,
// for at most coalesceMax, before the one listing that answers them all.
// The client hands events over one at a time (its channel has no buffer),
// so a backlog (a burst of starts, a listing slower than the events) is
// taken in one go instead of costing a listing per event, which let a
// provider fall minutes behind a burst on an engine of 400 containers; an
// isolated change waits coalesceQuiet more.
const (
	coalesceQuiet = 3 * time.Millisecond
	coalesceMax   = 50 * time.Millisecond
)

// Run pings the engine, subscribes to the events (before listing, so that a
// change between the two is not missed), resyncs, and follows until the
// connection fails, returning why, or ctx is done (returning ctx.Err()).
// The events that come together are taken first (coalesceQuiet): one
// listing answers them all.
func (f Follow) Run(ctx context.Context) error {
	pingCtx, cancel := context.WithTimeout(ctx, f.Timeout)
	_, err := f.API.Ping(pingCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("ping %s: %w", f.Endpoint, err)
	}

	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	var evs <-chan events.Message
	var evErrs <-chan error
	if f.Events != nil {
		evs, evErrs = f.API.Events(evCtx, events.ListOptions{Filters: *f.Events})
	}
	wakes := func(ev events.Message) bool { return f.Wakes == nil || f.Wakes(ev) }

	again, err := f.Resync(ctx, true)
	if err != nil {
		return err
	}
	if f.Connected != nil {
		f.Connected()
	}

	var tick <-chan time.Time
	if f.Refresh > 0 {
		t := time.NewTicker(f.Refresh)
		defer t.Stop()
		tick = t.C
	}
	soon := time.NewTimer(time.Hour)
	soon.Stop()
	defer soon.Stop()
	arm := func(d time.Duration) {
		soon.Stop()
		if d > 0 {
			soon.Reset(d)
		}
	}
	arm(again)
	for {
		woken := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-evErrs:
			if err == nil {
				err = errors.New("event stream closed")
			}
			return fmt.Errorf("event stream: %w", err)
		case ev := <-evs:
			woken = wakes(ev)
			if err := coalesce(ctx, evs, evErrs, func(ev events.Message) { woken = wakes(ev) || woken }); err != nil {
				return err
			}
			if !woken {
				continue
			}
		case <-tick:
		case <-soon.C:
		}
		if again, err = f.Resync(ctx, woken); err != nil {
			return err
		}
		arm(again)
	}
}

// coalesce takes the events that follow one another within coalesceQuiet,
// for at most coalesceMax, giving each to take. It returns the event
// stream's error, or ctx's, if either ends it meanwhile.
func coalesce(ctx context.Context, evs <-chan events.Message, evErrs <-chan error, take func(events.Message)) error {
	deadline := time.Now().Add(coalesceMax)
	quiet := time.NewTimer(coalesceQuiet)
	defer quiet.Stop()
	for {
		select {
		case ev := <-evs:
			take(ev)
			if time.Now().After(deadline) {
				return nil
			}
			quiet.Reset(coalesceQuiet)
		case <-quiet.C:
			return nil
		case err := <-evErrs:
			if err == nil {
				err = errors.New("event stream closed")
			}
			return fmt.Errorf("event stream: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
