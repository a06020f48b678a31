// Package labels decodes Traefik-style `traefik.tcp.*` labels (Docker
// containers, Swarm services) and tags (Consul, normalised to the same map
// shape by TagsToLabels) into dynamic configuration, and the provider knobs
// (`traefik.enable`, `traefik.docker.*`, `traefik.swarm.*`) into Knobs.
//
// Decoding goes through paerser with explicit filters, so labels outside the
// `traefik.tcp.` (or knob) keys, such as `com.docker.compose.project` or
// `maintainer`, are never read and can never break decoding. Keys are
// case-insensitive on the root and on field names.
//
// paerser's errors do not say which label was at fault; every error this
// package returns is an *Error that names the label key and its value.
//
// Choices where labels differ from a file:
//   - `...loadbalancer.server.address` is ignored (the address comes from the
//     container or the catalog); only `...loadbalancer.server.port` is read, and
//     it must be a port number from 1 to 65535.
//   - Values are decoded, not judged: whether an `inflightconn.amount` or an
//     `ipv6subnet` is in range is the middleware's own rule, applied when the
//     proxy compiles the configuration (the middleware is then disabled with
//     an error naming the field), as for a file.
//   - `traefik.tcp.middlewares.x.inflightconn=true` (the middleware type with
//     no field) is an error, not an InFlightConn with amount 0. That is what
//     Traefik v3 does with the same label (its TCPInFlightConn field carries no
//     `label:"allowEmpty"`, so paerser refuses a standalone element), and an
//     implicit amount of 0 would silently reject every connection. The error
//     says to set `...inflightconn.amount`.
//   - `tls=true` creates an empty TLS section (passthrough false);
//     `proxyprotocol=true` means PROXY protocol version 2, as in Traefik.
//   - Weighted services cannot be declared in labels (as in Traefik, the keys
//     are ignored).
package labels

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/traefik/paerser/parser"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/decodeerr"
	"github.com/tollgate-proxy/tollgate/internal/quote"
)

// Root is the root of every label key ("traefik"), whatever the Consul tag
// prefix was.
const Root = parser.DefaultRootName

// tcpPrefix and tlsPrefix select the dynamic-configuration labels. Of the
// tls section, labels declare stores only (`traefik.tls.stores.<name>.
// defaultgeneratedcert...`, as in Traefik v3): certificates, a store's
// default certificate and TLS options are not read from labels, and a
// label for them is an unknown key.
const (
	tcpPrefix = Root + ".tcp."
	tlsPrefix = Root + ".tls."
)

// Error is a label that could not be decoded. Key and Value are the label as
// written on the container or tag (Key is empty only when no single label
// could be blamed).
type Error struct {
	Key   string
	Value string
	Err   error
	// Kind and Name are the resource the label declares, when the error
	// drops that resource alone (DecodeResources): Kind is "router",
	// "service", "middleware" or "tls store" (provider's Kind constants),
	// Name as the labels spell it. Both are empty for an error about the
	// whole input.
	Kind, Name string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("labels: %v", e.Err)
	}
	return fmt.Sprintf("label %s=%s: %v", quote.Q(e.Key), quote.Q(e.Value), e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// KeyValue returns the label at fault, as written, and what is wrong with it
// (provider.KeyError).
func (e *Error) KeyValue() (key, value string, cause error) { return e.Key, e.Value, e.Err }

// DroppedResource returns the resource the error drops (provider.DroppedError);
// empty for an error about the whole input.
func (e *Error) DroppedResource() (kind, name string) { return e.Kind, e.Name }

// Decode decodes the `traefik.tcp.` and `traefik.tls.` labels in m into a
// configuration with bare resource names. Labels outside those prefixes are
// ignored; when there are none, the result has nil TCP and TLS sections. m is not modified. The error is an *Error
// naming the offending label.
func Decode(m map[string]string) (*config.Dynamic, error) {
	sel, orig, err := selectLabels(m, func(k string) bool { return hasPrefixFold(k, tcpPrefix) || hasPrefixFold(k, tlsPrefix) })
	if err != nil {
		return nil, err
	}
	for k := range sel {
		if isServerAddress(k) {
			delete(sel, k)
		}
	}
	if err := notFromLabels(sel, orig); err != nil {
		return nil, err
	}
	conf := &config.Dynamic{}
	if len(sel) == 0 {
		return conf, nil
	}
	if err := decodeNamed(sel, orig, func() any { return &config.Dynamic{} }, conf); err != nil {
		return nil, err
	}
	if err := checkPorts(conf, sel, orig); err != nil {
		return nil, err
	}
	return conf, nil
}

// DecodeResources is Decode that keeps what decodes: the labels of each
// router, service, middleware and TLS store are decoded on their own, and
// a label that does not decode (an unknown key, a value of the wrong type,
// a port that is not one) drops only the resource it declares, returned
// in dropped (each an *Error with Kind and Name set, a
// provider.DroppedError; routers, then services, middlewares, stores). err is
// an error no single resource owns (a label outside any resource, a key
// written twice, a key labels do not declare): the whole input is then
// refused, as Decode refuses it. m is not modified.
func DecodeResources(m map[string]string) (conf *config.Dynamic, dropped []error, err error) {
	sel, orig, err := selectLabels(m, func(k string) bool { return hasPrefixFold(k, tcpPrefix) || hasPrefixFold(k, tlsPrefix) })
	if err != nil {
		return nil, nil, err
	}
	for k := range sel {
		if isServerAddress(k) {
			delete(sel, k)
		}
	}
	if err := notFromLabels(sel, orig); err != nil {
		return nil, nil, err
	}
	conf = &config.Dynamic{}
	if len(sel) == 0 {
		return conf, nil, nil
	}
	if safeDecode(sel, conf) == nil && checkPorts(conf, sel, orig) == nil {
		return conf, nil, nil
	}
	// Something does not decode: decode each resource on its own (the
	// costly path, taken only then).
	type group struct {
		kind, name string
		sel        map[string]string
	}
	groups := map[string]*group{}
	var order []string
	rest := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		kind, name, ok := resourceOf(k)
		if !ok {
			rest[k] = sel[k]
			continue
		}
		id := kind + "\x00" + strings.ToLower(name) // paerser matches names case-insensitively
		g := groups[id]
		if g == nil {
			g = &group{kind: kind, name: name, sel: map[string]string{}}
			groups[id] = g
			order = append(order, id)
		}
		g.sel[k] = sel[k]
	}
	conf = &config.Dynamic{}
	if len(rest) > 0 {
		if err := decodeNamed(rest, orig, func() any { return &config.Dynamic{} }, conf); err != nil {
			return nil, nil, err
		}
	}
	kinds := map[string]int{"router": 0, "service": 1, "middleware": 2, "tls store": 3}
	slices.SortStableFunc(order, func(a, b string) int { return kinds[groups[a].kind] - kinds[groups[b].kind] })
	for _, id := range order {
		g := groups[id]
		d := &config.Dynamic{}
		err := decodeNamed(g.sel, orig, func() any { return &config.Dynamic{} }, d)
		if err == nil {
			err = checkPorts(d, g.sel, orig)
		}
		var le *Error
		if errors.As(err, &le) {
			le.Kind, le.Name = g.kind, g.name
			dropped = append(dropped, le)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		conf.AddResources(d)
	}
	if len(dropped) == 0 {
		// Every resource decodes alone but not together: blame as Decode does.
		if err := decodeNamed(sel, orig, func() any { return &config.Dynamic{} }, &config.Dynamic{}); err != nil {
			return nil, nil, err
		}
	}
	return conf, dropped, nil
}

// resourceOf returns the resource a selected label declares:
// traefik.tcp.{routers,services,middlewares}.<name>.<...> and
// traefik.tls.stores.<name>.<...>.
func resourceOf(key string) (kind, name string, ok bool) {
	parts := strings.Split(key, ".")
	if len(parts) < 5 || parts[3] == "" {
		return "", "", false
	}
	switch section := strings.ToLower(parts[1] + "." + parts[2]); section {
	case "tcp.routers":
		kind = "router"
	case "tcp.services":
		kind = "service"
	case "tcp.middlewares":
		kind = "middleware"
	case "tls.stores":
		kind = "tls store"
	default:
		return "", "", false
	}
	return kind, parts[3], true
}

// Knobs are the per-container provider settings read from labels.
type Knobs struct {
	// Enable is traefik.enable; nil when the label is absent, so the provider's
	// exposedByDefault decides.
	Enable *bool `json:"enable,omitempty"`
	// Network is traefik.docker.network: the network whose IP reaches the
	// container. Empty when absent.
	Network string `json:"network,omitempty"`
	// AllowNonRunning is traefik.docker.allownonrunning: keep the container's
	// routers, services and middlewares (without a server) while it is not
	// running.
	AllowNonRunning bool `json:"allowNonRunning,omitempty"`
	// LBSwarm is traefik.swarm.lbswarm (Swarm services only): route to the
	// service's virtual IP instead of its tasks' addresses.
	LBSwarm bool `json:"lbSwarm,omitempty"`
	// NetworkLabel is the label Network was read from, as written; empty
	// when Network is.
	NetworkLabel string `json:"-"`
	// Deprecated lists, as written, the traefik.docker. labels of a Swarm
	// service (DecodeSwarmKnobs): Traefik v3 still reads them there, with a
	// warning to use traefik.swarm.
	Deprecated []string `json:"-"`
}

// knobLabels is the paerser shape of the knob labels.
type knobLabels struct {
	Enable *bool
	Docker *dockerKnobs
}

type dockerKnobs struct {
	Network         *string
	AllowNonRunning bool
	// LBSwarm is accepted on a container and ignored there; on a Swarm
	// service (DecodeSwarmKnobs) it is traefik.swarm.lbswarm, deprecated.
	LBSwarm bool
}

// DecodeKnobs decodes `traefik.enable` and the `traefik.docker.` labels of m.
// Other labels are ignored. An unknown `traefik.docker.` key or a malformed
// value is an *Error naming the label.
func DecodeKnobs(m map[string]string) (Knobs, error) {
	sel, orig, err := selectLabels(m, func(k string) bool {
		return strings.EqualFold(k, Root+".enable") || hasPrefixFold(k, Root+".docker.")
	})
	if err != nil || len(sel) == 0 {
		return Knobs{}, err
	}
	var kl knobLabels
	if err := decodeNamed(sel, orig, func() any { return &knobLabels{} }, &kl); err != nil {
		return Knobs{}, err
	}
	var k Knobs
	k.Enable = kl.Enable
	if kl.Docker != nil {
		if kl.Docker.Network != nil {
			k.Network = *kl.Docker.Network
			k.NetworkLabel = written(orig, Root+".docker.network")
		}
		k.AllowNonRunning = kl.Docker.AllowNonRunning
	}
	return k, nil
}

// swarmKnobLabels is the paerser shape of a Swarm service's knob labels.
type swarmKnobLabels struct {
	Enable *bool
	Docker *dockerKnobs
	Swarm  *swarmKnobs
}

type swarmKnobs struct {
	Network *string
	LBSwarm bool
}

// DecodeSwarmKnobs decodes `traefik.enable` and the `traefik.swarm.` labels
// (network, lbswarm) of a Swarm service, as Traefik v3's Swarm provider
// reads them. Like Traefik, it also reads `traefik.docker.network` and
// `traefik.docker.lbswarm` there (listed in Knobs.Deprecated), and refuses
// a service that has both `traefik.docker.` and `traefik.swarm.` labels.
// Other labels are ignored. An unknown key or a malformed value is an
// *Error naming the label.
func DecodeSwarmKnobs(m map[string]string) (Knobs, error) {
	sel, orig, err := selectLabels(m, func(k string) bool {
		return strings.EqualFold(k, Root+".enable") || hasPrefixFold(k, Root+".docker.") || hasPrefixFold(k, Root+".swarm.")
	})
	if err != nil || len(sel) == 0 {
		return Knobs{}, err
	}
	var kl swarmKnobLabels
	if err := decodeNamed(sel, orig, func() any { return &swarmKnobLabels{} }, &kl); err != nil {
		return Knobs{}, err
	}
	var docker []string
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		if hasPrefixFold(k, Root+".docker.") {
			docker = append(docker, orig[k])
		}
	}
	k := Knobs{Enable: kl.Enable}
	switch {
	case kl.Docker != nil && kl.Swarm != nil:
		return Knobs{}, &Error{Key: docker[0], Value: m[docker[0]],
			Err: errors.New("both traefik.docker. and traefik.swarm. labels are set on this Swarm service: keep the traefik.swarm. ones")}
	case kl.Docker != nil:
		k.Deprecated = docker
		k.LBSwarm = kl.Docker.LBSwarm
		if kl.Docker.Network != nil {
			k.Network, k.NetworkLabel = *kl.Docker.Network, written(orig, Root+".docker.network")
		}
	case kl.Swarm != nil:
		k.LBSwarm = kl.Swarm.LBSwarm
		if kl.Swarm.Network != nil {
			k.Network, k.NetworkLabel = *kl.Swarm.Network, written(orig, Root+".swarm.network")
		}
	}
	return k, nil
}

// notFromLabels refuses the keys of the dynamic configuration that labels
// do not declare (Traefik v3 leaves them out of its label decoding, so
// they would be ignored): servers transports, TLS options, certificates
// and a store's default certificate. Ignored, they would leave a router
// with other TLS settings than its labels say; a label never names a key
// pair on the proxy's disk.
func notFromLabels(sel, orig map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts := strings.Split(strings.ToLower(k), ".")
		what := ""
		switch {
		case len(parts) > 2 && parts[1] == "tcp" && parts[2] == "serverstransports":
			what = "servers transports are"
		case len(parts) > 2 && parts[1] == "tls" && parts[2] == "options":
			what = "TLS options are"
		case len(parts) > 2 && parts[1] == "tls" && strings.HasPrefix(parts[2], "certificates"):
			what = "certificates are"
		case len(parts) > 4 && parts[1] == "tls" && parts[2] == "stores" && parts[4] == "defaultcertificate":
			what = "a store's default certificate is"
		}
		if what != "" {
			return &Error{Key: orig[k], Value: sel[k], Err: fmt.Errorf("%s not read from labels or tags: declare them in a file, a KV store or a Kubernetes resource, and name them from here (docs/reference/tls.md)", what)}
		}
	}
	return nil
}

// written returns the label selected as key (any case after the root), as
// written.
func written(orig map[string]string, key string) string {
	for k, w := range orig {
		if strings.EqualFold(k, key) {
			return w
		}
	}
	return key
}

// selectLabels copies the labels of m that keep accepts, with the root
// segment spelled "traefik" (paerser compares the root case-sensitively). orig
// maps each selected key back to the key as written. Two labels that differ
// only in the case of their root are an error.
func selectLabels(m map[string]string, keep func(string) bool) (sel, orig map[string]string, err error) {
	for k, v := range m {
		if !keep(k) {
			continue
		}
		if sel == nil {
			sel, orig = map[string]string{}, map[string]string{}
		}
		ck := Root + k[len(Root):]
		if prev, dup := orig[ck]; dup {
			a, b := prev, k
			if b < a {
				a, b = b, a
			}
			return nil, nil, &Error{Key: b, Value: m[b], Err: fmt.Errorf("same key as label %s (keys are case-insensitive)", quote.Q(a))}
		}
		sel[ck], orig[ck] = v, k
	}
	return sel, orig, nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// isServerAddress reports whether k is traefik.tcp.services.<s>.loadbalancer.server.address.
func isServerAddress(k string) bool {
	parts := strings.Split(k, ".")
	return len(parts) == 7 &&
		strings.EqualFold(parts[2], "services") &&
		strings.EqualFold(parts[4], "loadbalancer") &&
		strings.EqualFold(parts[5], "server") &&
		strings.EqualFold(parts[6], "address")
}

// decodeNamed decodes sel into dst. When paerser fails it finds the label to
// blame: first a label that fails on its own, else the label whose addition
// (in sorted order) makes decoding fail.
func decodeNamed(sel, orig map[string]string, fresh func() any, dst any) error {
	err := safeDecode(sel, dst)
	if err == nil {
		return nil
	}
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	blame := func(k string, err error) error {
		return &Error{Key: orig[k], Value: sel[k], Err: explain(orig[k], err)}
	}
	for _, k := range keys {
		if err := safeDecode(map[string]string{k: sel[k]}, fresh()); err != nil {
			return blame(k, err)
		}
	}
	acc := make(map[string]string, len(keys))
	for _, k := range keys {
		acc[k] = sel[k]
		if err := safeDecode(acc, fresh()); err != nil {
			return blame(k, err)
		}
	}
	return &Error{Err: err}
}

// safeDecode is parser.Decode turned panic-free. paerser v0.2.2 panics on
// some malformed keys (a segment such as "0]" that ends in a bracket it never
// opened: found by FuzzDecode); a label on a container must never take the
// proxy down, so the panic becomes an error for decodeNamed to attribute.
func safeDecode(m map[string]string, dst any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed key (paerser: %v)", r)
		}
	}()
	return parser.Decode(m, dst, Root)
}

// explain adds a hint to paerser errors that are hard to act on, and says
// what a value that does not parse should be (`amount must be an integer,
// got "ten"`, not strconv's words).
func explain(key string, err error) error {
	if msg, ok := decodeerr.Value(decodeerr.Last(key), err); ok {
		return errors.New(msg)
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "cannot be a standalone element"):
		hint := "set one of its fields"
		switch lk := strings.ToLower(key); {
		case strings.HasSuffix(lk, ".inflightconn"):
			hint = "set " + key + ".amount"
		case strings.HasSuffix(lk, ".ratelimit"):
			hint = "set " + key + ".average"
		}
		return fmt.Errorf("%w: %s", err, hint)
	case strings.Contains(msg, "field not found"):
		return fmt.Errorf("unknown key: %w", err)
	}
	return err
}

// checkPorts rejects a `...loadbalancer.server.port` label that is not a
// port number: labels spell the port alone (the address comes from the
// container or the catalog), so only labels can get it wrong this way.
func checkPorts(conf *config.Dynamic, sel, orig map[string]string) error {
	if conf.TCP == nil {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(conf.TCP.Services)) {
		svc := conf.TCP.Services[name]
		if svc == nil || svc.LoadBalancer == nil {
			continue
		}
		for _, srv := range svc.LoadBalancer.Servers {
			if srv.Port == "" {
				continue
			}
			if n, err := strconv.ParseUint(srv.Port, 10, 16); err != nil || n == 0 {
				want := tcpPrefix + "services." + name + ".loadbalancer.server.port"
				for k := range sel {
					if strings.EqualFold(k, want) {
						return &Error{Key: orig[k], Value: sel[k], Err: errors.New("port must be a number from 1 to 65535")}
					}
				}
				return &Error{Key: orig[want], Value: sel[want], Err: errors.New("port must be a number from 1 to 65535")}
			}
		}
	}
	return nil
}

// DeclaresRouter reports whether m has a `traefik.tcp.routers.` label (any
// case): an input left out because of its labels then keeps a router from
// serving.
func DeclaresRouter(m map[string]string) bool {
	for k := range m {
		if hasPrefixFold(k, tcpPrefix+"routers.") {
			return true
		}
	}
	return false
}
