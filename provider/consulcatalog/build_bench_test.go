package consulcatalog

import (
	"fmt"
	"testing"
)

// scaleInstances is 1,000 services x 3 instances with the tags of the scale
// test.
func scaleInstances() []Instance {
	var insts []Instance
	for s := range 1000 {
		name := fmt.Sprintf("s%04d", s)
		for i := range 3 {
			insts = append(insts, Instance{Name: name, ID: fmt.Sprintf("%s-%d", name, i), Node: fmt.Sprintf("node-%d", i), NodeAddress: fmt.Sprintf("127.0.%d.1", i+1), Port: 20000 + s, Status: "passing",
				Tags: []string{"traefik.tcp.routers." + name + ".rule=HostSNI(`*`)", "traefik.tcp.routers." + name + ".middlewares=" + name, "traefik.tcp.middlewares." + name + ".inflightconn.amount=10"}})
		}
	}
	return insts
}

// BenchmarkBuildCold is one build of 3,000 instances with nothing cached.
func BenchmarkBuildCold(b *testing.B) {
	insts := scaleInstances()
	for range b.N {
		build(insts, defaultOpts())
	}
}

// BenchmarkBuildWarm is the same build when the previous one saw the same
// tags (a snapshot after an unrelated change).
func BenchmarkBuildWarm(b *testing.B) {
	insts := scaleInstances()
	opts := defaultOpts()
	opts.Cache = &DecodeCache{}
	build(insts, opts)
	b.ResetTimer()
	for range b.N {
		build(insts, opts)
	}
}
