package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// OptionClass is how tollgate takes one of the options of Traefik's static
// configuration reference.
type OptionClass int

const (
	// Applied options mean here what they mean in Traefik.
	Applied OptionClass = iota
	// Ignored options are accepted with one warning at start saying why
	// they change nothing here: they configure HTTP or UDP routing, or a
	// part of Traefik tollgate has no need of.
	Ignored
	// NotYet options are accepted with one warning at start: tollgate
	// does not do what they configure yet (metrics exporters, tracing,
	// OpenTelemetry logs).
	NotYet
	// Refused options stop tollgate with an error naming them: serving
	// without them would silently serve something else.
	Refused
)

// String is the class as the docs table and check's report name it.
func (c OptionClass) String() string {
	switch c {
	case Ignored:
		return "ignored"
	case NotYet:
		return "not yet"
	case Refused:
		return "refused"
	}
	return "applied"
}

// OptionRule says how the options under Pattern are taken. Pattern is
// spelled as in Traefik's reference, <name> standing for any name a
// configuration chooses; the rule of the longest pattern that covers an
// option applies to it.
type OptionRule struct {
	Pattern string
	Class   OptionClass
	// Why says, for an option not applied, why (the warning and the error
	// quote it), and for an applied one what tollgate does with it, when
	// that needs saying (docs/reference/traefik-options.md).
	Why string
}

// Reasons shared by many rules.
const (
	whyHTTP       = "it configures Traefik's HTTP routers and services, and tollgate routes TCP only"
	whyHTTPEP     = "it configures the HTTP routers of the entry point, and tollgate routes TCP only (its TCP routers never used it)"
	whyHTTPProv   = "this provider's resources route HTTP only, and tollgate routes TCP only (it reads TCP routes from IngressRouteTCP: providers.kubernetesCRD)"
	whyPlugins    = "Traefik's plugins are HTTP middlewares and providers run by its Go interpreter; tollgate runs none (a plugin provider, providers.plugin, is refused)"
	whyPushLabels = "it selects Traefik's HTTP request series, which have no TCP meaning; Traefik's global series are sent either way"
	whyOTelLogs   = "tollgate does not send logs to OpenTelemetry yet: they are written as log.format and accessLog say"
	whyTracing    = "tollgate traces nothing yet (and Traefik traces HTTP requests only)"
)

// TraefikOptions is how tollgate takes every option of Traefik v3's static
// configuration reference (testdata/traefik-static-options-v3.7.txt lists
// them; docs/reference/traefik-options.md is generated from both, and
// tollgate's tests start the binary with each option and check it lands in
// its class). Options of tollgate's own (stores, maxUnroutedPerIP, ...) are
// applied and not listed. Validate refuses the Refused options set, and
// records a warning for the Ignored and NotYet ones (TraefikWarnings); an
// option under a Refused pattern that has no field is refused by the
// command line (RefusedOption).
var TraefikOptions = []OptionRule{
	{"accessLog", Applied, "one JSON line per closed connection (Traefik writes none for TCP); SIGUSR1 reopens accessLog.filePath"},
	{"accessLog.addInternals", Ignored, "Traefik's internal services (ping, API, dashboard) are HTTP, and tollgate logs TCP connections"},
	{"accessLog.bufferingSize", Ignored, "each line is one write of its own, unbuffered"},
	{"accessLog.dualOutput", NotYet, whyOTelLogs},
	{"accessLog.fields", Applied, "Traefik's field names (ClientHost, ClientPort, Duration, RouterName, ...) or tollgate's"},
	{"accessLog.fields.headers", Ignored, "HTTP headers: a TCP connection has none"},
	{"accessLog.fields.queryParameters", Ignored, "HTTP query parameters: a TCP connection has none"},
	{"accessLog.filePath", Applied, "appended to; SIGUSR1 reopens it (after logrotate moved it), as Traefik's"},
	{"accessLog.filters.retryAttempts", Ignored, "an HTTP filter: every closed TCP connection is logged (filters.minDuration applies)"},
	{"accessLog.filters.statusCodes", Ignored, "an HTTP filter: every closed TCP connection is logged (filters.minDuration applies)"},
	{"accessLog.format", Applied, "json; Traefik's common and genericCLF are HTTP lines: the lines stay JSON, with a warning"},
	{"accessLog.otlp", NotYet, whyOTelLogs},

	{"api", Applied, "the admin API, on api.address (127.0.0.1:8080), or with api.insecure on the traefik entry point (:8080)"},
	{"api.basePath", Applied, "<basePath>/api/...; /ping and /metrics stay at the root"},
	{"api.dashboard", Applied, "the dashboard at /dashboard/ (under api.basePath) on the API's listener, on with the API (as in Traefik), with the live per-client limiter views (docs/operations/dashboard.md)"},
	{"api.dashboardName", Ignored, "the dashboard's heading is tollgate's"},
	{"api.debug", Applied, "/debug/vars and /debug/pprof/ under api.basePath, as Traefik's; without the command line (its flags can carry secrets) and with the block and mutex profiles at Go's default rates (off)"},
	{"api.disableDashboardAd", Ignored, "tollgate's dashboard shows no advertisement"},

	{"certificatesResolvers", Applied, "ACME on lego, as Traefik's: tlsChallenge (TLS-ALPN-01), httpChallenge (HTTP-01) or dnsChallenge (DNS-01), on acme.json"},
	{"certificatesResolvers.<name>.acme.certificateTimeout", NotYet, "tollgate's ACME client has no bound of its own on an order's finalization yet"},
	{"certificatesResolvers.<name>.acme.disableCommonName", NotYet, "tollgate's ACME client does not leave the common name out of its requests yet"},
	{"certificatesResolvers.<name>.acme.dnsChallenge.delayBeforeCheck", Applied, "deprecated (as in Traefik): applied as propagation.delayBeforeChecks, with a warning"},
	{"certificatesResolvers.<name>.acme.dnsChallenge.disablePropagationCheck", Applied, "deprecated (as in Traefik): applied as propagation.disableChecks, with a warning"},
	{"certificatesResolvers.<name>.acme.emailAddresses", NotYet, "tollgate's ACME client puts no email address in its requests yet"},
	{"certificatesResolvers.<name>.acme.keyType", Applied, "EC256 when unset (Traefik's default is RSA4096: docs/reference/acme.md says why)"},
	{"certificatesResolvers.<name>.acme.profile", NotYet, "tollgate's ACME client asks for the CA's default profile"},
	{"certificatesResolvers.<name>.tailscale", NotYet, "tollgate does not obtain certificates from Tailscale: the routers naming the resolver are served from the TLS store's certificates"},

	{"core.defaultRuleSyntax", Applied, "v3; v2 is deprecated (as in Traefik), read as v3, with a warning"},

	{"entryPoints", Applied, "a TCP entry point; an address ending in /udp is a UDP entry point, not listened on, with a warning"},
	{"entryPoints.<name>.allowACMEByPass", Ignored, "tollgate answers an ACME validation only for a name its own resolver is validating: every other one reaches the routers already"},
	{"entryPoints.<name>.forwardedHeaders", Ignored, "X-Forwarded-* are HTTP headers: a TCP connection carries none (proxyProtocol says whose PROXY headers to believe)"},
	{"entryPoints.<name>.http", Ignored, whyHTTPEP},
	{"entryPoints.<name>.http.redirections", Applied, "a plain HTTP request no TCP router takes is answered with the redirection, as Traefik's HTTP router would"},
	{"entryPoints.<name>.http.redirections.entryPoint.priority", Ignored, "a TCP router always comes before the redirection"},
	{"entryPoints.<name>.http2", Ignored, "HTTP/2 settings of Traefik's HTTP server; tollgate routes TCP only"},
	{"entryPoints.<name>.http3", Ignored, "HTTP/3 runs over QUIC (UDP), and tollgate routes TCP only"},
	{"entryPoints.<name>.observability", Applied, "accessLogs and metrics: whether the entry point's connections are in the access log and the per-router series"},
	{"entryPoints.<name>.observability.traceVerbosity", NotYet, whyTracing},
	{"entryPoints.<name>.observability.tracing", NotYet, whyTracing},
	{"entryPoints.<name>.transport.keepAliveMaxRequests", Ignored, "an HTTP keep-alive bound: a TCP connection is one stream"},
	{"entryPoints.<name>.transport.keepAliveMaxTime", Ignored, "an HTTP keep-alive bound: a TCP connection is one stream"},
	{"entryPoints.<name>.transport.respondingTimeouts.idleTimeout", Ignored, "an HTTP keep-alive timeout; a routed TCP connection has no deadline, as in Traefik"},
	{"entryPoints.<name>.transport.respondingTimeouts.readTimeout", Applied, "the deadline for a PROXY header and a TLS ClientHello before routing (tollgate's default is 5s, Traefik's 60s)"},
	{"entryPoints.<name>.transport.respondingTimeouts.writeTimeout", Ignored, "an HTTP timeout; a routed TCP connection has no deadline, as in Traefik"},
	{"entryPoints.<name>.udp", Ignored, "UDP sessions: tollgate routes TCP only"},

	{"experimental", Ignored, whyPlugins},
	{"experimental.fastProxy", Ignored, "Traefik's experimental HTTP reverse proxy"},
	{"experimental.knative", Ignored, "the gate of the Knative provider, whose services route HTTP"},
	{"experimental.kubernetesGateway", Ignored, "a gate Traefik v3 no longer needs (and tollgate refuses providers.kubernetesGateway)"},
	{"experimental.kubernetesIngressNGINX", Ignored, "the gate of the ingress-nginx provider, whose Ingresses route HTTP"},
	{"experimental.otlplogs", NotYet, whyOTelLogs},

	{"global", Applied, "tollgate never checks for a new version and never sends usage data: false is applied"},
	{"global.checkNewVersion", Ignored, "tollgate never checks for a new version"},
	{"global.notAppendXForwardedFor", Ignored, "X-Forwarded-For is an HTTP header: a TCP connection carries none"},
	{"global.sendAnonymousUsage", Ignored, "tollgate never sends usage data"},

	{"hostResolver", Ignored, "CNAME flattening of the hosts of HTTP requests, which tollgate does not route"},

	{"log", Applied, "Traefik's formats (common, json) and default (common at ERROR); log.filePath rotated by lumberjack, as Traefik's, and reopened on SIGUSR1"},
	{"log.compress", Applied, "as documented (Traefik 3.7.9 compresses rotated files whatever it says)"},
	{"log.filePath", Applied, "rotated by lumberjack at log.maxSize (100 MB when 0), as Traefik's; SIGUSR1 reopens it (after logrotate moved it)"},
	{"log.format", Applied, "common (Traefik's text lines, the default) or json"},
	{"log.level", Applied, "ERROR when unset, as in Traefik"},
	{"log.noColor", Applied, "no colours in the common format; there are none off a terminal or in a file anyway (Traefik colours a pipe unless noColor)"},
	{"log.otlp", NotYet, whyOTelLogs},

	{"metrics.addInternals", Ignored, "the requests to the admin listeners (ping, API, metrics) are HTTP and counted in no series"},
	{"metrics.datadog", Applied, "Traefik's global series pushed over DogStatsD"},
	{"metrics.datadog.addEntryPointsLabels", Ignored, whyPushLabels},
	{"metrics.datadog.addRoutersLabels", Ignored, whyPushLabels},
	{"metrics.datadog.addServicesLabels", Ignored, whyPushLabels},
	{"metrics.influxDB2", Applied, "Traefik's global series written to InfluxDB v2"},
	{"metrics.influxDB2.addEntryPointsLabels", Ignored, whyPushLabels},
	{"metrics.influxDB2.addRoutersLabels", Ignored, whyPushLabels},
	{"metrics.influxDB2.addServicesLabels", Ignored, whyPushLabels},
	{"metrics.otlp", Applied, "Traefik's global series exported to an OpenTelemetry collector"},
	{"metrics.otlp.addEntryPointsLabels", Ignored, whyPushLabels},
	{"metrics.otlp.addRoutersLabels", Ignored, whyPushLabels},
	{"metrics.otlp.addServicesLabels", Ignored, whyPushLabels},
	{"metrics.otlp.explicitBoundaries", Ignored, "the boundaries of Traefik's HTTP request-duration histograms, which have no TCP meaning"},
	{"metrics.prometheus", Applied, "Traefik's series (traefik_*) beside tollgate's own (tollgate_*), on the traefik entry point (:8080 when none is declared)"},
	{"metrics.prometheus.addEntryPointsLabels", Applied, "exports the per-entry-point series (tollgate_entrypoint_*)"},
	{"metrics.prometheus.addRoutersLabels", Applied, "exports the per-router series (tollgate_router_*); on by default here (Traefik: off)"},
	{"metrics.prometheus.addServicesLabels", Applied, "exports the per-service series (tollgate_service_*)"},
	{"metrics.prometheus.buckets", Ignored, "Traefik's buckets are for HTTP request durations; tollgate_router_connection_duration_seconds has its own, from 5 ms to 4 h"},
	{"metrics.prometheus.headerLabels", Ignored, "labels from HTTP request headers; TCP connections have none"},
	{"metrics.prometheus.manualRouting", Applied, "no traefik entry point for /metrics (Traefik leaves it to an HTTP router, which tollgate does not have): only on metrics.prometheus.address or the admin API"},
	{"metrics.statsD", Applied, "Traefik's global series pushed over StatsD"},
	{"metrics.statsD.addEntryPointsLabels", Ignored, whyPushLabels},
	{"metrics.statsD.addRoutersLabels", Ignored, whyPushLabels},
	{"metrics.statsD.addServicesLabels", Ignored, whyPushLabels},

	{"ocsp", NotYet, "tollgate staples no OCSP response yet: clients check revocation themselves, as without stapling"},

	{"ping", Applied, "/ping on the traefik entry point (:8080 when none is declared)"},
	{"ping.manualRouting", Applied, "no traefik entry point for /ping (Traefik leaves it to an HTTP router, which tollgate does not have); the admin API still answers it"},
	{"ping.terminatingStatusCode", Ignored, "while stopping, tollgate closes its ping listener: a health check sees it down, as it sees Traefik's 503"},

	{"providers.consulCatalog.connectAware", Refused, "tollgate does not speak Consul Connect: Connect services would be dialled without the mesh's mutual TLS"},
	{"providers.consulCatalog.connectByDefault", Refused, "tollgate does not speak Consul Connect: Connect services would be dialled without the mesh's mutual TLS"},
	{"providers.consulCatalog.defaultRule", Ignored, "a default rule makes HTTP routers; a TCP router needs its rule tag"},
	{"providers.consulCatalog.namespaces", Refused, "the Consul Catalog provider reads the default namespace only: the services of the namespaces named would not be routed"},
	{"providers.consulCatalog.refreshInterval", Applied, "the period of the full read when watch is off; with watch (the default) the blocking queries say when to read, and an unchanged catalog is not read (Traefik reads it every refreshInterval too)"},
	{"providers.consulCatalog.serviceName", Ignored, "Traefik's own name in Consul, for Consul Connect, which tollgate does not speak"},
	{"providers.docker.defaultRule", Ignored, "a default rule makes HTTP routers; a TCP router needs its rule label"},
	{"providers.ecs", Refused, "tollgate has no ECS provider: its tasks' traefik.tcp.* labels would not be routed"},
	{"providers.http", Applied, "the dynamic configuration (JSON or YAML) polled from the endpoint, as Traefik's"},
	{"providers.knative", Ignored, whyHTTPProv},
	{"providers.kubernetesCRD.crossProviderNamespaces", Refused, "tollgate does not restrict cross-provider references by namespace: routes of every namespace could name mw@file"},
	{"providers.kubernetesGateway", Refused, "tollgate does not read the Kubernetes Gateway API (TCPRoute, TLSRoute): use providers.kubernetesCRD (IngressRouteTCP)"},
	{"providers.kubernetesIngress", Ignored, whyHTTPProv},
	{"providers.kubernetesIngressNGINX", Ignored, whyHTTPProv},
	{"providers.nomad", Refused, "tollgate has no Nomad provider: its services' traefik.tcp.* tags would not be routed (Consul Catalog's are: providers.consulCatalog)"},
	{"providers.plugin", Refused, "tollgate runs no plugin provider (Traefik's plugins are Go interpreted by Yaegi; tollgate has none)"},
	{"providers.precedence", Applied, "of two routers of equal priority, the one of the provider named first comes first; unset, ties are broken by qualified name (Traefik's default is its own provider order)"},
	{"providers.rest", Refused, "tollgate has no REST provider: a configuration PUT to the API would not be routed (providers.http polls one instead)"},
	{"providers.swarm.defaultRule", Ignored, "a default rule makes HTTP routers; a TCP router needs its rule label"},
	{"providers.swarm.useBindPortIP", Ignored, "Swarm tasks have no port bindings: Traefik dials their addresses too"},

	{"serversTransport", Ignored, "the transport of Traefik's HTTP services: TCP services dial with tcpServersTransport"},
	{"spiffe", Ignored, "the SPIFFE Workload API is used by servers transports' spiffe, which tollgate refuses (tcpServersTransport.tls.spiffe)"},
	{"tcpServersTransport", Applied, "the transport of every service that names none (default@internal); without it, Traefik's defaults: dialTimeout 30s, dialKeepAlive 15s, terminationDelay 100ms"},
	{"tcpServersTransport.dialKeepAlive", Applied, "15s when unset, for services without a transport too, as in Traefik"},
	{"tcpServersTransport.dialTimeout", Applied, "30s when unset, for services without a transport too, as in Traefik"},
	{"tcpServersTransport.terminationDelay", Applied, "100ms when unset, as in Traefik"},
	{"tcpServersTransport.tls.spiffe", Refused, "tollgate does not check SPIFFE identities: servers would be dialled without the client certificate and the ID check asked for"},

	{"tracing", NotYet, whyTracing},
}

// MatchOption returns the rule that covers path (dotted, any case, as
// written: entryPoints.web.http.tls), or an applied rule with no Why when
// none does.
func MatchOption(path string) OptionRule {
	r, _ := matchSegments(strings.Split(path, "."))
	return r
}

// matchSegments returns the rule of the longest pattern that covers segs,
// and how many segments of segs it covers.
func matchSegments(segs []string) (OptionRule, int) {
	segs = stripIndexes(segs)
	best, n := OptionRule{Class: Applied}, 0
	for _, r := range TraefikOptions {
		pat := strings.Split(r.Pattern, ".")
		if len(pat) <= n || len(pat) > len(segs) {
			continue
		}
		ok := true
		for i, p := range pat {
			if p != "<name>" && !strings.EqualFold(p, segs[i]) {
				ok = false
				break
			}
		}
		if ok {
			best, n = r, len(pat)
		}
	}
	return best, n
}

// RefusedOption returns the error that refuses path (dotted, as written)
// when a Refused rule covers it, else nil; the error does not repeat the
// option, which the caller names as it was written (the flag, the
// variable, the file and line). The command line calls it for an option it
// does not know: a refused option may have no field.
func RefusedOption(path string) error {
	if err := RefusedProvider(path); err != nil {
		return err // a provider's: named, as its options are refused with it
	}
	if r := MatchOption(path); r.Class == Refused {
		return fmt.Errorf("not supported: %s", r.Why)
	}
	return nil
}

// setOption is an option set in a static configuration: its segments as
// written in Traefik's spelling, with the names the configuration chose.
type setOption []string

func (o setOption) String() string { return strings.Join(o, ".") }

// setOptions walks v (a configuration value) and returns the options set
// in it: what differs from def, v's default (what paerser makes of a block
// turned on by its key alone: SetDefaults), or, without one, what is not
// zero; a block set is named itself and walked. A list of blocks is walked
// with its index (domains[0].main).
func setOptions(v, def reflect.Value, at setOption, out *[]setOption) {
	if def.IsValid() && reflect.DeepEqual(v.Interface(), def.Interface()) {
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if len(at) > 0 {
			*out = append(*out, slices.Clone(at))
		}
		setOptions(v.Elem(), defaultOf(v.Elem().Type()), at, out)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			var fd reflect.Value
			if def.IsValid() {
				fd = def.Field(i)
			}
			if f.Anonymous {
				setOptions(v.Field(i), fd, at, out)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			setOptions(v.Field(i), fd, append(slices.Clone(at), name), out)
		}
	case reflect.Map:
		if v.Len() == 0 {
			return
		}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			e := v.MapIndex(k)
			p := append(slices.Clone(at), k.String())
			if e.Kind() == reflect.Pointer || e.Kind() == reflect.Struct {
				setOptions(e, reflect.Value{}, p, out)
				continue
			}
			*out = append(*out, p)
		}
	case reflect.Slice:
		if v.Len() == 0 && !def.IsValid() {
			return
		}
		*out = append(*out, slices.Clone(at))
		if k := v.Type().Elem().Kind(); k == reflect.Struct || k == reflect.Pointer {
			for i := range v.Len() {
				p := slices.Clone(at)
				p[len(p)-1] += "[" + strconv.Itoa(i) + "]"
				setOptions(v.Index(i), reflect.Value{}, p, out)
			}
		}
	default:
		if def.IsValid() || !v.IsZero() {
			*out = append(*out, slices.Clone(at))
		}
	}
}

// defaultOf is what paerser makes of a value of type t when its key alone
// turns it on: zero, then its SetDefaults.
func defaultOf(t reflect.Type) reflect.Value {
	d := reflect.New(t)
	if s, ok := d.Interface().(interface{ SetDefaults() }); ok {
		s.SetDefaults()
	}
	return d.Elem()
}

// traefikOptions classifies the options set in s: the first Refused one's
// error, and one warning per Ignored or NotYet rule and name it covers,
// naming the most precise options set under it.
func (s *Static) traefikOptions() (warnings, warned []string, err error) {
	var set []setOption
	setOptions(reflect.ValueOf(s).Elem(), reflect.Value{}, nil, &set)
	type group struct {
		rule OptionRule
		opts []string
	}
	var order []string
	groups := map[string]*group{}
	for i, o := range set {
		r, n := matchSegments(o)
		if r.Class == Applied {
			continue
		}
		if r.Class == Refused {
			if err := RefusedProvider(o.String()); err != nil {
				return nil, nil, err
			}
			return nil, nil, fmt.Errorf("%s: not supported: %s", o, r.Why)
		}
		deeper := false // only the most precise options set are named
		bare := stripIndexes(o)
		for _, p := range set[i+1:] {
			if len(p) > len(o) && slices.Equal(stripIndexes(p)[:len(o)], bare) {
				deeper = true
				break
			}
		}
		if deeper {
			continue
		}
		key := strings.Join(o[:n], ".")
		g, ok := groups[key]
		if !ok {
			g = &group{rule: r}
			groups[key] = g
			order = append(order, key)
		}
		g.opts = append(g.opts, o.String())
	}
	for _, key := range order {
		g := groups[key]
		what := "ignored"
		if g.rule.Class == NotYet {
			what = "not yet supported: ignored"
		}
		warnings = append(warnings, fmt.Sprintf("%s: %s (%s)", strings.Join(g.opts, ", "), g.rule.Why, what))
		warned = append(warned, g.opts...)
	}
	return warnings, warned, nil
}

// stripIndexes returns the segments without their list indexes
// (domains[0] is domains).
func stripIndexes(o []string) []string {
	out := make([]string, len(o))
	for i, s := range o {
		if j := strings.IndexByte(s, '['); j > 0 {
			s = s[:j]
		}
		out[i] = s
	}
	return out
}

// TraefikWarnings are the warnings Validate recorded about the Traefik
// options set that change nothing here (Ignored, NotYet), one per rule and
// name, each naming the options: a start logs them and `tollgate check
// --static` prints them (internal/preflight).
func (s *Static) TraefikWarnings() []string { return slices.Clone(s.traefikWarnings) }

// TraefikWarned are the options TraefikWarnings name, so that a warning
// about one of them from elsewhere (internal/acme's) is not given twice.
func (s *Static) TraefikWarned() []string { return slices.Clone(s.traefikWarned) }
