package kubernetescrd

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// fakeSets fills informer stores (never run) with n routes, each with its own
// MiddlewareTCP, Service and EndpointSlice of three ready endpoints: what the
// provider's build reads on every wake-up.
func fakeSets(n int) []*informers {
	mk := func(extra cache.Indexers) cache.SharedIndexInformer {
		idx := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
		for k, v := range extra {
			idx[k] = v
		}
		return cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, idx)
	}
	in := &informers{middlewares: mk(nil), routes: mk(nil), services: mk(nil), endpoints: mk(cache.Indexers{serviceIndex: indexByService})}
	for i := range n {
		ns := fmt.Sprintf("ns%d", i%10)
		name := fmt.Sprintf("app%d", i)
		_ = in.middlewares.GetIndexer().Add(middlewareTCP(ns, name, 10))
		_ = in.routes.GetIndexer().Add(ingressRouteTCP(ns, name, name, 5432, name))
		_ = in.services.GetIndexer().Add(service(ns, name, 5432))
		_ = in.endpoints.GetIndexer().Add(endpointSlice(ns, name+"-1", name, 4000, map[string]bool{
			fmt.Sprintf("10.%d.%d.1", i/250, i%250): true, fmt.Sprintf("10.%d.%d.2", i/250, i%250): true, fmt.Sprintf("10.%d.%d.3", i/250, i%250): false,
		}))
	}
	return []*informers{in}
}

func TestProviderBuildFromStores(t *testing.T) {
	p := &Provider{}
	conf, problems := p.build(fakeSets(20))
	if len(problems) != 0 || len(conf.TCP.Routers) != 20 || len(conf.TCP.Middlewares) != 20 {
		t.Fatalf("routers %d, middlewares %d, problems %q", len(conf.TCP.Routers), len(conf.TCP.Middlewares), problems)
	}
	for name, s := range conf.TCP.Services {
		if len(s.LoadBalancer.Servers) != 2 {
			t.Fatalf("service %s: %v, want the 2 ready servers", name, s.LoadBalancer.Servers)
		}
	}
}

// BenchmarkProviderBuild is one wake-up's work for 1,000 routes: decoding
// every resource from the caches and building the configuration.
func BenchmarkProviderBuild(b *testing.B) {
	sets := fakeSets(1000)
	p := &Provider{}
	b.ReportAllocs()
	for b.Loop() {
		p.build(sets)
	}
}
