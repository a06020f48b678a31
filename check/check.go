// Package check is `tollgate check`: it lints dynamic configuration without
// running the proxy. It reads dynamic YAML/TOML files (the file provider's
// input), files of `key=value` labels and docker-compose files (the Docker
// provider's input, labels in list or map form, per service; their
// deploy.labels, the Swarm provider's) and Consul service definitions (the
// Consul Catalog provider's input), turns the label and tag inputs into the
// providers' own plain inputs (docker.Container, swarm.Service,
// consulcatalog.Instance) and builds them with the providers' own Build
// functions, merges the results the way the watcher does, and compiles them
// with proxy.Compile. So every problem the running proxy would find is found
// here; check adds only where it comes from: the file, the line when the
// format has lines, the compose or Consul service, and the label or key.
package check

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/decodeerr"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	// The built-in middleware kinds (middleware.Register), which the
	// proxy's Compile builds through middleware.New.
	_ "github.com/tollgate-proxy/tollgate/middleware/standard"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/consulcatalog"
	"github.com/tollgate-proxy/tollgate/provider/docker"
	pfile "github.com/tollgate-proxy/tollgate/provider/file"
	"github.com/tollgate-proxy/tollgate/provider/swarm"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// Severities of a Problem.
const (
	// SeverityError: the input or resource is dropped or disabled.
	SeverityError = "error"
	// SeverityWarning: it applies, but probably not as meant.
	SeverityWarning = "warning"
)

// Problem is one finding and where it comes from.
type Problem struct {
	File string `json:"file"`
	// Line is the 1-based line in File, when the format has lines and the
	// problem could be placed; 0 otherwise.
	Line int `json:"line,omitempty"`
	// Service is the compose service (the container) the labels belong to.
	Service string `json:"service,omitempty"`
	// Key is the label key as written, or the dotted key path in a file.
	Key string `json:"key,omitempty"`
	// Resource is the qualified router, service or middleware concerned.
	Resource string `json:"resource,omitempty"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	// DisablesRouter is true when the problem keeps a router from serving.
	DisablesRouter bool `json:"disablesRouter,omitempty"`
}

// Report is what check found: the merged, qualified TCP configuration the
// proxy would compile, the status each resource would get, and the problems.
type Report struct {
	TCP      *config.TCPConfiguration `json:"tcp"`
	Status   Statuses                 `json:"status"`
	Problems []Problem                `json:"problems"`
}

// Statuses is the status (enabled, warning, disabled) of every resource.
type Statuses struct {
	Routers     map[string]string `json:"routers,omitempty"`
	Services    map[string]string `json:"services,omitempty"`
	Middlewares map[string]string `json:"middlewares,omitempty"`
}

// Failed reports whether a problem would keep a router from serving: the
// exit status of `tollgate check`.
func (r *Report) Failed() bool {
	for _, p := range r.Problems {
		if p.DisablesRouter {
			return true
		}
	}
	return false
}

// Options tune a check.
type Options struct {
	// EntryPoints are the entry points routers may name. Empty means every
	// entry point a router names exists (routers without entryPoints then
	// serve on all of them, or on one called "default" when none is named).
	EntryPoints []string
	// ExposedByDefault is the Docker and Consul Catalog providers'
	// exposedByDefault: false skips containers and services without
	// traefik.enable=true.
	ExposedByDefault bool
	// Prefix is the Consul Catalog tag prefix ("traefik" when empty).
	Prefix string
	// RootKey is the KV providers' root key ("traefik" when empty), and
	// KVProvider the store a dump of `key value` lines is qualified with
	// (DefaultKVProvider when empty; a `consul kv export` is @consul).
	RootKey, KVProvider string
}

// DefaultOptions are the providers' defaults.
func DefaultOptions() Options { return Options{ExposedByDefault: true, Prefix: "traefik"} }

// origin is where a resource or an input was defined.
type origin struct {
	file    string
	fileIdx int                 // position of file among the inputs, for ordering problems
	service string              // compose or Consul service, for labels and tags
	line    int                 // where the container or service is declared
	labels  []labelLine         // the labels or tags of that input, for label inputs
	doc     *lazyDoc            // YAML document, for file inputs
	toml    decodeerr.TOMLIndex // where TOML keys are, for TOML file inputs
	isFile  bool                // a dynamic file (else labels or tags)
	isKV    bool                // a KV store dump (labels holds its keys)
}

// labelLine is one label with the line it was read from (0 when unknown).
// key is the label key under the "traefik" root; shown is the key as written
// (a Consul tag keeps its own prefix), empty when the same.
type labelLine struct {
	key, value string
	line       int
	shown      string
}

// written returns the key as the user wrote it.
func (l *labelLine) written() string {
	if l.shown != "" {
		return l.shown
	}
	return l.key
}

// find returns the label written as key (any case), or nil.
func (o *origin) find(key string) *labelLine {
	for i := range o.labels {
		if strings.EqualFold(o.labels[i].written(), key) {
			return &o.labels[i]
		}
	}
	return nil
}

// located is a problem with the input position it sorts by.
type located struct {
	Problem
	fileIdx, line int
}

// checker accumulates the inputs: dynamic files merged as the file provider
// merges them, containers and Consul instances for the providers' builds.
type checker struct {
	opts     Options
	problems []located
	files    int // inputs read so far
	// dynamic files: configuration with bare names, and where each resource
	// came from ("routers/r@file")
	fileMerger  pfile.Merger      // the dynamic files, merged as the file provider merges them
	fileOrigins map[string]origin // by file path
	// label and tag inputs, and where each was read (by source ID)
	containers []docker.Container
	instances  []consulcatalog.Instance
	services   []swarm.Service // from stack files' deploy.labels (swarm.go)
	kvDumps    []kvDump        // KV store dumps (kv.go)
	inputs     map[string]origin
	// after the builds: per provider, which inputs defined each resource
	definedBy map[string]map[provider.Resource][]string
}

// Files checks the given files (a directory stands for its dynamic files)
// together, as one tollgate would see them with a file provider reading the
// dynamic files, a Docker provider reading the compose and label files, and
// a Consul Catalog provider reading the Consul service definitions (.json).
func Files(paths []string, opts Options) *Report {
	c := &checker{opts: opts, fileOrigins: map[string]origin{}, inputs: map[string]origin{}, definedBy: map[string]map[provider.Resource][]string{}}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			c.dir(p)
			continue
		}
		c.file(p)
	}
	return c.compile()
}

// add records a problem found while reading file number c.files.
func (c *checker) add(p Problem) {
	c.problems = append(c.problems, located{Problem: p, fileIdx: c.files, line: p.Line})
}

// dir checks the .yml, .yaml and .toml files of a directory in name order,
// as the file provider's directory mode reads them (not recursively).
func (c *checker) dir(path string) {
	entries, err := os.ReadDir(path)
	if err != nil {
		c.add(Problem{File: path, Severity: SeverityError, Message: err.Error(), DisablesRouter: true})
		return
	}
	for _, e := range entries { // ReadDir sorts by name
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yml", ".yaml", ".toml":
			if !e.IsDir() {
				c.file(filepath.Join(path, e.Name()))
			}
		}
	}
}

// file dispatches on the kind of input.
func (c *checker) file(path string) {
	c.files++
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Size() > config.DefaultMaxFileSize {
		c.add(Problem{File: path, Severity: SeverityError, DisablesRouter: true,
			Message: fmt.Sprintf("the file is %d bytes, over limits.maxFileSize (%d bytes): it is not read", fi.Size(), config.DefaultMaxFileSize)})
		return
	}
	content, err := os.ReadFile(path)
	if err != nil {
		c.add(Problem{File: path, Severity: SeverityError, Message: err.Error(), DisablesRouter: true})
		return
	}
	ext := strings.ToLower(filepath.Ext(path))
	switch ext {
	case ".yml", ".yaml":
		text := string(content) // one copy (each conversion is one: 27 MB for 100,000 routers)
		if keys, ok := pfile.TopKeysYAML(text); ok && !composeKeys(keys) {
			// A dynamic file in the block style: parsed into yaml.v3's
			// nodes only if a problem is to be placed (100,000 routers
			// are 460 MB of nodes).
			c.dynamic(path, ext, text, &lazyDoc{content: text, keys: keys, haveKeys: true})
			return
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(content, &doc); err != nil {
			if strings.Contains(string(content), "{{") {
				// A dynamic file's template: YAML once rendered.
				c.dynamic(path, ext, string(content), nil)
				return
			}
			c.add(Problem{File: path, Severity: SeverityError, Message: "not YAML: " + err.Error(), DisablesRouter: true})
			return
		}
		if isCompose(&doc) {
			c.compose(path, &doc)
			return
		}
		c.dynamic(path, ext, string(content), &lazyDoc{node: &doc, parsed: true})
	case ".toml":
		c.dynamic(path, ext, string(content), nil)
	case ".json":
		var doc yaml.Node // JSON is YAML: the YAML parser gives lines
		if err := yaml.Unmarshal(content, &doc); err != nil {
			c.add(Problem{File: path, Severity: SeverityError, Message: "not JSON: " + err.Error(), DisablesRouter: true})
			return
		}
		if isKVExport(&doc) {
			c.kvExport(path, &doc)
			return
		}
		c.consul(path, &doc)
	default:
		if isKVLines(string(content)) {
			c.kvLines(path, string(content))
			return
		}
		c.labelFile(path, string(content))
	}
}

// lazyDoc is a YAML document parsed on first use.
type lazyDoc struct {
	content string
	parsed  bool
	node    *yaml.Node
	// keys are the document's top-level keys when haveKeys
	// (pfile.TopKeysYAML).
	keys     []pfile.TopKey
	haveKeys bool
}

// get returns the document, nil when there is none or it does not parse.
func (l *lazyDoc) get() *yaml.Node {
	if l == nil {
		return nil
	}
	if !l.parsed {
		l.parsed = true
		var doc yaml.Node
		if yaml.Unmarshal([]byte(l.content), &doc) == nil {
			l.node = &doc
		}
		l.content = ""
	}
	return l.node
}

// composeKeys is isCompose for a document's top-level keys.
func composeKeys(keys []pfile.TopKey) bool {
	has := func(k string) bool {
		for _, t := range keys {
			if strings.EqualFold(t.Written, k) {
				return true
			}
		}
		return false
	}
	return has("services") && !has("tcp")
}

// isCompose reports whether a YAML document is a compose file: a top-level
// `services` mapping and no `tcp` section.
func isCompose(doc *yaml.Node) bool {
	root := docRoot(doc)
	return root != nil && mapGet(root, "services") != nil && mapGet(root, "tcp") == nil
}

// mergeFile adds one dynamic file's configuration (bare names) to the file
// provider's, with the file provider's own Merger: a name defined
// differently twice keeps the first definition, with a problem naming both
// files.
func (c *checker) mergeFile(d *config.Dynamic, o origin) {
	c.fileOrigins[o.file] = o
	for _, conflict := range c.fileMerger.Add(o.file, d.TCP) {
		p := Problem{File: o.file, Resource: provider.Qualify(conflict.Resource.Name, pfile.Name), Severity: SeverityError, Message: conflict.String()}
		c.locate(&p, o, conflict.Resource.Kind+"s", conflict.Resource.Name, "")
		c.add(p)
	}
	for _, conflict := range c.fileMerger.AddTLS(o.file, d.TLS) {
		name, section := conflict.Resource.Name, "options"
		if conflict.Resource.Kind == provider.KindTLSStore {
			section = "stores"
		}
		if name != provider.DefaultTLSName {
			name = provider.Qualify(name, pfile.Name)
		}
		p := Problem{File: o.file, Resource: name, Severity: SeverityError, Message: conflict.String()}
		c.locatePath(&p, o, []string{"tls", section, conflict.Resource.Name}, "tls."+section+"."+conflict.Resource.Name)
		c.add(p)
	}
}

// mergeProblem reports a problem of the providers' merge (TLS options or
// a store named `default` in several providers), placed on the dynamic
// file that defines it when one does.
func (c *checker) mergeProblem(msg string) {
	kind, section := provider.KindTLSOptions, "options"
	if strings.HasPrefix(msg, "TLS store") {
		kind, section = provider.KindTLSStore, "stores"
	}
	p := Problem{Resource: provider.DefaultTLSName, Severity: SeverityError, Message: msg, DisablesRouter: kind == provider.KindTLSOptions}
	if file := c.fileMerger.DefinedBy(provider.Resource{Kind: kind, Name: provider.DefaultTLSName}); file != "" {
		p.File = file
		c.locatePath(&p, c.fileOrigins[file], []string{"tls", section, provider.DefaultTLSName}, "tls."+section+"."+provider.DefaultTLSName)
	}
	c.problems = append(c.problems, located{Problem: p, fileIdx: c.fileOrigins[p.File].fileIdx, line: p.Line})
}

// locatePath places p on the key path of a dynamic file (segments of
// digits are list indexes); key is how the problem names it.
func (c *checker) locatePath(p *Problem, o origin, path []string, key string) {
	p.Key = key
	if doc := o.doc.get(); doc != nil {
		if _, line := findPath(docRoot(doc), path); line > 0 {
			p.Line = line
		}
	}
	if o.toml != nil {
		var noIndex []string
		for _, s := range path {
			if strings.Trim(s, "0123456789") != "" {
				noIndex = append(noIndex, s)
			}
		}
		if k, ok := o.toml.Find(noIndex, 1); ok {
			p.Line = k.Line
		}
	}
}

// build runs the providers' own builds over the label and tag inputs and
// turns their problems into located ones.
func (c *checker) build() map[string]*config.Dynamic {
	configs := map[string]*config.Dynamic{}
	if c.fileMerger.TCP != nil || c.fileMerger.TLS != nil {
		configs[pfile.Name] = c.fileMerger.Dynamic()
	}
	if len(c.containers) > 0 {
		res := docker.Build(c.containers, docker.Options{ExposedByDefault: c.opts.ExposedByDefault})
		configs[docker.Name], c.definedBy[docker.Name] = res.Configuration, res.DefinedBy
		for _, p := range res.Problems {
			c.buildProblem(docker.Name, "container", p)
		}
	}
	if len(c.services) > 0 {
		res := swarm.Build(c.services, swarm.Options{ExposedByDefault: c.opts.ExposedByDefault})
		configs[swarm.Name], c.definedBy[swarm.Name] = res.Configuration, res.DefinedBy
		for _, p := range res.Problems {
			c.buildProblem(swarm.Name, swarmNoun, p)
		}
	}
	if len(c.instances) > 0 {
		res := consulcatalog.Build(c.instances, consulcatalog.Options{
			Prefix: c.prefix(), ExposedByDefault: c.opts.ExposedByDefault, StrictChecks: consulcatalog.DefaultStrictChecks(),
		})
		configs[consulcatalog.Name], c.definedBy[consulcatalog.Name] = res.Configuration, res.DefinedBy
		for _, p := range res.Problems {
			c.buildProblem(consulcatalog.Name, "service", p)
		}
	}
	c.buildKV(configs)
	return configs
}

// buildProblem places a provider's problem at the input it names: the label
// or tag it names, else the resource's first label, else the declaration of
// the container or service. noun is what check calls one input of prov in
// "the ... is skipped".
func (c *checker) buildProblem(prov, noun string, bp provider.Problem) {
	o := c.inputs[bp.SourceID]
	p := Problem{File: o.file, Line: o.line, Service: o.service, Severity: string(bp.Severity), Message: bp.Message, DisablesRouter: bp.DisablesRouter}
	if bp.Skipped {
		p.Message += ": the " + noun + " is skipped"
	}
	if bp.Resource.Kind != "" && !bp.Skipped {
		p.Resource = provider.Qualify(bp.Resource.Name, prov)
	}
	switch {
	case bp.Key != "":
		p.Key = bp.Key
		if l := o.find(bp.Key); l != nil {
			p.Key, p.Line = l.written(), l.line
		}
	case p.Resource != "":
		c.locate(&p, o, bp.Resource.Kind+"s", bp.Resource.Name, "")
	}
	c.problems = append(c.problems, located{Problem: p, fileIdx: o.fileIdx, line: p.Line})
}

// compile builds the label and tag inputs, merges the providers'
// configurations as the watcher does, compiles them and turns every resource
// error into a located problem. Problems about inputs come in input order
// (file, then line), then the compiler's, by resource.
func (c *checker) compile() *Report {
	merged, mergeProblems := provider.MergeReport(c.build())
	for _, msg := range mergeProblems {
		c.mergeProblem(msg)
	}
	sort.SliceStable(c.problems, func(i, j int) bool {
		a, b := c.problems[i], c.problems[j]
		if a.fileIdx != b.fileIdx {
			return a.fileIdx < b.fileIdx
		}
		return a.line < b.line
	})
	problems := make([]Problem, 0, len(c.problems))
	for _, p := range c.problems {
		problems = append(problems, p.Problem)
	}

	eps := c.opts.EntryPoints
	if len(eps) == 0 {
		eps = namedEntryPoints(merged)
	}
	st := proxy.NewState(zerolog.Nop(), proxy.StateOptions{Stores: middleware.StoresOf(namedStores(merged)), CertResolverNames: namedResolvers(merged), Offline: true})
	st.Close() // compile without starting health checkers: check does no I/O
	_, rt := proxy.Compile(merged, eps, st, zerolog.Nop())

	// The report shows the configuration without its private keys.
	shown := *merged
	shown.TLS, shown.ServersTransports = config.RedactTLS(merged.TLS), config.RedactTransports(merged.ServersTransports)
	rep := &Report{TCP: &shown, Status: Statuses{
		Routers: map[string]string{}, Services: map[string]string{}, Middlewares: map[string]string{},
	}}
	for _, name := range slices.Sorted(maps.Keys(rt.Routers)) {
		ri := rt.Routers[name]
		rep.Status.Routers[name] = ri.Status
		for i, msg := range ri.Err {
			problems = append(problems, c.resourceProblem("routers", name, ri.Status, ri.ErrorField(i), msg, ri.Status == proxy.StatusDisabled))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rt.Services)) {
		si := rt.Services[name]
		rep.Status.Services[name] = si.Status
		for i, msg := range si.Err {
			problems = append(problems, c.resourceProblem("services", name, si.Status, si.ErrorField(i), msg, false))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rt.Middlewares)) {
		mi := rt.Middlewares[name]
		rep.Status.Middlewares[name] = mi.Status
		for i, msg := range mi.Err {
			problems = append(problems, c.resourceProblem("middlewares", name, mi.Status, mi.ErrorField(i), msg, false))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rt.ServersTransports)) {
		ti := rt.ServersTransports[name]
		for i, msg := range ti.Err {
			problems = append(problems, c.resourceProblem("serversTransports", name, ti.Status, ti.ErrorField(i), msg, false))
		}
	}
	rep.Problems = problems
	return rep
}

// namedEntryPoints are the entry points tcp's routers name, sorted, or one
// called "default" when none names any: the entry points check assumes exist
// when Options.EntryPoints is empty.
func namedEntryPoints(tcp *config.TCPConfiguration) []string {
	var eps []string
	seen := map[string]bool{}
	for _, r := range tcp.Routers {
		if r == nil {
			continue
		}
		for _, ep := range r.EntryPoints {
			if !seen[ep] {
				seen[ep] = true
				eps = append(eps, ep)
			}
		}
	}
	if len(eps) == 0 {
		return []string{"default"}
	}
	sort.Strings(eps)
	return eps
}

// originOf returns where the resource kind/qname was defined: for a dynamic
// file, the file that defined it first; for labels and tags, the first input
// (in input order) that the provider's build says defined it.
func (c *checker) originOf(kind, qname string) origin {
	bare, prov, _ := strings.Cut(qname, "@")
	if prov == pfile.Name {
		return c.fileOrigins[c.fileMerger.DefinedBy(provider.Resource{Kind: strings.TrimSuffix(kind, "s"), Name: bare})]
	}
	var best origin
	found := false
	for _, id := range c.definedBy[prov][provider.Resource{Kind: strings.TrimSuffix(kind, "s"), Name: bare}] {
		o := c.inputs[id]
		if !found || o.fileIdx < best.fileIdx || (o.fileIdx == best.fileIdx && o.line < best.line) {
			best, found = o, true
		}
	}
	return best
}

// resourceProblem locates a compile error of a resource, about field (as
// the compiler names it; "" for the whole resource), at its origin.
func (c *checker) resourceProblem(kind, qname, status, field, msg string, disables bool) Problem {
	o := c.originOf(kind, qname)
	sev := SeverityWarning
	if status == proxy.StatusDisabled {
		sev = SeverityError
	}
	p := Problem{File: o.file, Service: o.service, Resource: qname, Severity: sev, Message: msg, DisablesRouter: disables}
	bare, _, _ := strings.Cut(qname, "@")
	if !o.isKV { // a KV store has a key per list element
		field = listIndex.ReplaceAllString(field, "")
	}
	c.locate(&p, o, kind, bare, field)
	if p.Key == "" && p.Line == 0 {
		p.Line = o.line // an automatic service: no label of its own
	}
	return p
}

// listIndex matches the "[i]" of a field such as "ipAllowList.sourceRange[2]":
// a label holds a whole list, and a problem is placed on the list's key.
var listIndex = regexp.MustCompile(`\[\d+\]`)

// locate fills p's Key and Line for field (dotted, may be empty) of the
// resource kind/name ("routers", "r") at origin o.
func (c *checker) locate(p *Problem, o origin, kind, name, field string) {
	if o.file == "" {
		return
	}
	if o.isKV {
		c.locateKV(p, o, kind, name, field)
		return
	}
	if !o.isFile {
		// Labels: the label whose key is the field's, else the first label of
		// the resource.
		base := strings.ToLower("traefik.tcp." + kind + "." + name)
		want := base
		if field != "" {
			want = base + "." + strings.ToLower(field)
		}
		var first *labelLine
		for i := range o.labels {
			l := &o.labels[i]
			k := strings.ToLower(l.key)
			if k == want || strings.HasPrefix(k, want+".") {
				p.Key, p.Line = l.written(), l.line
				return
			}
			if first == nil && strings.HasPrefix(k, base+".") {
				first = l
			}
		}
		if first != nil {
			p.Key, p.Line = first.written(), first.line
		}
		return
	}
	path := []string{"tcp", kind, name}
	if field != "" {
		path = append(path, strings.Split(field, ".")...)
	}
	p.Key = strings.Join(path, ".")
	if doc := o.doc.get(); doc != nil {
		if written, line := findPath(docRoot(doc), path); line > 0 {
			p.Key, p.Line = strings.Join(written, "."), line
		}
	}
	if o.toml != nil {
		if k, ok := o.toml.Find(path, 3); ok {
			p.Key, p.Line = k.Written, k.Line
		}
	}
}

// String formats p as one line: "file:line: service "s": key: [severity] message".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Service != "" {
		fmt.Fprintf(&b, "service %q: ", p.Service)
	}
	if p.Key != "" {
		b.WriteString(p.Key + ": ")
	}
	fmt.Fprintf(&b, "%s: %s", p.Severity, p.Message)
	return b.String()
}

// namedResolvers is every certificate resolver a router names: check
// reads no static configuration, so, as with stores, every resolver named
// is taken to exist, and what it obtains is not known (compile says nothing
// of it).
func namedResolvers(cfg *config.TCPConfiguration) []string {
	var names []string
	if cfg == nil {
		return names
	}
	for _, r := range cfg.Routers {
		if r != nil && r.TLS != nil && r.TLS.CertResolver != "" {
			names = append(names, r.TLS.CertResolver)
		}
	}
	return names
}

// namedStores is a store for every name an inFlightConn middleware gives as
// its store: check reads no static configuration, so, as with entry
// points, every store named is taken to exist. The stores are never
// reached (check does no I/O).
func namedStores(cfg *config.TCPConfiguration) map[string]*inflightconn.Store {
	stores := map[string]*inflightconn.Store{}
	if cfg == nil {
		return stores
	}
	for _, m := range cfg.Middlewares {
		if m != nil && m.InFlightConn != nil && m.InFlightConn.Store != "" {
			stores[m.InFlightConn.Store] = inflightconn.OfflineStore(m.InFlightConn.Store)
		}
	}
	return stores
}
