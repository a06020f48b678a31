package swarm

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/provider"
)

// FuzzBuild feeds arbitrary labels (key=value lines) and network names to
// a service of two tasks and checks what Build promises whatever the
// input: no panic, the same result twice, every kept router has a rule and
// a service, and every server has a port and one of the input's addresses.
func FuzzBuild(f *testing.F) {
	seedLines := func(m map[string]string) string {
		var b strings.Builder
		for k, v := range m {
			b.WriteString(k + "=" + v + "\n")
		}
		return b.String()
	}
	f.Add(seedLines(seed()), "shop_backend", "shop_frontend", false)
	f.Add(seedLines(seed())+"traefik.swarm.lbswarm=true\n", "ingress", "shop_backend", true)
	f.Add("traefik.tcp.routers.r.rule=HostSNI(`*`)\ntraefik.swarm.network=x\ntraefik.docker.network=y", "x", "", false)
	f.Add("traefik.tcp.services.s.loadbalancer.server.port=0\ntraefik.tcp.routers.=x", "", "a", true)
	f.Fuzz(func(t *testing.T, blob, net1, net2 string, lb bool) {
		lbls := map[string]string{}
		for _, line := range strings.Split(blob, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				lbls[k] = v
			}
		}
		if lb {
			lbls["traefik.swarm.lbswarm"] = "true"
		}
		nets := func(ip string) map[string]string { return map[string]string{net1: ip, net2: ip[:len(ip)-1] + "9"} }
		s := Service{ID: "s", Name: "shop_db", Labels: lbls, EndpointMode: ModeVIP, VirtualIPs: nets("10.0.0.2"), Ingress: "ingress",
			Tasks: []Task{{ID: "a", Slot: 1, State: TaskRunning, Networks: nets("10.0.0.3")}, {ID: "b", Slot: 2, State: TaskRunning, Networks: nets("10.0.0.4")}}}
		r1, r2 := Build([]Service{s}, defaults()), Build([]Service{s}, defaults())
		j1, j2 := resultJSON(t, r1), resultJSON(t, r2)
		if j1 != j2 {
			t.Fatalf("Build is not deterministic:\n%s\n%s", j1, j2)
		}
		if r1.Configuration == nil {
			return
		}
		for name, r := range r1.Configuration.TCP.Routers {
			if strings.TrimSpace(r.Rule) == "" || r.Service == "" {
				t.Errorf("router %q kept without rule or service: %+v", name, r)
			}
		}
		for name, svc := range r1.Configuration.TCP.Services {
			if svc.LoadBalancer == nil {
				continue
			}
			for _, srv := range svc.LoadBalancer.Servers {
				host, port, err := net.SplitHostPort(srv.Address)
				if err != nil || port == "" || port == "0" {
					t.Errorf("service %q has server %q without a usable port", name, srv.Address)
				}
				if !strings.HasPrefix(host, "10.0.0.") {
					t.Errorf("service %q has server %q, not an address of the input", name, srv.Address)
				}
			}
		}
	})
}

// resultJSON renders r whole, to compare two builds. encoding/json cannot
// marshal DefinedBy, a map keyed by a struct: it goes in keyed by
// "kind/name" (json sorts the keys).
func resultJSON(t *testing.T, r provider.Result) string {
	t.Helper()
	definedBy := make(map[string][]string, len(r.DefinedBy))
	for res, ids := range r.DefinedBy {
		definedBy[res.Kind+"/"+res.Name] = ids
	}
	j, err := json.Marshal(struct {
		Configuration any
		Problems      []provider.Problem
		DefinedBy     map[string][]string
	}{r.Configuration, r.Problems, definedBy})
	if err != nil {
		t.Fatalf("marshalling the result: %v", err)
	}
	return string(j)
}
