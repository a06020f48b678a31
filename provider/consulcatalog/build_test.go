package consulcatalog

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
)

// design7 are the documented Consul tags (docs/reference/middlewares/inflightconn.md)
// plus a router and a port.
var design7 = []string{
	"traefik.tcp.routers.db.rule=HostSNI(`*`)",
	"traefik.tcp.routers.db.entrypoints=db",
	"traefik.tcp.routers.db.middlewares=test-inflightconn",
	"traefik.tcp.middlewares.test-inflightconn.inflightconn.amount=10",
	"traefik.tcp.services.db.loadbalancer.server.port=5432",
}

func defaultOpts() Options {
	return Options{Prefix: "traefik", ExposedByDefault: true, StrictChecks: []string{"passing", "warning"}}
}

func inst(name, id, addr string, port int, status string, tags ...string) Instance {
	return Instance{Name: name, ID: id, Node: "node1", NodeAddress: "10.0.0.1", Address: addr, Port: port, Status: status, Tags: tags}
}

func lb(addrs ...string) *config.TCPService {
	s := &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{}}
	for _, a := range addrs {
		s.LoadBalancer.Servers = append(s.LoadBalancer.Servers, config.TCPServer{Address: a})
	}
	return s
}

func amount(n int64) *config.TCPMiddleware {
	return &config.TCPMiddleware{InFlightConn: &config.TCPInFlightConn{Amount: n}}
}

func tcp(routers map[string]*config.TCPRouter, services map[string]*config.TCPService, mws map[string]*config.TCPMiddleware) *config.Dynamic {
	if routers == nil {
		routers = map[string]*config.TCPRouter{}
	}
	if services == nil {
		services = map[string]*config.TCPService{}
	}
	if mws == nil {
		mws = map[string]*config.TCPMiddleware{}
	}
	return &config.Dynamic{TCP: &config.TCPConfiguration{Routers: routers, Services: services, Middlewares: mws}}
}

var dbRouter = &config.TCPRouter{Rule: "HostSNI(`*`)", EntryPoints: []string{"db"}, Middlewares: []string{"test-inflightconn"}, Service: "db"}

func TestBuild(t *testing.T) {
	tests := []struct {
		name      string
		instances []Instance
		opts      func(*Options)
		want      *config.Dynamic
		// problems are substrings, one per expected problem, in order.
		problems []string
	}{
		{
			name:      "nothing",
			instances: nil,
			want:      tcp(nil, nil, nil),
		},
		{
			name:      "the README's example tags",
			instances: []Instance{inst("db", "db-1", "127.0.0.1", 9999, "passing", design7...)},
			want: tcp(
				map[string]*config.TCPRouter{"db": dbRouter},
				map[string]*config.TCPService{"db": lb("127.0.0.1:5432")},
				map[string]*config.TCPMiddleware{"test-inflightconn": amount(10)}),
		},
		{
			name: "port from ServicePort, automatic service named after the consul service",
			instances: []Instance{inst("my.db_svc", "a", "192.168.1.5", 6379, "passing",
				"traefik.tcp.routers.r.rule=HostSNI(`*`)")},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "my-db-svc"}},
				map[string]*config.TCPService{"my-db-svc": lb("192.168.1.5:6379")}, nil),
		},
		{
			name: "address falls back to the node address",
			instances: []Instance{inst("db", "a", "", 5432, "passing",
				"traefik.tcp.routers.r.rule=HostSNI(`*`)")},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("10.0.0.1:5432")}, nil),
		},
		{
			name: "IPv6 address is bracketed",
			instances: []Instance{inst("db", "a", "fd00::1", 5432, "passing",
				"traefik.tcp.routers.r.rule=HostSNI(`*`)")},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("[fd00::1]:5432")}, nil),
		},
		{
			name: "missing port is a problem, not host:0",
			instances: []Instance{
				inst("db", "a", "127.0.0.1", 0, "passing", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
				inst("other", "o", "127.0.0.1", 7000, "passing", "traefik.tcp.routers.o.rule=HostSNI(`*`)"),
			},
			want: tcp(
				map[string]*config.TCPRouter{"o": {Rule: "HostSNI(`*`)", Service: "other"}},
				map[string]*config.TCPService{"other": lb("127.0.0.1:7000")}, nil),
			problems: []string{`consul service "db" (instance "a" on node "node1"): tcp service "db": port is missing`},
		},
		{
			name: "missing address is a problem",
			instances: []Instance{{Name: "db", ID: "a", Node: "n", Port: 1, Status: "passing",
				Tags: []string{"traefik.tcp.routers.r.rule=HostSNI(`*`)"}}},
			want:     tcp(nil, nil, nil),
			problems: []string{`address is missing`},
		},
		{
			name: "instances of one service merge, servers in node/ID order",
			instances: []Instance{
				inst("db", "db-3", "127.0.0.3", 5432, "passing", design7[:4]...),
				inst("db", "db-1", "127.0.0.1", 5432, "passing", design7[:4]...),
				inst("db", "db-2", "127.0.0.2", 5432, "warning", design7[:4]...),
			},
			want: tcp(
				map[string]*config.TCPRouter{"db": dbRouter},
				map[string]*config.TCPService{"db": lb("127.0.0.1:5432", "127.0.0.2:5432", "127.0.0.3:5432")},
				map[string]*config.TCPMiddleware{"test-inflightconn": amount(10)}),
		},
		{
			name: "duplicate address across instances is one server",
			instances: []Instance{
				inst("db", "a", "127.0.0.1", 5432, "passing", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
				{Name: "db", ID: "a", Node: "node2", Address: "127.0.0.1", Port: 5432, Status: "passing", Tags: []string{"traefik.tcp.routers.r.rule=HostSNI(`*`)"}},
			},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("127.0.0.1:5432")}, nil),
		},
		{
			name: "default strictChecks keep passing and warning, drop critical and maintenance",
			instances: []Instance{
				inst("db", "1", "127.0.0.1", 1, "passing", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
				inst("db", "2", "127.0.0.2", 1, "warning", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
				inst("db", "3", "127.0.0.3", 1, "critical", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
				inst("db", "4", "127.0.0.4", 1, "maintenance", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
				inst("db", "5", "127.0.0.5", 1, "", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
			},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("127.0.0.1:1", "127.0.0.2:1")}, nil),
		},
		{
			name: "strictChecks passing only",
			opts: func(o *Options) { o.StrictChecks = []string{"passing"} },
			instances: []Instance{
				inst("db", "1", "127.0.0.1", 1, "passing", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
				inst("db", "2", "127.0.0.2", 1, "warning", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
			},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("127.0.0.1:1")}, nil),
		},
		{
			name: "strictChecks including critical and maintenance",
			opts: func(o *Options) { o.StrictChecks = []string{"Passing", "critical", "maintenance"} },
			instances: []Instance{
				inst("db", "1", "127.0.0.1", 1, "passing", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
				inst("db", "2", "127.0.0.2", 1, "warning", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
				inst("db", "3", "127.0.0.3", 1, "critical", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
				inst("db", "4", "127.0.0.4", 1, "maintenance", "traefik.tcp.routers.r.rule=HostSNI(`*`)"),
			},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("127.0.0.1:1", "127.0.0.3:1", "127.0.0.4:1")}, nil),
		},
		{
			name: "every instance unhealthy: the service's routes are gone",
			instances: []Instance{
				inst("db", "1", "127.0.0.1", 1, "critical", design7...),
			},
			want: tcp(nil, nil, nil),
		},
		{
			// Issue 42: a bad tag used to leave out its whole instance.
			name: "bad tag: problem names service, instance, tag and resource; only that resource is dropped",
			instances: []Instance{
				inst("bad", "bad-1", "127.0.0.1", 1, "passing",
					"traefik.tcp.routers.b.rule=HostSNI(`*`)",
					"traefik.tcp.middlewares.lim.inflightconn.amount=abc"),
				inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...),
			},
			want: tcp(
				map[string]*config.TCPRouter{"db": dbRouter, "b": {Rule: "HostSNI(`*`)", Service: "bad"}},
				map[string]*config.TCPService{"db": lb("127.0.0.1:5432"), "bad": lb("127.0.0.1:1")},
				map[string]*config.TCPMiddleware{"test-inflightconn": amount(10)}),
			problems: []string{`consul service "bad" (instance "bad-1" on node "node1"): tag "traefik.tcp.middlewares.lim.inflightconn.amount=abc": amount must be an integer, got "abc": middleware "lim" is dropped`},
		},
		{
			name: "Traefik v3's forms: ipWhiteList (deprecated name of ipAllowList), healthcheck=true, unhealthyInterval",
			instances: []Instance{inst("db", "db-1", "127.0.0.1", 5432, "passing",
				"traefik.tcp.routers.r.rule=HostSNI(`*`)",
				"traefik.tcp.routers.r.middlewares=office",
				"traefik.tcp.middlewares.office.ipWhiteList.sourceRange=10.0.0.0/8, 127.0.0.1",
				"traefik.tcp.services.db.loadbalancer.healthcheck=true",
				"traefik.tcp.services.db.loadbalancer.healthcheck.unhealthyInterval=2s")},
			want: func() *config.Dynamic {
				s := lb("127.0.0.1:5432")
				u := config.Duration(2 * time.Second)
				s.LoadBalancer.HealthCheck = &config.TCPHealthCheck{UnhealthyInterval: &u}
				return tcp(map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db", Middlewares: []string{"office"}}},
					map[string]*config.TCPService{"db": s},
					map[string]*config.TCPMiddleware{"office": {IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8", "127.0.0.1"}}}})
			}(),
		},
		{
			name: "custom prefix is rewritten to traefik; other prefixes ignored",
			opts: func(o *Options) { o.Prefix = "tollgate" },
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "passing",
				"tollgate.tcp.routers.r.rule=HostSNI(`*`)",
				"tollgate.tcp.middlewares.m.inflightconn.amount=3",
				"traefik.tcp.routers.ignored.rule=HostSNI(`*`)",
				"primary")},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("127.0.0.1:1")},
				map[string]*config.TCPMiddleware{"m": amount(3)}),
		},
		{
			name: "custom prefix: a bad tag is named with that prefix",
			opts: func(o *Options) { o.Prefix = "tollgate" },
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "passing",
				"tollgate.tcp.routers.r.rule=HostSNI(`*`)",
				"tollgate.tcp.middlewares.m.inflightconn.amount=abc")},
			want: tcp( // the middleware alone is dropped (issue 42)
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("127.0.0.1:1")}, nil),
			problems: []string{`tag "tollgate.tcp.middlewares.m.inflightconn.amount=abc": amount must be an integer, got "abc"`},
		},
		{
			name: "a negative amount is decoded as written: the range is inFlightConn's rule, applied by the proxy",
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "passing",
				"traefik.tcp.routers.r.rule=HostSNI(`*`)",
				"traefik.tcp.middlewares.m.inflightconn.amount=-1")},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("127.0.0.1:1")},
				map[string]*config.TCPMiddleware{"m": amount(-1)}),
		},
		{
			name: "empty prefix means traefik",
			opts: func(o *Options) { o.Prefix = "" },
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "passing",
				"traefik.tcp.routers.r.rule=HostSNI(`*`)")},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("127.0.0.1:1")}, nil),
		},
		{
			name: "= in values: split on the first =",
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "passing",
				"traefik.tcp.routers.r.rule=HostSNI(`*`) && ClientIP(`10.0.0.0/8`)",
				"traefik.tcp.routers.r2.rule=HostSNI(`a=b.example`)",
				"traefik.tcp.routers.r2.tls.passthrough=true")},
			want: tcp(
				map[string]*config.TCPRouter{
					"r":  {Rule: "HostSNI(`*`) && ClientIP(`10.0.0.0/8`)", Service: "db"},
					"r2": {Rule: "HostSNI(`a=b.example`)", Service: "db", TLS: &config.RouterTCPTLSConfig{Passthrough: true}},
				},
				map[string]*config.TCPService{"db": lb("127.0.0.1:1")}, nil),
		},
		{
			name: "tag keys are case-insensitive",
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "passing",
				"Traefik.TCP.Routers.r.Rule=HostSNI(`*`)",
				"TRAEFIK.tcp.middlewares.m.InFlightConn.Amount=7")},
			want: tcp(
				map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db"}},
				map[string]*config.TCPService{"db": lb("127.0.0.1:1")},
				map[string]*config.TCPMiddleware{"m": amount(7)}),
		},
		{
			name: "services without TCP tags are ignored",
			instances: []Instance{
				inst("consul", "consul", "127.0.0.1", 8300, "passing"),
				inst("web", "web", "127.0.0.1", 80, "passing", "traefik.http.routers.w.rule=Host(`x`)", "traefik.enable=true"),
			},
			want: tcp(nil, nil, nil),
		},
		{
			name: "exposedByDefault=false needs traefik.enable=true",
			opts: func(o *Options) { o.ExposedByDefault = false },
			instances: []Instance{
				inst("a", "a", "127.0.0.1", 1, "passing", "traefik.tcp.routers.a.rule=HostSNI(`*`)"),
				inst("b", "b", "127.0.0.1", 2, "passing", "traefik.tcp.routers.b.rule=HostSNI(`*`)", "traefik.enable=true"),
			},
			want: tcp(
				map[string]*config.TCPRouter{"b": {Rule: "HostSNI(`*`)", Service: "b"}},
				map[string]*config.TCPService{"b": lb("127.0.0.1:2")}, nil),
		},
		{
			name: "traefik.enable=false hides an instance; a bad enable value is a problem",
			instances: []Instance{
				inst("a", "a", "127.0.0.1", 1, "passing", "traefik.tcp.routers.a.rule=HostSNI(`*`)", "traefik.enable=false"),
				inst("b", "b", "127.0.0.1", 2, "passing", "traefik.tcp.routers.b.rule=HostSNI(`*`)", "traefik.enable=yes please"),
			},
			want:     tcp(nil, nil, nil),
			problems: []string{`consul service "b" (instance "b" on node "node1"): tag "traefik.enable=yes please": want true or false`},
		},
		{
			name: "constraints filter instances by their tags",
			opts: func(o *Options) {
				o.Match = func(tags []string) bool { return slices.Contains(tags, "public") }
			},
			instances: []Instance{
				inst("a", "a", "127.0.0.1", 1, "passing", "traefik.tcp.routers.a.rule=HostSNI(`*`)", "public"),
				inst("b", "b", "127.0.0.1", 2, "passing", "traefik.tcp.routers.b.rule=HostSNI(`*`)"),
			},
			want: tcp(
				map[string]*config.TCPRouter{"a": {Rule: "HostSNI(`*`)", Service: "a"}},
				map[string]*config.TCPService{"a": lb("127.0.0.1:1")}, nil),
		},
		{
			name: "constraints expression from provider/constraints",
			opts: func(o *Options) {
				m, err := parseConstraints("Tag(`public`) && !TagRegex(`^env=dev.*`)")
				if err != nil {
					panic(err)
				}
				o.Match = m
			},
			instances: []Instance{
				inst("a", "a", "127.0.0.1", 1, "passing", "traefik.tcp.routers.a.rule=HostSNI(`*`)", "public"),
				inst("b", "b", "127.0.0.1", 2, "passing", "traefik.tcp.routers.b.rule=HostSNI(`*`)", "public", "env=devel"),
				inst("c", "c", "127.0.0.1", 3, "passing", "traefik.tcp.routers.c.rule=HostSNI(`*`)"),
			},
			want: tcp(
				map[string]*config.TCPRouter{"a": {Rule: "HostSNI(`*`)", Service: "a"}},
				map[string]*config.TCPService{"a": lb("127.0.0.1:1")}, nil),
		},
		{
			name: "conflicting routers across instances are dropped, naming both",
			instances: []Instance{
				inst("db", "db-1", "127.0.0.1", 1, "passing", "traefik.tcp.routers.r.rule=HostSNI(`*`)", "traefik.tcp.routers.r.entrypoints=a"),
				inst("db", "db-2", "127.0.0.2", 1, "passing", "traefik.tcp.routers.r.rule=HostSNI(`*`)", "traefik.tcp.routers.r.entrypoints=b"),
			},
			want:     tcp(nil, map[string]*config.TCPService{"db": lb("127.0.0.1:1", "127.0.0.2:1")}, nil),
			problems: []string{`tcp router "r" is defined differently by consul service "db" (instance "db-1" on node "node1") and consul service "db" (instance "db-2" on node "node1"); dropping it`},
		},
		{
			name: "conflicting middlewares across services are dropped",
			instances: []Instance{
				inst("a", "a", "127.0.0.1", 1, "passing", "traefik.tcp.middlewares.m.inflightconn.amount=1"),
				inst("b", "b", "127.0.0.1", 2, "passing", "traefik.tcp.middlewares.m.inflightconn.amount=2"),
			},
			want:     tcp(nil, nil, nil),
			problems: []string{`tcp middleware "m" is defined differently by consul service "a" (instance "a" on node "node1") and consul service "b"`},
		},
		{
			name: "same middleware on every instance is kept once",
			instances: []Instance{
				inst("a", "a", "127.0.0.1", 1, "passing", "traefik.tcp.middlewares.m.inflightconn.amount=1"),
				inst("b", "b", "127.0.0.1", 2, "passing", "traefik.tcp.middlewares.m.inflightconn.amount=1"),
			},
			want: tcp(nil, nil, map[string]*config.TCPMiddleware{"m": amount(1)}),
		},
		{
			name: "services differing beyond servers conflict",
			instances: []Instance{
				inst("db", "1", "127.0.0.1", 1, "passing", "traefik.tcp.routers.r.rule=HostSNI(`*`)", "traefik.tcp.services.s.loadbalancer.terminationdelay=5"),
				inst("db", "2", "127.0.0.2", 1, "passing", "traefik.tcp.routers.r.rule=HostSNI(`*`)", "traefik.tcp.services.s.loadbalancer.terminationdelay=6"),
			},
			want:     tcp(map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}}, nil, nil),
			problems: []string{`tcp service "s" is defined differently by`},
		},
		{
			// Traefik's "tcp with label without rule": the router alone is dropped.
			name: "router without rule is dropped alone, the instance's service stays",
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "passing",
				"traefik.tcp.routers.r.entrypoints=db")},
			want:     tcp(nil, map[string]*config.TCPService{"db": lb("127.0.0.1:1")}, nil),
			problems: []string{`consul service "db" (instance "a" on node "node1"): router "r" has no rule: dropped (set traefik.tcp.routers.r.rule`},
		},
		{
			name: "router without service among several services is dropped alone",
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "passing",
				"traefik.tcp.routers.r.rule=HostSNI(`*`)",
				"traefik.tcp.services.s1.loadbalancer.server.port=1",
				"traefik.tcp.services.s2.loadbalancer.server.port=2")},
			want:     tcp(nil, map[string]*config.TCPService{"s1": lb("127.0.0.1:1"), "s2": lb("127.0.0.1:2")}, nil),
			problems: []string{`router "r" has no service and the instance defines 2 services (s1, s2): dropped (set traefik.tcp.routers.r.service)`},
		},
		{
			// Issue 11's drift: the provider used to skip the whole instance
			// (tollgate check kept b, s1, s2). Traefik drops a alone.
			name: "router a without service, b on s1, services s1 and s2: only a is dropped",
			instances: []Instance{inst("db", "a", "127.0.0.1", 7000, "passing",
				"traefik.tcp.routers.a.rule=HostSNI(`*`)",
				"traefik.tcp.routers.b.rule=HostSNI(`*`)",
				"traefik.tcp.routers.b.service=s1",
				"traefik.tcp.services.s1.loadbalancer.server.port=1",
				"traefik.tcp.services.s2.loadbalancer.server.port=2")},
			want: tcp(
				map[string]*config.TCPRouter{"b": {Rule: "HostSNI(`*`)", Service: "s1"}},
				map[string]*config.TCPService{"s1": lb("127.0.0.1:1"), "s2": lb("127.0.0.1:2")}, nil),
			problems: []string{`router "a" has no service and the instance defines 2 services (s1, s2): dropped`},
		},
		{
			name: "two services on one instance, each with its port",
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "passing",
				"traefik.tcp.routers.r1.rule=HostSNI(`*`)", "traefik.tcp.routers.r1.service=s1", "traefik.tcp.routers.r1.entrypoints=e1",
				"traefik.tcp.routers.r2.rule=HostSNI(`*`)", "traefik.tcp.routers.r2.service=s2", "traefik.tcp.routers.r2.entrypoints=e2",
				"traefik.tcp.services.s1.loadbalancer.server.port=1001",
				"traefik.tcp.services.s2.loadbalancer.proxyprotocol.version=1")},
			want: tcp(
				map[string]*config.TCPRouter{
					"r1": {Rule: "HostSNI(`*`)", Service: "s1", EntryPoints: []string{"e1"}},
					"r2": {Rule: "HostSNI(`*`)", Service: "s2", EntryPoints: []string{"e2"}},
				},
				map[string]*config.TCPService{
					"s1": lb("127.0.0.1:1001"),
					"s2": {LoadBalancer: &config.TCPServersLoadBalancer{
						Servers:       []config.TCPServer{{Address: "127.0.0.1:1"}},
						ProxyProtocol: &config.ProxyProtocol{Version: 1},
					}},
				}, nil),
		},
		{
			name: "bad port tag is a problem naming the tag; the router that would fall back on another service is dropped too",
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "passing",
				"traefik.tcp.routers.r.rule=HostSNI(`*`)",
				"traefik.tcp.services.db.loadbalancer.server.port=99999")},
			want: tcp(nil, nil, nil),
			problems: []string{`tag "traefik.tcp.services.db.loadbalancer.server.port=99999": port must be a number from 1 to 65535: service "db" is dropped`,
				`router "r" names no service and a service of the instance is dropped: dropped too, rather than routed to another (set traefik.tcp.routers.r.service)`},
		},
		{
			name: "unhealthy instance with a bad tag still reports it",
			instances: []Instance{inst("db", "a", "127.0.0.1", 1, "critical",
				"traefik.tcp.middlewares.m.inflightconn.amount=x")},
			want:     tcp(nil, nil, nil),
			problems: []string{`tag "traefik.tcp.middlewares.m.inflightconn.amount=x"`},
		},
		{
			name: "canary instances get their own automatic service",
			instances: []Instance{
				inst("web", "prod", "127.0.0.1", 1, "passing", "traefik.tcp.routers.prod.rule=HostSNI(`*`)"),
				inst("web", "canary", "127.0.0.2", 1, "passing", "traefik.tcp.routers.canary.rule=HostSNI(`*`)", "traefik.consulcatalog.canary=true"),
			},
			want: func() *config.Dynamic {
				c := serviceName(&Instance{Name: "web", Tags: []string{"traefik.tcp.routers.canary.rule=HostSNI(`*`)", "traefik.consulcatalog.canary=true"}}, true)
				return tcp(
					map[string]*config.TCPRouter{
						"prod":   {Rule: "HostSNI(`*`)", Service: "web"},
						"canary": {Rule: "HostSNI(`*`)", Service: c},
					},
					map[string]*config.TCPService{"web": lb("127.0.0.1:1"), c: lb("127.0.0.2:1")}, nil)
			}(),
		},
		{
			name: "consul connect and unknown consulcatalog keys are problems",
			instances: []Instance{
				inst("a", "a", "127.0.0.1", 1, "passing", "traefik.tcp.routers.a.rule=HostSNI(`*`)", "traefik.consulcatalog.connect=true"),
				inst("b", "b", "127.0.0.1", 1, "passing", "traefik.tcp.routers.b.rule=HostSNI(`*`)", "traefik.consulcatalog.bogus=1"),
			},
			want: tcp(nil, nil, nil),
			problems: []string{
				`tag "traefik.consulcatalog.connect=true": Consul Connect is not supported`,
				`tag "traefik.consulcatalog.bogus=1": unknown key`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := defaultOpts()
			if tt.opts != nil {
				tt.opts(&opts)
			}
			before, _ := json.Marshal(tt.instances)
			got, problems := build(tt.instances, opts)
			if after, _ := json.Marshal(tt.instances); string(before) != string(after) {
				t.Errorf("build modified its input:\n%s\n%s", before, after)
			}
			if !reflect.DeepEqual(got, tt.want) {
				g, _ := json.MarshalIndent(got, "", "  ")
				w, _ := json.MarshalIndent(tt.want, "", "  ")
				t.Errorf("configuration:\ngot  %s\nwant %s", g, w)
			}
			if len(problems) != len(tt.problems) {
				t.Fatalf("problems: got %d %q, want %d like %q", len(problems), problems, len(tt.problems), tt.problems)
			}
			for i := range problems {
				if !strings.Contains(problems[i], tt.problems[i]) {
					t.Errorf("problem %d: got %q, want it to contain %q", i, problems[i], tt.problems[i])
				}
			}
		})
	}
}

// TestBuildOrderIndependent checks that the instance order does not change the
// result (servers, conflicts and problems are sorted).
func TestBuildOrderIndependent(t *testing.T) {
	insts := []Instance{
		inst("db", "db-2", "127.0.0.2", 5432, "passing", design7...),
		inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...),
		inst("x", "x-1", "127.0.0.1", 0, "passing", "traefik.tcp.routers.x.rule=HostSNI(`*`)"),
		inst("db", "db-3", "127.0.0.3", 5432, "passing", append([]string{"traefik.tcp.routers.db.priority=3"}, design7...)...),
	}
	want, wantProb := build(insts, defaultOpts())
	for i := range 20 {
		shuffled := slices.Clone(insts)
		for j := range shuffled {
			k := (j*7 + i*3) % len(shuffled)
			shuffled[j], shuffled[k] = shuffled[k], shuffled[j]
		}
		got, prob := build(shuffled, defaultOpts())
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(prob, wantProb) {
			t.Fatalf("order %d changed the result:\n%+v %q\n%+v %q", i, got.TCP, prob, want.TCP, wantProb)
		}
	}
	if len(wantProb) != 2 { // missing port of x, conflicting router db
		t.Fatalf("want 2 problems, got %q", wantProb)
	}
}

// TestBuildCache checks that a build through a warm cache returns the same
// result as a cold one, shares no memory with the previous result, and drops
// entries that a build no longer uses.
func TestBuildCache(t *testing.T) {
	insts := []Instance{
		inst("db", "db-1", "127.0.0.1", 5432, "passing", design7...),
		inst("db", "db-2", "127.0.0.2", 5432, "passing", design7...),
		inst("bad", "bad-1", "127.0.0.1", 1, "passing", "traefik.tcp.routers.b.rule=HostSNI(`*`)", "traefik.tcp.middlewares.m.inflightconn.amount=abc"),
	}
	opts := defaultOpts()
	opts.Cache = &DecodeCache{}
	want, wantProb := build(insts, defaultOpts())
	first, _ := build(insts, opts)
	if n := len(opts.Cache.prev); n != 2 {
		t.Errorf("cache holds %d tag lists after the first build, want 2 (db's shared by both instances, bad's)", n)
	}
	// Modify the first result as a careless consumer might.
	first.TCP.Routers["db"].EntryPoints[0] = "changed"
	first.TCP.Routers["db"].Service = "changed"
	first.TCP.Middlewares["test-inflightconn"].InFlightConn.Amount = 99
	first.TCP.Services["db"].LoadBalancer.Servers[0].Address = "changed"

	second, prob := build(insts, opts)
	if !reflect.DeepEqual(second, want) || !reflect.DeepEqual(prob, wantProb) {
		t.Errorf("warm build differs from a cold one:\ngot  %+v %q\nwant %+v %q", second.TCP, prob, want.TCP, wantProb)
	}
	build(insts[:1], opts)
	if n := len(opts.Cache.prev); n != 1 {
		t.Errorf("cache holds %d tag lists after a build that used 1", n)
	}
}

// build is Build as the provider's Message carries it: the configuration
// and the problems.
func build(instances []Instance, opts Options) (*config.Dynamic, []string) {
	m := Build(instances, opts).Message(Name)
	return m.Configuration, m.Problems
}
