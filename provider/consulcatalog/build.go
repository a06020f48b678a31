package consulcatalog

import (
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/labels"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Instance is one Consul service instance as the provider reads it from the
// catalog, with its aggregated health: what Build needs and nothing else.
// `tollgate check` fills it from a Consul service definition. The JSON form
// is the input of the golden files under testdata/consulcatalog.
type Instance struct {
	// Name is the Consul service name; the automatic TCP service is named
	// after it.
	Name string `json:"name"`
	// ID is the service ID, unique on its node.
	ID string `json:"id"`
	// Node and NodeAddress are the catalog node the instance is registered on.
	Node        string `json:"node"`
	NodeAddress string `json:"nodeAddress,omitempty"`
	// Address is the ServiceAddress; empty means NodeAddress.
	Address string `json:"address,omitempty"`
	// Port is the ServicePort; 0 means none was registered.
	Port int `json:"port,omitempty"`
	// Tags are the service tags as registered.
	Tags []string `json:"tags,omitempty"`
	// Status is the instance's aggregated health (node and service checks):
	// passing, warning, critical or maintenance (Consul's AggregatedStatus).
	Status string `json:"status"`
}

// SourceID identifies the instance in problems (provider.Problem.SourceID):
// its node and service ID.
func (i *Instance) SourceID() string { return i.Node + "/" + i.ID }

// Options are the static settings Build applies.
type Options struct {
	// Prefix is the tag prefix ("traefik" when empty).
	Prefix string
	// ExposedByDefault keeps instances without a <prefix>.enable tag.
	ExposedByDefault bool
	// StrictChecks lists the health states that keep an instance (lower case).
	StrictChecks []string
	// Match is the constraints expression over an instance's tags; nil keeps
	// every instance.
	Match func(tags []string) bool
	// Cache, when set, carries decoded tags and built instances from one
	// build to the next; it changes how fast Build is, never what it
	// returns. A cache serves builds with the same options only.
	Cache *DecodeCache
}

// DefaultStrictChecks returns the health states that keep an instance when
// providers.consulCatalog.strictChecks is not set: passing and warning.
func DefaultStrictChecks() []string { return []string{"passing", "warning"} }

// Build turns instances into the provider's configuration (bare names) and
// the list of problems: inputs it left out, each naming the Consul service,
// the instance and, for tag errors, the tag. It is pure: it reads instances
// and opts and modifies neither (opts.Cache only remembers decoded tags and
// built instances). The result is the same for the same input, whatever the
// order of instances, and shares no memory with earlier results.
//
// Per instance, in order: <prefix>.enable (else opts.ExposedByDefault), the
// constraints, the tags decoded by labels.Decode and the
// <prefix>.consulcatalog.* tags (canary; connect=true and any other key are
// problems), one server per TCP service (address = ServiceAddress else node
// address, port = the service's `loadbalancer.server.port` tag else
// ServicePort; a missing port is a problem that leaves the instance out),
// the router defaults (provider.BuildTCPRouterConfiguration: a router
// without a rule, or without a service among several, is dropped alone), and
// finally the health filter (opts.StrictChecks). Instances with no TCP tags
// are ignored. Instances are then merged by provider.MergeSources:
// same-named services that differ only in their servers pool their servers;
// same-named routers or middlewares, and services that differ otherwise,
// must be identical or are dropped with a problem naming every instance that
// defined them.
func Build(instances []Instance, opts Options) provider.Result {
	sorted := sortInstances(instances)

	healthy := make(map[string]bool, len(opts.StrictChecks))
	for _, s := range opts.StrictChecks {
		healthy[strings.ToLower(s)] = true
	}

	cache := opts.Cache
	if cache == nil {
		cache = &DecodeCache{}
	}
	defer cache.rotate()

	// One merge per Consul service (its instances are consecutive), kept
	// from one build to the next while its instances are the same.
	var (
		problems []provider.Problem
		groups   []*merged
	)
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j].Name == sorted[i].Name {
			j++
		}
		var members []*built
		var use []bool
		for _, inst := range sorted[i:j] {
			b := cache.build(inst, opts)
			problems = append(problems, b.problems...)
			members = append(members, b)
			use = append(use, (b.src.TCP != nil || b.src.TLS != nil) && healthy[strings.ToLower(inst.Status)])
		}
		groups = append(groups, cache.merge(sorted[i].Name, members, use))
		i = j
	}

	// The services' merges are the whole merge when no resource name is
	// defined by two services; otherwise everything is merged again
	// (MergeSources' outcome for a name depends on every input defining
	// it, in order).
	tcp := &config.TCPConfiguration{
		Routers:     map[string]*config.TCPRouter{},
		Services:    map[string]*config.TCPService{},
		Middlewares: map[string]*config.TCPMiddleware{},
	}
	var tls *config.TLSConfiguration
	definedBy := map[provider.Resource][]string{}
	var conflicts, tlsConflicts []provider.Problem
	whole := false
	for _, g := range groups {
		for r, ids := range g.definedBy {
			if _, twice := definedBy[r]; twice {
				whole = true
				break
			}
			definedBy[r] = slices.Clone(ids)
		}
		if whole {
			break
		}
		maps.Copy(tcp.Routers, g.tcp.Routers)
		maps.Copy(tcp.Services, g.tcp.Services)
		maps.Copy(tcp.Middlewares, g.tcp.Middlewares)
		if g.tls != nil {
			if tls == nil {
				tls = &config.TLSConfiguration{Stores: map[string]config.TLSStore{}}
			}
			maps.Copy(tls.Stores, g.tls.Stores)
		}
		conflicts = append(conflicts, g.conflicts...)
		tlsConflicts = append(tlsConflicts, g.tlsConflicts...)
	}
	if whole {
		var sources []provider.Source
		for _, g := range groups {
			sources = append(sources, g.sources...)
		}
		var tlsDefinedBy map[provider.Resource][]string
		tcp, conflicts, definedBy = provider.MergeSources(sources)
		tls, tlsConflicts, tlsDefinedBy = provider.MergeSourcesTLS(sources)
		maps.Copy(definedBy, tlsDefinedBy)
	} else {
		// In MergeSources' order: by kind, then name.
		order := map[string]int{provider.KindRouter: 0, provider.KindService: 1, provider.KindMiddleware: 2}
		sort.SliceStable(conflicts, func(i, j int) bool {
			a, b := conflicts[i].Resource, conflicts[j].Resource
			if a.Kind != b.Kind {
				return order[a.Kind] < order[b.Kind]
			}
			return a.Name < b.Name
		})
		sort.SliceStable(tlsConflicts, func(i, j int) bool { return tlsConflicts[i].Resource.Name < tlsConflicts[j].Resource.Name })
	}

	// The merges share the cache's sources (MergeSources does not modify
	// them): the result is copied, so that it shares nothing with them.
	return provider.Result{
		Configuration: &config.Dynamic{TCP: provider.DeepCopy(tcp), TLS: provider.DeepCopy(tls)},
		Problems:      append(append(problems, conflicts...), tlsConflicts...),
		DefinedBy:     definedBy,
	}
}

// merged is the merge of one Consul service's instances (those in use:
// healthy, contributing something), never modified once made.
type merged struct {
	members      []*built // every instance of the service, in order
	use          []bool   // which of them are merged
	sources      []provider.Source
	tcp          *config.TCPConfiguration
	tls          *config.TLSConfiguration
	conflicts    []provider.Problem
	tlsConflicts []provider.Problem
	definedBy    map[provider.Resource][]string
}

// merge returns the merge of the members in use of the Consul service name,
// from the cache when its members and their use are the same.
func (c *DecodeCache) merge(name string, members []*built, use []bool) *merged {
	if m, ok := c.mcur[name]; ok && slices.Equal(m.members, members) && slices.Equal(m.use, use) {
		return m
	}
	m, ok := c.mprev[name]
	if !ok || !slices.Equal(m.members, members) || !slices.Equal(m.use, use) {
		m = &merged{members: members, use: use}
		for i, b := range members {
			if use[i] {
				m.sources = append(m.sources, b.src)
			}
		}
		var tlsDefinedBy map[provider.Resource][]string
		m.tcp, m.conflicts, m.definedBy = provider.MergeSources(m.sources)
		m.tls, m.tlsConflicts, tlsDefinedBy = provider.MergeSourcesTLS(m.sources)
		maps.Copy(m.definedBy, tlsDefinedBy)
	}
	if c.mcur == nil {
		c.mcur = make(map[string]*merged, len(c.mprev))
	}
	c.mcur[name] = m
	return m
}

// sortInstances returns pointers to the instances in Build's order: by
// service name, node and ID.
func sortInstances(instances []Instance) []*Instance {
	sorted := make([]*Instance, len(instances))
	for i := range instances {
		sorted[i] = &instances[i]
	}
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.ID < b.ID
	})
	return sorted
}

// built is one instance's own configuration and problems (buildInstance),
// never modified once made.
type built struct {
	src      provider.Source
	problems []provider.Problem
	tags     string   // the tags' key in the cache's decodings
	inst     Instance // what it was built from
}

// describe names an instance in problems.
func describe(inst *Instance) string {
	return fmt.Sprintf("consul service %q (instance %q on node %q)", inst.Name, inst.ID, inst.Node)
}

// buildInstance decodes one instance's tags. A nil src.TCP means the
// instance contributes nothing: not exposed (disabled, filtered by the
// constraints, or without TCP tags) or left out for a problem.
func buildInstance(inst *Instance, opts Options, cache *DecodeCache) (provider.Source, []provider.Problem) {
	src := provider.Source{ID: inst.SourceID(), Name: describe(inst)}
	prefix := prefixOf(opts)
	d := cache.decode(inst.Tags, prefix)
	skip := func(p provider.Problem) (provider.Source, []provider.Problem) {
		p.Source, p.SourceID, p.Severity, p.Skipped = src.Name, src.ID, provider.SeverityError, true
		p.DisablesRouter = d.routers
		return provider.Source{}, []provider.Problem{p}
	}
	if d.err != nil {
		return skip(tagProblem(d.err, prefix))
	}
	enabled := opts.ExposedByDefault
	if d.knobs.enable != nil {
		enabled = *d.knobs.enable
	}
	if !enabled {
		return provider.Source{}, nil
	}
	if opts.Match != nil && !opts.Match(inst.Tags) {
		return provider.Source{}, nil
	}
	if d.tls != nil {
		src.TLS = provider.DeepCopy(d.tls)
	}
	// A tag that does not decode dropped its own resource (d.dropped).
	tagOf := func(err error) provider.Problem { return tagProblem(err, prefix) }
	if d.tcp == nil {
		drops := provider.DropResourceProblems(src, d.dropped, tagOf, "instance", prefix)
		if src.TLS != nil {
			return src, drops // TLS stores only
		}
		return provider.Source{}, drops
	}
	tcp := provider.DeepCopy(d.tcp)
	if tcp.Routers == nil {
		tcp.Routers = map[string]*config.TCPRouter{}
	}
	if tcp.Middlewares == nil {
		tcp.Middlewares = map[string]*config.TCPMiddleware{}
	}
	src.TCP = tcp
	drops := provider.DropResourceProblems(src, d.dropped, tagOf, "instance", prefix)
	if len(tcp.Routers) == 0 && len(tcp.Services) == 0 {
		tcp.Services = map[string]*config.TCPService{}
		return src, drops
	}

	if len(tcp.Services) == 0 {
		tcp.Services = map[string]*config.TCPService{
			serviceName(inst, d.knobs.canary): {LoadBalancer: &config.TCPServersLoadBalancer{}},
		}
	}
	for _, name := range slices.Sorted(maps.Keys(tcp.Services)) {
		if err := addServer(inst, name, tcp.Services[name], prefix); err != nil {
			src, skipped := skip(provider.Problem{Resource: provider.Resource{Kind: provider.KindService, Name: name}, Message: err.Error()})
			return src, append(drops, skipped...)
		}
	}
	return src, append(drops, provider.BuildTCPRouterConfiguration(src, "instance", prefix)...)
}

// tagProblem turns a tag decoding error into a problem naming the tag as
// written, with the configured prefix.
func tagProblem(err error, prefix string) provider.Problem {
	var le *labels.Error
	if !errors.As(err, &le) || le.Key == "" {
		return provider.Problem{Message: "tags: " + err.Error()}
	}
	return provider.Problem{Key: tagOf(le.Key, prefix), Value: le.Value, KeyKind: provider.KeyTag, Message: le.Err.Error()}
}

// decoded is what one list of tags decodes to. It depends only on the tags
// and the prefix, and is never modified once made.
type decoded struct {
	knobs   knobs
	tcp     *config.TCPConfiguration // nil: no TCP tags
	err     error                    // a *labels.Error naming the tag (key under the traefik root)
	dropped []error                  // the resources a tag of which does not decode (labels.DecodeResources)
	routers bool                     // the tags declare a router
	tls     *config.TLSConfiguration // the tls stores the tags declare; nil: none
}

// DecodeCache memoises decoding by tag list: instances of one service usually
// carry the same tags, and most tags are unchanged from one snapshot to the
// next, while labels.Decode (paerser) is the costliest step of Build. It
// memoises each instance's own configuration too (buildInstance, by
// everything it reads of the instance but its health), so that a change
// of one instance among thousands builds that one again, and the rest is
// the merge (docs/performance.md, "Providers at scale"). An entry lives for
// the build that used it and the next one. The zero value is ready; it is
// not safe for concurrent use (Run builds from one goroutine).
type DecodeCache struct {
	prev, cur   map[string]*decoded
	bprev, bcur map[instanceKey]*built
	mprev, mcur map[string]*merged
}

// build returns buildInstance(inst, opts, c), from the cache if it is there:
// an entry is found by the instance's node and ID, and used when the rest of
// what buildInstance reads of the instance is the same.
func (c *DecodeCache) build(inst *Instance, opts Options) *built {
	key := instanceKey{inst.Node, inst.ID}
	b, ok := c.bcur[key]
	if ok && b.same(inst) {
		return b
	}
	if b, ok = c.bprev[key]; ok && b.same(inst) {
		// The instance's tags are used by this build too: their decoding
		// stays as long as the instance does.
		if d, ok := c.prev[b.tags]; ok && c.cur[b.tags] == nil {
			if c.cur == nil {
				c.cur = map[string]*decoded{}
			}
			c.cur[b.tags] = d
		}
	} else {
		src, probs := buildInstance(inst, opts, c)
		b = &built{src: src, problems: probs, tags: tagsKey(inst.Tags, prefixOf(opts)), inst: *inst}
		b.inst.Tags = slices.Clone(inst.Tags)
	}
	if c.bcur == nil {
		c.bcur = make(map[instanceKey]*built, len(c.bprev))
	}
	c.bcur[key] = b
	return b
}

// instanceKey finds an instance in the cache: its node and ID.
type instanceKey struct{ node, id string }

// same reports whether inst reads as b's instance to buildInstance (all but
// its health).
func (b *built) same(inst *Instance) bool {
	o := &b.inst
	return o.Name == inst.Name && o.ID == inst.ID && o.Node == inst.Node && o.NodeAddress == inst.NodeAddress &&
		o.Address == inst.Address && o.Port == inst.Port && slices.Equal(o.Tags, inst.Tags)
}

// prefixOf is opts' tag prefix, labels.Root when empty.
func prefixOf(opts Options) string {
	if opts.Prefix == "" {
		return labels.Root
	}
	return opts.Prefix
}

// tagsKey is the key of tags under prefix in the cache's decodings.
func tagsKey(tags []string, prefix string) string {
	return prefix + "\x00" + strings.Join(tags, "\x00")
}

// decode returns the decoding of tags under prefix, from the cache if it is
// there.
func (c *DecodeCache) decode(tags []string, prefix string) *decoded {
	key := tagsKey(tags, prefix)
	if d, ok := c.cur[key]; ok {
		return d
	}
	d, ok := c.prev[key]
	if !ok {
		d = decodeTags(tags, prefix)
	}
	if c.cur == nil {
		c.cur = map[string]*decoded{}
	}
	c.cur[key] = d
	return d
}

// rotate ends a build: entries it did not use are dropped at the next rotate.
func (c *DecodeCache) rotate() {
	c.prev, c.cur = c.cur, nil
	c.bprev, c.bcur = c.bcur, nil
	c.mprev, c.mcur = c.mcur, nil
}

// decodeTags turns tags into labels and decodes them.
func decodeTags(tags []string, prefix string) *decoded {
	lbls := labels.TagsToLabels(tags, prefix)
	routers := labels.DeclaresRouter(lbls)
	k, err := decodeKnobs(lbls, prefix)
	if err != nil {
		return &decoded{err: err, routers: routers}
	}
	conf, dropped, err := labels.DecodeResources(lbls)
	if err != nil {
		return &decoded{err: err, routers: routers}
	}
	d := &decoded{knobs: k, routers: routers, tls: conf.TLS, dropped: dropped}
	if tcp := conf.TCP; tcp != nil && (len(tcp.Routers) > 0 || len(tcp.Services) > 0 || len(tcp.Middlewares) > 0) {
		d.tcp = tcp
	}
	return d
}

// knobs are the provider settings read from tags: <prefix>.enable and
// <prefix>.consulcatalog.*.
type knobs struct {
	enable *bool
	canary bool
}

// decodeKnobs reads <prefix>.enable and <prefix>.consulcatalog.canary from
// lbls (keys already rewritten to the traefik root). Another
// <prefix>.consulcatalog. key, or consulcatalog.connect=true (Consul Connect
// is not supported), is an error: a *labels.Error naming the label.
func decodeKnobs(lbls map[string]string, prefix string) (knobs, error) {
	var k knobs
	for _, key := range slices.Sorted(maps.Keys(lbls)) {
		value := lbls[key]
		lower := strings.ToLower(key)
		fail := func(msg string) (knobs, error) {
			return k, &labels.Error{Key: key, Value: value, Err: errors.New(msg)}
		}
		parseBool := func() (bool, bool) {
			b, err := strconv.ParseBool(strings.TrimSpace(value))
			return b, err == nil
		}
		switch {
		case lower == labels.Root+".enable":
			b, ok := parseBool()
			if !ok {
				return fail("want true or false")
			}
			k.enable = &b
		case lower == labels.Root+".consulcatalog.canary":
			b, ok := parseBool()
			if !ok {
				return fail("want true or false")
			}
			k.canary = b
		case lower == labels.Root+".consulcatalog.connect":
			b, ok := parseBool()
			if !ok {
				return fail("want true or false")
			}
			if b {
				return fail("Consul Connect is not supported by tollgate")
			}
		case strings.HasPrefix(lower, labels.Root+".consulcatalog."):
			return fail(fmt.Sprintf("unknown key (known: %s.consulcatalog.canary)", prefix))
		}
	}
	return k, nil
}

// tagOf spells a label key (traefik root) as the tag key the user wrote, with
// the configured prefix.
func tagOf(key, prefix string) string {
	if len(key) >= len(labels.Root) && strings.EqualFold(key[:len(labels.Root)], labels.Root) {
		return prefix + key[len(labels.Root):]
	}
	return key
}

// serviceName is the automatic TCP service of an instance that declares
// routers but no service: the Consul service name, normalised; for a canary
// instance (<prefix>.consulcatalog.canary=true) it is suffixed with a hash of
// its tags, so canaries do not share the production load balancer (as in
// Traefik).
func serviceName(inst *Instance, canary bool) string {
	if !canary {
		return provider.Normalize(inst.Name)
	}
	tags := append([]string(nil), inst.Tags...)
	sort.Strings(tags)
	h := fnv.New64()
	h.Write([]byte(strings.Join(tags, "")))
	return provider.Normalize(fmt.Sprintf("%s-%d", inst.Name, h.Sum64()))
}

// addServer gives the load balancer of service name one server for inst.
func addServer(inst *Instance, name string, svc *config.TCPService, prefix string) error {
	if svc == nil || svc.LoadBalancer == nil {
		return fmt.Errorf("tcp service %q has no loadBalancer", name)
	}
	lb := svc.LoadBalancer
	if len(lb.Servers) == 0 {
		lb.Servers = []config.TCPServer{{}}
	}
	port := lb.Servers[0].Port
	lb.Servers[0].Port = ""
	if port == "" && inst.Port > 0 {
		port = strconv.Itoa(inst.Port)
	}
	if port == "" {
		return fmt.Errorf("tcp service %q: port is missing: register the instance with a port or tag it %s.tcp.services.%s.loadbalancer.server.port=<port>", name, prefix, name)
	}
	addr := inst.Address
	if addr == "" {
		addr = inst.NodeAddress
	}
	if addr == "" {
		return fmt.Errorf("tcp service %q: address is missing: neither the instance nor its node has an address", name)
	}
	lb.Servers[0].Address = net.JoinHostPort(addr, port)
	return nil
}
