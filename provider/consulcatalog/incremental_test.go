package consulcatalog

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// referenceBuild is Build as it was before it kept anything between
// builds: every instance built, every source merged at once.
func referenceBuild(instances []Instance, opts Options) provider.Result {
	sorted := sortInstances(instances)
	healthy := map[string]bool{}
	for _, s := range opts.StrictChecks {
		healthy[strings.ToLower(s)] = true
	}
	var (
		sources  []provider.Source
		problems []provider.Problem
	)
	for _, inst := range sorted {
		src, probs := buildInstance(inst, opts, &DecodeCache{})
		problems = append(problems, probs...)
		if (src.TCP == nil && src.TLS == nil) || !healthy[strings.ToLower(inst.Status)] {
			continue
		}
		sources = append(sources, src)
	}
	tcp, conflicts, definedBy := provider.MergeSources(sources)
	tls, tlsConflicts, tlsDefinedBy := provider.MergeSourcesTLS(sources)
	maps.Copy(definedBy, tlsDefinedBy)
	return provider.Result{
		Configuration: &config.Dynamic{TCP: tcp, TLS: tls},
		Problems:      append(append(problems, conflicts...), tlsConflicts...),
		DefinedBy:     definedBy,
	}
}

// TestBuildIncrementalMatchesReference changes a random catalog a little
// at a time and checks that each build through one DecodeCache (kept
// instances and services' merges) returns what building everything again
// returns: resources defined by one service or by several (a router of
// the same name in two services, equal or not), conflicts inside a
// service, bad tags, TLS stores, health changes.
func TestBuildIncrementalMatchesReference(t *testing.T) {
	variants := func(svc string) [][]string {
		return [][]string{
			{"traefik.tcp.routers." + svc + ".rule=HostSNI(`*`)"},
			{"traefik.tcp.routers." + svc + ".rule=HostSNI(`*`)", "traefik.tcp.routers." + svc + ".middlewares=lim", "traefik.tcp.middlewares.lim.inflightconn.amount=10"},
			{"traefik.tcp.routers." + svc + ".rule=HostSNI(`*`)", "traefik.tcp.routers." + svc + ".middlewares=lim", "traefik.tcp.middlewares.lim.inflightconn.amount=20"},
			{"traefik.tcp.routers.shared.rule=HostSNI(`*`)", "traefik.tcp.routers.shared.service=" + svc},
			{"traefik.tcp.routers.shared.rule=HostSNI(`*`)"},
			{"traefik.tcp.routers." + svc + ".rule=HostSNI(`*`)", "traefik.tcp.middlewares.bad.inflightconn.amount=x"},
			{"traefik.tcp.routers." + svc + ".rule=HostSNI(`*`)", "traefik.tls.stores.default.defaultgeneratedcert.resolver=le"},
			{"traefik.tcp.routers." + svc + ".rule=HostSNI(`*`)", "traefik.tls.stores." + svc + ".defaultgeneratedcert.resolver=le"},
			{"traefik.tcp.routers." + svc + ".rule=HostSNI(`*`)", "traefik.tcp.services." + svc + ".loadbalancer.server.port=9"},
			{"traefik.enable=false", "traefik.tcp.routers." + svc + ".rule=HostSNI(`*`)"},
			{"primary"},
		}
	}
	statuses := []string{"passing", "passing", "passing", "warning", "critical"}
	r := rand.New(rand.NewPCG(1, 2))
	// Until step 150, no router is shared by two services: each build is
	// the union of the services' merges; after, some are.
	step := 0
	tags := func(svc string) []string {
		vs := variants(svc)
		if step < 150 {
			vs = append(vs[:3:3], vs[5:]...)
		}
		return vs[r.IntN(len(vs))]
	}
	instance := func(svc string, i int) Instance {
		return Instance{Name: svc, ID: fmt.Sprintf("%s-%d", svc, i), Node: fmt.Sprintf("n%d", i%3), NodeAddress: "10.0.0.1",
			Address: fmt.Sprintf("127.0.0.%d", 1+i), Port: 1000 + i, Tags: tags(svc), Status: statuses[r.IntN(len(statuses))]}
	}
	var insts []Instance
	for s := range 12 {
		for i := range 1 + r.IntN(4) {
			insts = append(insts, instance(fmt.Sprintf("svc%d", s), i))
		}
	}
	opts := defaultOpts()
	opts.Cache = &DecodeCache{}
	for ; step < 300; step++ {
		got := Build(insts, opts)
		want := referenceBuild(insts, defaultOpts())
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: incremental build\n%+v\n%q\nreference\n%+v\n%q", step, got.Configuration.TCP, got.Strings(), want.Configuration.TCP, want.Strings())
		}
		// One change: an instance's tags or health, one more, one fewer.
		switch i := r.IntN(len(insts)); r.IntN(4) {
		case 0:
			insts[i].Tags = tags(insts[i].Name)
		case 1:
			insts[i].Status = statuses[r.IntN(len(statuses))]
		case 2:
			insts = append(insts, instance(insts[i].Name, 10+step))
		case 3:
			if len(insts) > 1 {
				insts = append(insts[:i:i], insts[i+1:]...)
			}
		}
	}
}
