package file

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// A key that does not decode drops the resource it is in, and only that
// one, with an error naming the file, line and key; the rest of the file
// applies. In YAML and in TOML.
func TestDecodeResourcesDropsOnlyTheBadResource(t *testing.T) {
	type drop struct {
		kind, name, key string
		line            int
		msg             string
	}
	want := &config.Dynamic{
		TCP: &config.TCPConfiguration{
			Routers:  map[string]*config.TCPRouter{"good": {Rule: "HostSNI(`*`)", Service: "plain"}},
			Services: map[string]*config.TCPService{"plain": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:1"}}}}},
		},
		TLS: &config.TLSConfiguration{Options: map[string]config.TLSOptions{"modern": {MinVersion: "VersionTLS13"}}},
	}
	for _, tc := range []struct {
		ext, content string
		dropped      []drop
	}{
		{".yml", `tcp:
  routers:
    good:
      rule: "HostSNI(` + "`*`" + `)"
      service: plain
    typo:
      rule: "HostSNI(` + "`*`" + `)"
      servce: plain
  middlewares:
    limit:
      inFlightConn:
        amount: ten
  services:
    plain:
      loadBalancer:
        servers:
          - address: "127.0.0.1:1"
  serversTransports:
    newer:
      tls:
        peerCertSANs: ["a"]
tls:
  options:
    modern:
      minVersion: VersionTLS13
  certificates:
    - certFile: a.crt
      keyFil: a.key
`, []drop{
			{provider.KindRouter, "typo", "tcp.routers.typo.servce", 8, `unknown key "servce": router "typo" is dropped`},
			{provider.KindMiddleware, "limit", "tcp.middlewares.limit.inFlightConn.amount", 12, `amount must be an integer, got "ten": middleware "limit" is dropped`},
			{provider.KindServersTransport, "newer", "tcp.serversTransports.newer.tls.peerCertSANs", 21, `unknown key "peerCertSANs": serversTransport "newer" is dropped`},
			{provider.KindTLSCertificate, "0", "tls.certificates.0.keyFil", 28, `unknown key "keyFil": tls certificate "0" is dropped`},
		}},
		{".toml", `[tcp.routers.good]
  rule = "HostSNI(` + "`*`" + `)"
  service = "plain"
[tcp.routers.typo]
  rule = "HostSNI(` + "`*`" + `)"
  servce = "plain"
[tcp.middlewares.limit.inFlightConn]
  amount = "ten"
[[tcp.services.plain.loadBalancer.servers]]
  address = "127.0.0.1:1"
[tcp.serversTransports.newer.tls]
  peerCertSANs = ["a"]
[tls.options.modern]
  minVersion = "VersionTLS13"
`, []drop{
			{provider.KindRouter, "typo", "tcp.routers.typo.servce", 6, `unknown key "servce": router "typo" is dropped`},
			{provider.KindMiddleware, "limit", "tcp.middlewares.limit.inFlightConn.amount", 8, `amount must be an integer, got "ten": middleware "limit" is dropped`},
			{provider.KindServersTransport, "newer", "tcp.serversTransports.newer.tls.peerCertSANs", 12, `unknown key "peerCertSANs": serversTransport "newer" is dropped`},
		}},
	} {
		t.Run(tc.ext, func(t *testing.T) {
			d, dropped, err := DecodeResources(tc.content, tc.ext, "dyn"+tc.ext)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d, want) {
				b, _ := json.Marshal(d)
				t.Errorf("decoded %s", b)
			}
			if len(dropped) != len(tc.dropped) {
				t.Fatalf("dropped %v, want %d", dropped, len(tc.dropped))
			}
			for i, e := range dropped {
				w := tc.dropped[i]
				if e.Resource != (provider.Resource{Kind: w.kind, Name: w.name}) || e.Key != w.key || e.Line != w.line || e.Message() != w.msg ||
					e.Error() != `file "dyn`+tc.ext+`", line `+itoa(w.line)+": "+w.key+": "+w.msg {
					t.Errorf("dropped[%d]: %v (%+v %q line %d)\nwant %+v", i, e, e.Resource, e.Key, e.Line, w)
				}
			}
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A file none of whose resources decodes, or whose fault is outside any
// resource, is not applied at all, with the error decoding it whole gives:
// the file provider keeps its last configuration, as for a file that does
// not parse.
func TestDecodeResourcesWholeFileErrors(t *testing.T) {
	for _, content := range []string{
		"tcp:\n  routers:\n    r:\n      rulez: oops\n",
		"tcp:\n  routerz:\n    r:\n      rule: x\n  routers:\n    s:\n      rule: y\n",
		"tcp:\n  routers: [1]\n",
		"tcp: {\n",
	} {
		d, dropped, err := DecodeResources(content, ".yml", "dyn.yml")
		if err == nil || d != nil || dropped != nil {
			t.Errorf("%q: %v, %v, %v: want the whole file in error", content, d, dropped, err)
		}
		_, whole := DecodeContent(content, ".yml", "dyn.yml")
		if err.Error() != whole.Error() {
			t.Errorf("%q: error %q, want DecodeContent's %q", content, err, whole)
		}
	}
}

// Traefik v3's forms decode from a file: ipWhiteList, an empty healthCheck,
// unhealthyInterval, weighted healthCheck: {}, a transport's tls.spiffe.
func TestDecodeTraefikForms(t *testing.T) {
	u := config.Duration(5 * time.Second)
	want := &config.TCPConfiguration{
		Services: map[string]*config.TCPService{
			"w": {Weighted: &config.TCPWeightedRoundRobin{HealthCheck: &config.TCPWeightedHealthCheck{}, Services: []config.TCPWRRService{{Name: "a"}}}},
			"a": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:1"}}, HealthCheck: &config.TCPHealthCheck{}}},
			"b": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:2"}}, HealthCheck: &config.TCPHealthCheck{Interval: config.Duration(time.Minute), UnhealthyInterval: &u}}},
		},
		Middlewares:       map[string]*config.TCPMiddleware{"old": {IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.1"}}}},
		ServersTransports: map[string]*config.TCPServersTransport{"workload": {TLS: &config.TLSClientConfig{Spiffe: &config.SpiffeTransport{IDs: []string{"spiffe://example.org/db"}}}}},
	}
	for _, tc := range []struct{ ext, content string }{
		{".yml", `tcp:
  services:
    w:
      weighted:
        healthCheck: {}
        services:
          - name: a
    a:
      loadBalancer:
        servers:
          - address: "127.0.0.1:1"
        healthCheck: {}
    b:
      loadBalancer:
        servers:
          - address: "127.0.0.1:2"
        healthCheck:
          interval: 1m
          unhealthyInterval: 5s
  middlewares:
    old:
      ipWhiteList:
        sourceRange: ["127.0.0.1"]
  serversTransports:
    workload:
      tls:
        spiffe:
          ids: ["spiffe://example.org/db"]
`},
		{".toml", `[tcp.services.w.weighted]
  [tcp.services.w.weighted.healthCheck]
  [[tcp.services.w.weighted.services]]
    name = "a"
[tcp.services.a.loadBalancer]
  [[tcp.services.a.loadBalancer.servers]]
    address = "127.0.0.1:1"
  [tcp.services.a.loadBalancer.healthCheck]
[tcp.services.b.loadBalancer]
  [[tcp.services.b.loadBalancer.servers]]
    address = "127.0.0.1:2"
  [tcp.services.b.loadBalancer.healthCheck]
    interval = "1m"
    unhealthyInterval = "5s"
[tcp.middlewares.old.ipWhiteList]
  sourceRange = ["127.0.0.1"]
[tcp.serversTransports.workload.tls.spiffe]
  ids = ["spiffe://example.org/db"]
`},
	} {
		t.Run(tc.ext, func(t *testing.T) {
			d, err := DecodeContent(tc.content, tc.ext, "dyn"+tc.ext)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d.TCP, want) {
				b, _ := json.Marshal(d.TCP)
				t.Fatalf("decoded %s", b)
			}
		})
	}
}

// The file provider applies what decodes and reports each dropped resource
// as a problem; a file in which nothing decodes keeps the provider's last
// configuration (an error), as a file that does not parse does.
func TestLoadAppliesTheRestOfAFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dyn.yml")
	content := "tcp:\n  routers:\n    good:\n      rule: \"HostSNI(`*`)\"\n      service: s\n    typo:\n      rule: \"HostSNI(`*`)\"\n      servce: s\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	p := mustNew(t, &config.FileProvider{Filename: path}, provider.Options{})
	m := p.Load()
	if m.Err != nil || m.Configuration.TCP.Routers["good"] == nil || m.Configuration.TCP.Routers["typo"] != nil {
		t.Fatalf("Load: err %v, configuration %+v", m.Err, m.Configuration)
	}
	want := `file "` + path + `", line 8: tcp.routers.typo.servce: unknown key "servce": router "typo" is dropped`
	if len(m.Problems) != 1 || m.Problems[0] != want {
		t.Fatalf("problems %q, want [%q]", m.Problems, want)
	}
	if err := os.WriteFile(path, []byte("tcp:\n  routers:\n    typo:\n      servce: s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := p.Load(); m.Err == nil || !strings.Contains(m.Err.Error(), "servce") {
		t.Fatalf("nothing decodes: err %v, want the file in error", m.Err)
	}
}

// No content panics DecodeResources; what decodes whole is what
// DecodeContent gives; otherwise only resources are dropped, each placed
// on a key of the file.
func FuzzDecodeResources(f *testing.F) {
	f.Add("tcp:\n  routers:\n    r:\n      rule: x\n    s:\n      rulez: y\n", ".yml")
	f.Add("[tcp.routers.r]\nrule = \"x\"\n[tcp.routers.s]\nrulez = 1\n", ".toml")
	f.Add("tls:\n  certificates:\n    - certFile: a\n    - nope: b\n", ".yml")
	f.Add("[[tls.certificates]]\ncertFile = \"a\"\n[[tls.certificates]]\nnope = 1\n", ".toml")
	f.Add("tcp:\n  services:\n    s: {loadBalancer: {servers: [{address: a}], healthCheck: {}}}\n    t: {weighted: {bogus: 1}}\n", ".yml")
	f.Fuzz(func(t *testing.T, content, ext string) {
		if ext != ".yml" && ext != ".toml" {
			ext = ".yml"
		}
		d, dropped, err := DecodeResources(content, ext, "fuzz"+ext)
		whole, werr := DecodeContent(content, ext, "fuzz"+ext)
		switch {
		case werr == nil && (err != nil || len(dropped) > 0 || !reflect.DeepEqual(d, whole)):
			t.Fatalf("decodes whole, but DecodeResources gives %+v, %v, %v", d, dropped, err)
		case werr != nil && err == nil && len(dropped) == 0:
			t.Fatalf("does not decode whole (%v), but DecodeResources drops nothing", werr)
		case err != nil && (d != nil || dropped != nil):
			t.Fatalf("error %v with a result", err)
		case err == nil && d == nil:
			t.Fatal("nil configuration without error")
		}
		for _, e := range dropped {
			if e.Resource.Kind == "" || e.Key == "" || !strings.Contains(e.Error(), "fuzz"+ext) {
				t.Fatalf("dropped %v (%+v, key %q): want it to name its resource, key and file", e, e.Resource, e.Key)
			}
		}
	})
}
