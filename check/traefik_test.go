package check

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider/consulcatalog"
	"github.com/tollgate-proxy/tollgate/provider/docker"
)

// The TCP cases of Traefik v3's provider tests (pkg/provider/docker and
// pkg/provider/consulcatalog, config_test.go), transcribed as facts: the
// labels or tags of a service named "Test", and the TCP configuration
// Traefik builds from them. Each goes through the provider's Build with
// Traefik's inputs (and must give Traefik's configuration), and through
// `tollgate check` against the same Build (and must give the same
// configuration, statuses and problems).

type traefikCase struct {
	desc string
	// labels per instance; one entry per container or catalog instance
	labels []map[string]string
	want   *config.TCPConfiguration
}

func svcAt(addrs ...string) *config.TCPService {
	s := &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{}}
	for _, a := range addrs {
		s.LoadBalancer.Servers = append(s.LoadBalancer.Servers, config.TCPServer{Address: a})
	}
	return s
}

var traefikMiddlewaresInTCPRouter = traefikCase{
	desc: "Middlewares used in TCP router",
	labels: []map[string]string{{
		"traefik.tcp.routers.Test.rule":                               "HostSNI(`foo.bar`)",
		"traefik.tcp.middlewares.Middleware1.ipallowlist.sourcerange": "foobar, fiibar",
		"traefik.tcp.routers.Test.middlewares":                        "Middleware1",
	}},
	want: &config.TCPConfiguration{
		Routers:     map[string]*config.TCPRouter{"Test": {Service: "Test", Rule: "HostSNI(`foo.bar`)", Middlewares: []string{"Middleware1"}}},
		Middlewares: map[string]*config.TCPMiddleware{"Middleware1": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"foobar", "fiibar"}}}},
		Services:    map[string]*config.TCPService{"Test": svcAt("127.0.0.1:80")},
	},
}

var traefikWithoutRule = traefikCase{
	desc:   "tcp with label without rule",
	labels: []map[string]string{{"traefik.tcp.routers.foo.tls": "true"}},
	want:   &config.TCPConfiguration{Services: map[string]*config.TCPService{"Test": svcAt("127.0.0.1:80")}},
}

var traefikWithPort = traefikCase{
	desc: "tcp with label and port",
	labels: []map[string]string{{
		"traefik.tcp.routers.foo.rule":                      "HostSNI(`foo.bar`)",
		"traefik.tcp.routers.foo.tls.options":               "foo",
		"traefik.tcp.services.foo.loadbalancer.server.port": "8080",
	}},
	want: &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"foo": {Service: "foo", Rule: "HostSNI(`foo.bar`)", TLS: &config.RouterTCPTLSConfig{Options: "foo"}}},
		Services: map[string]*config.TCPService{"foo": svcAt("127.0.0.1:8080")},
	},
}

// The TCP services and routers of Traefik v3's own label test
// (pkg/config/label/label_test.go, TestDecodeConfiguration): a servers
// transport named beside the deprecated terminationDelay and proxyProtocol,
// and tls.options on the routers. Issue 16's acceptance: they decode and
// apply.
var traefikServersTransport = traefikCase{
	desc: "v3 label test: serversTransport, deprecated terminationDelay and proxyProtocol, tls.options",
	labels: []map[string]string{{
		"traefik.tcp.routers.Router0.rule":                                 "HostSNI(`foo.bar`)",
		"traefik.tcp.routers.Router0.service":                              "Service0",
		"traefik.tcp.routers.Router0.tls.passthrough":                      "false",
		"traefik.tcp.routers.Router0.tls.options":                          "foo",
		"traefik.tcp.routers.Router1.rule":                                 "HostSNI(`foo.bar`)",
		"traefik.tcp.routers.Router1.service":                              "Service1",
		"traefik.tcp.routers.Router1.tls.options":                          "foo",
		"traefik.tcp.services.Service0.loadbalancer.server.Port":           "42",
		"traefik.tcp.services.Service0.loadbalancer.TerminationDelay":      "42",
		"traefik.tcp.services.Service0.loadbalancer.proxyProtocol.version": "1",
		"traefik.tcp.services.Service0.loadbalancer.serversTransport":      "foo",
		"traefik.tcp.services.Service1.loadbalancer.server.Port":           "42",
		"traefik.tcp.services.Service1.loadbalancer.server.tls":            "true",
		"traefik.tcp.services.Service1.loadbalancer.TerminationDelay":      "42",
		"traefik.tcp.services.Service1.loadbalancer.proxyProtocol":         "true",
		"traefik.tcp.services.Service1.loadbalancer.serversTransport":      "foo@file",
	}},
	want: func() *config.TCPConfiguration {
		delay := 42
		return &config.TCPConfiguration{
			Routers: map[string]*config.TCPRouter{
				"Router0": {Service: "Service0", Rule: "HostSNI(`foo.bar`)", TLS: &config.RouterTCPTLSConfig{Options: "foo"}},
				"Router1": {Service: "Service1", Rule: "HostSNI(`foo.bar`)", TLS: &config.RouterTCPTLSConfig{Options: "foo"}},
			},
			Services: map[string]*config.TCPService{
				"Service0": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:42"}},
					TerminationDelay: &delay, ProxyProtocol: &config.ProxyProtocol{Version: 1}, ServersTransport: "foo"}},
				"Service1": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:42", TLS: true}},
					TerminationDelay: &delay, ProxyProtocol: &config.ProxyProtocol{Version: 2}, ServersTransport: "foo@file"}},
			},
		}
	}(),
}

var dockerTraefikCases = []traefikCase{
	traefikMiddlewaresInTCPRouter,
	traefikServersTransport,
	{
		desc:   "tcp with label",
		labels: []map[string]string{{"traefik.tcp.routers.foo.rule": "HostSNI(`foo.bar`)", "traefik.tcp.routers.foo.tls": "true"}},
		want: &config.TCPConfiguration{
			Routers:  map[string]*config.TCPRouter{"foo": {Service: "Test", Rule: "HostSNI(`foo.bar`)", TLS: &config.RouterTCPTLSConfig{}}},
			Services: map[string]*config.TCPService{"Test": svcAt("127.0.0.1:80")},
		},
	},
	traefikWithoutRule,
	traefikWithPort,
	{
		desc:   "tcp with label for tcp service, with termination delay",
		labels: []map[string]string{{"traefik.tcp.services.foo.loadbalancer.server.port": "8080"}},
		want:   &config.TCPConfiguration{Services: map[string]*config.TCPService{"foo": svcAt("127.0.0.1:8080")}},
	},
}

var consulTraefikCases = []traefikCase{
	traefikMiddlewaresInTCPRouter,
	traefikServersTransport,
	traefikWithoutRule,
	traefikWithPort,
	{
		desc: "tcp with label and port and http service",
		labels: []map[string]string{
			{
				"traefik.tcp.routers.foo.rule":                               "HostSNI(`foo.bar`)",
				"traefik.tcp.routers.foo.tls":                                "true",
				"traefik.tcp.services.foo.loadbalancer.server.port":          "80",
				"traefik.http.services.Service1.loadbalancer.passhostheader": "true",
			},
			{
				"traefik.tcp.routers.foo.rule":                               "HostSNI(`foo.bar`)",
				"traefik.tcp.routers.foo.tls":                                "true",
				"traefik.tcp.services.foo.loadbalancer.server.port":          "80",
				"traefik.http.services.Service1.loadbalancer.passhostheader": "true",
			},
		},
		want: &config.TCPConfiguration{
			Routers:  map[string]*config.TCPRouter{"foo": {Service: "foo", Rule: "HostSNI(`foo.bar`)", TLS: &config.RouterTCPTLSConfig{}}},
			Services: map[string]*config.TCPService{"foo": svcAt("127.0.0.1:80", "127.0.0.2:80")},
		},
	},
	{
		desc:   "tcp with label for tcp service",
		labels: []map[string]string{{"traefik.tcp.services.foo.loadbalancer.server.port": "80"}},
		want:   &config.TCPConfiguration{Services: map[string]*config.TCPService{"foo": svcAt("127.0.0.1:80")}},
	},
	{
		desc: "two TCP service instances with one canary",
		labels: []map[string]string{
			{"traefik.tcp.routers.test.rule": "HostSNI(`foobar`)"},
			{"traefik.consulcatalog.canary": "true", "traefik.tcp.routers.test-canary.rule": "HostSNI(`canary.foobar`)"},
		},
		want: &config.TCPConfiguration{
			Routers: map[string]*config.TCPRouter{
				"test":        {Service: "Test", Rule: "HostSNI(`foobar`)"},
				"test-canary": {Service: "Test-17573747155436217342", Rule: "HostSNI(`canary.foobar`)"},
			},
			Services: map[string]*config.TCPService{"Test": svcAt("127.0.0.1:80"), "Test-17573747155436217342": svcAt("127.0.0.2:80")},
		},
	},
}

func sameTCP(t *testing.T, got *config.Dynamic, want *config.TCPConfiguration) {
	t.Helper()
	var g *config.TCPConfiguration
	if got != nil {
		g = got.TCP
	}
	gj, _ := json.MarshalIndent(g, "", "  ")
	wj, _ := json.MarshalIndent(want, "", "  ")
	if string(gj) != string(wj) {
		t.Errorf("configuration:\n got %s\nwant (Traefik) %s", gj, wj)
	}
}

func TestTraefikDockerCases(t *testing.T) {
	for _, tc := range dockerTraefikCases {
		t.Run(tc.desc, func(t *testing.T) {
			// Traefik's container: "Test" on the bridge at 127.0.0.1, exposing 80/tcp.
			c := docker.Container{ID: "Test", Name: "Test", Labels: tc.labels[0], State: "running",
				Networks: map[string]string{"bridge": "127.0.0.1"}, Ports: []docker.Port{{Port: 80, Proto: "tcp"}}}
			sameTCP(t, docker.Build([]docker.Container{c}, docker.Options{ExposedByDefault: true}).Configuration, tc.want)

			path := filepath.Join(t.TempDir(), "Test.labels")
			var lines []string
			for k, v := range tc.labels[0] {
				lines = append(lines, k+"="+v)
			}
			sort.Strings(lines)
			content := ""
			for _, l := range lines {
				content += l + "\n"
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			want, eps := providerView([]docker.Container{labelContainer("Test", tc.labels[0])}, nil, DefaultOptions())
			sameViews(t, want, checkView(t, []string{path}, Options{EntryPoints: eps, ExposedByDefault: true, Prefix: "traefik"}))
		})
	}
}

func TestTraefikConsulCases(t *testing.T) {
	for _, tc := range consulTraefikCases {
		t.Run(tc.desc, func(t *testing.T) {
			var insts, agent []consulcatalog.Instance
			var defs []definition
			for i, lbls := range tc.labels {
				var tags []string
				for k, v := range lbls {
					tags = append(tags, k+"="+v)
				}
				sort.Strings(tags)
				id, addr := fmt.Sprint(i+1), fmt.Sprintf("127.0.0.%d", i+1)
				insts = append(insts, consulcatalog.Instance{ID: id, Node: "Node1", Name: "Test", Address: addr, Port: 80, Tags: tags, Status: "passing"})
				d := definition{ID: id, Name: "Test", Address: addr, Port: 80, Tags: tags}
				defs = append(defs, d)
				agent = append(agent, agentInstance(d))
			}
			sameTCP(t, consulcatalog.Build(insts, consulcatalog.Options{Prefix: "traefik", ExposedByDefault: true, StrictChecks: consulcatalog.DefaultStrictChecks()}).Configuration, tc.want)

			want, eps := providerView(nil, agent, DefaultOptions())
			sameViews(t, want, checkView(t, []string{writeDefinitions(t, defs)}, Options{EntryPoints: eps, ExposedByDefault: true, Prefix: "traefik"}))
		})
	}
}
