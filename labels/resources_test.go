package labels

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
)

// A label that does not decode drops the resource it declares, and only
// that one; an error no resource owns refuses the whole input.
func TestDecodeResources(t *testing.T) {
	type drop struct{ kind, name, key, msg string }
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		want    *config.Dynamic
		dropped []drop
		err     string
	}{
		{
			name: "an unknown key, a bad value and a bad port each drop their own resource",
			labels: map[string]string{
				"traefik.tcp.routers.good.rule":                        "HostSNI(`*`)",
				"traefik.tcp.routers.good.service":                     "db",
				"traefik.tcp.routers.Typo.rule":                        "HostSNI(`*`)",
				"traefik.tcp.routers.typo.servce":                      "db", // one resource: names match case-insensitively, as paerser's
				"traefik.tcp.middlewares.lim.inflightconn.amount":      "ten",
				"traefik.tcp.middlewares.ok.ipallowlist.sourcerange":   "10.0.0.0/8",
				"traefik.tcp.services.db.loadbalancer.server.port":     "5432",
				"traefik.tcp.services.cache.loadbalancer.server.port":  "99999",
				"traefik.tls.stores.default.defaultgeneratedcert.nope": "x",
				"com.docker.compose.project":                           "shop",
			},
			want: &config.Dynamic{TCP: &config.TCPConfiguration{
				Routers:     map[string]*config.TCPRouter{"good": {Rule: "HostSNI(`*`)", Service: "db"}},
				Services:    map[string]*config.TCPService{"db": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Port: "5432"}}}}},
				Middlewares: map[string]*config.TCPMiddleware{"ok": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8"}}}},
			}},
			dropped: []drop{
				{"router", "Typo", "traefik.tcp.routers.typo.servce", "unknown key"},
				{"service", "cache", "traefik.tcp.services.cache.loadbalancer.server.port", "port must be a number from 1 to 65535"},
				{"middleware", "lim", "traefik.tcp.middlewares.lim.inflightconn.amount", `amount must be an integer, got "ten"`},
				{"tls store", "default", "traefik.tls.stores.default.defaultgeneratedcert.nope", "unknown key"},
			},
		},
		{
			name: "Traefik v3's forms decode: ipWhiteList, an empty health check",
			labels: map[string]string{
				"traefik.tcp.middlewares.old.ipwhitelist.sourcerange": "127.0.0.1",
				"traefik.tcp.services.db.loadbalancer.healthcheck":    "true",
			},
			want: &config.Dynamic{TCP: &config.TCPConfiguration{
				Services:    map[string]*config.TCPService{"db": {LoadBalancer: &config.TCPServersLoadBalancer{HealthCheck: &config.TCPHealthCheck{}}}},
				Middlewares: map[string]*config.TCPMiddleware{"old": {IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.1"}}}},
			}},
		},
		{
			name:   "a label outside any resource refuses the input",
			labels: map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)", "traefik.tcp.bogus.x": "1"},
			err:    "traefik.tcp.bogus.x",
		},
		{
			name:   "a servers transport in labels refuses the input (docs/reference/tls.md)",
			labels: map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)", "traefik.tcp.serverstransports.t.dialtimeout": "1s"},
			err:    "servers transports are not read from labels",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, dropped, err := DecodeResources(tc.labels)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(conf, tc.want) {
				t.Errorf("configuration\n%+v\nwant\n%+v", conf.TCP, tc.want.TCP)
			}
			if len(dropped) != len(tc.dropped) {
				t.Fatalf("dropped %v, want %d", dropped, len(tc.dropped))
			}
			for i, d := range dropped {
				var le *Error
				if !errors.As(d, &le) || le.Kind != tc.dropped[i].kind || le.Name != tc.dropped[i].name || le.Key != tc.dropped[i].key || !strings.Contains(le.Err.Error(), tc.dropped[i].msg) {
					t.Errorf("dropped[%d] = %#v, want %+v", i, d, tc.dropped[i])
				}
			}
		})
	}
}
