package provider

import (
	"reflect"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
)

func TestDeepCopy(t *testing.T) {
	five := 5
	orig := &config.TCPConfiguration{
		Routers:     map[string]*config.TCPRouter{"r": {EntryPoints: []string{"a"}, TLS: &config.RouterTCPTLSConfig{Passthrough: true}}},
		Services:    map[string]*config.TCPService{"s": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "x"}}, TerminationDelay: &five}}},
		Middlewares: map[string]*config.TCPMiddleware{"m": {InFlightConn: &config.TCPInFlightConn{Amount: 1, IPv6Subnet: &five}, IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8"}}}},
	}
	cp := DeepCopy(orig)
	if !reflect.DeepEqual(cp, orig) {
		t.Fatalf("copy differs: %+v", cp)
	}
	cp.Routers["r"].EntryPoints[0] = "z"
	cp.Routers["r"].TLS.Passthrough = false
	*cp.Services["s"].LoadBalancer.TerminationDelay = 6
	cp.Services["s"].LoadBalancer.Servers[0].Address = "y"
	*cp.Middlewares["m"].InFlightConn.IPv6Subnet = 7
	cp.Middlewares["m"].IPAllowList.SourceRange[0] = "z"
	delete(cp.Routers, "r")
	if len(orig.Routers) != 1 || orig.Routers["r"].EntryPoints[0] != "a" || !orig.Routers["r"].TLS.Passthrough ||
		five != 5 || orig.Services["s"].LoadBalancer.Servers[0].Address != "x" || orig.Middlewares["m"].IPAllowList.SourceRange[0] != "10.0.0.0/8" {
		t.Errorf("modifying the copy changed the original: %+v", orig)
	}
}
