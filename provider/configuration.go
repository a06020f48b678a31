package provider

// This file holds what every label or tag provider (Docker, Consul Catalog;
// Swarm and KV next) does the same way once it has turned each of its inputs
// (a container, a catalog instance) into that input's own configuration:
// naming, router defaults, merging the inputs into one configuration, and
// reporting what it left out. Traefik keeps the same building blocks in
// pkg/provider/configuration.go; `tollgate check` reaches them through the
// providers' own Build functions (ARCHITECTURE.md).

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/quote"
)

// Severity says what a Problem does to the configuration.
type Severity string

const (
	// SeverityError: the input, or the resource named, is left out.
	SeverityError Severity = "error"
	// SeverityWarning: it applies, but probably not as meant.
	SeverityWarning Severity = "warning"
)

// Kinds of Resource.
const (
	KindRouter     = "router"
	KindService    = "service"
	KindMiddleware = "middleware"
	// The servers transports (tcp.serversTransports) and the tls section's
	// resources: option sets and stores by name, certificates by their
	// index in the list.
	KindServersTransport = "serversTransport"
	KindTLSOptions       = "tls options"
	KindTLSStore         = "tls store"
	KindTLSCertificate   = "tls certificate"
)

// Sections are where the resources of a dynamic configuration written like
// a file (a file, a KV store) are: by section and key (Traefik's names,
// matched case-insensitively), in the order problems about them are
// reported.
var Sections = []struct{ Section, Key, Kind string }{
	{"tcp", "routers", KindRouter},
	{"tcp", "services", KindService},
	{"tcp", "middlewares", KindMiddleware},
	{"tcp", "serversTransports", KindServersTransport},
	{"tls", "options", KindTLSOptions},
	{"tls", "stores", KindTLSStore},
	{"tls", "certificates", KindTLSCertificate},
}

// Resource names one router, service, middleware, servers transport or
// resource of the tls section of a provider's configuration by its bare
// name (a certificate by its index).
type Resource struct {
	Kind string // one of the Kind constants
	Name string
}

// How a Problem's String names its Key.
const (
	// KeyLabel renders `label "k"="v"` (Docker labels).
	KeyLabel = "label"
	// KeyTag renders `tag "k=v"` (Consul tags).
	KeyTag = "tag"
	// KeyKV renders `key "k"="v"` (a KV store's key, with its full path).
	KeyKV = "key"
)

// Problem is one input a provider's build left out, or one resource it
// dropped, with what is wrong. The fields are there so that a caller can
// place the problem without reading its message: `tollgate check` maps
// SourceID back to the file and service it read the input from, and Key to
// the line of that label or tag.
type Problem struct {
	// Source names the input at fault as messages name it: `container
	// "db-1"`, `consul service "db" (instance "db-1" on node "n1")`. It is
	// empty for a problem about several inputs: a conflict names them all in
	// Message.
	Source string
	// SourceID identifies the input among those given to the build (the
	// container ID; the instance's node and service ID). For a conflict it is
	// the first input whose definition differed from the one before.
	SourceID string
	// Key and Value are the label or tag at fault as written (a Consul tag
	// with its own prefix), when one single key is; KeyKind says how String
	// shows them (KeyLabel or KeyTag).
	Key, Value, KeyKind string
	// Resource is the router, service or middleware concerned; zero when the
	// problem is about a whole input.
	Resource Resource
	Severity Severity
	// Message says what is wrong and what to do, without Source and Key.
	Message string
	// Skipped is true when the whole input was left out because of this
	// problem (else only Resource was dropped, or nothing: a warning).
	Skipped bool
	// DisablesRouter is true when the problem keeps a router from serving: a
	// router is dropped, or a skipped input declared one.
	DisablesRouter bool
}

// String formats p as one line: `container "db": label "k"="v": message`.
func (p Problem) String() string {
	var b strings.Builder
	if p.Source != "" {
		b.WriteString(p.Source + ": ")
	}
	switch {
	case p.Key == "":
	case p.KeyKind == KeyTag:
		fmt.Fprintf(&b, "tag %s: ", quote.Q(p.Key+"="+p.Value))
	case p.KeyKind == KeyKV:
		fmt.Fprintf(&b, "key %s=%s: ", quote.Q(p.Key), quote.Q(p.Value))
	default:
		fmt.Fprintf(&b, "label %s=%s: ", quote.Q(p.Key), quote.Q(p.Value))
	}
	b.WriteString(p.Message)
	return b.String()
}

// Source is one input's own configuration, before merging: the routers,
// services and middlewares one container or one catalog instance defines,
// with bare names.
type Source struct {
	// ID identifies the input (Problem.SourceID); Name names it in messages
	// (Problem.Source).
	ID, Name string
	TCP      *config.TCPConfiguration
	// TLS is what the input's labels declare of the tls section: stores
	// only (labels.Decode refuses the rest).
	TLS *config.TLSConfiguration
}

// Result is what a label or tag provider's pure build returns.
type Result struct {
	// Configuration has bare names; the watcher qualifies them.
	Configuration *config.Dynamic
	// Problems are in build order: per input (inputs sorted as the provider
	// documents), then the conflicts.
	Problems []Problem
	// DefinedBy lists, for every resource some input defined (kept or dropped
	// for a conflict), the IDs of those inputs in build order.
	DefinedBy map[Resource][]string
}

// Strings renders every problem, errors and warnings alike, one line each
// (nil when there are none), to show a result in a test or a log line. A
// provider's Message is made by Result.Message, which keeps the warnings
// apart.
func (r Result) Strings() []string {
	var out []string
	for _, p := range r.Problems {
		out = append(out, p.String())
	}
	return out
}

// Normalize turns a name into one usable as a resource name: every run of
// characters other than letters and digits becomes one "-", trimmed at both
// ends (Traefik's provider.Normalize). "my_db.1" becomes "my-db-1".
func Normalize(name string) string {
	return strings.Join(strings.FieldsFunc(name, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	}), "-")
}

// BuildTCPRouterConfiguration applies the router defaults to one input's own
// configuration (src.TCP, modified in place), as Traefik's function of that
// name does: a router without a rule is dropped; a router without a service
// gets the input's only service, and is dropped when the input defines
// several. Only the router concerned is dropped; everything else the input
// defines stays. Each drop is a problem naming the router and what to set;
// noun is what one input is ("container", "instance") and prefix the root
// its keys are written with ("traefik", or a Consul tag prefix; a KV root
// key ends in "/", and the keys named are then written with slashes).
func BuildTCPRouterConfiguration(src Source, noun, prefix string) []Problem {
	tcp := src.TCP
	if tcp == nil {
		return nil
	}
	var problems []Problem
	drop := func(name, format string, args ...any) {
		delete(tcp.Routers, name)
		problems = append(problems, Problem{
			Source: src.Name, SourceID: src.ID, Resource: Resource{KindRouter, name},
			Severity: SeverityError, Message: fmt.Sprintf(format, args...), DisablesRouter: true,
		})
	}
	for _, name := range slices.Sorted(maps.Keys(tcp.Routers)) {
		r := tcp.Routers[name]
		if r == nil || strings.TrimSpace(r.Rule) == "" {
			drop(name, "router %q has no rule: dropped (set %s, e.g. HostSNI(`*`))", name, keyPath(prefix, "tcp", "routers", name, "rule"))
			continue
		}
		if r.Service != "" {
			continue
		}
		switch len(tcp.Services) {
		case 0:
			// Nothing to infer: the compiler reports a router without service.
		case 1:
			for s := range tcp.Services {
				r.Service = s
			}
		default:
			drop(name, "router %q has no service and the %s defines %d services (%s): dropped (set %s)",
				name, noun, len(tcp.Services), strings.Join(slices.Sorted(maps.Keys(tcp.Services)), ", "), keyPath(prefix, "tcp", "routers", name, "service"))
		}
	}
	return problems
}

// DroppedError is a decoding error that drops one resource of an input
// alone (labels.DecodeResources' errors): its key, and the resource's kind
// (a Kind constant) and name.
type DroppedError interface {
	KeyError
	DroppedResource() (kind, name string)
}

// DropResourceProblems turns what labels.DecodeResources dropped from one
// input (DroppedErrors) into problems naming the label and the resource,
// and drops from the input's own configuration (src.TCP, modified in
// place) the routers that name no service when a service was dropped: the
// service the router defaults would infer for them (BuildTCPRouterConfiguration,
// BuildTCPServiceConfiguration) is not the one the input declares.
// Everything else the input defines stays. keyProblem names the key of an
// error (LabelProblem for labels; a Consul tag as written for tags); noun
// and prefix are as for BuildTCPRouterConfiguration.
func DropResourceProblems(src Source, dropped []error, keyProblem func(error) Problem, noun, prefix string) []Problem {
	var problems []Problem
	services := false
	for _, err := range dropped {
		p := keyProblem(err)
		p.Source, p.SourceID, p.Severity = src.Name, src.ID, SeverityError
		var de DroppedError
		if errors.As(err, &de) {
			kind, name := de.DroppedResource()
			p.Resource = Resource{kind, name}
			p.DisablesRouter = kind == KindRouter
			p.Message += fmt.Sprintf(": %s %q is dropped", kind, name)
			services = services || kind == KindService
		}
		problems = append(problems, p)
	}
	if !services || src.TCP == nil {
		return problems
	}
	for _, name := range slices.Sorted(maps.Keys(src.TCP.Routers)) {
		if r := src.TCP.Routers[name]; r != nil && r.Service == "" {
			delete(src.TCP.Routers, name)
			problems = append(problems, Problem{
				Source: src.Name, SourceID: src.ID, Resource: Resource{KindRouter, name}, Severity: SeverityError, DisablesRouter: true,
				Message: fmt.Sprintf("router %q names no service and a service of the %s is dropped: dropped too, rather than routed to another (set %s)", name, noun, keyPath(prefix, "tcp", "routers", name, "service")),
			})
		}
	}
	return problems
}

// keyPath writes a key under prefix: dotted, or with slashes when prefix
// ends in "/" (a KV root key).
func keyPath(prefix string, parts ...string) string {
	if strings.HasSuffix(prefix, "/") {
		return prefix + strings.Join(parts, "/")
	}
	return prefix + "." + strings.Join(parts, ".")
}

// AddRouterTCP adds router r as name to tcp (making the map when it is nil)
// and reports true, or reports whether r equals the router already there.
func AddRouterTCP(tcp *config.TCPConfiguration, name string, r *config.TCPRouter) bool {
	return addSame(&tcp.Routers, name, r)
}

// AddMiddlewareTCP is AddRouterTCP for middlewares.
func AddMiddlewareTCP(tcp *config.TCPConfiguration, name string, m *config.TCPMiddleware) bool {
	return addSame(&tcp.Middlewares, name, m)
}

func addSame[V any](dst *map[string]V, name string, v V) bool {
	if *dst == nil {
		*dst = map[string]V{}
	}
	prev, ok := (*dst)[name]
	if !ok {
		(*dst)[name] = v
		return true
	}
	return reflect.DeepEqual(prev, v)
}

// AddServiceTCP adds service s as name to tcp (making the map when it is nil)
// and reports true. When a service of that name is there already, the two
// pool their servers (by address, without duplicates, in order) if their load
// balancers are Mergeable, and AddServiceTCP reports true; services that
// differ otherwise, or are not load balancers and differ at all, report false
// and leave tcp as it was. Pooling puts a copy of the service there in tcp
// in its place: neither service is modified.
func AddServiceTCP(tcp *config.TCPConfiguration, name string, s *config.TCPService) bool {
	return addServiceTCP(tcp, name, s, nil)
}

// addServiceTCP is AddServiceTCP. pooled, when not nil, holds the
// addresses of the services of tcp that are copies of their own (made by an
// earlier pooling): servers are added to those in place, so that pooling n
// services costs O(n), not O(n²).
func addServiceTCP(tcp *config.TCPConfiguration, name string, s *config.TCPService, pooled map[string]map[string]bool) bool {
	if tcp.Services == nil {
		tcp.Services = map[string]*config.TCPService{}
	}
	prev, ok := tcp.Services[name]
	if !ok {
		tcp.Services[name] = s
		return true
	}
	if prev == nil || s == nil || prev.LoadBalancer == nil || s.LoadBalancer == nil {
		return reflect.DeepEqual(prev, s)
	}
	if !prev.LoadBalancer.Mergeable(s.LoadBalancer) || !reflect.DeepEqual(prev.Weighted, s.Weighted) {
		return false
	}
	addrs := pooled[name]
	if addrs == nil {
		cp, lb := *prev, *prev.LoadBalancer
		lb.Servers = slices.Clone(lb.Servers)
		cp.LoadBalancer = &lb
		prev = &cp
		tcp.Services[name] = prev
		addrs = make(map[string]bool, len(lb.Servers)+len(s.LoadBalancer.Servers))
		for _, srv := range lb.Servers {
			addrs[srv.Address] = true
		}
		if pooled != nil {
			pooled[name] = addrs
		}
	}
	for _, srv := range s.LoadBalancer.Servers {
		if !addrs[srv.Address] {
			addrs[srv.Address] = true
			prev.LoadBalancer.Servers = append(prev.LoadBalancer.Servers, srv)
		}
	}
	return true
}

// MergeSources merges the inputs' configurations, in order, into one, as
// Traefik's provider.Merge does: same-named services pool their servers
// (AddServiceTCP); same-named routers and middlewares must be equal. A name
// defined differently by two inputs is dropped for good, whatever later
// inputs say, with a problem naming every input that defined it. It never
// modifies the sources: the result shares their routers, middlewares and
// the services no other input pooled with (a pooled service is a copy),
// so a provider may keep each input's configuration from one build to the
// next. The result's maps are never nil.
func MergeSources(sources []Source) (*config.TCPConfiguration, []Problem, map[Resource][]string) {
	out := &config.TCPConfiguration{
		Routers:     map[string]*config.TCPRouter{},
		Services:    map[string]*config.TCPService{},
		Middlewares: map[string]*config.TCPMiddleware{},
	}
	definedBy := map[Resource][]string{}
	names := map[Resource][]string{}
	conflict := map[Resource]string{} // the first input that differed
	add := func(src Source, r Resource, ok bool) {
		definedBy[r] = append(definedBy[r], src.ID)
		names[r] = append(names[r], src.Name)
		if _, seen := conflict[r]; !ok && !seen {
			conflict[r] = src.ID
		}
	}
	pooled := map[string]map[string]bool{}
	for _, src := range sources {
		if src.TCP == nil {
			continue
		}
		for _, name := range sortedKeys(src.TCP.Routers) {
			add(src, Resource{KindRouter, name}, AddRouterTCP(out, name, src.TCP.Routers[name]))
		}
		for _, name := range sortedKeys(src.TCP.Services) {
			add(src, Resource{KindService, name}, addServiceTCP(out, name, src.TCP.Services[name], pooled))
		}
		for _, name := range sortedKeys(src.TCP.Middlewares) {
			add(src, Resource{KindMiddleware, name}, AddMiddlewareTCP(out, name, src.TCP.Middlewares[name]))
		}
	}

	dropped := make([]Resource, 0, len(conflict))
	for r := range conflict {
		dropped = append(dropped, r)
	}
	order := map[string]int{KindRouter: 0, KindService: 1, KindMiddleware: 2}
	sort.Slice(dropped, func(i, j int) bool {
		a, b := dropped[i], dropped[j]
		if a.Kind != b.Kind {
			return order[a.Kind] < order[b.Kind]
		}
		return a.Name < b.Name
	})
	var problems []Problem
	for _, r := range dropped {
		switch r.Kind {
		case KindRouter:
			delete(out.Routers, r.Name)
		case KindService:
			delete(out.Services, r.Name)
		case KindMiddleware:
			delete(out.Middlewares, r.Name)
		}
		problems = append(problems, Problem{
			SourceID: conflict[r], Resource: r, Severity: SeverityError, DisablesRouter: r.Kind == KindRouter,
			Message: fmt.Sprintf("tcp %s %q is defined differently by %s; dropping it", r.Kind, r.Name, strings.Join(names[r], " and ")),
		})
	}
	return out, problems, definedBy
}

// sortedKeys is slices.Sorted(maps.Keys(m)), without allocating for the
// maps of one entry that most inputs have.
func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 1 {
		for k := range m {
			return []string{k}
		}
	}
	return slices.Sorted(maps.Keys(m))
}

// MergeSourcesTLS merges the inputs' TLS stores (the only part of the tls
// section labels declare) as MergeSources merges middlewares: same-named
// stores must be equal, or the name is dropped with a problem naming every
// input that defined it. It returns nil when no input has a store.
func MergeSourcesTLS(sources []Source) (*config.TLSConfiguration, []Problem, map[Resource][]string) {
	stores := map[string]config.TLSStore{}
	definedBy := map[Resource][]string{}
	names := map[string][]string{}
	conflict := map[string]string{}
	for _, src := range sources {
		if src.TLS == nil {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(src.TLS.Stores)) {
			r := Resource{KindTLSStore, name}
			definedBy[r] = append(definedBy[r], src.ID)
			names[name] = append(names[name], src.Name)
			st := src.TLS.Stores[name]
			if prev, ok := stores[name]; ok && !reflect.DeepEqual(prev, st) {
				if _, seen := conflict[name]; !seen {
					conflict[name] = src.ID
				}
				continue
			}
			stores[name] = st
		}
	}
	var problems []Problem
	for _, name := range slices.Sorted(maps.Keys(conflict)) {
		delete(stores, name)
		problems = append(problems, Problem{
			SourceID: conflict[name], Resource: Resource{KindTLSStore, name}, Severity: SeverityError,
			Message: fmt.Sprintf("tls store %q is defined differently by %s; dropping it", name, strings.Join(names[name], " and ")),
		})
	}
	if len(stores) == 0 {
		return nil, problems, definedBy
	}
	return &config.TLSConfiguration{Stores: stores}, problems, definedBy
}

// KeyError is a decoding error that names the key at fault, as written on
// the input, and its value (labels.Error is one).
type KeyError interface {
	error
	KeyValue() (key, value string, cause error)
}

// LabelProblem turns a label decoding error into a problem naming the label
// (KeyLabel), or carrying the error alone when no single label is to blame.
// The caller fills in the input (Source, SourceID) and the severity.
func LabelProblem(err error) Problem {
	var ke KeyError
	if !errors.As(err, &ke) {
		return Problem{Message: err.Error()}
	}
	key, value, cause := ke.KeyValue()
	if key == "" || cause == nil {
		return Problem{Message: ke.Error()}
	}
	return Problem{Key: key, Value: value, KeyKind: KeyLabel, Message: cause.Error()}
}

// BuildTCPServiceConfiguration gives one input's own configuration (src.TCP,
// modified in place) its servers, as Traefik's function of that name does
// for labels: an input that defines routers but no service gets one named
// auto (Normalize its name first); every service must be a load balancer
// (weighted services cannot be declared in labels or tags); the servers of
// each, in name order, are what servers returns for its name and the port
// its `...loadbalancer.server.port` key gave ("" when it has none), which
// replace whatever the keys put there. servers returns nil for a service
// that is kept without servers (nothing running). The first service that
// fails is returned as a problem about it (Resource and Message set): the
// caller then leaves the whole input out.
func BuildTCPServiceConfiguration(src Source, auto string, servers func(service, port string) ([]config.TCPServer, error)) *Problem {
	tcp := src.TCP
	if tcp == nil || (len(tcp.Routers) == 0 && len(tcp.Services) == 0) {
		return nil
	}
	if len(tcp.Services) == 0 {
		tcp.Services = map[string]*config.TCPService{auto: {LoadBalancer: &config.TCPServersLoadBalancer{}}}
	}
	for _, name := range slices.Sorted(maps.Keys(tcp.Services)) {
		svc := tcp.Services[name]
		if svc == nil || svc.LoadBalancer == nil {
			return &Problem{Resource: Resource{KindService, name},
				Message: fmt.Sprintf("service %q has no loadBalancer (weighted services cannot be declared in labels)", name)}
		}
		lb := svc.LoadBalancer
		var labelled config.TCPServer // the labels' server: its port, maxConn and tls
		if len(lb.Servers) > 0 {
			labelled = lb.Servers[0]
		}
		list, err := servers(name, labelled.Port)
		if err != nil {
			return &Problem{Resource: Resource{KindService, name}, Message: fmt.Sprintf("service %q: %v", name, err)}
		}
		for i := range list {
			list[i].MaxConn = labelled.MaxConn
			list[i].TLS = labelled.TLS
		}
		lb.Servers = list
	}
	return nil
}

// BuildInputs is a label provider's Build around its per-input build: it
// builds each input, in the order cmp sorts a copy of them into, with
// build, which returns the input's own configuration (nil TCP when it
// contributes nothing) and its problems, then merges them (MergeResult).
// inputs is not modified.
func BuildInputs[T any](inputs []T, cmp func(a, b T) int, build func(T) (Source, []Problem)) Result {
	sorted := slices.Clone(inputs)
	slices.SortStableFunc(sorted, cmp)
	var (
		problems []Problem
		sources  []Source
	)
	for _, in := range sorted {
		src, probs := build(in)
		problems = append(problems, probs...)
		if src.TCP != nil || src.TLS != nil {
			sources = append(sources, src)
		}
	}
	return MergeResult(sources, problems)
}

// MergeResult is the end of a label provider's build: it merges the inputs'
// configurations (MergeSources) and returns them with problems (the inputs'
// own, then the conflicts). The configuration is nil when nothing remains,
// and each of its sections (routers, services, middlewares) is nil when empty.
func MergeResult(sources []Source, problems []Problem) Result {
	out, conflicts, definedBy := MergeSources(sources)
	tls, tlsConflicts, tlsDefinedBy := MergeSourcesTLS(sources)
	maps.Copy(definedBy, tlsDefinedBy)
	res := Result{Problems: append(append(problems, conflicts...), tlsConflicts...), DefinedBy: definedBy}
	if len(out.Routers) == 0 && len(out.Services) == 0 && len(out.Middlewares) == 0 {
		if tls != nil {
			res.Configuration = &config.Dynamic{TLS: tls}
		}
		return res
	}
	if len(out.Routers) == 0 {
		out.Routers = nil
	}
	if len(out.Services) == 0 {
		out.Services = nil
	}
	if len(out.Middlewares) == 0 {
		out.Middlewares = nil
	}
	res.Configuration = &config.Dynamic{TCP: out, TLS: tls}
	return res
}
