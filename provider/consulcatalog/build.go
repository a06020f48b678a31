package consulcatalog

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/labels"
)

// instance is one Consul service instance as the provider reads it from the
// catalog, with its aggregated health: what build needs and nothing else. The
// JSON form is the input of the golden files under testdata/consulcatalog.
type instance struct {
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

// buildOptions are the static settings build applies.
type buildOptions struct {
	// Prefix is the tag prefix ("traefik" when empty).
	Prefix string
	// ExposedByDefault keeps instances without a <prefix>.enable tag.
	ExposedByDefault bool
	// StrictChecks lists the health states that keep an instance (lower case).
	StrictChecks []string
	// Match is the constraints expression over an instance's tags; nil keeps
	// every instance.
	Match func(tags []string) bool
	// Cache, when set, carries decoded tags from one build to the next; it
	// changes how fast build is, never what it returns.
	Cache *decodeCache
}

// source is one kept instance's own configuration, before merging.
type source struct {
	desc string // `consul service "db" (instance "db-1" on node "n1")`
	tcp  *config.TCPConfiguration
}

// build turns instances into the provider's configuration (bare names) and
// the list of problems: inputs it skipped, each naming the Consul service, the
// instance and, for tag errors, the tag. It is pure: it reads instances and
// opts and modifies neither (opts.Cache only remembers decoded tags). The
// result is the same for the same input, whatever the order of instances, and
// shares no memory with earlier results.
//
// Per instance, in order: <prefix>.enable (else opts.ExposedByDefault), the
// constraints, the tags decoded by labels.Decode, one server per TCP service
// (address = ServiceAddress else node address, port = the service's
// `loadbalancer.server.port` tag else ServicePort; a missing port is a
// problem), routers without a rule dropped, routers without a service given
// the only one, and finally the health filter (opts.StrictChecks). Instances
// with no TCP tags are ignored. Instances are then merged, as Traefik's
// provider.Merge does: same-named services that differ only in their servers
// pool their servers; same-named routers or middlewares, and services that
// differ otherwise, must be identical or are dropped with a problem naming
// every instance that defined them.
func build(instances []instance, opts buildOptions) (*config.Dynamic, []string) {
	sorted := make([]*instance, len(instances))
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

	healthy := make(map[string]bool, len(opts.StrictChecks))
	for _, s := range opts.StrictChecks {
		healthy[strings.ToLower(s)] = true
	}

	cache := opts.Cache
	if cache == nil {
		cache = &decodeCache{}
	}
	defer cache.rotate()

	var (
		sources  []source
		problems []string
	)
	for _, inst := range sorted {
		src, err := buildInstance(inst, opts, cache)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", describe(inst), err))
			continue
		}
		if src.tcp == nil {
			continue
		}
		if !healthy[strings.ToLower(inst.Status)] {
			continue
		}
		sources = append(sources, src)
	}

	tcp, mergeProblems := merge(sources)
	problems = append(problems, mergeProblems...)
	return &config.Dynamic{TCP: tcp}, problems
}

// describe names an instance in problems.
func describe(inst *instance) string {
	return fmt.Sprintf("consul service %q (instance %q on node %q)", inst.Name, inst.ID, inst.Node)
}

// buildInstance decodes one instance's tags. A nil src.tcp with a nil error
// means the instance is not exposed (disabled, filtered by the constraints, or
// without TCP tags).
func buildInstance(inst *instance, opts buildOptions, cache *decodeCache) (source, error) {
	src := source{desc: describe(inst)}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = labels.Root
	}
	d := cache.decode(inst.Tags, prefix)
	if d.err != nil {
		return src, d.err
	}
	enabled := opts.ExposedByDefault
	if d.knobs.enable != nil {
		enabled = *d.knobs.enable
	}
	if !enabled {
		return src, nil
	}
	if opts.Match != nil && !opts.Match(inst.Tags) {
		return src, nil
	}
	if d.tcp == nil {
		return src, nil
	}
	tcp := deepCopy(d.tcp)

	if len(tcp.Routers) > 0 || len(tcp.Services) > 0 {
		if len(tcp.Services) == 0 {
			tcp.Services = map[string]*config.TCPService{
				serviceName(inst, d.knobs.canary): {LoadBalancer: &config.TCPServersLoadBalancer{}},
			}
		}
		for _, name := range sortedKeys(tcp.Services) {
			if err := addServer(inst, name, tcp.Services[name], prefix); err != nil {
				return src, err
			}
		}
		if err := routeRouters(tcp, prefix); err != nil {
			return src, err
		}
	}
	if tcp.Routers == nil {
		tcp.Routers = map[string]*config.TCPRouter{}
	}
	if tcp.Services == nil {
		tcp.Services = map[string]*config.TCPService{}
	}
	if tcp.Middlewares == nil {
		tcp.Middlewares = map[string]*config.TCPMiddleware{}
	}
	src.tcp = tcp
	return src, nil
}

// decoded is what one list of tags decodes to. It depends only on the tags
// and the prefix, and is never modified once made.
type decoded struct {
	knobs knobs
	tcp   *config.TCPConfiguration // nil: no TCP tags
	err   error                    // names the tag
}

// decodeCache memoises decoding by tag list: instances of one service usually
// carry the same tags, and most tags are unchanged from one snapshot to the
// next, while labels.Decode (paerser) is the costliest step of build. An entry
// lives for the build that used it and the next one. The zero value is ready;
// it is not safe for concurrent use (Run builds from one goroutine).
type decodeCache struct {
	prev, cur map[string]*decoded
}

// decode returns the decoding of tags under prefix, from the cache if it is
// there.
func (c *decodeCache) decode(tags []string, prefix string) *decoded {
	key := prefix + "\x00" + strings.Join(tags, "\x00")
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
func (c *decodeCache) rotate() {
	c.prev, c.cur = c.cur, nil
}

// decodeTags turns tags into labels and decodes them.
func decodeTags(tags []string, prefix string) *decoded {
	lbls := labels.TagsToLabels(tags, prefix)
	k, err := decodeKnobs(lbls, prefix)
	if err != nil {
		return &decoded{err: err}
	}
	conf, err := labels.Decode(lbls)
	if err != nil {
		var le *labels.Error
		if errors.As(err, &le) && le.Key != "" {
			return &decoded{err: fmt.Errorf("tag %q: %w", tagOf(le.Key, prefix)+"="+le.Value, le.Err)}
		}
		return &decoded{err: fmt.Errorf("tags: %w", err)}
	}
	d := &decoded{knobs: k}
	if tcp := conf.TCP; tcp != nil && (len(tcp.Routers) > 0 || len(tcp.Services) > 0 || len(tcp.Middlewares) > 0) {
		d.tcp = tcp
	}
	return d
}

// deepCopy copies v and everything it points to, so that the copy can be
// modified without touching v (which may be shared through decodeCache).
// The config types have no unexported fields, channels or funcs.
func deepCopy[T any](v T) T {
	var out T
	copyValue(reflect.ValueOf(&out).Elem(), reflect.ValueOf(v))
	return out
}

func copyValue(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(src.Elem().Type())
		copyValue(p.Elem(), src.Elem())
		dst.Set(p)
	case reflect.Struct:
		for i := range src.NumField() {
			if dst.Field(i).CanSet() {
				copyValue(dst.Field(i), src.Field(i))
			}
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := range src.Len() {
			copyValue(s.Index(i), src.Index(i))
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		for it := src.MapRange(); it.Next(); {
			v := reflect.New(src.Type().Elem()).Elem()
			copyValue(v, it.Value())
			m.SetMapIndex(it.Key(), v)
		}
		dst.Set(m)
	case reflect.Interface:
		if src.IsNil() {
			return
		}
		v := reflect.New(src.Elem().Type()).Elem()
		copyValue(v, src.Elem())
		dst.Set(v)
	default:
		dst.Set(src)
	}
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
// is not supported), is an error naming the tag.
func decodeKnobs(lbls map[string]string, prefix string) (knobs, error) {
	var k knobs
	keys := sortedKeys(lbls)
	for _, key := range keys {
		value := lbls[key]
		lower := strings.ToLower(key)
		parseBool := func() (bool, error) {
			b, err := strconv.ParseBool(strings.TrimSpace(value))
			if err != nil {
				return false, fmt.Errorf("tag %q: want true or false", tagOf(key, prefix)+"="+value)
			}
			return b, nil
		}
		switch {
		case lower == labels.Root+".enable":
			b, err := parseBool()
			if err != nil {
				return k, err
			}
			k.enable = &b
		case lower == labels.Root+".consulcatalog.canary":
			b, err := parseBool()
			if err != nil {
				return k, err
			}
			k.canary = b
		case lower == labels.Root+".consulcatalog.connect":
			b, err := parseBool()
			if err != nil {
				return k, err
			}
			if b {
				return k, fmt.Errorf("tag %q: Consul Connect is not supported by tollgate", tagOf(key, prefix)+"="+value)
			}
		case strings.HasPrefix(lower, labels.Root+".consulcatalog."):
			return k, fmt.Errorf("tag %q: unknown key (known: %s.consulcatalog.canary)", tagOf(key, prefix)+"="+value, prefix)
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
func serviceName(inst *instance, canary bool) string {
	if !canary {
		return normalize(inst.Name)
	}
	tags := append([]string(nil), inst.Tags...)
	sort.Strings(tags)
	h := fnv.New64()
	h.Write([]byte(strings.Join(tags, "")))
	return normalize(fmt.Sprintf("%s-%d", inst.Name, h.Sum64()))
}

// normalize replaces every run of characters other than letters and digits
// with "-" and trims them at the ends (Traefik's provider.Normalize).
func normalize(name string) string {
	notAlnum := func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsNumber(c) }
	return strings.Join(strings.FieldsFunc(name, notAlnum), "-")
}

// addServer gives the load balancer of service name one server for inst.
func addServer(inst *instance, name string, svc *config.TCPService, prefix string) error {
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

// routeRouters drops routers without a rule and gives a router without a
// service the instance's only service (Traefik's
// provider.BuildTCPRouterConfiguration). Either defect is an error: the
// instance is skipped rather than exposed half-configured.
func routeRouters(tcp *config.TCPConfiguration, prefix string) error {
	for _, name := range sortedKeys(tcp.Routers) {
		r := tcp.Routers[name]
		if r == nil || strings.TrimSpace(r.Rule) == "" {
			return fmt.Errorf("tcp router %q has no rule: tag it %s.tcp.routers.%s.rule=HostSNI(`*`)", name, prefix, name)
		}
		if r.Service != "" {
			continue
		}
		if len(tcp.Services) != 1 {
			return fmt.Errorf("tcp router %q names no service and the instance defines %d (%s): tag it %s.tcp.routers.%s.service=<name>",
				name, len(tcp.Services), strings.Join(sortedKeys(tcp.Services), ", "), prefix, name)
		}
		for s := range tcp.Services {
			r.Service = s
		}
	}
	return nil
}

// merge combines the instances' configurations, in order.
func merge(sources []source) (*config.TCPConfiguration, []string) {
	out := &config.TCPConfiguration{
		Routers:     map[string]*config.TCPRouter{},
		Services:    map[string]*config.TCPService{},
		Middlewares: map[string]*config.TCPMiddleware{},
	}
	var (
		routerBy  = map[string][]string{}
		serviceBy = map[string][]string{}
		mwBy      = map[string][]string{}
		conflicts = map[string]map[string]bool{"router": {}, "service": {}, "middleware": {}}
	)
	for _, src := range sources {
		for name, r := range src.tcp.Routers {
			routerBy[name] = append(routerBy[name], src.desc)
			if prev, ok := out.Routers[name]; !ok {
				out.Routers[name] = r
			} else if !reflect.DeepEqual(prev, r) {
				conflicts["router"][name] = true
			}
		}
		for name, m := range src.tcp.Middlewares {
			mwBy[name] = append(mwBy[name], src.desc)
			if prev, ok := out.Middlewares[name]; !ok {
				out.Middlewares[name] = m
			} else if !reflect.DeepEqual(prev, m) {
				conflicts["middleware"][name] = true
			}
		}
		for name, s := range src.tcp.Services {
			serviceBy[name] = append(serviceBy[name], src.desc)
			prev, ok := out.Services[name]
			if !ok {
				out.Services[name] = s
				continue
			}
			if !mergeable(prev, s) {
				conflicts["service"][name] = true
				continue
			}
			seen := make(map[string]bool, len(prev.LoadBalancer.Servers))
			for _, srv := range prev.LoadBalancer.Servers {
				seen[srv.Address] = true
			}
			for _, srv := range s.LoadBalancer.Servers {
				if !seen[srv.Address] {
					seen[srv.Address] = true
					prev.LoadBalancer.Servers = append(prev.LoadBalancer.Servers, srv)
				}
			}
		}
	}

	var problems []string
	report := func(kind string, by map[string][]string, drop func(string)) {
		for _, name := range sortedKeys(conflicts[kind]) {
			drop(name)
			problems = append(problems, fmt.Sprintf("tcp %s %q is defined differently by %s; dropping it", kind, name, strings.Join(by[name], " and ")))
		}
	}
	report("router", routerBy, func(n string) { delete(out.Routers, n) })
	report("service", serviceBy, func(n string) { delete(out.Services, n) })
	report("middleware", mwBy, func(n string) { delete(out.Middlewares, n) })
	return out, problems
}

// mergeable reports whether two same-named services differ at most in their
// servers.
func mergeable(a, b *config.TCPService) bool {
	if a.LoadBalancer == nil || b.LoadBalancer == nil {
		return reflect.DeepEqual(a, b)
	}
	la, lb := *a.LoadBalancer, *b.LoadBalancer
	la.Servers, lb.Servers = nil, nil
	return reflect.DeepEqual(la, lb) && reflect.DeepEqual(a.Weighted, b.Weighted)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
