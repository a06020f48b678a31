package provider

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
)

// Traefik's aggregator rules for the tls section and the servers
// transports (docs/reference/tls.md): options and stores qualified but `default`,
// certificates pooled, `default` defined twice left out with a problem.
func TestMergeTLSAndServersTransports(t *testing.T) {
	cert := func(name string, stores ...string) *config.CertAndStores {
		return &config.CertAndStores{Certificate: config.Certificate{CertFile: config.FileOrContent(name + ".crt"), KeyFile: config.FileOrContent(name + ".key")}, Stores: stores}
	}
	opts := func(min string) config.TLSOptions { return config.TLSOptions{MinVersion: min} }
	lbWith := func(st string) *config.TCPService {
		return &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{ServersTransport: st, Servers: []config.TCPServer{{Address: "10.0.0.1:5432", TLS: true}}}}
	}
	router := func(tls *config.RouterTCPTLSConfig) *config.TCPRouter {
		return &config.TCPRouter{Rule: "HostSNI(`db.example`)", Service: "s", TLS: tls}
	}
	tests := []struct {
		name     string
		in       map[string]*config.Dynamic
		want     *config.TCPConfiguration
		problems []string
	}{{
		name: "no tls anywhere: no tls section, no transports",
		in:   map[string]*config.Dynamic{"file": {TCP: &config.TCPConfiguration{Services: map[string]*config.TCPService{"s": lbWith("")}}}},
		want: &config.TCPConfiguration{Routers: map[string]*config.TCPRouter{}, Middlewares: map[string]*config.TCPMiddleware{},
			Services: map[string]*config.TCPService{"s@file": lbWith("")}},
	}, {
		name: "options qualified but default; stores likewise; certificates pooled",
		in: map[string]*config.Dynamic{
			"file": {TLS: &config.TLSConfiguration{
				Certificates: []*config.CertAndStores{cert("a"), cert("b", "default")},
				Options:      map[string]config.TLSOptions{"default": opts("VersionTLS12"), "mtls": opts("VersionTLS13")},
				Stores:       map[string]config.TLSStore{"default": {DefaultCertificate: &config.Certificate{CertFile: "d.crt", KeyFile: "d.key"}}, "other": {}},
			}},
			"kubernetescrd": {TLS: &config.TLSConfiguration{
				Certificates: []*config.CertAndStores{cert("c")},
				Options:      map[string]config.TLSOptions{"mtls": opts("VersionTLS11")},
			}},
		},
		want: &config.TCPConfiguration{Routers: map[string]*config.TCPRouter{}, Services: map[string]*config.TCPService{}, Middlewares: map[string]*config.TCPMiddleware{},
			TLS: &config.TLSConfiguration{
				Certificates: []*config.CertAndStores{cert("a"), cert("b", "default"), cert("c")},
				Options:      map[string]config.TLSOptions{"default": opts("VersionTLS12"), "mtls@file": opts("VersionTLS13"), "mtls@kubernetescrd": opts("VersionTLS11")},
				Stores:       map[string]config.TLSStore{"default": {DefaultCertificate: &config.Certificate{CertFile: "d.crt", KeyFile: "d.key"}}, "other@file": {}},
			}},
	}, {
		name: "no provider defines default options: empty default is there",
		in:   map[string]*config.Dynamic{"file": {TLS: &config.TLSConfiguration{Certificates: []*config.CertAndStores{cert("a")}}}},
		want: &config.TCPConfiguration{Routers: map[string]*config.TCPRouter{}, Services: map[string]*config.TCPService{}, Middlewares: map[string]*config.TCPMiddleware{},
			TLS: &config.TLSConfiguration{Certificates: []*config.CertAndStores{cert("a")}, Options: map[string]config.TLSOptions{"default": {}}, Stores: map[string]config.TLSStore{}}},
	}, {
		name: "default options and store in two providers: left out, two problems",
		in: map[string]*config.Dynamic{
			"file":   {TLS: &config.TLSConfiguration{Options: map[string]config.TLSOptions{"default": opts("VersionTLS12")}, Stores: map[string]config.TLSStore{"default": {}}}},
			"consul": {TLS: &config.TLSConfiguration{Options: map[string]config.TLSOptions{"default": opts("VersionTLS13"), "x": {}}, Stores: map[string]config.TLSStore{"default": {}}}},
		},
		want: &config.TCPConfiguration{Routers: map[string]*config.TCPRouter{}, Services: map[string]*config.TCPService{}, Middlewares: map[string]*config.TCPMiddleware{},
			TLS: &config.TLSConfiguration{Options: map[string]config.TLSOptions{"x@consul": {}}, Stores: map[string]config.TLSStore{}}},
		problems: []string{
			`TLS options "default" defined in several providers (consul, file): none of them applies, and the routers that use them are disabled`,
			`TLS store "default" defined in several providers (consul, file): none of them applies`,
		},
	}, {
		name: "servers transports and the references to them and to tls options",
		in: map[string]*config.Dynamic{"docker": {TCP: &config.TCPConfiguration{
			Routers: map[string]*config.TCPRouter{
				"own":         router(&config.RouterTCPTLSConfig{Options: "mtls"}),
				"crossing":    router(&config.RouterTCPTLSConfig{Options: "mtls@file"}),
				"default":     router(&config.RouterTCPTLSConfig{Options: "default", CertResolver: "le", Domains: []config.Domain{{Main: "db.example"}}}),
				"passthrough": router(&config.RouterTCPTLSConfig{Passthrough: true}),
			},
			Services: map[string]*config.TCPService{"s": lbWith("tr"), "x": lbWith("tr@file")},
			ServersTransports: map[string]*config.TCPServersTransport{
				"tr": {DialTimeout: config.Duration(5e9), TLS: &config.TLSClientConfig{ServerName: "db.internal"}},
			},
		}}},
		want: &config.TCPConfiguration{
			Routers: map[string]*config.TCPRouter{
				"own@docker":         {Rule: "HostSNI(`db.example`)", Service: "s@docker", TLS: &config.RouterTCPTLSConfig{Options: "mtls@docker"}},
				"crossing@docker":    {Rule: "HostSNI(`db.example`)", Service: "s@docker", TLS: &config.RouterTCPTLSConfig{Options: "mtls@file"}},
				"default@docker":     {Rule: "HostSNI(`db.example`)", Service: "s@docker", TLS: &config.RouterTCPTLSConfig{Options: "default", CertResolver: "le", Domains: []config.Domain{{Main: "db.example"}}}},
				"passthrough@docker": {Rule: "HostSNI(`db.example`)", Service: "s@docker", TLS: &config.RouterTCPTLSConfig{Passthrough: true}},
			},
			Services:    map[string]*config.TCPService{"s@docker": lbWith("tr@docker"), "x@docker": lbWith("tr@file")},
			Middlewares: map[string]*config.TCPMiddleware{},
			ServersTransports: map[string]*config.TCPServersTransport{
				"tr@docker": {DialTimeout: config.Duration(5e9), TLS: &config.TLSClientConfig{ServerName: "db.internal"}},
			},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := deepCopyDynamic(t, tt.in)
			got, problems := MergeReport(tt.in)
			for name := range got.Routers {
				if len(got.Routers[name].EntryPoints) == 0 {
					got.Routers[name].EntryPoints = nil
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("merged\n%s\nwant\n%s", dump(t, got), dump(t, tt.want))
			}
			if !reflect.DeepEqual(problems, tt.problems) {
				t.Errorf("problems %q, want %q", problems, tt.problems)
			}
			if !reflect.DeepEqual(deepCopyDynamic(t, tt.in), before) {
				t.Errorf("MergeReport modified its input")
			}
			// Merge's result must not share what it rewrote with the input.
			for _, r := range got.Routers {
				if r.TLS != nil {
					r.TLS.Options = "changed"
				}
			}
			for _, s := range got.Services {
				if s.LoadBalancer != nil && s.LoadBalancer.ServersTransport != "" {
					s.LoadBalancer.ServersTransport = "changed"
				}
			}
			for _, c := range tlsCerts(got) {
				c.CertFile = "changed"
			}
			if !reflect.DeepEqual(deepCopyDynamic(t, tt.in), before) {
				t.Errorf("MergeReport's result shares rewritten values with its input")
			}
		})
	}
}

func tlsCerts(c *config.TCPConfiguration) []*config.CertAndStores {
	if c.TLS == nil {
		return nil
	}
	return c.TLS.Certificates
}

// The watcher logs a merge problem once and keeps it for MergeProblems.
func TestWatcherReportsMergeProblems(t *testing.T) {
	var got []*config.TCPConfiguration
	var log strings.Builder
	w := &Watcher{Apply: func(c *config.TCPConfiguration) { got = append(got, c) }}
	w.Log = w.Log.Output(&log)
	w.init()
	def := &config.Dynamic{TLS: &config.TLSConfiguration{Options: map[string]config.TLSOptions{"default": {}}}}
	w.record(Message{ProviderName: "file", Configuration: def})
	w.record(Message{ProviderName: "docker", Configuration: def})
	w.applyMerged()
	w.applyMerged()
	if p := w.MergeProblems(); len(p) != 1 || !strings.Contains(p[0], `"default" defined in several providers (docker, file)`) {
		t.Fatalf("MergeProblems %q", p)
	}
	if n := strings.Count(log.String(), "defined in several providers"); n != 1 {
		t.Fatalf("logged the problem %d times, want once:\n%s", n, log.String())
	}
	if len(got) != 1 || got[0].TLS == nil || len(got[0].TLS.Options) != 0 {
		t.Fatalf("applied %+v", got)
	}
}

func deepCopyDynamic(t *testing.T, in map[string]*config.Dynamic) string {
	t.Helper()
	return dump(t, in)
}

func dump(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
