package provider

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
)

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"db":          "db",
		"/db":         "db",
		"my_db.1":     "my-db-1",
		"db_My_Demo":  "db-My-Demo",
		"a--b__c":     "a-b-c",
		"-x-":         "x",
		"ünïcode_svc": "ünïcode-svc",
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func lb(addrs ...string) *config.TCPService {
	s := &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{}}
	for _, a := range addrs {
		s.LoadBalancer.Servers = append(s.LoadBalancer.Servers, config.TCPServer{Address: a})
	}
	return s
}

func TestMergeable(t *testing.T) {
	five, six := 5, 6
	for _, tc := range []struct {
		name string
		a, b *config.TCPServersLoadBalancer
		want bool
	}{
		{"both nil", nil, nil, true},
		{"one nil", nil, &config.TCPServersLoadBalancer{}, false},
		{"servers differ only", lb("a:1").LoadBalancer, lb("b:1", "c:1").LoadBalancer, true},
		{"termination delay differs", &config.TCPServersLoadBalancer{TerminationDelay: &five}, &config.TCPServersLoadBalancer{TerminationDelay: &six}, false},
		{"proxy protocol on one side", &config.TCPServersLoadBalancer{ProxyProtocol: &config.ProxyProtocol{Version: 2}}, &config.TCPServersLoadBalancer{}, false},
	} {
		if got := tc.a.Mergeable(tc.b); got != tc.want {
			t.Errorf("%s: Mergeable = %v, want %v", tc.name, got, tc.want)
		}
		if got := tc.b.Mergeable(tc.a); got != tc.want {
			t.Errorf("%s (swapped): Mergeable = %v, want %v", tc.name, got, tc.want)
		}
	}
	a, b := lb("a:1").LoadBalancer, lb("b:1").LoadBalancer
	a.Mergeable(b)
	if a.Servers[0].Address != "a:1" || b.Servers[0].Address != "b:1" {
		t.Fatalf("Mergeable modified its operands: %+v %+v", a, b)
	}
}

func TestAddServiceTCP(t *testing.T) {
	tcp := &config.TCPConfiguration{}
	if !AddServiceTCP(tcp, "s", lb("a:1")) || !AddServiceTCP(tcp, "s", lb("a:1", "b:1")) {
		t.Fatal("same load balancer refused")
	}
	if got := tcp.Services["s"].LoadBalancer.Servers; len(got) != 2 || got[0].Address != "a:1" || got[1].Address != "b:1" {
		t.Fatalf("servers %+v, want a:1 then b:1 once each", got)
	}
	delay := 3
	other := lb("c:1")
	other.LoadBalancer.TerminationDelay = &delay
	if AddServiceTCP(tcp, "s", other) {
		t.Fatal("a load balancer with another termination delay merged")
	}
	if len(tcp.Services["s"].LoadBalancer.Servers) != 2 {
		t.Fatal("a refused service changed the one there")
	}
	w := &config.TCPService{Weighted: &config.TCPWeightedRoundRobin{Services: []config.TCPWRRService{{Name: "x"}}}}
	if !AddServiceTCP(tcp, "w", w) || !AddServiceTCP(tcp, "w", w) || AddServiceTCP(tcp, "w", lb("a:1")) {
		t.Fatal("weighted services: equal ones must be accepted, a load balancer of the same name refused")
	}
	if AddServiceTCP(tcp, "n", nil) != true || AddServiceTCP(tcp, "n", lb()) {
		t.Fatal("nil service: first accepted, a different one refused")
	}
}

func TestBuildTCPRouterConfiguration(t *testing.T) {
	src := Source{ID: "id-1", Name: `container "c"`, TCP: &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"a":      {Rule: "HostSNI(`*`)"},
			"b":      {Rule: "HostSNI(`*`)", Service: "s1"},
			"norule": {EntryPoints: []string{"db"}},
		},
		Services: map[string]*config.TCPService{"s1": lb("a:1"), "s2": lb("a:2")},
	}}
	problems := BuildTCPRouterConfiguration(src, "container", "traefik")
	if len(src.TCP.Routers) != 1 || src.TCP.Routers["b"] == nil || len(src.TCP.Services) != 2 {
		t.Fatalf("want router b and both services kept, a and norule dropped: %+v", src.TCP)
	}
	want := []Problem{
		{Source: `container "c"`, SourceID: "id-1", Resource: Resource{KindRouter, "a"}, Severity: SeverityError, DisablesRouter: true,
			Message: "router \"a\" has no service and the container defines 2 services (s1, s2): dropped (set traefik.tcp.routers.a.service)"},
		{Source: `container "c"`, SourceID: "id-1", Resource: Resource{KindRouter, "norule"}, Severity: SeverityError, DisablesRouter: true,
			Message: "router \"norule\" has no rule: dropped (set traefik.tcp.routers.norule.rule, e.g. HostSNI(`*`))"},
	}
	if !reflect.DeepEqual(problems, want) {
		t.Fatalf("problems\n got %+v\nwant %+v", problems, want)
	}

	one := Source{TCP: &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)"}},
		Services: map[string]*config.TCPService{"only": lb("a:1")},
	}}
	if p := BuildTCPRouterConfiguration(one, "instance", "tollgate"); len(p) != 0 || one.TCP.Routers["r"].Service != "only" {
		t.Fatalf("the only service is not inferred: %+v %+v", p, one.TCP.Routers["r"])
	}
}

func TestMergeSources(t *testing.T) {
	mw := func(n int64) *config.TCPMiddleware {
		return &config.TCPMiddleware{InFlightConn: &config.TCPInFlightConn{Amount: n}}
	}
	src := func(id string, amount int64, addr string) Source {
		return Source{ID: id, Name: `container "` + id + `"`, TCP: &config.TCPConfiguration{
			Routers:     map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}},
			Services:    map[string]*config.TCPService{"s": lb(addr)},
			Middlewares: map[string]*config.TCPMiddleware{"m": mw(amount)},
		}}
	}
	tcp, problems, definedBy := MergeSources([]Source{src("c0", 1, "a:1"), src("c1", 2, "b:1"), src("c2", 1, "c:1"), {ID: "empty"}})
	if _, ok := tcp.Middlewares["m"]; ok {
		t.Fatal("a middleware defined differently was kept (a third, equal definition must not bring it back)")
	}
	if s := tcp.Services["s"]; s == nil || len(s.LoadBalancer.Servers) != 3 || tcp.Routers["r"] == nil {
		t.Fatalf("servers not pooled or router lost: %+v", tcp)
	}
	if len(problems) != 1 {
		t.Fatalf("problems %+v, want one conflict", problems)
	}
	p := problems[0]
	if p.SourceID != "c1" || p.Resource != (Resource{KindMiddleware, "m"}) || p.DisablesRouter ||
		!strings.Contains(p.Message, `tcp middleware "m" is defined differently by container "c0" and container "c1" and container "c2"; dropping it`) {
		t.Fatalf("conflict %+v", p)
	}
	if got := definedBy[Resource{KindMiddleware, "m"}]; !reflect.DeepEqual(got, []string{"c0", "c1", "c2"}) {
		t.Fatalf("definedBy %v", got)
	}
	if tcp.Routers == nil || tcp.Services == nil || tcp.Middlewares == nil {
		t.Fatal("nil map in the result")
	}
}

// MergeSources leaves its inputs as they were, so that a provider may keep
// them from one build to the next: pooling copies the service.
func TestMergeSourcesLeavesSourcesAlone(t *testing.T) {
	src := func(id string, addrs ...string) Source {
		return Source{ID: id, TCP: &config.TCPConfiguration{
			Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s"}},
			Services: map[string]*config.TCPService{"s": lb(addrs...)},
		}}
	}
	sources := []Source{src("a", "a:1"), src("b", "b:1", "a:1"), src("c", "c:1", "c:1")}
	tcp, _, _ := MergeSources(sources)
	var got []string
	for _, s := range tcp.Services["s"].LoadBalancer.Servers {
		got = append(got, s.Address)
	}
	if !reflect.DeepEqual(got, []string{"a:1", "b:1", "c:1"}) {
		t.Fatalf("pooled servers %v, want a:1 b:1 c:1", got)
	}
	for i, want := range [][]string{{"a:1"}, {"b:1", "a:1"}, {"c:1", "c:1"}} {
		var have []string
		for _, s := range sources[i].TCP.Services["s"].LoadBalancer.Servers {
			have = append(have, s.Address)
		}
		if !reflect.DeepEqual(have, want) {
			t.Errorf("source %d's servers became %v, want %v", i, have, want)
		}
	}
	if tcp.Services["s"] == sources[0].TCP.Services["s"] {
		t.Error("the pooled service is the first source's")
	}
}
