package docker

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// running returns a running container without health check on the bridge
// network with IP ip, exposing the given TCP ports.
func running(name, ip string, lbls map[string]string, ports ...int) Container {
	c := Container{
		ID:          "id-" + name,
		Name:        name,
		Labels:      lbls,
		State:       "running",
		NetworkMode: "bridge",
		Networks:    map[string]string{"bridge": ip},
	}
	for _, p := range ports {
		c.Ports = append(c.Ports, Port{Port: p, Proto: "tcp"})
	}
	return c
}

func with(c Container, f func(*Container)) Container {
	f(&c)
	return c
}

// dbLabels are the documented Docker label example (router, middleware, service
// port: docs/reference/middlewares/inflightconn.md).
func dbLabels() map[string]string {
	return map[string]string{
		"traefik.tcp.routers.db.rule":                          "HostSNI(`*`)",
		"traefik.tcp.routers.db.entrypoints":                   "db",
		"traefik.tcp.routers.db.middlewares":                   "db-limit",
		"traefik.tcp.middlewares.db-limit.inflightconn.amount": "10",
		"traefik.tcp.services.db.loadbalancer.server.port":     "5432",
		"com.docker.compose.config-hash":                       "x=y",
		"maintainer":                                           "someone",
	}
}

func routerOnly() map[string]string {
	return map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)"}
}

func svc(addrs ...string) *config.TCPService {
	lb := &config.TCPServersLoadBalancer{}
	for _, a := range addrs {
		lb.Servers = append(lb.Servers, config.TCPServer{Address: a})
	}
	return &config.TCPService{LoadBalancer: lb}
}

func router(service string) *config.TCPRouter {
	return &config.TCPRouter{Rule: "HostSNI(`*`)", Service: service}
}

func tcp(routers map[string]*config.TCPRouter, services map[string]*config.TCPService, mws map[string]*config.TCPMiddleware) *config.Dynamic {
	return &config.Dynamic{TCP: &config.TCPConfiguration{Routers: routers, Services: services, Middlewares: mws}}
}

func defaults() Options { return Options{ExposedByDefault: true} }

func TestBuild(t *testing.T) {
	tests := []struct {
		name       string
		containers []Container
		opts       Options
		want       *config.Dynamic
		// wantProblems are substrings, one per expected problem, in order.
		wantProblems []string
	}{
		{
			name:       "README example: router, middleware, service with label port",
			containers: []Container{running("pg", "172.17.0.2", dbLabels(), 5432, 9187)},
			opts:       defaults(),
			want: tcp(
				map[string]*config.TCPRouter{"db": {Rule: "HostSNI(`*`)", EntryPoints: []string{"db"}, Middlewares: []string{"db-limit"}, Service: "db"}},
				map[string]*config.TCPService{"db": svc("172.17.0.2:5432")},
				map[string]*config.TCPMiddleware{"db-limit": {InFlightConn: &config.TCPInFlightConn{Amount: 10}}},
			),
		},
		{
			name:       "auto service named after the container, lowest exposed TCP port",
			containers: []Container{with(running("my_db.1", "172.17.0.3", routerOnly(), 9000, 5432), func(c *Container) { c.Ports = append(c.Ports, Port{Port: 53, Proto: "udp"}) })},
			opts:       defaults(),
			want: tcp(
				map[string]*config.TCPRouter{"r": router("my-db-1")},
				map[string]*config.TCPService{"my-db-1": svc("172.17.0.3:5432")},
				nil,
			),
		},
		{
			name: "auto service of a compose container is <service>-<project>",
			containers: []Container{running("demo_db_1", "172.18.0.2", map[string]string{
				"traefik.tcp.routers.r.rule": "HostSNI(`*`)",
				"com.docker.compose.service": "db",
				"com.docker.compose.project": "My_Demo",
			}, 5432)},
			opts: defaults(),
			want: tcp(
				map[string]*config.TCPRouter{"r": router("db-My-Demo")},
				map[string]*config.TCPService{"db-My-Demo": svc("172.18.0.2:5432")},
				nil,
			),
		},
		{
			name: "label port wins over exposed ports",
			containers: []Container{running("c", "10.0.0.2", map[string]string{
				"traefik.tcp.routers.r.rule":                      "HostSNI(`*`)",
				"traefik.tcp.services.s.loadbalancer.server.port": "7000",
			}, 80)},
			opts: defaults(),
			want: tcp(map[string]*config.TCPRouter{"r": router("s")}, map[string]*config.TCPService{"s": svc("10.0.0.2:7000")}, nil),
		},
		{
			name:         "no port at all skips the container",
			containers:   []Container{running("noport", "10.0.0.2", routerOnly())},
			opts:         defaults(),
			wantProblems: []string{`container "noport": service "noport": no port`},
		},
		{
			name: "traefik.docker.network picks the network",
			containers: []Container{with(running("c", "", map[string]string{
				"traefik.tcp.routers.r.rule": "HostSNI(`*`)",
				"traefik.docker.network":     "back",
			}, 5432), func(c *Container) {
				c.Networks = map[string]string{"a-front": "10.1.0.2", "back": "10.2.0.2", "z": "10.3.0.2"}
			})},
			opts: Options{ExposedByDefault: true, Network: "z"},
			want: tcp(map[string]*config.TCPRouter{"r": router("c")}, map[string]*config.TCPService{"c": svc("10.2.0.2:5432")}, nil),
		},
		{
			name: "provider network when no label",
			containers: []Container{with(running("c", "", routerOnly(), 5432), func(c *Container) {
				c.Networks = map[string]string{"a-front": "10.1.0.2", "back": "10.2.0.2", "z": "10.3.0.2"}
			})},
			opts: Options{ExposedByDefault: true, Network: "z"},
			want: tcp(map[string]*config.TCPRouter{"r": router("c")}, map[string]*config.TCPService{"c": svc("10.3.0.2:5432")}, nil),
		},
		{
			name: "first network by name when none is set or the named one is missing",
			containers: []Container{with(running("c", "", map[string]string{
				"traefik.tcp.routers.r.rule": "HostSNI(`*`)",
				"traefik.docker.network":     "missing",
			}, 5432), func(c *Container) {
				c.Networks = map[string]string{"zz": "10.9.0.2", "b": "10.2.0.2", "a": ""}
			})},
			opts: defaults(),
			want: tcp(map[string]*config.TCPRouter{"r": router("c")}, map[string]*config.TCPService{"c": svc("10.2.0.2:5432")}, nil),
		},
		{
			name: "IPv6-only network address is bracketed",
			containers: []Container{with(running("c", "", routerOnly(), 5432), func(c *Container) {
				c.Networks = map[string]string{"v6": "fd00::2"}
			})},
			opts: defaults(),
			want: tcp(map[string]*config.TCPRouter{"r": router("c")}, map[string]*config.TCPService{"c": svc("[fd00::2]:5432")}, nil),
		},
		{
			name: "host network mode reaches the container on loopback",
			containers: []Container{with(running("h", "", routerOnly(), 6000), func(c *Container) {
				c.NetworkMode = "host"
				c.Networks = map[string]string{"host": ""}
			})},
			opts: defaults(),
			want: tcp(map[string]*config.TCPRouter{"r": router("h")}, map[string]*config.TCPService{"h": svc("127.0.0.1:6000")}, nil),
		},
		{
			name: "network mode none has no address",
			containers: []Container{with(running("n", "", routerOnly(), 6000), func(c *Container) {
				c.NetworkMode = "none"
				c.Networks = map[string]string{"none": ""}
			})},
			opts:         defaults(),
			wantProblems: []string{`container "n": service "n": no IP address`},
		},
		{
			name: "useBindPortIP uses a concrete host binding",
			containers: []Container{with(running("b", "172.17.0.5", routerOnly()), func(c *Container) {
				c.Ports = []Port{{Port: 5432, Proto: "tcp", Bindings: []Binding{{HostIP: "0.0.0.0", HostPort: "1"}, {HostIP: "192.168.1.10", HostPort: "15432"}}}}
			})},
			opts: Options{ExposedByDefault: true, UseBindPortIP: true},
			want: tcp(map[string]*config.TCPRouter{"r": router("b")}, map[string]*config.TCPService{"b": svc("192.168.1.10:15432")}, nil),
		},
		{
			name: "useBindPortIP falls back on the container IP for 0.0.0.0 bindings",
			containers: []Container{with(running("b", "172.17.0.5", routerOnly()), func(c *Container) {
				c.Ports = []Port{{Port: 5432, Proto: "tcp", Bindings: []Binding{{HostIP: "0.0.0.0", HostPort: "15432"}}}}
			})},
			opts: Options{ExposedByDefault: true, UseBindPortIP: true},
			want: tcp(map[string]*config.TCPRouter{"r": router("b")}, map[string]*config.TCPService{"b": svc("172.17.0.5:5432")}, nil),
		},
		{
			name: "unhealthy, starting, exited, paused and created containers are excluded",
			containers: []Container{
				with(running("unhealthy", "10.0.0.1", routerOnly(), 1), func(c *Container) { c.Health = "unhealthy" }),
				with(running("starting", "10.0.0.2", routerOnly(), 1), func(c *Container) { c.Health = "starting" }),
				with(running("exited", "", routerOnly(), 1), func(c *Container) { c.State = "exited" }),
				with(running("paused", "10.0.0.4", routerOnly(), 1), func(c *Container) { c.State = "paused" }),
				with(running("created", "", routerOnly(), 1), func(c *Container) { c.State = "created" }),
			},
			opts: defaults(),
			want: nil,
		},
		{
			name: "healthy container is served",
			containers: []Container{
				with(running("ok", "10.0.0.1", routerOnly(), 1), func(c *Container) { c.Health = "healthy" }),
			},
			opts: defaults(),
			want: tcp(map[string]*config.TCPRouter{"r": router("ok")}, map[string]*config.TCPService{"ok": svc("10.0.0.1:1")}, nil),
		},
		{
			name: "allowEmptyServices keeps unhealthy and stopped replicas as services without servers",
			containers: []Container{
				with(running("a", "10.0.0.1", dbLabels(), 5432), func(c *Container) { c.Health = "unhealthy" }),
				with(running("b", "", dbLabels(), 5432), func(c *Container) { c.State = "exited"; c.Networks = nil }),
			},
			opts: Options{ExposedByDefault: true, AllowEmptyServices: true},
			want: tcp(
				map[string]*config.TCPRouter{"db": {Rule: "HostSNI(`*`)", EntryPoints: []string{"db"}, Middlewares: []string{"db-limit"}, Service: "db"}},
				map[string]*config.TCPService{"db": {LoadBalancer: &config.TCPServersLoadBalancer{}}},
				map[string]*config.TCPMiddleware{"db-limit": {InFlightConn: &config.TCPInFlightConn{Amount: 10}}},
			),
		},
		{
			name: "allowEmptyServices: a healthy replica's server next to an unhealthy one",
			containers: []Container{
				with(running("a", "10.0.0.1", routerOnly(), 1), func(c *Container) {
					c.Health = "unhealthy"
					c.Labels = map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)", "traefik.tcp.routers.r.service": "s", "traefik.tcp.services.s.loadbalancer.server.port": "1"}
				}),
				running("b", "10.0.0.2", map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)", "traefik.tcp.routers.r.service": "s", "traefik.tcp.services.s.loadbalancer.server.port": "1"}),
			},
			opts: Options{ExposedByDefault: true, AllowEmptyServices: true},
			want: tcp(map[string]*config.TCPRouter{"r": router("s")}, map[string]*config.TCPService{"s": svc("10.0.0.2:1")}, nil),
		},
		{
			name: "traefik.docker.allownonrunning keeps a stopped container's routers without a server",
			containers: []Container{
				with(running("stopped", "", map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)", "traefik.docker.allownonrunning": "true"}, 1), func(c *Container) { c.State = "exited" }),
			},
			opts: defaults(),
			want: tcp(map[string]*config.TCPRouter{"r": router("stopped")}, map[string]*config.TCPService{"stopped": {LoadBalancer: &config.TCPServersLoadBalancer{}}}, nil),
		},
		{
			name: "traefik.enable and exposedByDefault",
			containers: []Container{
				running("off", "10.0.0.1", map[string]string{"traefik.enable": "false", "traefik.tcp.routers.off.rule": "HostSNI(`*`)"}, 1),
				running("default", "10.0.0.2", map[string]string{"traefik.tcp.routers.default.rule": "HostSNI(`*`)"}, 1),
				running("on", "10.0.0.3", map[string]string{"traefik.enable": "true", "traefik.tcp.routers.on.rule": "HostSNI(`*`)"}, 1),
			},
			opts: Options{ExposedByDefault: false},
			want: tcp(map[string]*config.TCPRouter{"on": router("on")}, map[string]*config.TCPService{"on": svc("10.0.0.3:1")}, nil),
		},
		{
			name: "constraints filter containers",
			containers: []Container{
				running("a", "10.0.0.1", map[string]string{"env": "prod", "traefik.tcp.routers.a.rule": "HostSNI(`*`)"}, 1),
				running("b", "10.0.0.2", map[string]string{"env": "dev", "traefik.tcp.routers.b.rule": "HostSNI(`*`)"}, 1),
			},
			opts: Options{ExposedByDefault: true, Match: func(l map[string]string) bool { return l["env"] == "prod" }},
			want: tcp(map[string]*config.TCPRouter{"a": router("a")}, map[string]*config.TCPService{"a": svc("10.0.0.1:1")}, nil),
		},
		{
			name: "router without rule is dropped, the service stays",
			containers: []Container{running("c", "10.0.0.1", map[string]string{
				"traefik.tcp.routers.norule.entrypoints": "db",
				"traefik.tcp.routers.ok.rule":            "HostSNI(`*`)",
			}, 1)},
			opts:         defaults(),
			want:         tcp(map[string]*config.TCPRouter{"ok": router("c")}, map[string]*config.TCPService{"c": svc("10.0.0.1:1")}, nil),
			wantProblems: []string{`container "c": router "norule" has no rule: dropped`},
		},
		{
			name: "router without service is dropped when the container has several services",
			containers: []Container{running("c", "10.0.0.1", map[string]string{
				"traefik.tcp.routers.r.rule":                       "HostSNI(`*`)",
				"traefik.tcp.routers.linked.rule":                  "HostSNI(`*`)",
				"traefik.tcp.routers.linked.service":               "s2",
				"traefik.tcp.services.s1.loadbalancer.server.port": "1",
				"traefik.tcp.services.s2.loadbalancer.server.port": "2",
			})},
			opts: defaults(),
			want: tcp(
				map[string]*config.TCPRouter{"linked": router("s2")},
				map[string]*config.TCPService{"s1": svc("10.0.0.1:1"), "s2": svc("10.0.0.1:2")},
				nil,
			),
			wantProblems: []string{`container "c": router "r" has no service and the container defines 2 services (s1, s2): dropped`},
		},
		{
			name: "two replicas with identical labels merge into one service",
			containers: []Container{
				running("db-2", "172.17.0.3", dbLabels(), 5432),
				running("db-1", "172.17.0.2", dbLabels(), 5432),
			},
			opts: defaults(),
			want: tcp(
				map[string]*config.TCPRouter{"db": {Rule: "HostSNI(`*`)", EntryPoints: []string{"db"}, Middlewares: []string{"db-limit"}, Service: "db"}},
				map[string]*config.TCPService{"db": svc("172.17.0.2:5432", "172.17.0.3:5432")},
				map[string]*config.TCPMiddleware{"db-limit": {InFlightConn: &config.TCPInFlightConn{Amount: 10}}},
			),
		},
		{
			name: "conflicting routers and middlewares are dropped naming both containers",
			containers: []Container{
				running("a", "10.0.0.1", map[string]string{
					"traefik.tcp.routers.r.rule":                      "HostSNI(`*`)",
					"traefik.tcp.routers.r.service":                   "s",
					"traefik.tcp.middlewares.m.inflightconn.amount":   "1",
					"traefik.tcp.services.s.loadbalancer.server.port": "1",
				}),
				running("b", "10.0.0.2", map[string]string{
					"traefik.tcp.routers.r.rule":                      "HostSNI(`*`)",
					"traefik.tcp.routers.r.service":                   "s",
					"traefik.tcp.routers.r.entrypoints":               "other",
					"traefik.tcp.middlewares.m.inflightconn.amount":   "2",
					"traefik.tcp.services.s.loadbalancer.server.port": "1",
				}),
			},
			opts: defaults(),
			want: tcp(nil, map[string]*config.TCPService{"s": svc("10.0.0.1:1", "10.0.0.2:1")}, nil),
			wantProblems: []string{
				`tcp router "r" is defined differently by container "a" and container "b"; dropping it`,
				`tcp middleware "m" is defined differently by container "a" and container "b"; dropping it`,
			},
		},
		{
			name: "services that differ beyond their servers conflict",
			containers: []Container{
				running("a", "10.0.0.1", map[string]string{"traefik.tcp.services.s.loadbalancer.server.port": "1"}),
				running("b", "10.0.0.2", map[string]string{"traefik.tcp.services.s.loadbalancer.server.port": "1", "traefik.tcp.services.s.loadbalancer.proxyprotocol": "true"}),
			},
			opts:         defaults(),
			want:         nil,
			wantProblems: []string{`tcp service "s" is defined differently by container "a" and container "b"; dropping it`},
		},
		{
			// Issue 42: a bad label used to exclude its whole container.
			name: "a bad label drops only the resource it declares, naming container, key and resource; the rest of the container applies",
			containers: []Container{
				running("bad", "10.0.0.1", map[string]string{"traefik.tcp.routers.bad.rule": "HostSNI(`*`)", "traefik.tcp.middlewares.m.inflightconn.amount": "abc"}, 1),
				running("good", "10.0.0.2", map[string]string{"traefik.tcp.routers.good.rule": "HostSNI(`*`)"}, 1),
			},
			opts: defaults(),
			want: tcp(map[string]*config.TCPRouter{"good": router("good"), "bad": router("bad")},
				map[string]*config.TCPService{"good": svc("10.0.0.2:1"), "bad": svc("10.0.0.1:1")}, nil),
			wantProblems: []string{`container "bad": label "traefik.tcp.middlewares.m.inflightconn.amount"="abc": amount must be an integer, got "abc": middleware "m" is dropped`},
		},
		{
			name: "a bad knob label excludes the container",
			containers: []Container{
				running("bad", "10.0.0.1", map[string]string{"traefik.enable": "maybe", "traefik.tcp.routers.bad.rule": "HostSNI(`*`)"}, 1),
			},
			opts:         defaults(),
			wantProblems: []string{`container "bad": label "traefik.enable"="maybe"`},
		},
		{
			name:       "containers without TCP labels are ignored",
			containers: []Container{running("plain", "10.0.0.1", map[string]string{"maintainer": "x", "traefik.http.routers.r.rule": "Host(`x`)"}, 80)},
			opts:       defaults(),
			want:       nil,
		},
		{
			name: "Traefik v3's forms: ipWhiteList (deprecated name of ipAllowList), healthcheck=true (an empty health check), unhealthyInterval",
			containers: []Container{running("db", "10.0.0.1", map[string]string{
				"traefik.tcp.routers.r.rule":                                         "HostSNI(`*`)",
				"traefik.tcp.routers.r.middlewares":                                  "office",
				"traefik.tcp.middlewares.office.ipwhitelist.sourcerange":             "10.0.0.0/8, 127.0.0.1",
				"traefik.tcp.services.db.loadbalancer.server.port":                   "5432",
				"traefik.tcp.services.db.loadbalancer.healthcheck":                   "true",
				"traefik.tcp.services.db.loadbalancer.healthcheck.unhealthyinterval": "2s",
			}, 5432)},
			opts: defaults(),
			want: func() *config.Dynamic {
				s := svc("10.0.0.1:5432")
				u := config.Duration(2 * time.Second)
				s.LoadBalancer.HealthCheck = &config.TCPHealthCheck{UnhealthyInterval: &u}
				return tcp(map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db", Middlewares: []string{"office"}}},
					map[string]*config.TCPService{"db": s},
					map[string]*config.TCPMiddleware{"office": {IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8", "127.0.0.1"}}}})
			}(),
		},
		{
			name: "an unknown key drops its resource alone: the router using the middleware stays (the proxy disables it), the other router serves",
			containers: []Container{running("db", "10.0.0.1", map[string]string{
				"traefik.tcp.routers.r.rule":                "HostSNI(`*`)",
				"traefik.tcp.routers.r.middlewares":         "m",
				"traefik.tcp.routers.other.rule":            "ClientIP(`10.0.0.0/8`)",
				"traefik.tcp.routers.other.service":         "db",
				"traefik.tcp.routers.typo.rule":             "HostSNI(`*`)",
				"traefik.tcp.routers.typo.servce":           "db",
				"traefik.tcp.middlewares.m.ipallowlist.bad": "x",
			}, 5432)},
			opts: defaults(),
			want: tcp(map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "db", Middlewares: []string{"m"}}, "other": {Rule: "ClientIP(`10.0.0.0/8`)", Service: "db"}},
				map[string]*config.TCPService{"db": svc("10.0.0.1:5432")}, nil),
			wantProblems: []string{
				`container "db": label "traefik.tcp.routers.typo.servce"="db": unknown key: field not found, node: servce: router "typo" is dropped`,
				`container "db": label "traefik.tcp.middlewares.m.ipallowlist.bad"="x": unknown key: field not found, node: bad: middleware "m" is dropped`,
			},
		},
		{
			name: "a service dropped for a bad key takes with it the routers that name no service: no other service is inferred for them",
			containers: []Container{running("db", "10.0.0.1", map[string]string{
				"traefik.tcp.routers.r.rule":                          "HostSNI(`*`)",
				"traefik.tcp.services.s.loadbalancer.server.port":     "5432",
				"traefik.tcp.services.s.loadbalancer.healthcheck.bad": "1",
			}, 5432)},
			opts: defaults(),
			wantProblems: []string{
				`label "traefik.tcp.services.s.loadbalancer.healthcheck.bad"="1": unknown key: field not found, node: bad: service "s" is dropped`,
				`container "db": router "r" names no service and a service of the container is dropped: dropped too, rather than routed to another (set traefik.tcp.routers.r.service)`,
			},
		},
		{
			name:       "a middleware-only container contributes its middleware",
			containers: []Container{running("mw", "10.0.0.1", map[string]string{"traefik.tcp.middlewares.allow.ipallowlist.sourcerange": "10.0.0.0/8, 127.0.0.1"})},
			opts:       defaults(),
			want:       tcp(nil, nil, map[string]*config.TCPMiddleware{"allow": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8", "127.0.0.1"}}}}),
		},
		{
			name:         "a service declared only as weighted is refused",
			containers:   []Container{running("w", "10.0.0.1", map[string]string{"traefik.tcp.services.s.weighted.services.0.name": "x"}, 1)},
			opts:         defaults(),
			wantProblems: []string{`container "w": service "s" has no loadBalancer`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := json.Marshal(tt.containers)
			got, problems := build(tt.containers, tt.opts)
			if after, _ := json.Marshal(tt.containers); string(after) != string(before) {
				t.Errorf("build modified its input")
			}
			if !reflect.DeepEqual(got, tt.want) {
				g, _ := json.MarshalIndent(got, "", "  ")
				w, _ := json.MarshalIndent(tt.want, "", "  ")
				t.Errorf("config:\n got %s\nwant %s", g, w)
			}
			if len(problems) != len(tt.wantProblems) {
				t.Fatalf("problems = %q, want %d matching %q", problems, len(tt.wantProblems), tt.wantProblems)
			}
			for i, want := range tt.wantProblems {
				if !strings.Contains(problems[i], want) {
					t.Errorf("problem[%d] = %q, want it to contain %q", i, problems[i], want)
				}
			}
		})
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	cs := []Container{
		running("c", "10.0.0.3", dbLabels(), 5432),
		running("a", "10.0.0.1", dbLabels(), 5432),
		running("b", "10.0.0.2", dbLabels(), 5432),
	}
	first, _ := build(cs, defaults())
	for i := 0; i < 20; i++ {
		cs[0], cs[1], cs[2] = cs[1], cs[2], cs[0]
		got, _ := build(cs, defaults())
		if !reflect.DeepEqual(got, first) {
			t.Fatalf("build depends on input order: %+v vs %+v", got.TCP.Services["db"], first.TCP.Services["db"])
		}
	}
	if s := first.TCP.Services["db"].LoadBalancer.Servers; len(s) != 3 || s[0].Address != "10.0.0.1:5432" {
		t.Fatalf("servers = %+v, want three ordered by container name", s)
	}
}

func TestConstraintsExpression(t *testing.T) {
	match, err := parseConstraints("Label(`env`, `prod`) && !LabelRegex(`team`, `^ops`)")
	if err != nil {
		t.Fatal(err)
	}
	cs := []Container{
		running("a", "10.0.0.1", map[string]string{"env": "prod", "team": "db", "traefik.tcp.routers.a.rule": "HostSNI(`*`)"}, 1),
		running("b", "10.0.0.2", map[string]string{"env": "prod", "team": "ops-1", "traefik.tcp.routers.b.rule": "HostSNI(`*`)"}, 1),
		running("c", "10.0.0.3", map[string]string{"env": "dev", "traefik.tcp.routers.c.rule": "HostSNI(`*`)"}, 1),
	}
	got, _ := build(cs, Options{ExposedByDefault: true, Match: match})
	if got == nil || len(got.TCP.Routers) != 1 || got.TCP.Routers["a"] == nil {
		t.Fatalf("routers = %+v, want only a", got)
	}
	if m, err := parseConstraints("  "); err != nil || m != nil {
		t.Fatalf("empty expression: match=%v err=%v, want nil, nil", m != nil, err)
	}
	if _, err := parseConstraints("Label(`x`"); err == nil {
		t.Fatal("malformed expression parsed")
	}
	if _, err := New(&config.DockerProvider{Constraints: "Nope(`x`)"}, provider.Options{}); err == nil || !strings.Contains(err.Error(), "providers.docker.constraints") {
		t.Fatalf("New with a bad expression: %v, want an error naming providers.docker.constraints", err)
	}
}

// build is Build as the provider's Message carries it: the configuration
// and the problems.
func build(containers []Container, opts Options) (*config.Dynamic, []string) {
	m := Build(containers, opts).Message(Name)
	return m.Configuration, m.Problems
}
