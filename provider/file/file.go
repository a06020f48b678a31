// Package file is the file provider: dynamic configuration from one YAML or
// TOML file, or from every such file in a directory, reloaded when the files
// change (fsnotify) or on demand (SIGHUP).
package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"
	pfile "github.com/traefik/paerser/file"
	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/decodeerr"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Name is the provider name used in qualified resource names.
const Name = "file"

// Provider reads dynamic configuration files.
type Provider struct {
	cfg    config.FileProvider
	log    zerolog.Logger
	reload chan struct{}

	// lastGood is each file's last configuration that had something in it:
	// a file emptied, or left without any dynamic configuration, keeps
	// serving that (as Traefik skips an empty configuration).
	lastGood map[string]goodConfig
	// tlsPaths are the TLS files the last Load read (absolute): Run
	// watches their directories too.
	tlsPaths []string
	// maxFileSize bounds each file read (limits.maxFileSize).
	maxFileSize int64
	backoff     provider.Backoff
}

type goodConfig struct {
	d  *config.Dynamic
	at time.Time
}

var _ provider.Provider = (*Provider)(nil)

// New returns a file provider for cfg (filename or directory, not both).
// Each file read is bounded by po.Limits' maxFileSize: a larger file is an
// error naming the limit, and it keeps its last good configuration.
func New(cfg *config.FileProvider, po provider.Options) (*Provider, error) {
	if cfg == nil || (cfg.Filename == "") == (cfg.Directory == "") {
		return nil, errors.New("providers.file: set filename or directory")
	}
	return &Provider{cfg: *cfg, log: po.Log.With().Str("provider", Name).Logger(), reload: make(chan struct{}, 1),
		lastGood: map[string]goodConfig{}, maxFileSize: po.Limits.Resolved().MaxFileSize, backoff: po.Backoff}, nil
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

// settleTime is how long the directory must be quiet, after a change, before
// the files are read: renames and ConfigMap symlink swaps come in bursts.
const settleTime = 15 * time.Millisecond

// slowWriter is how long a file may stay open for writing before a warning
// says that tollgate waits for its writer.
const slowWriter = 10 * time.Second

// Run sends the configuration now and after every change until ctx is
// done, on the provider runtime (provider.Loop): every read is sent, even
// unchanged (each follows a change or SIGHUP), and a file that does not
// decode is reported once (Message.Err) until a read succeeds again.
//
// A change is read once the writer is done: a file written in place is read
// after its writer closes it (never while it is half-written, however long
// the writer pauses), a file renamed into place (editors, atomic writers,
// Kubernetes ConfigMaps) once the directory has been quiet for settleTime.
// SIGHUP (Reload) reads at once. A directory that cannot be watched is
// retried with the runtime's backoff.
func (p *Provider) Run(ctx context.Context, out chan<- provider.Message) error {
	provider.LowPriority() // reading 100,000 routers takes a core: the event loops come first
	provider.Loop{Name: Name, What: "files", Log: p.log, Backoff: p.backoff, Resend: true, Wake: p.reload,
		Attempt: p.follow}.Run(ctx, out)
	return nil
}

// follow reads the files and sends what they say; with watch, it watches
// their directory and reads them again after each change, returning only
// when the watch fails (or ctx is done).
func (p *Provider) follow(ctx context.Context, s *provider.Sink) error {
	dir := p.cfg.Directory
	if dir == "" {
		// Watch the folder: editors and ConfigMaps replace the file by rename.
		dir = filepath.Dir(p.cfg.Filename)
	}
	var w *dirWatcher
	if p.cfg.Watch {
		var err error
		if w, err = watchDir(dir); err != nil {
			return fmt.Errorf("file provider: %w", err)
		}
		defer w.Close()
	}
	read := func() bool {
		m := p.Load()
		if w != nil {
			p.watchTLSDirs(w, dir)
		}
		if m.Err != nil {
			return s.Fail(ctx, m.Err) // not retried: the next change reads it again
		}
		return s.Snapshot(ctx, m)
	}
	if !read() {
		return ctx.Err()
	}
	if w == nil {
		return nil // the next read is on SIGHUP (the runtime's Wake)
	}
	return p.events(ctx, w, dir, read)
}

// events reads the files again (read) after each change the watch reports,
// once the writer is done, until the watch fails (returning why) or ctx is
// done.
func (p *Provider) events(ctx context.Context, w *dirWatcher, dir string, read func() bool) error {
	var (
		writing = map[string]time.Time{} // open for writing: modified, not yet closed
		warned  = map[string]bool{}
		dirty   bool
		settle  = time.NewTimer(time.Hour)
		slow    = time.NewTicker(slowWriter / 2)
	)
	settle.Stop()
	defer settle.Stop()
	defer slow.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.reload:
			if !read() {
				return ctx.Err()
			}
			continue
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file provider: the watch of the directory ended")
			}
			if ev.name == "" { // a directory itself went away
				if ev.dir == dir {
					p.log.Error().Str("directory", dir).Msg("watched directory removed or moved: changes are no longer seen (SIGHUP still reloads)")
				} else {
					dirty = true // a TLS file's directory: read again, which names what is missing
				}
				continue
			}
			if !p.relevantEvent(ev, dir) {
				continue
			}
			full := filepath.Join(ev.dir, ev.name)
			switch {
			case ev.Has(unix.IN_MODIFY):
				if _, ok := writing[full]; !ok {
					writing[full] = time.Now()
				}
			case ev.Has(unix.IN_CLOSE_WRITE), ev.Has(unix.IN_DELETE), ev.Has(unix.IN_MOVED_FROM):
				delete(writing, full)
				delete(warned, full)
			}
			dirty = true
		case err := <-w.Errors:
			p.log.Error().Err(err).Msg("watching files: re-reading them")
			dirty = true
		case <-settle.C:
			if dirty && len(writing) == 0 {
				dirty = false
				if !read() {
					return ctx.Err()
				}
			}
			continue
		case <-slow.C:
			for name, since := range writing {
				if time.Since(since) > slowWriter && !warned[name] {
					warned[name] = true
					p.log.Warn().Str("file", name).Dur("open_for", time.Since(since).Round(time.Second)).
						Msg("file is still open for writing: its change is applied when the writer closes it (SIGHUP reads it now)")
				}
			}
			continue
		}
		if dirty && len(writing) == 0 {
			settle.Reset(settleTime)
		}
	}
}

// relevantEvent reports whether ev can change the configuration: a change
// of a configuration file in the configuration's directory (main), or of a
// TLS file the last Load read, wherever it is.
func (p *Provider) relevantEvent(ev dirEvent, main string) bool {
	if ev.dir == main && p.relevant(ev.name) {
		return true
	}
	if strings.Contains(ev.name, "..") {
		return true // a Kubernetes Secret's files change through "..data"
	}
	full := filepath.Join(ev.dir, ev.name)
	if abs, err := filepath.Abs(full); err == nil {
		full = abs
	}
	_, found := slices.BinarySearch(p.tlsPaths, full)
	return found
}

// watchTLSDirs watches the directories of the TLS files the last Load
// read (besides main, watched already) and stops watching those no file
// is read from any more. A directory that cannot be watched is logged:
// its files are read again on the next change or SIGHUP.
func (p *Provider) watchTLSDirs(w *dirWatcher, main string) {
	want := map[string]bool{}
	for _, f := range p.tlsPaths {
		want[filepath.Dir(f)] = true
	}
	mainAbs, _ := filepath.Abs(main)
	for d := range want {
		if d == mainAbs {
			continue
		}
		if err := w.add(d); err != nil {
			p.log.Warn().Err(err).Str("directory", d).Msg("cannot watch the directory of TLS files: their changes are read on the next configuration change or SIGHUP")
		}
	}
	for _, d := range w.watched() {
		if d != main && !want[d] {
			w.remove(d)
		}
	}
}

// relevant reports whether a name in the watched directory can change the
// configuration.
func (p *Provider) relevant(name string) bool {
	if strings.Contains(name, "..") {
		return true // a symlinked file (Kubernetes ConfigMap) changes through "..data"
	}
	if p.cfg.Filename != "" {
		return name == filepath.Base(p.cfg.Filename)
	}
	return isConfigFile(name)
}

func isConfigFile(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yml", ".yaml", ".toml":
		return true
	}
	return false
}

// Load reads the configured file or directory into one Message. A file that
// does not decode (or whose template does not render) keeps its last good
// configuration: the configured file makes the message an error, so the
// watcher keeps the last configuration; in a directory, that file's last
// good configuration (none if it never had one) is merged with the others',
// and a problem names the file and the error. A file with no dynamic
// configuration at all (empty, comments only, an empty tcp section) is not
// applied: it keeps its last configuration, and a warning names it.
func (p *Provider) Load() provider.Message {
	m := provider.Message{ProviderName: Name}
	if p.cfg.Filename != "" {
		d, ignored, dropped, err := p.decodeFile(p.cfg.Filename)
		if err != nil {
			m.Err = err
			return m
		}
		p.shareUnchanged(p.cfg.Filename, d)
		m.Problems = append(m.Problems, dropped...)
		m.Warnings = append(m.Warnings, ignored...)
		d, warning := p.keepIfEmpty(p.cfg.Filename, d, len(ignored) > 0)
		if warning != "" {
			m.Warnings = append(m.Warnings, warning)
		}
		if d == nil {
			d = &config.Dynamic{}
		}
		d, paths, problems := ReadTLSFiles(d)
		p.tlsPaths = paths
		m.Problems = append(m.Problems, prefixed(p.cfg.Filename, problems)...)
		m.Configuration = d
		return m
	}
	entries, err := os.ReadDir(p.cfg.Directory)
	if err != nil {
		m.Err = fmt.Errorf("reading directory %q: %w", p.cfg.Directory, err)
		return m
	}
	var merger Merger
	var names []string
	var tlsPaths []string
	for _, e := range entries {
		if !e.IsDir() && isConfigFile(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	seen := map[string]bool{}
	for _, n := range names {
		path := filepath.Join(p.cfg.Directory, n)
		seen[path] = true
		d, ignored, dropped, err := p.decodeFile(path)
		if err != nil {
			// This file alone: it keeps its last good configuration, the
			// others apply (a file over its template's budget must not
			// hold back an edit of another).
			g, ok := p.lastGood[path]
			if !ok {
				m.Problems = append(m.Problems, fmt.Sprintf("%v: nothing from this file is served", err))
				continue
			}
			m.Problems = append(m.Problems, fmt.Sprintf("%v: keeping this file's last good configuration, read at %s", err, g.at.Format(time.RFC3339)))
			d = g.d
		} else {
			p.shareUnchanged(path, d)
			m.Problems = append(m.Problems, dropped...)
			m.Warnings = append(m.Warnings, ignored...)
			var warning string
			d, warning = p.keepIfEmpty(path, d, len(ignored) > 0)
			if warning != "" {
				m.Warnings = append(m.Warnings, warning)
			}
			if d == nil {
				continue
			}
		}
		d, paths, problems := ReadTLSFiles(d)
		tlsPaths = append(tlsPaths, paths...)
		m.Problems = append(m.Problems, prefixed(path, problems)...)
		for _, c := range merger.Add(path, d.TCP) {
			m.Problems = append(m.Problems, c.String())
		}
		for _, c := range merger.AddTLS(path, d.TLS) {
			m.Problems = append(m.Problems, c.String())
		}
	}
	slices.Sort(tlsPaths)
	p.tlsPaths = slices.Compact(tlsPaths)
	for path := range p.lastGood {
		if !seen[path] {
			delete(p.lastGood, path) // removed: its configuration goes with it
		}
	}
	if merger.TCP == nil {
		merger.TCP = &config.TCPConfiguration{}
	}
	m.Configuration = merger.Dynamic()
	return m
}

// shareUnchanged replaces each router, service and middleware of d (just
// decoded from path) that equals the one of the same name in path's last
// good configuration with that one: the configuration serving and the one
// compiled beside it while a change applies share what did not change,
// instead of holding it twice (a file of 100,000 routers with their
// services and middlewares: 46 MB). Nothing writes a configuration once
// decoded, so the two may share.
func (p *Provider) shareUnchanged(path string, d *config.Dynamic) {
	g, ok := p.lastGood[path]
	if !ok || g.d == nil || g.d.TCP == nil || d == nil || d.TCP == nil {
		return
	}
	shareEqual(g.d.TCP.Routers, d.TCP.Routers)
	shareEqual(g.d.TCP.Services, d.TCP.Services)
	shareEqual(g.d.TCP.Middlewares, d.TCP.Middlewares)
}

// shareEqual sets each value of next that equals prev's of the same name
// to prev's.
func shareEqual[V any](prev, next map[string]*V) {
	if len(prev) == 0 {
		return
	}
	for name, v := range next {
		if old, ok := prev[name]; ok && old != v && reflect.DeepEqual(old, v) {
			next[name] = old
		}
	}
}

// prefixed names the configuration file in front of each of its problems.
func prefixed(path string, problems []TLSFileError) []string {
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = fmt.Sprintf("file %q: %v", path, p)
	}
	return out
}

// keepIfEmpty returns d, remembering it as path's last good configuration,
// or, when d holds no dynamic configuration, path's last good one (nil if
// none) and a warning saying which: a file caught empty is most likely
// being written. ignored: the file has sections tollgate does not read, so
// it is written as meant (a Traefik file with only HTTP routers): it applies,
// configuring nothing, with a warning.
func (p *Provider) keepIfEmpty(path string, d *config.Dynamic, ignored bool) (*config.Dynamic, string) {
	if !isEmpty(d) || ignored {
		p.lastGood[path] = goodConfig{d: d, at: time.Now()}
		if isEmpty(d) {
			return d, fmt.Sprintf("file %q has no tcp or tls configuration: nothing from it is served", path)
		}
		return d, ""
	}
	if g, ok := p.lastGood[path]; ok {
		return g.d, fmt.Sprintf("file %q has no dynamic configuration (empty?): skipping it and keeping its last configuration, read at %s", path, g.at.Format(time.RFC3339))
	}
	return nil, fmt.Sprintf("file %q has no dynamic configuration (empty?): nothing from it is served", path)
}

// isEmpty reports whether d configures nothing: no tcp section, or one
// without routers, services, middlewares or servers transports, and no tls
// section with anything in it.
func isEmpty(d *config.Dynamic) bool {
	if d == nil {
		return true
	}
	if t := d.TLS; t != nil && (len(t.Certificates) > 0 || len(t.Options) > 0 || len(t.Stores) > 0) {
		return false
	}
	return d.TCP == nil ||
		len(d.TCP.Routers) == 0 && len(d.TCP.Services) == 0 && len(d.TCP.Middlewares) == 0 && len(d.TCP.ServersTransports) == 0
}

// DecodeFile decodes one YAML or TOML dynamic configuration file, rendered
// as a template first (Decode). Keys are case-insensitive; an unknown key is
// an error naming it and the file.
func DecodeFile(path string) (*config.Dynamic, error) {
	d, _, _, dropped, err := decodeFile(path, config.DefaultMaxFileSize)
	if err == nil && len(dropped) > 0 {
		return nil, dropped[0]
	}
	return d, err
}

// decodeFile is DecodeFile keeping what decodes (DecodeAll), with the text
// decoded and whether the file was a template (the text is what it
// rendered).
func decodeFile(path string, maxSize int64) (d *config.Dynamic, text string, templated bool, dropped []*DroppedError, err error) {
	if !isConfigFile(path) {
		return nil, "", false, nil, fmt.Errorf("file %q: unsupported extension (use .yml, .yaml or .toml)", path)
	}
	content, err := readConfig(path, maxSize)
	if err != nil {
		return nil, "", false, nil, fmt.Errorf("reading %q: %w", path, err)
	}
	d, text, dropped, err = DecodeAll(content, filepath.Ext(path), path)
	return d, text, err == nil && text != content, dropped, err
}

// readConfig reads a dynamic file. A FIFO, a device or a directory with a
// configuration file's name is an error, not a read that holds the provider
// (and every other file's reload with it) until a writer comes.
//
// A file over maxSize bytes is an error naming limits.maxFileSize. The text
// is read into one buffer of the file's size (io.ReadAll doubles its
// buffer: four times a large file's size).
func readConfig(path string, maxSize int64) (string, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	tooBig := func(n int64) error {
		return fmt.Errorf("the file is %d bytes, over limits.maxFileSize (%d bytes): it is not read", n, maxSize)
	}
	if fi.Size() > maxSize {
		return "", tooBig(fi.Size())
	}
	var b strings.Builder
	b.Grow(int(fi.Size()) + 512)
	n, err := io.Copy(&b, io.LimitReader(f, maxSize+1))
	if err != nil {
		return "", err
	}
	if n > maxSize {
		return "", tooBig(n) // it grew while being read
	}
	return b.String(), nil
}

// decodeFile is DecodeFile, logging what a template rendered at debug level
// with debugLogGeneratedTemplate, as Traefik does; it returns the warnings
// about the file's sections tollgate does not read (Ignored), and the
// resources left out because a key of theirs does not decode (DroppedError).
func (p *Provider) decodeFile(path string) (*config.Dynamic, []string, []string, error) {
	d, text, templated, dropped, err := decodeFile(path, p.maxFileSize)
	if err != nil {
		return nil, nil, nil, err
	}
	var problems []string
	for _, e := range dropped {
		problems = append(problems, e.Error())
	}
	if templated && p.cfg.DebugLogGeneratedTemplate {
		p.log.Debug().Str("filename", path).Msg("Template content: " + text)
	}
	var warnings []string
	for _, ig := range IgnoredSections(text, filepath.Ext(path)) {
		if templated {
			ig.Line = 0 // a line of the rendered text, not of the file
		}
		warnings = append(warnings, ig.In(path))
	}
	return d, warnings, problems, nil
}

// Ignored is a top-level section of a dynamic file that tollgate does not
// read: Traefik's http or udp (HTTP routers and services, UDP), as the KV
// provider says of <root>/http and <root>/udp. A Traefik file that holds
// them beside its tcp section applies without them.
type Ignored struct {
	Section string // as written ("http", "HTTP", "udp")
	Line    int    // 1-based, in the text decoded; 0 when not placed
}

// Message says what is ignored, without the location.
func (ig Ignored) Message() string {
	return fmt.Sprintf("tollgate routes TCP only: the %s section is ignored", strings.ToLower(ig.Section))
}

// In is the warning for the file at path.
func (ig Ignored) In(path string) string {
	loc := fmt.Sprintf("file %q", path)
	if ig.Line > 0 {
		loc += fmt.Sprintf(", line %d", ig.Line)
	}
	return loc + ": " + ig.Message()
}

// IgnoredSections returns the http and udp sections written at the top of a
// dynamic file's decoded text (YAML or TOML, by ext), in the order of their
// lines. The file provider warns of each and tollgate check reports each.
func IgnoredSections(text, ext string) []Ignored {
	if e := strings.ToLower(ext); e == ".yml" || e == ".yaml" {
		// The top-level keys without building the document (100,000
		// routers are 460 MB of yaml.v3 nodes), as decodeerr.Find reads
		// them: the first written in any case.
		if keys, ok := TopKeysYAML(text); ok {
			return IgnoredOf(keys)
		}
	}
	return ignoredSections(text, ext)
}

// IgnoredOf is IgnoredSections of a YAML document whose top-level keys
// (TopKeysYAML) are keys.
func IgnoredOf(keys []TopKey) []Ignored {
	var out []Ignored
	for _, s := range []string{"http", "udp"} {
		for _, k := range keys {
			if strings.EqualFold(k.Written, s) {
				out = append(out, Ignored{Section: k.Written, Line: k.Line})
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b Ignored) int { return a.Line - b.Line })
	return out
}

// ignoredSections is IgnoredSections through decodeerr.Find.
func ignoredSections(text, ext string) []Ignored {
	var out []Ignored
	for _, s := range []string{"http", "udp"} {
		if written, line := decodeerr.Find(text, ext, []string{s}); written != "" {
			out = append(out, Ignored{Section: written, Line: line})
		}
	}
	slices.SortFunc(out, func(a, b Ignored) int { return a.Line - b.Line })
	return out
}

// Decode renders a dynamic file's content as a template (Render) and
// decodes what it renders (DecodeContent), as the file provider reads every
// file and tollgate check every dynamic file; rendered is the text decoded.
// A decoding error of a file that was a template places itself on the
// rendered text (DecodeError.Rendered).
func Decode(content, ext, name string) (d *config.Dynamic, rendered string, err error) {
	rendered, err = Render(content, name)
	if err != nil {
		return nil, "", err
	}
	d, err = DecodeContent(rendered, ext, name)
	var de *DecodeError
	if errors.As(err, &de) && rendered != content {
		de.Rendered = true
	}
	return d, rendered, err
}

// DecodeContent decodes YAML or TOML content; name labels errors.
func DecodeContent(content, ext, name string) (d *config.Dynamic, err error) {
	defer func() {
		// paerser panics on some malformed trees; a bad file must not take
		// tollgate down.
		if r := recover(); r != nil {
			d, err = nil, &DecodeError{File: name, Err: fmt.Errorf("cannot decode: %v", r)}
		}
	}()
	d = &config.Dynamic{}
	if strings.TrimSpace(content) == "" {
		return d, nil
	}
	switch strings.ToLower(ext) {
	case ".yml", ".yaml":
		if fast, ok := decodeYAMLFast(content); ok {
			return fast, nil
		}
	}
	if err := pfile.DecodeContent(content, strings.ToLower(ext), d); err != nil {
		de := &DecodeError{File: name, Err: err}
		de.Key, de.Line = decodeerr.Blame(content, ext, err)
		return nil, de
	}
	return d, nil
}

// DecodeError is a dynamic file that does not decode: the file, where in it
// the error is (Line 1-based and Key, the dotted key path as written; zero
// when it cannot be placed) and paerser's error. Its message names all
// three, so the log line and /api/providers say where to look, as
// `tollgate check` does:
//
//	file "dynamic.yml", line 7: tcp.middlewares.limit.inFlightConn.amount: amount must be an integer, got "ten"
type DecodeError struct {
	File string
	Line int
	Key  string
	Err  error
	// Rendered: the file is a template, and Line is a line of the text it
	// rendered.
	Rendered bool
}

func (e *DecodeError) Error() string {
	loc := fmt.Sprintf("file %q", e.File)
	if e.Line > 0 {
		loc += fmt.Sprintf(", line %d", e.Line)
		if e.Rendered {
			loc += " of its rendered template"
		}
	}
	if e.Key != "" {
		loc += ": " + e.Key
	}
	return loc + ": " + e.Message()
}

// Message is what went wrong, without the location: a value that does not
// parse says what was expected, an unknown key names it.
func (e *DecodeError) Message() string {
	if msg, ok := decodeerr.Value(decodeerr.Last(e.Key), e.Err); ok {
		return msg
	}
	if k, ok := decodeerr.UnknownField(e.Err); ok {
		return fmt.Sprintf("unknown key %q", k)
	}
	return e.Err.Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }
