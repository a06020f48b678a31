package swarm

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// seed are the labels of the example on a Swarm service: the
// inflightconn middleware of the article the project started from, on a
// HostSNI(`*`) router, with the service port Swarm services must state.
func seed() map[string]string {
	return map[string]string{
		"traefik.tcp.routers.db.rule":                                   "HostSNI(`*`)",
		"traefik.tcp.routers.db.middlewares":                            "test-inflightconn",
		"traefik.tcp.middlewares.test-inflightconn.inflightconn.amount": "10",
		"traefik.tcp.services.db.loadbalancer.server.port":              "7000",
		"com.docker.stack.namespace":                                    "shop",
	}
}

// service is a replicated service named name with one running task per IP,
// all on network "shop_backend", and a virtual IP there.
func service(name string, lbls map[string]string, ips ...string) Service {
	s := Service{ID: "id-" + name, Name: name, Labels: lbls, EndpointMode: ModeVIP,
		VirtualIPs: map[string]string{"shop_backend": "10.0.9.2"}}
	for i, ip := range ips {
		s.Tasks = append(s.Tasks, Task{ID: name + "-task-" + ip, Slot: i + 1, NodeID: "n1", State: TaskRunning,
			Networks: map[string]string{"shop_backend": ip}})
	}
	return s
}

func with(s Service, f func(*Service)) Service {
	f(&s)
	return s
}

func labelsWith(base map[string]string, kv ...string) map[string]string {
	m := maps.Clone(base)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func svc(addrs ...string) *config.TCPService {
	lb := &config.TCPServersLoadBalancer{}
	for _, a := range addrs {
		lb.Servers = append(lb.Servers, config.TCPServer{Address: a})
	}
	return &config.TCPService{LoadBalancer: lb}
}

func seedConfig(addrs ...string) *config.Dynamic {
	return &config.Dynamic{TCP: &config.TCPConfiguration{
		Routers:     map[string]*config.TCPRouter{"db": {Rule: "HostSNI(`*`)", Service: "db", Middlewares: []string{"test-inflightconn"}}},
		Services:    map[string]*config.TCPService{"db": svc(addrs...)},
		Middlewares: map[string]*config.TCPMiddleware{"test-inflightconn": {InFlightConn: &config.TCPInFlightConn{Amount: 10}}},
	}}
}

func defaults() Options { return Options{ExposedByDefault: true} }

func TestBuild(t *testing.T) {
	tests := []struct {
		name     string
		services []Service
		opts     Options
		want     *config.Dynamic
		// wantProblems and wantWarnings are substrings, one per expected
		// line, in order.
		wantProblems, wantWarnings []string
	}{
		{
			name:     "the seed's labels: the running tasks are the servers, in slot order",
			services: []Service{service("shop_db", seed(), "10.0.9.5", "10.0.9.3", "10.0.9.4")},
			opts:     defaults(),
			want:     seedConfig("10.0.9.5:7000", "10.0.9.3:7000", "10.0.9.4:7000"),
		},
		{
			name: "tasks that are not running yet (or any more) are not servers",
			services: []Service{with(service("shop_db", seed(), "10.0.9.3", "10.0.9.4", "10.0.9.5"), func(s *Service) {
				s.Tasks[0].State, s.Tasks[2].State = "starting", "failed"
			})},
			opts: defaults(),
			want: seedConfig("10.0.9.4:7000"),
		},
		{
			name:     "a service without a running task contributes nothing",
			services: []Service{with(service("shop_db", seed(), "10.0.9.3"), func(s *Service) { s.Tasks[0].State = "preparing" })},
			opts:     defaults(),
		},
		{
			name:     "allowEmptyServices keeps a service without a running task, with no server",
			services: []Service{service("shop_db", seed())},
			opts:     Options{ExposedByDefault: true, AllowEmptyServices: true},
			want:     seedConfig(),
		},
		{
			name: "a global service: one server per task (slot 0)",
			services: []Service{with(service("shop_db", seed(), "10.0.9.3", "10.0.9.4"), func(s *Service) {
				s.Global = true
				for i := range s.Tasks {
					s.Tasks[i].Slot = 0
				}
			})},
			opts: defaults(),
			want: seedConfig("10.0.9.3:7000", "10.0.9.4:7000"),
		},
		{
			name:     "lbswarm: the virtual IP is the one server",
			services: []Service{service("shop_db", labelsWith(seed(), "traefik.swarm.lbswarm", "true"), "10.0.9.3", "10.0.9.4")},
			opts:     defaults(),
			want:     seedConfig("10.0.9.2:7000"),
		},
		{
			name:     "lbswarm: the virtual IP is there without a running task",
			services: []Service{service("shop_db", labelsWith(seed(), "traefik.swarm.lbswarm", "true"))},
			opts:     defaults(),
			want:     seedConfig("10.0.9.2:7000"),
		},
		{
			name: "lbswarm on a dnsrr service: no virtual IP, the tasks are used, with a warning",
			services: []Service{with(service("shop_db", labelsWith(seed(), "traefik.swarm.lbswarm", "true"), "10.0.9.3"), func(s *Service) {
				s.EndpointMode, s.VirtualIPs = ModeDNSRR, nil
			})},
			opts:         defaults(),
			want:         seedConfig("10.0.9.3:7000"),
			wantWarnings: []string{`swarm service "shop_db": lbswarm is set but the service's endpoint mode is dnsrr`},
		},
		{
			name:         "several networks without a network label: the first by name, and a warning that says so",
			services:     []Service{onNetworks(service("shop_db", seed()), "shop_frontend", "10.0.8.3", "shop_backend", "10.0.9.3")},
			opts:         defaults(),
			want:         seedConfig("10.0.9.3:7000"),
			wantWarnings: []string{`swarm service "shop_db": the service is on networks shop_backend, shop_frontend and no traefik.swarm.network label names one: servers use "shop_backend"`},
		},
		{
			name:     "traefik.swarm.network picks the network",
			services: []Service{onNetworks(service("shop_db", labelsWith(seed(), "traefik.swarm.network", "shop_frontend")), "shop_frontend", "10.0.8.3", "shop_backend", "10.0.9.3")},
			opts:     defaults(),
			want:     seedConfig("10.0.8.3:7000"),
		},
		{
			name:     "the provider's network option picks the network when no label does",
			services: []Service{onNetworks(service("shop_db", seed()), "shop_frontend", "10.0.8.3", "shop_backend", "10.0.9.3")},
			opts:     Options{ExposedByDefault: true, Network: "shop_frontend"},
			want:     seedConfig("10.0.8.3:7000"),
		},
		{
			name:     "the label wins over the provider's network option",
			services: []Service{onNetworks(service("shop_db", labelsWith(seed(), "traefik.swarm.network", "shop_backend")), "shop_frontend", "10.0.8.3", "shop_backend", "10.0.9.3")},
			opts:     Options{ExposedByDefault: true, Network: "shop_frontend"},
			want:     seedConfig("10.0.9.3:7000"),
		},
		{
			name:         "a network label without the stack's prefix falls back to the first network, and the warning names the label and the full name",
			services:     []Service{onNetworks(service("shop_db", labelsWith(seed(), "Traefik.Swarm.Network", "frontend")), "shop_frontend", "10.0.8.3", "shop_backend", "10.0.9.3")},
			opts:         defaults(),
			want:         seedConfig("10.0.9.3:7000"),
			wantWarnings: []string{`swarm service "shop_db": label "Traefik.Swarm.Network"="frontend": network "frontend" is not one of the service's networks (shop_backend, shop_frontend): using "shop_backend" (a stack's networks are named <stack>_<network>: "shop_frontend"?)`},
		},
		{
			name: "the routing mesh is never chosen by default",
			services: []Service{with(onNetworks(service("shop_db", seed()), "ingress", "10.0.0.7", "shop_backend", "10.0.9.3"), func(s *Service) {
				s.Ingress = "ingress"
			})},
			opts: defaults(),
			want: seedConfig("10.0.9.3:7000"),
		},
		{
			name: "a service only on the routing mesh is skipped: tollgate cannot reach it",
			services: []Service{with(onNetworks(service("shop_db", seed()), "ingress", "10.0.0.7"), func(s *Service) {
				s.Ingress = "ingress"
			})},
			opts:         defaults(),
			wantProblems: []string{`swarm service "shop_db": service "db": no address tollgate can reach: the service is only on the routing mesh (ingress)`},
		},
		{
			name:         "a service without a port label is skipped, as in Traefik",
			services:     []Service{service("shop_db", map[string]string{"traefik.tcp.routers.db.rule": "HostSNI(`*`)"}, "10.0.9.3")},
			opts:         defaults(),
			wantProblems: []string{`swarm service "shop_db": service "shop-db": port is missing: set traefik.tcp.services.shop-db.loadbalancer.server.port`},
		},
		{
			// Issue 42: a bad label used to leave out its whole Swarm service.
			name: "a bad label drops only the resource it declares, naming the service, the label and the resource",
			services: []Service{
				service("shop_db", seed(), "10.0.9.3"),
				service("shop_cache", map[string]string{
					"traefik.tcp.routers.cache.rule":                          "HostSNI(`*`)",
					"traefik.tcp.middlewares.cache-limit.inflightconn.amount": "abc",
					"traefik.tcp.services.cache.loadbalancer.server.port":     "6379",
				}, "10.0.9.4"),
			},
			opts: defaults(),
			want: func() *config.Dynamic {
				d := seedConfig("10.0.9.3:7000")
				d.TCP.Routers["cache"] = &config.TCPRouter{Rule: "HostSNI(`*`)", Service: "cache"}
				d.TCP.Services["cache"] = svc("10.0.9.4:6379")
				return d
			}(),
			wantProblems: []string{`swarm service "shop_cache": label "traefik.tcp.middlewares.cache-limit.inflightconn.amount"="abc": amount must be an integer, got "abc": middleware "cache-limit" is dropped`},
		},
		{
			name:     "traefik.enable=false and exposedByDefault",
			services: []Service{service("a", labelsWith(seed(), "traefik.enable", "false"), "10.0.9.3"), service("b", seed(), "10.0.9.4")},
			opts:     Options{ExposedByDefault: false},
		},
		{
			name:     "traefik.enable=true with exposedByDefault=false",
			services: []Service{service("shop_db", labelsWith(seed(), "traefik.enable", "true"), "10.0.9.3")},
			opts:     Options{ExposedByDefault: false},
			want:     seedConfig("10.0.9.3:7000"),
		},
		{
			name:         "traefik.docker.network is read as traefik.swarm.network, with a warning",
			services:     []Service{onNetworks(service("shop_db", labelsWith(seed(), "traefik.docker.network", "shop_frontend")), "shop_frontend", "10.0.8.3", "shop_backend", "10.0.9.3")},
			opts:         defaults(),
			want:         seedConfig("10.0.8.3:7000"),
			wantWarnings: []string{`label "traefik.docker.network"="shop_frontend": traefik.docker. labels on a Swarm service are deprecated (Traefik v3 too): read as traefik.swarm.network`},
		},
		{
			name:         "traefik.docker. and traefik.swarm. labels together skip the service, as in Traefik",
			services:     []Service{service("shop_db", labelsWith(seed(), "traefik.docker.lbswarm", "true", "traefik.swarm.network", "shop_backend"), "10.0.9.3")},
			opts:         defaults(),
			wantProblems: []string{`swarm service "shop_db": label "traefik.docker.lbswarm"="true": both traefik.docker. and traefik.swarm. labels`},
		},
		{
			name:         "an unknown traefik.swarm. key skips the service",
			services:     []Service{service("shop_db", labelsWith(seed(), "traefik.swarm.lbswram", "true"), "10.0.9.3")},
			opts:         defaults(),
			wantProblems: []string{`swarm service "shop_db": label "traefik.swarm.lbswram"="true": unknown key`},
		},
		{
			name: "same-named services of two Swarm services pool their servers",
			services: []Service{
				service("shop_db", seed(), "10.0.9.3"),
				service("shop_db2", seed(), "10.0.9.4"),
			},
			opts: defaults(),
			want: seedConfig("10.0.9.3:7000", "10.0.9.4:7000"),
		},
		{
			name: "a router defined differently by two Swarm services is dropped, naming both",
			services: []Service{
				service("shop_db", seed(), "10.0.9.3"),
				service("shop_db2", labelsWith(seed(), "traefik.tcp.routers.db.rule", "ClientIP(`10.0.0.0/8`)"), "10.0.9.4"),
			},
			opts: defaults(),
			want: func() *config.Dynamic {
				d := seedConfig("10.0.9.3:7000", "10.0.9.4:7000")
				d.TCP.Routers = nil
				return d
			}(),
			wantProblems: []string{`tcp router "db" is defined differently by swarm service "shop_db" and swarm service "shop_db2"`},
		},
		{
			name:     "a middleware-only service contributes its middleware while it runs",
			services: []Service{service("shop_limits", map[string]string{"traefik.tcp.middlewares.limit.inflightconn.amount": "3"}, "10.0.9.3")},
			opts:     defaults(),
			want: &config.Dynamic{TCP: &config.TCPConfiguration{
				Middlewares: map[string]*config.TCPMiddleware{"limit": {InFlightConn: &config.TCPInFlightConn{Amount: 3}}},
			}},
		},
		{
			name: "a router without a service among several is dropped alone",
			services: []Service{service("shop_db", map[string]string{
				"traefik.tcp.routers.r.rule":                      "HostSNI(`*`)",
				"traefik.tcp.services.a.loadbalancer.server.port": "1",
				"traefik.tcp.services.b.loadbalancer.server.port": "2",
			}, "10.0.9.3")},
			opts: defaults(),
			want: &config.Dynamic{TCP: &config.TCPConfiguration{
				Services: map[string]*config.TCPService{"a": svc("10.0.9.3:1"), "b": svc("10.0.9.3:2")},
			}},
			wantProblems: []string{`router "r" has no service and the Swarm service defines 2 services (a, b)`},
		},
		{
			name:     "labels outside traefik. are ignored",
			services: []Service{service("shop_db", map[string]string{"com.docker.stack.image": "echo", "maintainer": "x"}, "10.0.9.3")},
			opts:     defaults(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := json.Marshal(tt.services)
			m := build(tt.services, tt.opts)
			if after, _ := json.Marshal(tt.services); string(after) != string(before) {
				t.Errorf("build modified its input")
			}
			if !reflect.DeepEqual(m.Configuration, tt.want) {
				g, _ := json.MarshalIndent(m.Configuration, "", "  ")
				w, _ := json.MarshalIndent(tt.want, "", "  ")
				t.Errorf("config:\n got %s\nwant %s", g, w)
			}
			matches(t, "problems", m.Problems, tt.wantProblems)
			matches(t, "warnings", m.Warnings, tt.wantWarnings)
		})
	}
}

func matches(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s = %q, want %d matching %q", what, got, len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("%s[%d] = %q, want it to contain %q", what, i, got[i], w)
		}
	}
}

// onNetworks puts s's virtual IPs and its one task on the networks given as
// name, task IP pairs (the virtual IP is the task IP with its last byte 2).
func onNetworks(s Service, pairs ...string) Service {
	s.VirtualIPs = map[string]string{}
	task := Task{ID: s.Name + "-task", Slot: 1, NodeID: "n1", State: TaskRunning, Networks: map[string]string{}}
	for i := 0; i+1 < len(pairs); i += 2 {
		task.Networks[pairs[i]] = pairs[i+1]
		s.VirtualIPs[pairs[i]] = pairs[i+1][:strings.LastIndexByte(pairs[i+1], '.')] + ".2"
	}
	s.Tasks = []Task{task}
	return s
}

func TestBuildIsDeterministic(t *testing.T) {
	ss := []Service{
		service("c", seed(), "10.0.9.5"),
		service("a", seed(), "10.0.9.3", "10.0.9.6"),
		service("b", seed(), "10.0.9.4"),
	}
	first := Build(ss, defaults())
	for range 20 {
		ss[0], ss[1], ss[2] = ss[1], ss[2], ss[0]
		ss[1].Tasks[0], ss[1].Tasks[len(ss[1].Tasks)-1] = ss[1].Tasks[len(ss[1].Tasks)-1], ss[1].Tasks[0]
		if got := Build(ss, defaults()); !reflect.DeepEqual(got, first) {
			t.Fatalf("Build depends on input order: %+v vs %+v", got.Configuration.TCP.Services["db"], first.Configuration.TCP.Services["db"])
		}
	}
	want := []string{"10.0.9.3:7000", "10.0.9.6:7000", "10.0.9.4:7000", "10.0.9.5:7000"}
	var got []string
	for _, s := range first.Configuration.TCP.Services["db"].LoadBalancer.Servers {
		got = append(got, s.Address)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("servers = %v, want %v (by service name, then slot)", got, want)
	}
}

// Problems carry what tollgate check places them with: the service's ID
// and the label key as written.
func TestBuildProblemFields(t *testing.T) {
	res := Build([]Service{service("shop_db", labelsWith(seed(), "traefik.tcp.routers.db.entrypoint", "db"), "10.0.9.3")}, defaults())
	if len(res.Problems) != 1 {
		t.Fatalf("problems = %+v, want one", res.Problems)
	}
	p := res.Problems[0]
	// Issue 42: the label drops its router alone (Resource), not the service (Skipped).
	want := provider.Problem{Source: `swarm service "shop_db"`, SourceID: "id-shop_db", Key: "traefik.tcp.routers.db.entrypoint", Value: "db",
		KeyKind: provider.KeyLabel, Resource: provider.Resource{Kind: provider.KindRouter, Name: "db"}, Severity: provider.SeverityError, DisablesRouter: true,
		Message: `unknown key: field not found, node: entrypoint: router "db" is dropped`}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("problem = %+v\nwant      %+v", p, want)
	}
}

// build is Build as the provider's Message carries it.
func build(services []Service, opts Options) provider.Message {
	return Build(services, opts).Message(Name)
}
