package kv

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// issueExample is the issue's example, with the seed's middleware.
var issueExample = []Pair{
	{"traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "10"},
	{"traefik/tcp/routers/my-router/rule", "HostSNI(`*`)"},
	{"traefik/tcp/routers/my-router/middlewares/0", "test-inflightconn"},
	{"traefik/tcp/routers/my-router/service", "my-service"},
	{"traefik/tcp/services/my-service/loadBalancer/servers/0/address", "127.0.0.1:4000"},
}

func issueConfig() *config.TCPConfiguration {
	return &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{"my-router": {Rule: "HostSNI(`*`)", Middlewares: []string{"test-inflightconn"}, Service: "my-service"}},
		Services: map[string]*config.TCPService{"my-service": {LoadBalancer: &config.TCPServersLoadBalancer{
			Servers: []config.TCPServer{{Address: "127.0.0.1:4000"}}}}},
		Middlewares: map[string]*config.TCPMiddleware{"test-inflightconn": {InFlightConn: &config.TCPInFlightConn{Amount: 10}}},
	}
}

func with(pairs []Pair, more ...Pair) []Pair { return append(slices.Clone(pairs), more...) }

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// problem is the part of a Problem the table checks.
type problem struct {
	key, resource string
	severity      provider.Severity
	contains      string
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name     string
		pairs    []Pair
		opts     Options
		want     func(*config.TCPConfiguration) // edits issueConfig(); nil: issueConfig() as is
		problems []problem
	}{
		{name: "the issue's example", pairs: issueExample},
		{
			name: "field names are case-insensitive, lists in index order",
			pairs: []Pair{
				{"traefik/TCP/Middlewares/test-inflightconn/INFLIGHTCONN/Amount", "10"},
				{"traefik/tcp/ROUTERS/my-router/Rule", "HostSNI(`*`)"},
				{"traefik/tcp/routers/my-router/MIDDLEWARES/0", "test-inflightconn"},
				{"traefik/tcp/routers/my-router/entrypoints/10", "k"},
				{"traefik/tcp/routers/my-router/entrypoints/2", "c"},
				{"traefik/tcp/routers/my-router/entrypoints/0", "a,b"},
				{"traefik/tcp/routers/my-router/service", "my-service"},
				{"traefik/tcp/services/my-service/loadbalancer/SERVERS/10/Address", "127.0.0.1:4010"},
				{"traefik/tcp/services/my-service/loadbalancer/servers/0/address", "127.0.0.1:4000"},
				{"traefik/tcp/services/my-service/loadbalancer/servers/2/address", "127.0.0.1:4002"},
			},
			want: func(c *config.TCPConfiguration) {
				c.Routers["my-router"].EntryPoints = []string{"a", "b", "c", "k"}
				c.Services["my-service"].LoadBalancer.Servers = []config.TCPServer{{Address: "127.0.0.1:4000"}, {Address: "127.0.0.1:4002"}, {Address: "127.0.0.1:4010"}}
			},
		},
		{
			name:  "a list as one comma-separated value, as in Traefik",
			pairs: []Pair{issueExample[0], issueExample[1], issueExample[3], issueExample[4], {"traefik/tcp/routers/my-router/middlewares", "test-inflightconn"}},
			want:  func(c *config.TCPConfiguration) {},
		},
		{
			name:  "a bad value drops only its router, named by its key",
			pairs: with(issueExample, Pair{"traefik/tcp/routers/bad/rule", "HostSNI(`*`)"}, Pair{"traefik/tcp/routers/bad/priority", "high"}),
			problems: []problem{{"traefik/tcp/routers/bad/priority", "bad", provider.SeverityError,
				`key "traefik/tcp/routers/bad/priority"="high": priority must be an integer, got "high"`}},
		},
		{
			name:  "an unknown field drops only its service",
			pairs: with(issueExample, Pair{"traefik/tcp/services/other/loadBalancer/servers/0/adress", "10.0.0.1:1"}),
			problems: []problem{{"traefik/tcp/services/other/loadBalancer/servers/0/adress", "other", provider.SeverityError,
				`unknown key (field not found, node: adress): service "other" is dropped`}},
		},
		{
			name:  "a middleware with a bad amount is dropped; the router that uses it stays (the proxy disables it)",
			pairs: with(issueExample[1:], Pair{"traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "ten"}),
			want:  func(c *config.TCPConfiguration) { delete(c.Middlewares, "test-inflightconn") },
			problems: []problem{{"traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "test-inflightconn", provider.SeverityError,
				`middleware "test-inflightconn" is dropped`}},
		},
		{
			name:     "a server's port is not a KV key",
			pairs:    with(issueExample, Pair{"traefik/tcp/services/my-service/loadBalancer/servers/1/port", "4001"}),
			want:     func(c *config.TCPConfiguration) { delete(c.Services, "my-service") },
			problems: []problem{{"traefik/tcp/services/my-service/loadBalancer/servers/1/port", "my-service", provider.SeverityError, "port is not read from a KV store"}},
		},
		{
			name:     "two spellings of one field",
			pairs:    with(issueExample, Pair{"traefik/tcp/routers/my-router/Rule", "HostSNI(`a`)"}),
			want:     func(c *config.TCPConfiguration) { delete(c.Routers, "my-router") },
			problems: []problem{{"traefik/tcp/routers/my-router/rule", "my-router", provider.SeverityError, `same key as "traefik/tcp/routers/my-router/Rule"`}},
		},
		{
			name:     "a list and its elements",
			pairs:    with(issueExample, Pair{"traefik/tcp/routers/my-router/middlewares", "x"}),
			want:     func(c *config.TCPConfiguration) { delete(c.Routers, "my-router") },
			problems: []problem{{"traefik/tcp/routers/my-router/middlewares", "my-router", provider.SeverityError, "not both"}},
		},
		{
			name:     "a value on a resource",
			pairs:    with(issueExample, Pair{"traefik/tcp/routers/lone", "HostSNI(`*`)"}),
			problems: []problem{{"traefik/tcp/routers/lone", "lone", provider.SeverityError, "lone takes fields, not a value"}},
		},
		{
			name:     "a name with an @",
			pairs:    with(issueExample, Pair{"traefik/tcp/routers/r@file/rule", "HostSNI(`*`)"}, Pair{"traefik/tcp/routers/r@file/service", "x"}),
			problems: []problem{{"traefik/tcp/routers/r@file/rule", "r@file", provider.SeverityError, `the router name "r@file" has an @`}},
		},
		{
			name:     "a list of blocks numbered with a name",
			pairs:    with(issueExample, Pair{"traefik/tcp/services/s2/loadBalancer/servers/first/address", "10.0.0.1:1"}),
			problems: []problem{{"traefik/tcp/services/s2/loadBalancer/servers/first/address", "s2", provider.SeverityError, "its elements are numbered"}},
		},
		{
			name:     "tls takes true, false or fields",
			pairs:    with(issueExample, Pair{"traefik/tcp/routers/my-router/tls", "yes"}),
			want:     func(c *config.TCPConfiguration) { delete(c.Routers, "my-router") },
			problems: []problem{{"traefik/tcp/routers/my-router/tls", "my-router", provider.SeverityError, `tls takes true, false or keys below it, not "yes"`}},
		},
		{
			name: "other sections, unknown keys, keys outside the root, folders",
			pairs: with(issueExample,
				Pair{"traefik/http/routers/web/rule", "Host(`a`)"},
				Pair{"traefik/http/routers/web/service", "web"},
				Pair{"traefik/tcp/routres/x/rule", "HostSNI(`*`)"},
				Pair{"traefik/version", "3"},
				Pair{"traefik/tcp/", ""},
				Pair{"traefik/", ""},
				Pair{"traefik", "x"},
				Pair{"other-app/tcp/routers/r/rule", "nope"},
			),
			problems: []problem{
				{"traefik/tcp/routres/x/rule", "", provider.SeverityError, `unknown key: "routres" is not one of {routers,services,middlewares,serversTransports}: ignored`},
				{"traefik/version", "", provider.SeverityError, "unknown key: tollgate reads traefik/tcp/... and traefik/tls/...: ignored"},
				{"traefik/http/routers/web/rule", "", provider.SeverityWarning, "the http section (2 keys) is ignored"},
			},
		},
		{
			name: "router defaults: a router without a rule is dropped; the only service is inferred",
			pairs: []Pair{
				{"traefik/tcp/routers/norule/service", "my-service"},
				{"traefik/tcp/routers/my-router/rule", "HostSNI(`*`)"},
				{"traefik/tcp/routers/my-router/middlewares/0", "test-inflightconn"},
				issueExample[0], issueExample[4],
			},
			problems: []problem{{"", "norule", provider.SeverityError, "set traefik/tcp/routers/norule/rule"}},
		},
		{
			name:  "another root key, with a trailing slash",
			opts:  Options{RootKey: "edge/traefik/"},
			pairs: append(prefixed("edge/", issueExample), issueExample...),
		},
		{
			name: "weighted services, proxy protocol, health checks, TLS passthrough",
			pairs: with(issueExample,
				Pair{"traefik/tcp/services/w/weighted/services/0/name", "my-service"},
				Pair{"traefik/tcp/services/w/weighted/services/0/weight", "3"},
				Pair{"traefik/tcp/services/w/weighted/services/1/name", "b@file"},
				Pair{"traefik/tcp/services/my-service/loadBalancer/proxyProtocol/version", "1"},
				Pair{"traefik/tcp/services/my-service/loadBalancer/healthCheck/interval", "5s"},
				Pair{"traefik/tcp/routers/my-router/tls/passthrough", "true"},
			),
			want: func(c *config.TCPConfiguration) {
				three := 3
				c.Services["w"] = &config.TCPService{Weighted: &config.TCPWeightedRoundRobin{Services: []config.TCPWRRService{{Name: "my-service", Weight: &three}, {Name: "b@file"}}}}
				c.Services["my-service"].LoadBalancer.ProxyProtocol = &config.ProxyProtocol{Version: 1}
				c.Services["my-service"].LoadBalancer.HealthCheck = &config.TCPHealthCheck{Interval: config.Duration(5 * time.Second)}
				c.Routers["my-router"].TLS = &config.RouterTCPTLSConfig{Passthrough: true}
			},
		},
		{
			name: "Traefik v3's forms: ipWhiteList (deprecated name of ipAllowList), an empty healthCheck, unhealthyInterval, weighted healthCheck, tls.spiffe",
			pairs: with(issueExample,
				Pair{"traefik/tcp/middlewares/office/ipWhiteList/sourceRange/0", "10.0.0.0/8"},
				Pair{"traefik/tcp/middlewares/office/ipWhiteList/sourceRange/1", "127.0.0.1"},
				Pair{"traefik/tcp/services/my-service/loadBalancer/healthCheck", "true"},
				Pair{"traefik/tcp/services/other/loadBalancer/servers/0/address", "127.0.0.1:4001"},
				Pair{"traefik/tcp/services/other/loadBalancer/healthCheck/unhealthyInterval", "2s"},
				Pair{"traefik/tcp/services/w/weighted/healthCheck", "true"},
				Pair{"traefik/tcp/services/w/weighted/services/0/name", "my-service"},
				Pair{"traefik/tcp/serversTransports/workload/tls/spiffe/trustDomain", "example.org"},
			),
			want: func(c *config.TCPConfiguration) {
				u := config.Duration(2 * time.Second)
				c.Middlewares["office"] = &config.TCPMiddleware{IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8", "127.0.0.1"}}}
				c.Services["my-service"].LoadBalancer.HealthCheck = &config.TCPHealthCheck{}
				c.Services["other"] = &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:4001"}},
					HealthCheck: &config.TCPHealthCheck{UnhealthyInterval: &u}}}
				c.Services["w"] = &config.TCPService{Weighted: &config.TCPWeightedRoundRobin{HealthCheck: &config.TCPWeightedHealthCheck{}, Services: []config.TCPWRRService{{Name: "my-service"}}}}
				c.ServersTransports = map[string]*config.TCPServersTransport{"workload": {TLS: &config.TLSClientConfig{Spiffe: &config.SpiffeTransport{TrustDomain: "example.org"}}}}
			},
		},
		{
			name: "geoIP and crowdSec (issue 47): lists as .../0, the interval as a duration",
			pairs: with(issueExample,
				Pair{"traefik/tcp/middlewares/geo/geoIP/databases/0", "/var/lib/GeoIP/GeoLite2-Country.mmdb"},
				Pair{"traefik/tcp/middlewares/geo/geoIP/allowCountries/0", "FR"},
				Pair{"traefik/tcp/middlewares/geo/geoIP/allowCountries/1", "DE"},
				Pair{"traefik/tcp/middlewares/geo/geoIP/denyASNs/0", "AS64512"},
				Pair{"traefik/tcp/middlewares/geo/geoIP/unknown", "deny"},
				Pair{"traefik/tcp/middlewares/cs/crowdSec/lapiURL", "http://127.0.0.1:8080"},
				Pair{"traefik/tcp/middlewares/cs/crowdSec/apiKeyFile", "/run/secrets/bouncer-key"},
				Pair{"traefik/tcp/middlewares/cs/crowdSec/updateInterval", "15s"},
				Pair{"traefik/tcp/middlewares/cs/crowdSec/failureMode", "open"},
				Pair{"traefik/tcp/middlewares/cs/crowdSec/tls/ca", "/ca.pem"},
			),
			want: func(c *config.TCPConfiguration) {
				iv := config.Duration(15 * time.Second)
				c.Middlewares["geo"] = &config.TCPMiddleware{GeoIP: &config.TCPGeoIP{Databases: []string{"/var/lib/GeoIP/GeoLite2-Country.mmdb"},
					AllowCountries: []string{"FR", "DE"}, DenyASNs: []string{"AS64512"}, Unknown: "deny"}}
				c.Middlewares["cs"] = &config.TCPMiddleware{CrowdSec: &config.TCPCrowdSec{LapiURL: "http://127.0.0.1:8080", APIKeyFile: "/run/secrets/bouncer-key",
					UpdateInterval: &iv, FailureMode: "open", TLS: &config.TCPCrowdSecTLS{CA: "/ca.pem"}}}
			},
		},
		{
			name:  "tls=true, proxyProtocol=true",
			pairs: with(issueExample, Pair{"traefik/tcp/routers/my-router/tls", "true"}, Pair{"traefik/tcp/services/my-service/loadBalancer/proxyProtocol", "true"}),
			want: func(c *config.TCPConfiguration) {
				c.Routers["my-router"].TLS = &config.RouterTCPTLSConfig{}
				c.Services["my-service"].LoadBalancer.ProxyProtocol = &config.ProxyProtocol{Version: 2}
			},
		},
		{
			name: "two spellings of a resource name are one resource (as in Traefik)",
			pairs: []Pair{
				{"traefik/tcp/routers/My-Router/rule", "HostSNI(`*`)"},
				{"traefik/tcp/routers/my-router/middlewares/0", "test-inflightconn"},
				{"traefik/tcp/routers/my-router/service", "my-service"},
				issueExample[0], issueExample[4],
			},
			want: func(c *config.TCPConfiguration) {
				c.Routers["My-Router"] = c.Routers["my-router"]
				delete(c.Routers, "my-router")
			},
		},
		{
			name:  "a key twice (a dump): the later one wins, with a warning",
			pairs: with(issueExample, Pair{"traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "12"}),
			want:  func(c *config.TCPConfiguration) { c.Middlewares["test-inflightconn"].InFlightConn.Amount = 12 },
			problems: []problem{{"traefik/tcp/middlewares/test-inflightconn/inFlightConn/amount", "", provider.SeverityWarning,
				`key appears twice (values "10" and "12"): the later one is used`}},
		},
		{
			name:  "nothing under the root",
			pairs: []Pair{{"other/x", "y"}},
			want: func(c *config.TCPConfiguration) {
				*c = config.TCPConfiguration{Routers: map[string]*config.TCPRouter{}, Services: map[string]*config.TCPService{}, Middlewares: map[string]*config.TCPMiddleware{}}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.pairs)
			res := Build(tc.pairs, tc.opts)
			if !reflect.DeepEqual(in, tc.pairs) {
				t.Error("Build modified its input")
			}
			want := issueConfig()
			if tc.want != nil {
				tc.want(want)
			}
			if !reflect.DeepEqual(res.Configuration.TCP, want) {
				t.Errorf("configuration:\n%s\nwant:\n%s", dump(res.Configuration.TCP), dump(want))
			}
			if len(res.Problems) != len(tc.problems) {
				t.Fatalf("problems:\n%s\nwant %d", strings.Join(res.Strings(), "\n"), len(tc.problems))
			}
			for i, w := range tc.problems {
				p := res.Problems[i]
				if p.Key != w.key || p.Resource.Name != w.resource || p.Severity != w.severity || !strings.Contains(p.String(), w.contains) {
					t.Errorf("problem %d: %+v\n%s\nwant key %q resource %q %s containing %q", i, p, p.String(), w.key, w.resource, w.severity, w.contains)
				}
				if p.Key != "" && p.KeyKind != provider.KeyKV {
					t.Errorf("problem %d: KeyKind %q", i, p.KeyKind)
				}
				if p.DisablesRouter != (p.Resource.Kind == provider.KindRouter) {
					t.Errorf("problem %d: DisablesRouter %v for a %s", i, p.DisablesRouter, p.Resource.Kind)
				}
			}
		})
	}
}

func prefixed(prefix string, pairs []Pair) []Pair {
	out := make([]Pair, len(pairs))
	for i, p := range pairs {
		out[i] = Pair{prefix + p.Key, p.Value}
	}
	return out
}

// The result is the same whatever the order of the pairs.
func TestBuildOrderIndependent(t *testing.T) {
	pairs := with(issueExample,
		Pair{"traefik/tcp/routers/bad/rule", "HostSNI(`*`)"}, Pair{"traefik/tcp/routers/bad/priority", "high"},
		Pair{"traefik/tcp/routers/my-router/entryPoints/1", "b"}, Pair{"traefik/tcp/routers/my-router/entryPoints/0", "a"},
		Pair{"traefik/http/x", "y"}, Pair{"traefik/nope", "z"},
		Pair{"traefik/tcp/services/my-service/loadBalancer/servers/1/address", "127.0.0.1:4001"},
	)
	first := Build(pairs, Options{})
	for range 50 {
		shuffled := slices.Clone(pairs)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := Build(shuffled, Options{}); !reflect.DeepEqual(got, first) {
			t.Fatalf("order changed the result:\n%s\nvs\n%s", dump(got), dump(first))
		}
	}
}

// Every resource is listed in DefinedBy, kept or dropped.
func TestBuildDefinedBy(t *testing.T) {
	res := Build(with(issueExample, Pair{"traefik/tcp/routers/bad/priority", "x"}), Options{SourceID: "kv:consul"})
	for _, r := range []provider.Resource{
		{Kind: provider.KindRouter, Name: "my-router"}, {Kind: provider.KindRouter, Name: "bad"},
		{Kind: provider.KindService, Name: "my-service"}, {Kind: provider.KindMiddleware, Name: "test-inflightconn"},
	} {
		if ids := res.DefinedBy[r]; !slices.Equal(ids, []string{"kv:consul"}) {
			t.Errorf("DefinedBy[%v] = %q", r, ids)
		}
	}
	for _, p := range res.Problems {
		if p.SourceID != "kv:consul" {
			t.Errorf("problem %q without the source ID", p.String())
		}
	}
}

// Build never panics and never returns a nil configuration.
func FuzzBuild(f *testing.F) {
	for _, p := range issueExample {
		f.Add(p.Key, p.Value)
	}
	f.Add("traefik/tcp/routers/r/0]", "x")
	f.Add("traefik/tcp/services/s/loadBalancer/servers/99999999999999999999/address", "x")
	f.Add("traefik/tcp/routers//rule", "x")
	f.Add("traefik/tls/certificates/0/certFile", "/c.crt")
	f.Add("traefik/tls/certificates/x/keyFile", "k")
	f.Add("traefik/tls/options/o/clientAuth/caFiles/0", "ca")
	f.Add("traefik/tls/stores/default/defaultCertificate", "x")
	f.Add("traefik/tcp/serversTransports/t/tls/certificates/0/keyFile", "k")
	f.Add("traefik/tcp/serversTransports/t/dialTimeout", "1x")
	f.Fuzz(func(t *testing.T, key, value string) {
		res := Build(with(issueExample, Pair{key, value}), Options{})
		if res.Configuration == nil || res.Configuration.TCP == nil {
			t.Fatal("nil configuration")
		}
	})
}

// A rateLimit block in a KV store decodes through the same config types as
// a file (the period a duration or a number of seconds); its ranges are the
// middleware's to judge, so a negative average decodes as written.
func TestBuildRateLimit(t *testing.T) {
	res := Build([]Pair{
		{"traefik/tcp/middlewares/rl/rateLimit/average", "100"},
		{"traefik/tcp/middlewares/rl/rateLimit/period", "1m"},
		{"traefik/tcp/middlewares/rl/rateLimit/burst", "20"},
		{"traefik/tcp/middlewares/secs/rateLimit/average", "-5"},
		{"traefik/tcp/middlewares/secs/rateLimit/period", "10"},
		{"traefik/tcp/middlewares/secs/rateLimit/dryRun", "true"},
	}, Options{})
	if len(res.Problems) != 0 {
		t.Fatalf("problems: %+v", res.Problems)
	}
	rl := res.Configuration.TCP.Middlewares["rl"].RateLimit
	if rl == nil || rl.Average != 100 || rl.Period == nil || time.Duration(*rl.Period) != time.Minute || rl.Burst == nil || *rl.Burst != 20 {
		t.Fatalf("rl: %s", dump(rl))
	}
	secs := res.Configuration.TCP.Middlewares["secs"].RateLimit
	if secs == nil || secs.Average != -5 || secs.Period == nil || time.Duration(*secs.Period) != 10*time.Second || !secs.DryRun || secs.Burst != nil {
		t.Fatalf("secs: %s", dump(secs))
	}
}

// inFlightConn's store and failureMode decode from KV keys
// (docs/operations/replicas.md); what they mean is the middleware's.
func TestBuildSharedStore(t *testing.T) {
	res := Build([]Pair{
		{"traefik/tcp/middlewares/m/inFlightConn/amount", "10"},
		{"traefik/tcp/middlewares/m/inFlightConn/store", "shared"},
		{"traefik/tcp/middlewares/m/inFlightConn/failureMode", "closed"},
	}, Options{})
	m := res.Configuration.TCP.Middlewares["m"]
	if m == nil || m.InFlightConn == nil || m.InFlightConn.Store != "shared" || m.InFlightConn.FailureMode != "closed" || m.InFlightConn.Amount != 10 {
		t.Fatalf("built %s (problems %v)", dump(res.Configuration), res.Problems)
	}
}
