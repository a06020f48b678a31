package proxy

import (
	"fmt"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// bigConfig is what 1,000 Consul services x 3 instances look like after the
// watcher: one router, one limiter and one 3-server service each.
func bigConfig(n int) *config.TCPConfiguration {
	d := &config.TCPConfiguration{
		Routers:     map[string]*config.TCPRouter{},
		Services:    map[string]*config.TCPService{},
		Middlewares: map[string]*config.TCPMiddleware{},
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("s%04d", i)
		d.Routers[name] = &config.TCPRouter{EntryPoints: []string{"tcp"}, Rule: "HostSNI(`*`)", Service: name, Middlewares: []string{name + "-limit"}}
		d.Middlewares[name+"-limit"] = &config.TCPMiddleware{InFlightConn: &config.TCPInFlightConn{Amount: 10}}
		d.Services[name] = lbConfig(
			fmt.Sprintf("127.0.%d.%d:%d", i/250, i%250+1, 7000),
			fmt.Sprintf("127.1.%d.%d:%d", i/250, i%250+1, 7000),
			fmt.Sprintf("127.2.%d.%d:%d", i/250, i%250+1, 7000))
	}
	return provider.Merge(map[string]*config.Dynamic{"consulcatalog": {TCP: d}})
}

// BenchmarkCompile1000: the scale target is <= 50 ms per compile.
func BenchmarkCompile1000(b *testing.B) {
	cfg := bigConfig(1000)
	st := NewState(zerolog.Nop(), StateOptions{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Compile(cfg, []string{"tcp"}, st, zerolog.Nop())
	}
}
