// Package check is `tollgate check`: it lints dynamic configuration without
// running the proxy. It reads dynamic YAML/TOML files (the file provider's
// input), files of `key=value` labels and docker-compose files (the Docker
// provider's input, labels in list or map form, per service), decodes them
// with the same code the providers use, merges them the way the watcher does,
// and compiles the result with proxy.Compile, so that every problem the
// running proxy would find is found here, with where it comes from: the file,
// the line when the format has lines, the compose service, and the label or
// key.
package check

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
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
}

// DefaultOptions are the providers' defaults.
func DefaultOptions() Options { return Options{ExposedByDefault: true, Prefix: "traefik"} }

// origin is where a resource was defined.
type origin struct {
	file    string
	service string      // compose service, for labels
	labels  []labelLine // the labels of that container, for label inputs
	doc     *yaml.Node  // YAML document, for file inputs
	toml    tomlIndex   // where TOML keys are, for TOML file inputs
	path    []string    // key path of the resource in doc, as written
	isFile  bool        // a dynamic file (else labels)
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

// checker accumulates inputs per provider.
type checker struct {
	opts     Options
	problems []Problem
	// per provider: configuration with bare names, and where each came from
	configs map[string]*config.Dynamic
	origins map[string]origin // qualified name with kind: "routers/r@file"
	dropped map[string]bool   // names dropped for conflicting definitions, same keys
}

// Files checks the given files (a directory stands for its dynamic files)
// together, as one tollgate would see them
// with a file provider reading the dynamic files and a Docker provider
// reading the compose and label files, and a Consul Catalog provider reading
// the Consul service definitions (.json).
func Files(paths []string, opts Options) *Report {
	c := &checker{opts: opts, configs: map[string]*config.Dynamic{}, origins: map[string]origin{}, dropped: map[string]bool{}}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			c.dir(p)
			continue
		}
		c.file(p)
	}
	return c.compile()
}

func (c *checker) add(p Problem) { c.problems = append(c.problems, p) }

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
	content, err := os.ReadFile(path)
	if err != nil {
		c.add(Problem{File: path, Severity: SeverityError, Message: err.Error(), DisablesRouter: true})
		return
	}
	ext := strings.ToLower(filepath.Ext(path))
	switch ext {
	case ".yml", ".yaml":
		var doc yaml.Node
		if err := yaml.Unmarshal(content, &doc); err != nil {
			c.add(Problem{File: path, Severity: SeverityError, Message: "not YAML: " + err.Error(), DisablesRouter: true})
			return
		}
		if isCompose(&doc) {
			c.compose(path, &doc)
			return
		}
		c.dynamic(path, ext, string(content), &doc)
	case ".toml":
		c.dynamic(path, ext, string(content), nil)
	case ".json":
		var doc yaml.Node // JSON is YAML: the YAML parser gives lines
		if err := yaml.Unmarshal(content, &doc); err != nil {
			c.add(Problem{File: path, Severity: SeverityError, Message: "not JSON: " + err.Error(), DisablesRouter: true})
			return
		}
		c.consul(path, &doc)
	default:
		c.labelFile(path, string(content))
	}
}

// isCompose reports whether a YAML document is a compose file: a top-level
// `services` mapping and no `tcp` section.
func isCompose(doc *yaml.Node) bool {
	root := docRoot(doc)
	return root != nil && mapGet(root, "services") != nil && mapGet(root, "tcp") == nil
}

// merge adds one source's configuration (bare names) to provider prov. For
// the file provider a name defined differently twice keeps the first (as the
// file provider's directory mode does); for docker and consulcatalog,
// services merge their servers and other differences drop the name for good
// (as those providers do).
func (c *checker) merge(prov string, tcp *config.TCPConfiguration, o origin) {
	d := c.configs[prov]
	if d == nil {
		d = &config.Dynamic{TCP: &config.TCPConfiguration{
			Routers: map[string]*config.TCPRouter{}, Services: map[string]*config.TCPService{}, Middlewares: map[string]*config.TCPMiddleware{},
		}}
		c.configs[prov] = d
	}
	dst := d.TCP
	conflict := func(kind, name string, drop bool) {
		prev := c.origins[kind+"/"+provider.Qualify(name, prov)]
		where := func(o origin) string {
			if o.service != "" {
				return fmt.Sprintf("service %q of %s", o.service, o.file)
			}
			return o.file
		}
		what := "keeping the first"
		if drop {
			what = "dropped (give them the same labels or different names)"
		}
		p := Problem{File: o.file, Service: o.service, Resource: provider.Qualify(name, prov), Severity: SeverityError,
			Message:        fmt.Sprintf("%s %q is defined differently in %s and %s: %s", strings.TrimSuffix(kind, "s"), name, where(prev), where(o), what),
			DisablesRouter: kind == "routers" && drop}
		c.locate(&p, o, kind, name, "")
		c.add(p)
	}
	record := func(kind, name string) {
		q := kind + "/" + provider.Qualify(name, prov)
		if _, ok := c.origins[q]; !ok {
			c.origins[q] = o
		}
	}
	docker := prov != "file"
	dropped := func(kind, name string) bool { return c.dropped[kind+"/"+provider.Qualify(name, prov)] }
	drop := func(kind, name string) { c.dropped[kind+"/"+provider.Qualify(name, prov)] = true }
	for _, name := range sortedKeys(tcp.Routers) {
		r := tcp.Routers[name]
		prev, have := dst.Routers[name]
		switch {
		case dropped("routers", name):
		case !have:
			dst.Routers[name] = r
			record("routers", name)
		case !reflect.DeepEqual(prev, r):
			conflict("routers", name, docker)
			if docker {
				delete(dst.Routers, name)
				drop("routers", name)
			}
		}
	}
	for _, name := range sortedKeys(tcp.Services) {
		s := tcp.Services[name]
		prev, have := dst.Services[name]
		switch {
		case dropped("services", name):
		case !have:
			dst.Services[name] = s
			record("services", name)
		case docker && prev != nil && s != nil && mergeable(prev.LoadBalancer, s.LoadBalancer):
			for _, srv := range s.LoadBalancer.Servers {
				if !slices.Contains(prev.LoadBalancer.Servers, srv) {
					prev.LoadBalancer.Servers = append(prev.LoadBalancer.Servers, srv)
				}
			}
		case !reflect.DeepEqual(prev, s):
			conflict("services", name, docker)
			if docker {
				delete(dst.Services, name)
				drop("services", name)
			}
		}
	}
	for _, name := range sortedKeys(tcp.Middlewares) {
		m := tcp.Middlewares[name]
		prev, have := dst.Middlewares[name]
		switch {
		case dropped("middlewares", name):
		case !have:
			dst.Middlewares[name] = m
			record("middlewares", name)
		case !reflect.DeepEqual(prev, m):
			conflict("middlewares", name, docker)
			if docker {
				delete(dst.Middlewares, name)
				drop("middlewares", name)
			}
		}
	}
}

func mergeable(a, b *config.TCPServersLoadBalancer) bool {
	if a == nil || b == nil {
		return false
	}
	x, y := *a, *b
	x.Servers, y.Servers = nil, nil
	return reflect.DeepEqual(x, y)
}

// compile merges the providers' configurations as the watcher does, compiles
// them and turns every resource error into a located problem.
func (c *checker) compile() *Report {
	merged := provider.Merge(c.configs)
	eps := c.opts.EntryPoints
	if len(eps) == 0 {
		seen := map[string]bool{}
		for _, r := range merged.Routers {
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
			eps = []string{"default"}
		}
		sort.Strings(eps)
	}
	st := proxy.NewState(zerolog.Nop())
	st.Close() // compile without starting health checkers: check does no I/O
	_, rt := proxy.Compile(merged, eps, st, zerolog.Nop())

	rep := &Report{TCP: merged, Status: Statuses{
		Routers: map[string]string{}, Services: map[string]string{}, Middlewares: map[string]string{},
	}}
	for _, name := range sortedKeys(rt.Routers) {
		ri := rt.Routers[name]
		rep.Status.Routers[name] = ri.Status
		for _, msg := range ri.Err {
			c.resourceProblem("routers", name, ri.Status, msg, ri.Status == proxy.StatusDisabled)
		}
	}
	for _, name := range sortedKeys(rt.Services) {
		si := rt.Services[name]
		rep.Status.Services[name] = si.Status
		for _, msg := range si.Err {
			c.resourceProblem("services", name, si.Status, msg, false)
		}
	}
	for _, name := range sortedKeys(rt.Middlewares) {
		mi := rt.Middlewares[name]
		rep.Status.Middlewares[name] = mi.Status
		for _, msg := range mi.Err {
			c.resourceProblem("middlewares", name, mi.Status, msg, false)
		}
	}
	rep.Problems = c.problems
	if rep.Problems == nil {
		rep.Problems = []Problem{}
	}
	return rep
}

// resourceProblem records a compile error of a resource at its origin.
func (c *checker) resourceProblem(kind, qname, status, msg string, disables bool) {
	o := c.origins[kind+"/"+qname]
	sev := SeverityWarning
	if status == proxy.StatusDisabled {
		sev = SeverityError
	}
	p := Problem{File: o.file, Service: o.service, Resource: qname, Severity: sev, Message: msg, DisablesRouter: disables}
	bare, _, _ := strings.Cut(qname, "@")
	c.locate(&p, o, kind, bare, fieldFor(kind, msg))
	c.add(p)
}

// hints map words of compile messages to the field they are about, per kind.
var hints = map[string][][2]string{
	"routers": {
		{"rule", "rule"}, {"hostsni", "rule"}, {"service", "service"}, {"middleware", "middlewares"},
		{"entry point", "entryPoints"}, {"tls termination", "tls"},
	},
	"services": {
		{"servers", "loadBalancer.servers"}, {"proxyprotocol", "loadBalancer.proxyProtocol"},
		{"healthcheck", "loadBalancer.healthCheck"}, {"weighted", "weighted"}, {"member", "weighted"},
	},
	"middlewares": {
		{"amount", "inFlightConn.amount"}, {"ipv6subnet", "inFlightConn.ipv6Subnet"},
		{"sourcerange", "ipAllowList.sourceRange"},
	},
}

// fieldFor picks the field a message is about: the hint that occurs first.
func fieldFor(kind, msg string) string {
	low := strings.ToLower(msg)
	best, at := "", len(low)+1
	for _, h := range hints[kind] {
		if i := strings.Index(low, h[0]); i >= 0 && i < at {
			best, at = h[1], i
		}
	}
	return best
}

// locate fills p's Key and Line for field (dotted, may be empty) of the
// resource kind/name at origin o.
func (c *checker) locate(p *Problem, o origin, kind, name, field string) {
	if o.file == "" {
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
	if o.doc != nil {
		if written, line := findPath(docRoot(o.doc), path); line > 0 {
			p.Key, p.Line = strings.Join(written, "."), line
		}
	}
	if o.toml != nil {
		if k, ok := o.toml.find(path, 3); ok {
			p.Key, p.Line = k.written, k.line
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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
