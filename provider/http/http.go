// Package http is Traefik's HTTP provider (providers.http): the dynamic
// configuration polled from an endpoint, every pollInterval, as JSON or
// YAML in the file provider's layout, decoded by the file provider's
// decoder (provider/file.DecodeContent) so that a key means what it means
// in a file. Resources are qualified @http.
package http

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	nethttp "net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/file"
)

// Name is the provider's name, the suffix of its resources' names.
const Name = "http"

// Provider polls providers.http.endpoint. Create it with New; it is used
// by one Run at a time.
type Provider struct {
	cfg      *config.HTTPProvider
	client   *nethttp.Client
	maxBody  int64
	interval time.Duration
	log      zerolog.Logger

	// What Run's polls keep between them: the ETag and body last applied,
	// and the message they made.
	etag    string
	last    []byte
	lastMsg *provider.Message
}

var _ provider.Provider = (*Provider)(nil)

// New returns the provider of cfg (checked by config.Static.Validate); an
// error names the option (a TLS file that does not load).
func New(cfg *config.HTTPProvider, po provider.Options) (*Provider, error) {
	tc, err := provider.TLSConfig(cfg.TLS, "providers.http.tls")
	if err != nil {
		return nil, err
	}
	tr := nethttp.DefaultTransport.(*nethttp.Transport).Clone()
	if tc != nil {
		tr.TLSClientConfig = tc
	}
	maxBody := cfg.MaxResponseBodySize
	if maxBody < 0 || maxBody > config.MaxHTTPBody {
		maxBody = config.MaxHTTPBody
	}
	interval := time.Duration(cfg.PollInterval)
	if interval <= 0 {
		interval = 5 * time.Second
	}
	return &Provider{
		cfg:      cfg,
		client:   &nethttp.Client{Transport: tr, Timeout: time.Duration(cfg.PollTimeout)},
		maxBody:  maxBody,
		interval: interval,
		log:      po.Log.With().Str("provider", Name).Str("endpoint", cfg.Endpoint).Logger(),
	}, nil
}

// Name returns "http".
func (p *Provider) Name() string { return Name }

// errNotModified is fetch's answer when the endpoint says (304) or shows
// (the same body) that the configuration has not changed.
var errNotModified = errors.New("not modified")

// Run asks the endpoint at once and then every pollInterval until ctx is
// done, each poll an attempt of the provider runtime (provider.Loop), and
// sends a Message when what it answers changes: a configuration when it
// decodes, else one Err per outage (the endpoint unreachable, an answer
// other than 200, a body that does not decode; the runtime's rule), while
// the watcher keeps the last good configuration serving. A failed poll is
// retried at the next pollInterval. A body equal to the last one applied
// (or a 304 to the ETag it came with) is not decoded again; after an
// outage the configuration is sent again, even unchanged, so that the
// error clears.
func (p *Provider) Run(ctx context.Context, out chan<- provider.Message) error {
	provider.Loop{Name: Name, What: "HTTP endpoint", Log: p.log, Every: p.interval,
		Backoff: provider.Backoff{Min: p.interval, Max: p.interval}, Attempt: p.poll}.Run(ctx, out)
	return nil
}

// poll asks the endpoint once and sends what it answers.
func (p *Provider) poll(ctx context.Context, s *provider.Sink) error {
	body, tag, err := p.fetch(ctx, p.etag, p.last)
	switch {
	case errors.Is(err, errNotModified):
		if p.lastMsg != nil && !s.Snapshot(ctx, *p.lastMsg) { // sent only after an outage
			return ctx.Err()
		}
		return nil
	case err != nil:
		return err
	}
	d, err := decode(p.cfg.Endpoint, body)
	if err != nil {
		return err
	}
	m := provider.Message{Configuration: d, Warnings: ignored(p.cfg.Endpoint, body)}
	p.last, p.etag, p.lastMsg = body, tag, &m
	if !s.Snapshot(ctx, m) {
		return ctx.Err()
	}
	return nil
}

// fetch asks the endpoint for the configuration, with If-None-Match when
// an ETag came with the last body applied. It returns errNotModified for a
// 304 or a body equal to last.
func (p *Provider) fetch(ctx context.Context, etag string, last []byte) ([]byte, string, error) {
	req, err := nethttp.NewRequestWithContext(ctx, nethttp.MethodGet, p.cfg.Endpoint, nethttp.NoBody)
	if err != nil {
		return nil, "", fmt.Errorf("providers.http.endpoint %q: %w", p.cfg.Endpoint, err)
	}
	for k, v := range p.cfg.Headers {
		req.Header.Set(k, v)
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", p.cfg.Endpoint, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case nethttp.StatusOK:
	case nethttp.StatusNotModified:
		if etag != "" {
			return nil, etag, errNotModified
		}
		fallthrough
	default:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, "", fmt.Errorf("GET %s: %s, want 200 OK", p.cfg.Endpoint, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.maxBody+1))
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: reading the answer: %w", p.cfg.Endpoint, err)
	}
	if int64(len(body)) > p.maxBody {
		return nil, "", fmt.Errorf("GET %s: an answer of over %d bytes (providers.http.maxResponseBodySize)", p.cfg.Endpoint, p.maxBody)
	}
	if last != nil && bytes.Equal(body, last) {
		return nil, resp.Header.Get("ETag"), errNotModified
	}
	return body, resp.Header.Get("ETag"), nil
}

// decode reads body as the file provider reads a YAML file (JSON is YAML):
// the same keys, case-insensitive, an unknown one an error naming it and
// its line, as Traefik's HTTP provider decodes its body.
func decode(endpoint string, body []byte) (*config.Dynamic, error) {
	d, err := file.DecodeContent(string(body), ".yaml", endpoint)
	var de *file.DecodeError
	if errors.As(err, &de) {
		loc := "endpoint " + endpoint
		if de.Line > 0 {
			loc += fmt.Sprintf(", line %d", de.Line)
		}
		if de.Key != "" {
			loc += ": " + de.Key
		}
		return nil, fmt.Errorf("%s: %s", loc, de.Message())
	}
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", endpoint, err)
	}
	return d, nil
}

// ignored warns of the http and udp sections of the body, which tollgate
// does not route (as the file provider warns).
func ignored(endpoint string, body []byte) []string {
	var out []string
	for _, ig := range file.IgnoredSections(string(body), ".yaml") {
		w := ig.In(endpoint)
		out = append(out, strings.Replace(w, fmt.Sprintf("file %q", endpoint), "endpoint "+endpoint, 1))
	}
	return out
}
