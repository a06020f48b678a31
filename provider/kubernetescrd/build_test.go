package kubernetescrd

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tollgate-proxy/tollgate/config"
)

// fakeCluster backs build's cluster interface with maps keyed "ns/name".
type fakeCluster struct {
	services map[string]*corev1.Service
	slices   map[string][]*discoveryv1.EndpointSlice
}

func (f fakeCluster) Service(ns, name string) (*corev1.Service, bool) {
	s, ok := f.services[ns+"/"+name]
	return s, ok
}

func (f fakeCluster) EndpointSlices(ns, svc string) []*discoveryv1.EndpointSlice {
	return f.slices[ns+"/"+svc]
}

func svc(ns, name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.0.0.10", Ports: ports},
	}
}

func sport(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolTCP}
}

type ep struct {
	addr  string
	ready *bool
}

var (
	yes = ptr(true)
	no  = ptr(false)
)

func ptr[T any](v T) *T { return &v }

func slice(ports map[string]int32, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}
	for name, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(p)})
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}})
	}
	return s
}

func inflight(ns, name string, amount int64) MiddlewareTCP {
	return MiddlewareTCP{Namespace: ns, Name: name, Spec: config.TCPMiddleware{InFlightConn: &config.TCPInFlightConn{Amount: amount}}}
}

func route(ns, name, match string, mws []ObjectReference, svcs ...ServiceTCP) IngressRouteTCP {
	return IngressRouteTCP{Namespace: ns, Name: name, Spec: IngressRouteTCPSpec{
		Routes: []RouteTCP{{Match: match, Middlewares: mws, Services: svcs}},
	}}
}

func port(p int) intstr.IntOrString { return intstr.FromInt32(int32(p)) }

const (
	anyKey = "673acf455cb2dab0b43a" // sha256("HostSNI(`*`)"), first 10 bytes
	sniKey = "d2eb301e4c45d36a707a" // sha256("HostSNI(`db.example.com`)")
)

func lb(addrs ...string) *config.TCPService {
	s := &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{}}}
	for _, a := range addrs {
		s.LoadBalancer.Servers = append(s.LoadBalancer.Servers, config.TCPServer{Address: a})
	}
	return s
}

func TestBuild(t *testing.T) {
	dbCluster := fakeCluster{
		services: map[string]*corev1.Service{"default/db": svc("default", "db", sport("", 5432))},
		slices: map[string][]*discoveryv1.EndpointSlice{"default/db": {
			slice(map[string]int32{"": 4000}, ep{"127.0.0.1", yes}, ep{"10.1.0.2", no}, ep{"10.1.0.3", nil}),
		}},
	}
	multiPort := fakeCluster{
		services: map[string]*corev1.Service{
			"db/pg": svc("db", "pg", sport("sql", 5432), sport("metrics", 9187)),
		},
		slices: map[string][]*discoveryv1.EndpointSlice{"db/pg": {
			slice(map[string]int32{"sql": 15432, "metrics": 19187}, ep{"10.1.0.2", yes}),
			slice(map[string]int32{"sql": 15432, "metrics": 19187}, ep{"10.1.0.1", yes}, ep{"10.1.0.2", yes}),
		}},
	}

	tests := []struct {
		name     string
		mws      []MiddlewareTCP
		routes   []IngressRouteTCP
		k        fakeCluster
		opt      options
		want     *config.TCPConfiguration
		problems []string // substrings, one per problem, in order
	}{
		{
			name:   "design example: inFlightConn amount 10 on HostSNI(*)",
			mws:    []MiddlewareTCP{inflight("default", "test-inflightconn", 10)},
			routes: []IngressRouteTCP{route("default", "db", "HostSNI(`*`)", []ObjectReference{{Name: "test-inflightconn"}}, ServiceTCP{Name: "db", Port: port(5432)})},
			k:      dbCluster,
			want: &config.TCPConfiguration{
				Routers: map[string]*config.TCPRouter{"default-db-" + anyKey: {
					Rule: "HostSNI(`*`)", Service: "default-db-" + anyKey, Middlewares: []string{"default-test-inflightconn"},
				}},
				Services:    map[string]*config.TCPService{"default-db-" + anyKey: lb("10.1.0.3:4000", "127.0.0.1:4000")},
				Middlewares: map[string]*config.TCPMiddleware{"default-test-inflightconn": {InFlightConn: &config.TCPInFlightConn{Amount: 10}}},
			},
		},
		{
			name: "cross-namespace and cross-provider middleware references (allowCrossNamespace)",
			opt:  options{allowCrossNamespace: true},
			mws:  []MiddlewareTCP{inflight("shared", "limit", 5), {Namespace: "default", Name: "allow", Spec: config.TCPMiddleware{IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.0/8"}}}}},
			routes: []IngressRouteTCP{route("default", "db", "HostSNI(`*`)",
				[]ObjectReference{{Name: "limit", Namespace: "shared"}, {Name: "allow"}, {Name: "audit@file"}},
				ServiceTCP{Name: "db", Port: port(5432)})},
			k: dbCluster,
			want: &config.TCPConfiguration{
				Routers: map[string]*config.TCPRouter{"default-db-" + anyKey: {
					Rule: "HostSNI(`*`)", Service: "default-db-" + anyKey, Middlewares: []string{"shared-limit", "default-allow", "audit@file"},
				}},
				Services: map[string]*config.TCPService{"default-db-" + anyKey: lb("10.1.0.3:4000", "127.0.0.1:4000")},
				Middlewares: map[string]*config.TCPMiddleware{
					"shared-limit":  {InFlightConn: &config.TCPInFlightConn{Amount: 5}},
					"default-allow": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.0/8"}}},
				},
			},
		},
		{
			name: "without allowCrossNamespace, a middleware of another namespace: the route is not served (fail closed); a Service of another namespace is refused; a namespace-name@kubernetescrd transport is refused",
			mws:  []MiddlewareTCP{inflight("shared", "limit", 5)},
			routes: []IngressRouteTCP{
				route("default", "db", "HostSNI(`*`)", []ObjectReference{{Name: "limit", Namespace: "shared"}}, ServiceTCP{Name: "db", Port: port(5432)}),
				route("web", "x", "HostSNI(`*`)", nil, ServiceTCP{Name: "db", Namespace: "default", Port: port(5432)}),
				route("default", "y", "HostSNI(`*`)", nil, ServiceTCP{Name: "db", Port: port(5432), ServersTransport: "other-st@kubernetescrd"}),
			},
			k: dbCluster,
			want: &config.TCPConfiguration{
				Routers: map[string]*config.TCPRouter{
					"web-x-" + anyKey:     {Rule: "HostSNI(`*`)", Service: "web-x-" + anyKey},
					"default-y-" + anyKey: {Rule: "HostSNI(`*`)", Service: "default-y-" + anyKey},
				},
				Services:    map[string]*config.TCPService{},
				Middlewares: map[string]*config.TCPMiddleware{"shared-limit": {InFlightConn: &config.TCPInFlightConn{Amount: 5}}},
			},
			problems: []string{
				`IngressRouteTCP "default/db" routes[0]: MiddlewareTCP "shared/limit" is not in the IngressRouteTCP's namespace "default" (set providers.kubernetesCRD.allowCrossNamespace to allow it): the route is not served`,
				`IngressRouteTCP "default/y" routes[0]: serversTransport "other-st@kubernetescrd": the namespace-name@kubernetescrd form`,
				`IngressRouteTCP "web/x" routes[0]: Service "default/db" is not in the IngressRouteTCP's namespace "web"`,
			},
		},
		{
			name:   "missing middleware: router kept (the proxy disables it), problem names both resources",
			opt:    options{allowCrossNamespace: true},
			routes: []IngressRouteTCP{route("default", "db", "HostSNI(`*`)", []ObjectReference{{Name: "nope", Namespace: "other"}}, ServiceTCP{Name: "db", Port: port(5432)})},
			k:      dbCluster,
			want: &config.TCPConfiguration{
				Routers: map[string]*config.TCPRouter{"default-db-" + anyKey: {
					Rule: "HostSNI(`*`)", Service: "default-db-" + anyKey, Middlewares: []string{"other-nope"},
				}},
				Services:    map[string]*config.TCPService{"default-db-" + anyKey: lb("10.1.0.3:4000", "127.0.0.1:4000")},
				Middlewares: map[string]*config.TCPMiddleware{},
			},
			problems: []string{`IngressRouteTCP "default/db" routes[0]: MiddlewareTCP "other/nope" not found`},
		},
		{
			name:   "missing service: router kept without its service",
			routes: []IngressRouteTCP{route("default", "db", "HostSNI(`*`)", nil, ServiceTCP{Name: "gone", Port: port(5432)})},
			k:      dbCluster,
			want: &config.TCPConfiguration{
				Routers:     map[string]*config.TCPRouter{"default-db-" + anyKey: {Rule: "HostSNI(`*`)", Service: "default-db-" + anyKey}},
				Services:    map[string]*config.TCPService{},
				Middlewares: map[string]*config.TCPMiddleware{},
			},
			problems: []string{`IngressRouteTCP "default/db" routes[0]: Service "default/gone" port 5432: service not found`},
		},
		{
			name:   "unknown port and no ready endpoints",
			routes: []IngressRouteTCP{route("default", "a", "HostSNI(`*`)", nil, ServiceTCP{Name: "db", Port: port(1)}), route("default", "b", "HostSNI(`*`)", nil, ServiceTCP{Name: "db", Port: port(5432)})},
			k: fakeCluster{
				services: map[string]*corev1.Service{"default/db": svc("default", "db", sport("", 5432))},
				slices:   map[string][]*discoveryv1.EndpointSlice{"default/db": {slice(map[string]int32{"": 4000}, ep{"10.1.0.2", no})}},
			},
			want: &config.TCPConfiguration{
				Routers: map[string]*config.TCPRouter{
					"default-a-" + anyKey: {Rule: "HostSNI(`*`)", Service: "default-a-" + anyKey},
					"default-b-" + anyKey: {Rule: "HostSNI(`*`)", Service: "default-b-" + anyKey},
				},
				Services:    map[string]*config.TCPService{},
				Middlewares: map[string]*config.TCPMiddleware{},
			},
			problems: []string{
				`IngressRouteTCP "default/a" routes[0]: Service "default/db" port 1: the service has no such port (ports: 5432)`,
				`IngressRouteTCP "default/b" routes[0]: Service "default/db" port 5432: no ready endpoints`,
			},
		},
		{
			name: "several ports: by number and by name, each from its own slice port; several services weighted (one route's in another namespace: allowCrossNamespace)",
			opt:  options{allowCrossNamespace: true},
			routes: []IngressRouteTCP{
				route("db", "sql", "HostSNI(`*`)", nil, ServiceTCP{Name: "pg", Port: intstr.FromString("sql")}),
				route("db", "metrics", "HostSNI(`*`)", nil, ServiceTCP{Name: "pg", Port: port(9187)}),
				route("web", "both", "HostSNI(`*`)", nil,
					ServiceTCP{Name: "pg", Namespace: "db", Port: port(5432), Weight: ptr(3)},
					ServiceTCP{Name: "pg", Namespace: "db", Port: intstr.FromString("metrics"), NativeLB: yes, ProxyProtocol: &config.ProxyProtocol{}, TerminationDelay: ptr(50)}),
			},
			k: multiPort,
			want: &config.TCPConfiguration{
				Routers: map[string]*config.TCPRouter{
					"db-sql-" + anyKey:     {Rule: "HostSNI(`*`)", Service: "db-sql-" + anyKey},
					"db-metrics-" + anyKey: {Rule: "HostSNI(`*`)", Service: "db-metrics-" + anyKey},
					"web-both-" + anyKey:   {Rule: "HostSNI(`*`)", Service: "web-both-" + anyKey},
				},
				Services: map[string]*config.TCPService{
					"db-sql-" + anyKey:     lb("10.1.0.1:15432", "10.1.0.2:15432"),
					"db-metrics-" + anyKey: lb("10.1.0.1:19187", "10.1.0.2:19187"),
					"web-both-" + anyKey: {Weighted: &config.TCPWeightedRoundRobin{Services: []config.TCPWRRService{
						{Name: "web-both-" + anyKey + "-pg-5432", Weight: ptr(3)},
						{Name: "web-both-" + anyKey + "-pg-metrics"},
					}}},
					"web-both-" + anyKey + "-pg-5432": lb("10.1.0.1:15432", "10.1.0.2:15432"),
					"web-both-" + anyKey + "-pg-metrics": {LoadBalancer: &config.TCPServersLoadBalancer{
						Servers:          []config.TCPServer{{Address: "10.0.0.10:9187"}},
						ProxyProtocol:    &config.ProxyProtocol{Version: 2},
						TerminationDelay: ptr(50),
					}},
				},
				Middlewares: map[string]*config.TCPMiddleware{},
			},
		},
		{
			name: "passthrough: SNI route with entry points",
			routes: []IngressRouteTCP{{Namespace: "default", Name: "tls", Spec: IngressRouteTCPSpec{
				EntryPoints: []string{"tls"},
				Routes:      []RouteTCP{{Match: "HostSNI(`db.example.com`)", Priority: 7, Services: []ServiceTCP{{Name: "db", Port: port(5432)}}}},
				TLS:         &TLSTCP{Passthrough: true},
			}}},
			k: dbCluster,
			want: &config.TCPConfiguration{
				Routers: map[string]*config.TCPRouter{"default-tls-" + sniKey: {
					EntryPoints: []string{"tls"}, Rule: "HostSNI(`db.example.com`)", Priority: 7,
					Service: "default-tls-" + sniKey, TLS: &config.RouterTCPTLSConfig{Passthrough: true},
				}},
				Services:    map[string]*config.TCPService{"default-tls-" + sniKey: lb("10.1.0.3:4000", "127.0.0.1:4000")},
				Middlewares: map[string]*config.TCPMiddleware{},
			},
		},
		{
			name:   "TLS termination whose secretName is not there: the route is not served (fail closed)",
			routes: []IngressRouteTCP{{Namespace: "default", Name: "t", Spec: IngressRouteTCPSpec{Routes: []RouteTCP{{Match: "HostSNI(`*`)", Services: []ServiceTCP{{Name: "db", Port: port(5432)}}}}, TLS: &TLSTCP{SecretName: "cert"}}}},
			k:      dbCluster,
			want: &config.TCPConfiguration{
				Routers:     map[string]*config.TCPRouter{},
				Services:    map[string]*config.TCPService{},
				Middlewares: map[string]*config.TCPMiddleware{},
			},
			problems: []string{`IngressRouteTCP "default/t" routes[0]: tls.secretName: Secret "default/cert" not found: the route is not served`},
		},
		{
			name:   "TLS termination without a secretName is passed on (the default store's certificate)",
			routes: []IngressRouteTCP{{Namespace: "default", Name: "t", Spec: IngressRouteTCPSpec{Routes: []RouteTCP{{Match: "HostSNI(`*`)", Services: []ServiceTCP{{Name: "db", Port: port(5432)}}}}, TLS: &TLSTCP{}}}},
			k:      dbCluster,
			want: &config.TCPConfiguration{
				Routers:     map[string]*config.TCPRouter{"default-t-" + anyKey: {Rule: "HostSNI(`*`)", Service: "default-t-" + anyKey, TLS: &config.RouterTCPTLSConfig{}}},
				Services:    map[string]*config.TCPService{"default-t-" + anyKey: lb("10.1.0.3:4000", "127.0.0.1:4000")},
				Middlewares: map[string]*config.TCPMiddleware{},
			},
		},
		{
			name:   "negative amount past validation: middleware kept as written (the proxy disables it and its routers)",
			mws:    []MiddlewareTCP{inflight("default", "bad", -1)},
			routes: []IngressRouteTCP{{Namespace: "default", Name: "empty"}, {Namespace: "default", Name: "nomatch", Spec: IngressRouteTCPSpec{Routes: []RouteTCP{{}}}}},
			want: &config.TCPConfiguration{
				Routers:     map[string]*config.TCPRouter{},
				Services:    map[string]*config.TCPService{},
				Middlewares: map[string]*config.TCPMiddleware{"default-bad": {InFlightConn: &config.TCPInFlightConn{Amount: -1}}},
			},
			problems: []string{
				`IngressRouteTCP "default/empty": no routes`,
				`IngressRouteTCP "default/nomatch" routes[0]: empty match rule`,
			},
		},
		{
			name:   "ExternalName services are refused",
			routes: []IngressRouteTCP{route("default", "x", "HostSNI(`*`)", nil, ServiceTCP{Name: "ext", Port: port(5432)})},
			k: fakeCluster{services: map[string]*corev1.Service{"default/ext": {
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ext"},
				Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com", Ports: []corev1.ServicePort{sport("", 5432)}},
			}}},
			want: &config.TCPConfiguration{
				Routers:     map[string]*config.TCPRouter{"default-x-" + anyKey: {Rule: "HostSNI(`*`)", Service: "default-x-" + anyKey}},
				Services:    map[string]*config.TCPService{},
				Middlewares: map[string]*config.TCPMiddleware{},
			},
			problems: []string{`Service "default/ext" port 5432: ExternalName services are not allowed (providers.kubernetesCRD.allowExternalNameServices)`},
		},
		{
			name:   "allowExternalNameServices: the ExternalName's DNS name is the server",
			opt:    options{allowExternalNameServices: true},
			routes: []IngressRouteTCP{route("default", "x", "HostSNI(`*`)", nil, ServiceTCP{Name: "ext", Port: port(5432)})},
			k: fakeCluster{services: map[string]*corev1.Service{"default/ext": {
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ext"},
				Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com", Ports: []corev1.ServicePort{sport("", 5432)}},
			}}},
			want: &config.TCPConfiguration{
				Routers:     map[string]*config.TCPRouter{"default-x-" + anyKey: {Rule: "HostSNI(`*`)", Service: "default-x-" + anyKey}},
				Services:    map[string]*config.TCPService{"default-x-" + anyKey: lb("db.example.com:5432")},
				Middlewares: map[string]*config.TCPMiddleware{},
			},
		},
		{
			name: "allowEmptyServices keeps a Service with no ready endpoint (no server); nativeLBByDefault uses the cluster IP unless the route says",
			opt:  options{allowEmptyServices: true, nativeLBByDefault: true},
			routes: []IngressRouteTCP{
				route("default", "empty", "HostSNI(`*`)", nil, ServiceTCP{Name: "db", Port: port(5432), NativeLB: no}),
				route("default", "native", "HostSNI(`*`)", nil, ServiceTCP{Name: "db", Port: port(5432)}),
			},
			k: fakeCluster{services: map[string]*corev1.Service{"default/db": func() *corev1.Service {
				s := svc("default", "db", sport("", 5432))
				s.Spec.ClusterIP = "10.96.0.7"
				return s
			}()}},
			want: &config.TCPConfiguration{
				Routers: map[string]*config.TCPRouter{
					"default-empty-" + anyKey:  {Rule: "HostSNI(`*`)", Service: "default-empty-" + anyKey},
					"default-native-" + anyKey: {Rule: "HostSNI(`*`)", Service: "default-native-" + anyKey},
				},
				Services: map[string]*config.TCPService{
					"default-empty-" + anyKey:  lb(),
					"default-native-" + anyKey: lb("10.96.0.7:5432"),
				},
				Middlewares: map[string]*config.TCPMiddleware{},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := buildAll(tt.mws, tt.routes, tlsInputs{}, tt.k, tt.opt)
			if !reflect.DeepEqual(got.TCP, tt.want) {
				g, _ := json.MarshalIndent(got.TCP, "", "  ")
				w, _ := json.MarshalIndent(tt.want, "", "  ")
				t.Errorf("configuration:\n got %s\nwant %s", g, w)
			}
			if len(problems) != len(tt.problems) {
				t.Fatalf("problems = %q, want %d matching %q", problems, len(tt.problems), tt.problems)
			}
			for i, p := range problems {
				if !strings.Contains(p, tt.problems[i]) {
					t.Errorf("problem[%d] = %q, want it to contain %q", i, p, tt.problems[i])
				}
			}
		})
	}
}

// TestBuildOrderIndependent checks that build sorts its inputs and leaves
// them unmodified.
func TestBuildOrderIndependent(t *testing.T) {
	k := fakeCluster{
		services: map[string]*corev1.Service{"a/s": svc("a", "s", sport("", 1)), "b/s": svc("b", "s", sport("", 1))},
		slices: map[string][]*discoveryv1.EndpointSlice{
			"a/s": {slice(map[string]int32{"": 1}, ep{"10.0.0.2", yes}), slice(map[string]int32{"": 1}, ep{"10.0.0.1", yes})},
			"b/s": {slice(map[string]int32{"": 1}, ep{"10.0.0.3", yes})},
		},
	}
	mws := []MiddlewareTCP{inflight("b", "m", 1), inflight("a", "m", 2)}
	routes := []IngressRouteTCP{
		route("b", "r", "HostSNI(`*`)", []ObjectReference{{Name: "m"}}, ServiceTCP{Name: "s", Port: port(1)}),
		route("a", "r", "HostSNI(`*`)", []ObjectReference{{Name: "m"}, {Name: "x"}}, ServiceTCP{Name: "s", Port: port(1)}),
	}
	before, _ := json.Marshal([]any{mws, routes})
	c1, p1 := build(mws, routes, k)
	c2, p2 := build([]MiddlewareTCP{mws[1], mws[0]}, []IngressRouteTCP{routes[1], routes[0]}, k)
	if !reflect.DeepEqual(c1, c2) || !reflect.DeepEqual(p1, p2) {
		t.Fatalf("order changed the result:\n%+v %q\n%+v %q", c1.TCP, p1, c2.TCP, p2)
	}
	after, _ := json.Marshal([]any{mws, routes})
	if string(before) != string(after) {
		t.Fatal("build modified its input")
	}
	c1.TCP.Middlewares["a-m"].InFlightConn.Amount = 99
	if mws[1].Spec.InFlightConn.Amount != 2 {
		t.Fatal("result shares memory with the input")
	}
}

// TestDecodeSpec decodes specs the way the API server returns them.
func TestDecodeSpec(t *testing.T) {
	var m config.TCPMiddleware
	if err := decodeSpec(map[string]any{"inFlightConn": map[string]any{"amount": int64(10)}, "ipWhiteList": map[string]any{}}, &m); err != nil || m.InFlightConn == nil || m.InFlightConn.Amount != 10 {
		t.Fatalf("decode = %+v, %v", m.InFlightConn, err)
	}
	if err := decodeSpec(map[string]any{"inFlightConn": map[string]any{"amount": "ten"}}, &m); err == nil || !strings.Contains(err.Error(), "amount") {
		t.Fatalf("string amount: err = %v, want one naming amount", err)
	}
	var r IngressRouteTCPSpec
	err := decodeSpec(map[string]any{"routes": []any{map[string]any{"match": "HostSNI(`*`)", "services": []any{
		map[string]any{"name": "a", "port": int64(5432)}, map[string]any{"name": "b", "port": "sql"},
	}}}, "tls": map[string]any{"passthrough": true}}, &r)
	if err != nil || r.Routes[0].Services[0].Port != port(5432) || r.Routes[0].Services[1].Port != intstr.FromString("sql") || !r.TLS.Passthrough {
		t.Fatalf("decode route = %+v, %v", r, err)
	}
}
