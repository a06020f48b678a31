package proxy

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
)

// Every compile error says which field it is about, so that tollgate check
// places it on a key without reading its words.
func TestCompileErrorsNameTheirField(t *testing.T) {
	neg, bits, zeroBurst := int64(-1), 200, int64(0)
	zeroPeriod := config.Duration(0)
	cfg := &config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"norule":  {Service: "s"},
			"badrule": {Rule: "HostSNI(", Service: "s"},
			"nosvc":   {Rule: "HostSNI(`*`)", Service: "missing"},
			"nomw":    {Rule: "HostSNI(`*`)", Service: "s", Middlewares: []string{"absent"}},
			"sni":     {Rule: "HostSNI(`a.test`)", Service: "s"},
			"ep":      {Rule: "HostSNI(`*`)", Service: "s", EntryPoints: []string{"nope"}},
		},
		Services: map[string]*config.TCPService{
			"s":     lbConfig("127.0.0.1:1"),
			"empty": {LoadBalancer: &config.TCPServersLoadBalancer{}},
			"noadr": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:1"}, {}}}},
			"pp":    {LoadBalancer: &config.TCPServersLoadBalancer{ProxyProtocol: &config.ProxyProtocol{Version: 3}}},
		},
		Middlewares: map[string]*config.TCPMiddleware{
			"neg":  {InFlightConn: &config.TCPInFlightConn{Amount: neg}},
			"bits": {InFlightConn: &config.TCPInFlightConn{Amount: 1, IPv6Subnet: &bits}},
			"zero": {InFlightConn: &config.TCPInFlightConn{Amount: 0}},
			"mode": {InFlightConn: &config.TCPInFlightConn{Amount: 1, FailureMode: "open"}},
			"cidr": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8", "10.0.0.0/33"}}},
			"host": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.9/8"}}},
			"rneg": {RateLimit: &config.TCPRateLimit{Average: neg}},
			"rper": {RateLimit: &config.TCPRateLimit{Average: 1, Period: &zeroPeriod}},
			"rbit": {RateLimit: &config.TCPRateLimit{Average: 1, IPv6Subnet: &bits}},
			"ravg": {RateLimit: &config.TCPRateLimit{}},
			"rbur": {RateLimit: &config.TCPRateLimit{Average: 1, Burst: &zeroBurst}},
		},
	}
	_, rt := Compile(cfg, []string{"tcp"}, NewState(zerolog.Nop(), StateOptions{}), zerolog.Nop())
	for _, tc := range []struct {
		st    *ResourceStatus
		field string
	}{
		{&rt.Routers["norule"].ResourceStatus, "rule"},
		{&rt.Routers["badrule"].ResourceStatus, "rule"},
		{&rt.Routers["nosvc"].ResourceStatus, "service"},
		{&rt.Routers["nomw"].ResourceStatus, "middlewares"},
		{&rt.Routers["sni"].ResourceStatus, "rule"},
		{&rt.Routers["ep"].ResourceStatus, "entryPoints"},
		{&rt.Services["empty"].ResourceStatus, "loadBalancer.servers"},
		{&rt.Services["noadr"].ResourceStatus, "loadBalancer.servers[1]"},
		{&rt.Services["pp"].ResourceStatus, "loadBalancer.proxyProtocol.version"},
		{&rt.Middlewares["neg"].ResourceStatus, "inFlightConn.amount"},
		{&rt.Middlewares["bits"].ResourceStatus, "inFlightConn.ipv6Subnet"},
		{&rt.Middlewares["zero"].ResourceStatus, "inFlightConn.amount"},
		// A failureMode without a store is a warning about failureMode,
		// not about the amount (it was pinned on inFlightConn.amount).
		{&rt.Middlewares["mode"].ResourceStatus, "inFlightConn.failureMode"},
		{&rt.Middlewares["cidr"].ResourceStatus, "ipAllowList.sourceRange[1]"},
		{&rt.Middlewares["host"].ResourceStatus, "ipAllowList.sourceRange[0]"},
		{&rt.Middlewares["rneg"].ResourceStatus, "rateLimit.average"},
		{&rt.Middlewares["rper"].ResourceStatus, "rateLimit.period"},
		{&rt.Middlewares["rbit"].ResourceStatus, "rateLimit.ipv6Subnet"},
		{&rt.Middlewares["ravg"].ResourceStatus, "rateLimit.average"},
		{&rt.Middlewares["rbur"].ResourceStatus, "rateLimit.burst"},
	} {
		if len(tc.st.Err) == 0 || tc.st.ErrorField(0) != tc.field {
			t.Errorf("errors %q: field %q, want %q", tc.st.Err, tc.st.ErrorField(0), tc.field)
		}
	}
	for name, status := range map[string]string{"rneg": StatusDisabled, "rper": StatusDisabled, "rbit": StatusDisabled, "ravg": StatusWarning, "rbur": StatusWarning} {
		mi := rt.Middlewares[name]
		_, limiter := mi.Live().(*ratelimit.Limiter)
		if mi.Status != status || mi.Type != "RateLimit" || (status == StatusWarning) != limiter {
			t.Errorf("%s: status %s type %q limiter %v, want %s RateLimit", name, mi.Status, mi.Type, limiter, status)
		}
	}
}

// Issue 10.6: an allow list entry with host bits set applies as its masked
// range, with status warning and the note in its errors.
func TestAllowListHostBitsWarn(t *testing.T) {
	cfg := &config.TCPConfiguration{Middlewares: map[string]*config.TCPMiddleware{
		"host": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.9/8", "::ffff:0:0/96"}}},
	}}
	_, rt := Compile(cfg, []string{"tcp"}, NewState(zerolog.Nop(), StateOptions{}), zerolog.Nop())
	mi := rt.Middlewares["host"]
	if mi.Status != StatusWarning || len(mi.Err) != 2 || mi.ErrorField(1) != "ipAllowList.sourceRange[1]" {
		t.Fatalf("status %s, errors %q", mi.Status, mi.Err)
	}
}
