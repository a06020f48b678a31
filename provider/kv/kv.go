// Package kv is the core of the KV providers (Consul KV, etcd, Redis,
// ZooKeeper): it turns the key/value pairs under a root key into the dynamic
// configuration with Traefik's key layout, and drives a store's watch
// (Provider, in run.go). Each store is a small package of its own under
// provider/kv that implements Store with the store's real client.
//
// The layout is Traefik's: one key per field, segments separated by "/",
// lists as ".../0", ".../1":
//
//	traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount   10
//	traefik/tcp/routers/my-router/rule                              HostSNI(`*`)
//	traefik/tcp/routers/my-router/middlewares/0                     test-inflightconn
//	traefik/tcp/routers/my-router/service                           my-service
//	traefik/tcp/services/my-service/loadBalancer/servers/0/address  127.0.0.1:4000
//
// Build decodes them as Traefik's kv.Decode does: the pairs become a tree of
// paerser nodes (a segment of digits is a list index, "[0]"; the values of a
// list of plain values, ".../middlewares/0", ".../middlewares/1", are joined
// in index order), paerser adds the types from config.Dynamic and fills it.
// Field names are case-insensitive; the root key, the section (tcp) and the
// resource names are matched as written, except that two spellings of one
// resource name are one resource, as in Traefik. A KV store is written like a
// file, not like labels: the struct tags that apply are the file's
// (`file:"allowEmpty"`, `file:"-"`), so servers take their address and
// weighted services can be declared.
//
// Unlike Traefik, which refuses the whole configuration when one key is bad,
// Build decodes each router, service and middleware on its own: a bad key
// (unknown field, bad value) drops only the resource it belongs to, with a
// problem that names the full key and its value; the rest applies.
package kv

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/traefik/paerser/parser"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/decodeerr"
	"github.com/tollgate-proxy/tollgate/provider"
)

// DefaultRootKey is the root key when none is configured.
const DefaultRootKey = "traefik"

// Pair is one key and its value as read from the store.
type Pair struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Options are the static settings Build applies.
type Options struct {
	// RootKey is the key the configuration is under (DefaultRootKey when
	// empty); a trailing "/" is ignored.
	RootKey string
	// SourceID identifies the store in problems (provider.Problem.SourceID)
	// and in Result.DefinedBy; `tollgate check` uses it to find the dump the
	// pairs came from. It may be empty.
	SourceID string
	// Cache, when set, carries each resource's decoding from one build to
	// the next; it changes how fast Build is, never what it returns. New
	// gives the provider one.
	Cache *DecodeCache
}

// root returns the root key without its trailing slash.
func (o Options) root() string {
	r := strings.TrimRight(o.RootKey, "/")
	if r == "" {
		r = DefaultRootKey
	}
	return r
}

// group is the pairs of one resource.
type group struct {
	res   provider.Resource
	pairs []Pair // sorted by key
}

// Build turns the pairs read under opts.RootKey into the provider's
// configuration (bare names) and its problems. It is pure: pairs are not
// modified, and the result is the same whatever their order (when a key
// appears twice, which no store allows but a dump may, the later one wins
// with a warning).
//
// Keys outside the root key are ignored (a dump of the whole store may hold
// other applications' keys), and so are folder keys (Consul's "dir/" with no
// value). Under the root key:
//
//   - <root>/tcp/{routers,services,middlewares,serversTransports}/<name>/...,
//     <root>/tls/{options,stores}/<name>/... and
//     <root>/tls/certificates/<n>/{certFile,keyFile,stores/<i>} are decoded,
//     one resource (one certificate) at a time; a key that does not decode
//     (unknown field, a value of the wrong type, two spellings of one field)
//     drops that resource alone, with an error naming the key. Certificate
//     and key values are paths on the proxy's disk or PEM, read by the
//     proxy (docs/reference/tls.md);
//   - <root>/http and <root>/udp are Traefik's other sections: ignored, with
//     one warning per section (tollgate routes TCP only);
//   - any other key is an unknown key: an error that drops nothing.
//
// Then the router defaults apply (provider.BuildTCPRouterConfiguration): a
// router without a rule is dropped, a router without a service gets the only
// service when there is exactly one. The configuration's maps are never nil.
func Build(pairs []Pair, opts Options) provider.Result {
	b := newBuilder(opts)
	for _, p := range b.underRoot(pairs) {
		b.place(p)
	}
	b.warnIgnored()
	b.decodeAll()
	opts.Cache.rotate()

	src := provider.Source{ID: opts.SourceID, TCP: b.tcp}
	for _, p := range provider.BuildTCPRouterConfiguration(src, "store", b.prefix) {
		b.problem(p)
	}
	b.res.Configuration = &config.Dynamic{TCP: b.tcp, TLS: b.tls}
	return b.res
}

// A builder is one Build: the keys grouped into resources, then the
// resources decoded into the configuration, the problems met on the way
// kept in res.
type builder struct {
	opts   Options
	root   string
	prefix string // root + "/"
	res    provider.Result

	groups   map[provider.Resource]*group
	names    map[string]string // kind + "/" + lower(name) -> the first spelling
	ignored  map[string][]Pair // the keys of the sections tollgate ignores
	sections []string          // those sections, in the order met
	at       map[string]bool   // names with an @, reported once

	tcp *config.TCPConfiguration
	tls *config.TLSConfiguration // nil until a TLS resource decodes
}

func newBuilder(opts Options) *builder {
	root := opts.root()
	return &builder{
		opts:    opts,
		root:    root,
		prefix:  root + "/",
		res:     provider.Result{DefinedBy: map[provider.Resource][]string{}},
		groups:  map[provider.Resource]*group{},
		names:   map[string]string{},
		ignored: map[string][]Pair{},
		at:      map[string]bool{},
		tcp: &config.TCPConfiguration{
			Routers:     map[string]*config.TCPRouter{},
			Services:    map[string]*config.TCPService{},
			Middlewares: map[string]*config.TCPMiddleware{},
		},
	}
}

// problem records p as the store's.
func (b *builder) problem(p provider.Problem) {
	p.SourceID = b.opts.SourceID
	if p.Key != "" {
		p.KeyKind = provider.KeyKV
	}
	b.res.Problems = append(b.res.Problems, p)
}

// unknownKey records p's key as one Build does not know; format says what
// it expected.
func (b *builder) unknownKey(p Pair, format string, args ...any) {
	b.problem(provider.Problem{Key: p.Key, Value: p.Value, Severity: provider.SeverityError,
		Message: "unknown key: " + fmt.Sprintf(format, args...) + ": ignored"})
}

// underRoot returns the pairs under the root key, sorted by key; the later
// of two equal keys wins, with a warning when their values differ.
func (b *builder) underRoot(pairs []Pair) []Pair {
	byKey := make(map[string]int, len(pairs))
	sorted := make([]Pair, 0, len(pairs))
	for _, p := range pairs {
		if !strings.HasPrefix(p.Key, b.prefix) {
			continue
		}
		if i, dup := byKey[p.Key]; dup {
			if sorted[i].Value != p.Value {
				b.problem(provider.Problem{Key: p.Key, Value: p.Value, Severity: provider.SeverityWarning,
					Message: fmt.Sprintf("key appears twice (values %q and %q): the later one is used", sorted[i].Value, p.Value)})
			}
			sorted[i] = p
			continue
		}
		byKey[p.Key] = len(sorted)
		sorted = append(sorted, p)
	}
	slices.SortFunc(sorted, func(a, b Pair) int { return strings.Compare(a.Key, b.Key) }) // keys are unique by now
	return sorted
}

// place adds p to the group of the resource its key names, or reports why
// it belongs to none.
func (b *builder) place(p Pair) {
	kind, name, ok := b.resourceKey(p)
	if !ok {
		return
	}
	if strings.Contains(name, "@") {
		if b.at[kind+"/"+name] {
			return
		}
		b.at[kind+"/"+name] = true
		b.problem(provider.Problem{Key: p.Key, Value: p.Value, Resource: provider.Resource{Kind: kind, Name: name}, Severity: provider.SeverityError,
			Message:        fmt.Sprintf("the %s name %q has an @, which qualifies names (name@provider): dropped", kind, name),
			DisablesRouter: kind == provider.KindRouter})
		return
	}
	// Names are case-insensitive: the first spelling met names the resource.
	lname := kind + "/" + strings.ToLower(name)
	if first, seen := b.names[lname]; seen {
		name = first
	} else {
		b.names[lname] = name
	}
	r := provider.Resource{Kind: kind, Name: name}
	g := b.groups[r]
	if g == nil {
		g = &group{res: r}
		b.groups[r] = g
	}
	g.pairs = append(g.pairs, p)
}

// resourceKey reads the kind and the name of the resource p's key is a
// key of (<root>/<section>/<kind>/<name>/...). A folder, a key of an
// ignored section or an unknown key is no resource's: ok is false (the
// last two are recorded).
func (b *builder) resourceKey(p Pair) (kind, name string, ok bool) {
	rest := p.Key[len(b.prefix):]
	if strings.HasSuffix(rest, "/") {
		if p.Value == "" {
			return "", "", false // a folder
		}
		rest = strings.TrimRight(rest, "/")
	}
	if rest == "" {
		return "", "", false
	}
	segs := strings.SplitN(rest, "/", 4) // section, kind, name and the rest
	section := strings.ToLower(segs[0])
	switch section {
	case "tcp", "tls":
	case "http", "udp":
		if b.ignored[section] == nil {
			b.sections = append(b.sections, section)
		}
		b.ignored[section] = append(b.ignored[section], p)
		return "", "", false
	default:
		b.unknownKey(p, "tollgate reads %stcp/... and %stls/...", b.prefix, b.prefix)
		return "", "", false
	}
	want := "{routers,services,middlewares,serversTransports}"
	if section == "tls" {
		want = "{options,stores,certificates}"
	}
	if len(segs) < 3 || segs[1] == "" || segs[2] == "" {
		b.unknownKey(p, "want %s%s/%s/<name>/...", b.prefix, segs[0], want)
		return "", "", false
	}
	for _, k := range provider.Sections {
		if k.Section == section && strings.EqualFold(segs[1], k.Key) {
			kind = k.Kind
		}
	}
	if kind == "" {
		b.unknownKey(p, "%q is not one of %s", segs[1], want)
		return "", "", false
	}
	if kind == provider.KindTLSCertificate && !digits.MatchString(segs[2]) {
		b.unknownKey(p, "certificates is a list: its elements are numbered (%stls/certificates/0/certFile), not %q", b.prefix, segs[2])
		return "", "", false
	}
	return kind, segs[2], true
}

// warnIgnored says once per section that the http and udp keys are
// ignored.
func (b *builder) warnIgnored() {
	for _, s := range b.sections {
		ps := b.ignored[s]
		msg := fmt.Sprintf("tollgate routes TCP only: the %s section is ignored", s)
		if len(ps) > 1 {
			msg = fmt.Sprintf("tollgate routes TCP only: the %s section (%d keys) is ignored", s, len(ps))
		}
		b.problem(provider.Problem{Key: ps[0].Key, Value: ps[0].Value, Severity: provider.SeverityWarning, Message: msg})
	}
}

// decodeAll decodes the groups kind by kind (provider.Sections' order),
// each kind's by name, and adds each to the configuration; a group that
// does not decode is dropped with an error naming its key.
func (b *builder) decodeAll() {
	definedBy := []string{b.opts.SourceID} // every resource's: one store, read-only
	for _, k := range provider.Sections {
		for _, g := range b.groupsOf(k.Kind) {
			b.res.DefinedBy[g.res] = definedBy
			d, bad, err := b.opts.Cache.decode(b.root, g)
			if err != nil {
				b.problem(provider.Problem{
					Key: bad.Key, Value: bad.Value, Resource: g.res, Severity: provider.SeverityError,
					Message:        fmt.Sprintf("%v: %s %q is dropped", err, g.res.Kind, g.res.Name),
					DisablesRouter: g.res.Kind == provider.KindRouter,
				})
				continue
			}
			b.add(g.res.Kind, d)
		}
	}
}

// groupsOf returns the groups of kind sorted by name (certificates by
// index, not as strings).
func (b *builder) groupsOf(kind string) []*group {
	var gs []*group
	for r, g := range b.groups {
		if r.Kind == kind {
			gs = append(gs, g)
		}
	}
	sort.Slice(gs, func(i, j int) bool {
		if kind == provider.KindTLSCertificate {
			a, _ := strconv.Atoi(gs[i].res.Name)
			b, _ := strconv.Atoi(gs[j].res.Name)
			if a != b {
				return a < b
			}
		}
		return gs[i].res.Name < gs[j].res.Name
	})
	return gs
}

// add copies d, one resource of kind decoded alone, into the
// configuration.
func (b *builder) add(kind string, d *config.Dynamic) {
	tcp := b.tcp
	switch {
	case d.TCP != nil && kind == provider.KindRouter:
		maps.Copy(tcp.Routers, d.TCP.Routers)
	case d.TCP != nil && kind == provider.KindService:
		maps.Copy(tcp.Services, d.TCP.Services)
	case d.TCP != nil && kind == provider.KindMiddleware:
		maps.Copy(tcp.Middlewares, d.TCP.Middlewares)
	case d.TCP != nil && kind == provider.KindServersTransport && len(d.TCP.ServersTransports) > 0:
		if tcp.ServersTransports == nil {
			tcp.ServersTransports = map[string]*config.TCPServersTransport{}
		}
		maps.Copy(tcp.ServersTransports, d.TCP.ServersTransports)
	case d.TLS != nil && kind == provider.KindTLSOptions && len(d.TLS.Options) > 0:
		t := b.tlsSection()
		if t.Options == nil {
			t.Options = map[string]config.TLSOptions{}
		}
		maps.Copy(t.Options, d.TLS.Options)
	case d.TLS != nil && kind == provider.KindTLSStore && len(d.TLS.Stores) > 0:
		t := b.tlsSection()
		if t.Stores == nil {
			t.Stores = map[string]config.TLSStore{}
		}
		maps.Copy(t.Stores, d.TLS.Stores)
	case d.TLS != nil && kind == provider.KindTLSCertificate:
		// Decoded alone, the element is the list's only one.
		for _, c := range d.TLS.Certificates {
			if c != nil {
				t := b.tlsSection()
				t.Certificates = append(t.Certificates, c)
			}
		}
	}
}

// tlsSection returns the configuration's TLS section, made on first use.
func (b *builder) tlsSection() *config.TLSConfiguration {
	if b.tls == nil {
		b.tls = &config.TLSConfiguration{}
	}
	return b.tls
}

// DecodeCache memoises the decoding of each resource (decodeGroup) by its
// pairs: when one key of ten thousand changes, a build decodes the one
// resource it belongs to again, not every resource (paerser's decode was
// most of a build's time). The routers a build returns are its own (it
// writes the router defaults into them); the services, middlewares,
// servers transports and TLS resources are shared with the earlier results
// that decoded the same pairs: a configuration handed to the watcher is
// read-only (ARCHITECTURE.md: Compile never writes into its input, and the
// watcher's Merge copies what it qualifies). An entry lives for the build
// that used it and the next one. The zero value is ready; a nil
// *DecodeCache decodes every time. It is not safe for concurrent use (a
// provider builds from one goroutine).
type DecodeCache struct {
	prev, cur map[provider.Resource]*decodedGroup
}

// decodedGroup is what decodeGroup returned for one resource's pairs.
type decodedGroup struct {
	root  string
	pairs []Pair // the group's, never modified
	d     *config.Dynamic
	bad   Pair
	err   error
}

// decode is decodeGroup(root, g), from the cache when g's pairs were
// decoded by this build or the previous one.
func (c *DecodeCache) decode(root string, g *group) (*config.Dynamic, Pair, error) {
	if c == nil {
		return decodeGroup(root, g)
	}
	same := func(e *decodedGroup) bool { return e != nil && e.root == root && slices.Equal(e.pairs, g.pairs) }
	e := c.cur[g.res]
	if !same(e) {
		if e = c.prev[g.res]; !same(e) {
			d, bad, err := decodeGroup(root, g)
			e = &decodedGroup{root: root, pairs: g.pairs, d: d, bad: bad, err: err}
		}
		if c.cur == nil {
			c.cur = make(map[provider.Resource]*decodedGroup, len(c.prev))
		}
		c.cur[g.res] = e
	}
	return ownRouters(e.d), e.bad, e.err
}

// ownRouters returns d with routers of its own (copies) and the rest shared.
func ownRouters(d *config.Dynamic) *config.Dynamic {
	if d == nil || d.TCP == nil || len(d.TCP.Routers) == 0 {
		return d
	}
	tcp := *d.TCP
	tcp.Routers = make(map[string]*config.TCPRouter, len(d.TCP.Routers))
	for name, r := range d.TCP.Routers {
		if r != nil {
			cp := *r
			r = &cp
		}
		tcp.Routers[name] = r
	}
	out := *d
	out.TCP = &tcp
	return &out
}

// rotate ends a build: the entries it did not use are dropped at the next.
func (c *DecodeCache) rotate() {
	if c != nil {
		c.prev, c.cur = c.cur, nil
	}
}

// decodeGroup decodes one resource's pairs. On failure it returns the pair
// to blame: the first that fails on its own, else the one whose addition (in
// key order) makes decoding fail.
func decodeGroup(root string, g *group) (*config.Dynamic, Pair, error) {
	d, err := decodePairs(root, g.pairs)
	if err == nil {
		return d, Pair{}, nil
	}
	p, err := blame(root, g, err)
	// A value that does not parse: say what it should be, as labels and
	// files do (`amount must be an integer, got "ten"`).
	if msg, ok := decodeerr.Value(field(p.Key), err); ok {
		err = errors.New(msg)
	}
	return nil, p, err
}

// blame finds the pair that err, the error of decoding g, is about.
func blame(root string, g *group, err error) (Pair, error) {
	var ke *keyError
	if errors.As(err, &ke) {
		return ke.pair, ke.err
	}
	for _, p := range g.pairs {
		if _, err := decodePairs(root, []Pair{p}); err != nil {
			return p, unwrapKey(err)
		}
	}
	for i := range g.pairs {
		if _, err := decodePairs(root, g.pairs[:i+1]); err != nil {
			return g.pairs[i], unwrapKey(err)
		}
	}
	return g.pairs[0], err
}

// field is the field a key sets: its last segment that is not a list index
// ("middlewares" for ".../middlewares/0").
func field(key string) string {
	segs := strings.Split(strings.TrimRight(key, "/"), "/")
	for i := len(segs) - 1; i >= 0; i-- {
		if !digits.MatchString(segs[i]) {
			return segs[i]
		}
	}
	return ""
}

// keyError is an error that names its pair already.
type keyError struct {
	pair Pair
	err  error
}

func (e *keyError) Error() string { return fmt.Sprintf("key %q: %v", e.pair.Key, e.err) }

func unwrapKey(err error) error {
	var ke *keyError
	if errors.As(err, &ke) {
		return ke.err
	}
	return err
}

// digits is a list index segment.
var digits = regexp.MustCompile(`^[0-9]+$`)

// decodePairs decodes pairs, all under root, into a fresh configuration
// through paerser's node tree, the way Traefik's kv.Decode does.
func decodePairs(root string, pairs []Pair) (d *config.Dynamic, err error) {
	defer func() {
		// paerser panics on some malformed trees: a bad key must not take
		// tollgate down.
		if r := recover(); r != nil {
			d, err = nil, fmt.Errorf("malformed key (paerser: %v)", r)
		}
	}()
	node, err := toNode(root, pairs)
	if err != nil {
		return nil, err
	}
	d = &config.Dynamic{}
	if err := parser.AddMetadata(d, node, parser.MetadataOpts{TagName: parser.TagFile, AllowSliceAsStruct: false}); err != nil {
		return nil, explain(err)
	}
	if err := checkNodes(node, reflect.TypeOf(d)); err != nil {
		return nil, err
	}
	if err := parser.Fill(d, node, parser.FillerOpts{AllowSliceAsStruct: false}); err != nil {
		return nil, explain(err)
	}
	return d, nil
}

// toNode builds the paerser tree of pairs. A key whose last segment is a
// number is one element of a list of plain values: the elements are joined
// with commas in index order into their parent key, as Traefik does (so an
// element may itself hold a comma-separated list). Other segments of digits
// are list indexes ("[0]"). Segments are matched case-insensitively; two keys
// that differ only in case are an error.
func toNode(root string, pairs []Pair) (*parser.Node, error) {
	type elem struct {
		index int
		pair  Pair
	}
	leaves := map[string]Pair{}    // lower-case path -> pair
	lists := map[string][]elem{}   // lower-case parent path -> elements
	spelled := map[string]string{} // lower-case key -> key as written
	listKey := map[string]string{} // lower-case parent path -> parent path as written
	for _, p := range pairs {
		rest := strings.TrimRight(p.Key[len(root)+1:], "/")
		lower := strings.ToLower(rest)
		if prev, dup := spelled[lower]; dup {
			return nil, &keyError{p, fmt.Errorf("same key as %q (keys are case-insensitive)", prev)}
		}
		spelled[lower] = p.Key
		for _, s := range strings.Split(rest, "/") {
			if s == "" {
				return nil, &keyError{p, errors.New("empty segment in key")}
			}
		}
		i := strings.LastIndexByte(rest, '/')
		if last := rest[i+1:]; digits.MatchString(last) {
			n, err := strconv.Atoi(last)
			if err != nil {
				return nil, &keyError{p, fmt.Errorf("list index %q is too large", last)}
			}
			parent := strings.ToLower(rest[:i])
			lists[parent] = append(lists[parent], elem{n, p})
			listKey[parent] = rest[:i]
			continue
		}
		leaves[lower] = p
	}

	type leaf struct {
		path  string // as written
		value string
	}
	var all []leaf
	for _, p := range leaves {
		all = append(all, leaf{strings.TrimRight(p.Key[len(root)+1:], "/"), p.Value})
	}
	for parent, es := range lists {
		if p, both := leaves[parent]; both {
			return nil, &keyError{p, fmt.Errorf("set either %s or its elements %s/0, %s/1, ..., not both", p.Key, p.Key, p.Key)}
		}
		sort.Slice(es, func(i, j int) bool { return es[i].index < es[j].index })
		vals := make([]string, len(es))
		for i, e := range es {
			if i > 0 && e.index == es[i-1].index {
				return nil, &keyError{e.pair, fmt.Errorf("same list element as %q", es[i-1].pair.Key)}
			}
			vals[i] = e.pair.Value
		}
		all = append(all, leaf{listKey[parent], strings.Join(vals, ",")})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].path < all[j].path })

	node := &parser.Node{Name: parser.DefaultRootName}
	for _, l := range all {
		n := node
		for _, s := range strings.Split(l.path, "/") {
			if digits.MatchString(s) {
				s = "[" + s + "]"
			}
			var child *parser.Node
			for _, c := range n.Children {
				if strings.EqualFold(c.Name, s) {
					child = c
					break
				}
			}
			if child == nil {
				child = &parser.Node{Name: s}
				n.Children = append(n.Children, child)
			}
			n = child
		}
		n.Value = l.value
	}
	sortIndexes(node)
	return node, nil
}

// sortIndexes orders list elements ("[2]", "[10]") by their index, not as
// strings.
func sortIndexes(n *parser.Node) {
	if len(n.Children) > 1 && isIndex(n.Children[0].Name) {
		sort.SliceStable(n.Children, func(i, j int) bool { return index(n.Children[i].Name) < index(n.Children[j].Name) })
	}
	for _, c := range n.Children {
		sortIndexes(c)
	}
}

func isIndex(name string) bool {
	return len(name) > 2 && name[0] == '[' && name[len(name)-1] == ']'
}

func index(name string) int {
	n, _ := strconv.Atoi(strings.Trim(name, "[]"))
	return n
}

// checkNodes rejects what paerser would accept silently, walking the tree
// with the types of config.Dynamic: a field the file format ignores
// (`file:"-"`, such as a server's port: a KV server takes its address), a
// router, service, middleware or list element with no field set, elements
// of a list of blocks that are not numbered, and a value set on such a list.
func checkNodes(n *parser.Node, t reflect.Type) error {
	for _, c := range n.Children {
		ct := childType(t, c)
		if ct == nil {
			continue
		}
		if c.Tag.Get(parser.TagFile) == "-" {
			return fmt.Errorf("unknown key: %s is not read from a KV store", c.Name)
		}
		base := ct
		for base.Kind() == reflect.Pointer {
			base = base.Elem()
		}
		allowEmpty := c.Tag.Get(parser.TagFile) == parser.TagLabelAllowEmpty
		switch {
		case allowEmpty && len(c.Children) == 0 && c.Value != "" && !strings.EqualFold(c.Value, "true") && !strings.EqualFold(c.Value, "false"):
			// paerser takes any value but "true" as "off".
			return fmt.Errorf("%s takes true, false or keys below it, not %q", c.Name, c.Value)
		case base.Kind() == reflect.Struct && len(c.Children) == 0 && !allowEmpty:
			return fmt.Errorf("%s takes fields, not a value: set the keys below it", c.Name)
		case base.Kind() == reflect.Slice && isBlock(base.Elem()):
			if len(c.Children) == 0 && c.Value != "" {
				return fmt.Errorf("%s is a list of blocks: set the fields of its elements (%s/0/..., %s/1/...)", c.Name, c.Name, c.Name)
			}
			for _, e := range c.Children {
				if !isIndex(e.Name) {
					return fmt.Errorf("%s is a list: its elements are numbered (%s/0, %s/1, ...), not %q", c.Name, c.Name, c.Name, e.Name)
				}
			}
		}
		if err := checkNodes(c, ct); err != nil {
			return err
		}
	}
	return nil
}

// childType is the type of child c of a node of type t (nil when unknown).
func childType(t reflect.Type, c *parser.Node) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if f, ok := t.FieldByName(c.FieldName); ok {
			return f.Type
		}
	case reflect.Map, reflect.Slice:
		return t.Elem()
	}
	return nil
}

// isBlock reports whether t is a struct or a pointer to one.
func isBlock(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct
}

// explain turns paerser's errors about keys into ones a user can act on;
// errors about values are reworded by decodeGroup, which knows the key.
func explain(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "field not found"):
		return fmt.Errorf("unknown key (%s)", msg)
	case strings.Contains(msg, "cannot be a standalone element"):
		return fmt.Errorf("%s: set one of its fields as a key below it", msg)
	}
	return err
}
