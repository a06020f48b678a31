// Package file is the file provider: dynamic configuration from one YAML or
// TOML file, or from every such file in a directory, reloaded when the files
// change (fsnotify) or on demand (SIGHUP).
package file

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"
	pfile "github.com/traefik/paerser/file"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Name is the provider name used in qualified resource names.
const Name = "file"

// Provider reads dynamic configuration files.
type Provider struct {
	cfg    config.FileProvider
	log    zerolog.Logger
	reload chan struct{}
}

var _ provider.Provider = (*Provider)(nil)

// New returns a file provider for cfg (filename or directory).
func New(cfg *config.FileProvider, log zerolog.Logger) *Provider {
	return &Provider{cfg: *cfg, log: log.With().Str("provider", Name).Logger(), reload: make(chan struct{}, 1)}
}

// Name returns "file".
func (p *Provider) Name() string { return Name }

// Reload asks Run to re-read the files (SIGHUP). It never blocks.
func (p *Provider) Reload() {
	select {
	case p.reload <- struct{}{}:
	default:
	}
}

// Run sends the configuration now and after every change until ctx is done.
func (p *Provider) Run(ctx context.Context, out chan<- provider.Message) error {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if p.cfg.Watch {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return fmt.Errorf("file provider: %w", err)
		}
		defer w.Close()
		dir := p.cfg.Directory
		if dir == "" {
			// Watch the folder: editors and ConfigMaps replace the file by rename.
			dir = filepath.Dir(p.cfg.Filename)
		}
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("file provider: watching %q: %w", dir, err)
		}
		events, errs = w.Events, w.Errors
	}
	send := func() bool {
		m := p.Load()
		select {
		case out <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !send() {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.reload:
		case ev := <-events:
			if !p.relevant(ev.Name) {
				continue
			}
			// Writers that truncate and rewrite in place produce a burst of
			// events and a moment of empty or partial file: read once the
			// burst has been quiet for settleTime.
			if !settle(ctx, events, p.relevant) {
				return nil
			}
		case err := <-errs:
			p.log.Error().Err(err).Msg("watching files")
			continue
		}
		if !send() {
			return nil
		}
	}
}

// settleTime is how long the file events must be quiet before a reload.
const settleTime = 15 * time.Millisecond

// settle waits until no relevant event arrived for settleTime; false when ctx ended.
func settle(ctx context.Context, events <-chan fsnotify.Event, relevant func(string) bool) bool {
	t := time.NewTimer(settleTime)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case ev := <-events:
			if relevant(ev.Name) {
				t.Reset(settleTime)
			}
		}
	}
}

func (p *Provider) relevant(path string) bool {
	if p.cfg.Filename != "" {
		return filepath.Clean(path) == filepath.Clean(p.cfg.Filename) ||
			// A symlinked file (Kubernetes ConfigMap) changes through "..data".
			strings.Contains(filepath.Base(path), "..")
	}
	return isConfigFile(path) || strings.Contains(filepath.Base(path), "..")
}

func isConfigFile(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yml", ".yaml", ".toml":
		return true
	}
	return false
}

// Load reads the configured file or directory into one Message. A file that
// fails to parse makes the whole message an error, so the watcher keeps the
// last good configuration.
func (p *Provider) Load() provider.Message {
	m := provider.Message{ProviderName: Name}
	if p.cfg.Filename != "" {
		d, err := DecodeFile(p.cfg.Filename)
		if err != nil {
			m.Err = err
			return m
		}
		m.Configuration = d
		return m
	}
	entries, err := os.ReadDir(p.cfg.Directory)
	if err != nil {
		m.Err = fmt.Errorf("reading directory %q: %w", p.cfg.Directory, err)
		return m
	}
	merged := &config.Dynamic{TCP: &config.TCPConfiguration{}}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && isConfigFile(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	origin := map[string]string{}
	for _, n := range names {
		path := filepath.Join(p.cfg.Directory, n)
		d, err := DecodeFile(path)
		if err != nil {
			m.Err = err
			return m
		}
		if d.TCP == nil {
			continue
		}
		m.Problems = append(m.Problems, mergeInto(merged.TCP, d.TCP, path, origin)...)
	}
	m.Configuration = merged
	return m
}

// mergeInto adds src's resources to dst. A name defined differently in two
// files keeps the first definition and yields a problem naming both files.
func mergeInto(dst, src *config.TCPConfiguration, path string, origin map[string]string) []string {
	var problems []string
	problems = mergeMap(&dst.Routers, src.Routers, "router", path, origin, problems)
	problems = mergeMap(&dst.Services, src.Services, "service", path, origin, problems)
	problems = mergeMap(&dst.Middlewares, src.Middlewares, "middleware", path, origin, problems)
	return problems
}

// mergeMap adds src's entries to *dst (made on first use), keeping the
// first definition of a name; a different later one becomes a problem naming
// both files. origin remembers which file defined each kind/name.
func mergeMap[V any](dst *map[string]V, src map[string]V, kind, path string, origin map[string]string, problems []string) []string {
	for name, v := range src {
		key := kind + "/" + name
		if old, have := (*dst)[name]; have {
			if !reflect.DeepEqual(old, v) {
				problems = append(problems, fmt.Sprintf("%s %q is defined differently in %s and %s: keeping the first", kind, name, origin[key], path))
			}
			continue
		}
		if *dst == nil {
			*dst = map[string]V{}
		}
		(*dst)[name] = v
		origin[key] = path
	}
	return problems
}

// DecodeFile decodes one YAML or TOML dynamic configuration file. Keys are
// case-insensitive; an unknown key is an error naming it and the file.
func DecodeFile(path string) (*config.Dynamic, error) {
	if !isConfigFile(path) {
		return nil, fmt.Errorf("file %q: unsupported extension (use .yml, .yaml or .toml)", path)
	}
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", path, err)
	}
	return DecodeContent(string(content), filepath.Ext(path), path)
}

// DecodeContent decodes YAML or TOML content; name labels errors.
func DecodeContent(content, ext, name string) (d *config.Dynamic, err error) {
	defer func() {
		// paerser panics on some malformed trees; a bad file must not take
		// tollgate down.
		if r := recover(); r != nil {
			d, err = nil, fmt.Errorf("file %q: cannot decode: %v", name, r)
		}
	}()
	d = &config.Dynamic{}
	if strings.TrimSpace(content) == "" {
		return d, nil
	}
	if err := pfile.DecodeContent(content, strings.ToLower(ext), d); err != nil {
		return nil, fmt.Errorf("file %q: %w", name, err)
	}
	return d, nil
}
