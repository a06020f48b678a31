package consulcatalog

import (
	"net"
	"strings"
	"testing"
)

// FuzzBuild feeds arbitrary tags (one per line) to two instances of a service
// and checks what build promises whatever the input: no panic, the same
// result twice (through a warm cache too), no server without a port, and
// every kept router has a rule and a service.
func FuzzBuild(f *testing.F) {
	f.Add(strings.Join(design7, "\n"), 5432)
	f.Add("traefik.tcp.routers.r.rule=HostSNI(`*`)\ntraefik.tcp.middlewares.m.inflightconn.amount=abc", 0)
	f.Add("traefik.enable=false\ntraefik.tcp.services.s.loadbalancer.server.port=0", 1)
	f.Add("traefik.consulcatalog.canary=true\ntraefik.tcp.routers.r.rule=HostSNI(`*`)\ntraefik.tcp.routers.r.service=x", 9)
	f.Add("traefik.tcp.routers.=x\ntraefik.tcp..=y\ntraefik.tcp.routers.r.tls=true", 1)
	f.Fuzz(func(t *testing.T, tags string, port int) {
		list := strings.Split(tags, "\n")
		insts := []Instance{
			{Name: "svc", ID: "a", Node: "n1", NodeAddress: "10.0.0.1", Port: port, Status: "passing", Tags: list},
			{Name: "svc", ID: "b", Node: "n2", Address: "10.0.0.2", Port: port, Status: "warning", Tags: list},
		}
		opts := defaultOpts()
		opts.Cache = &DecodeCache{}
		c1, p1 := build(insts, opts)
		c2, p2 := build(insts, opts)
		c3, p3 := build(insts, defaultOpts())
		if !equalJSON(t, c1, c2) || !equalJSON(t, c1, c3) || strings.Join(p1, "|") != strings.Join(p2, "|") || strings.Join(p1, "|") != strings.Join(p3, "|") {
			t.Fatalf("build is not deterministic:\n%s %q\n%s %q", mustJSON(t, c1), p1, mustJSON(t, c2), p2)
		}
		for name, r := range c1.TCP.Routers {
			if strings.TrimSpace(r.Rule) == "" || r.Service == "" {
				t.Errorf("router %q kept without rule or service: %+v", name, r)
			}
		}
		for name, s := range c1.TCP.Services {
			if s.LoadBalancer == nil {
				continue
			}
			for _, srv := range s.LoadBalancer.Servers {
				_, p, err := net.SplitHostPort(srv.Address)
				if err != nil || p == "" || p == "0" {
					t.Errorf("service %q has server %q without a usable port", name, srv.Address)
				}
			}
		}
	})
}
