package kv

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/tollgate-proxy/tollgate/provider"
)

// scalePairs is the fleet of docs/performance.md's KV measurement: n
// routers of 4 keys each (rule, service, priority, server address).
func scalePairs(n int) []Pair {
	var pairs []Pair
	for i := range n {
		r, s := fmt.Sprintf("traefik/tcp/routers/r%d/", i), fmt.Sprintf("traefik/tcp/services/s%d/", i)
		pairs = append(pairs, Pair{r + "rule", "HostSNI(`*`)"}, Pair{r + "service", fmt.Sprintf("s%d", i)},
			Pair{r + "priority", fmt.Sprint(i + 1)}, Pair{s + "loadBalancer/servers/0/address", "127.0.0.1:4000"})
	}
	return pairs
}

// A build with a DecodeCache returns what one without returns, however
// the pairs change from one build to the next, and its routers are its
// own: the router defaults a build applies (a router without a service
// gets the only one) are not kept by the cache, nor what a consumer writes
// into a router.
func TestBuildCache(t *testing.T) {
	cache := &DecodeCache{}
	steps := [][]Pair{
		issueExample,
		issueExample, // all from the cache
		with(issueExample, Pair{"traefik/tcp/routers/bad/priority", "high"}, Pair{"traefik/tcp/routers/bad/rule", "HostSNI(`*`)"}),
		with(issueExample[:4], Pair{"traefik/tcp/routers/my-router/service", "other"}), // one key changed
		// A router without a service: it gets the only one, then is dropped
		// when there are two.
		{{"traefik/tcp/routers/r/rule", "HostSNI(`*`)"}, {"traefik/tcp/services/a/loadBalancer/servers/0/address", "127.0.0.1:1"}},
		{{"traefik/tcp/routers/r/rule", "HostSNI(`*`)"}, {"traefik/tcp/services/a/loadBalancer/servers/0/address", "127.0.0.1:1"}, {"traefik/tcp/services/b/loadBalancer/servers/0/address", "127.0.0.1:2"}},
		issueExample,
	}
	var prev provider.Result
	for i, pairs := range steps {
		got := Build(pairs, Options{Cache: cache})
		want := Build(pairs, Options{})
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: with the cache\n%s\nwithout\n%s", i, dump(got), dump(want))
		}
		if prev.Configuration != nil {
			// Scribble on the previous result's routers: the next build
			// must not see it.
			for _, r := range prev.Configuration.TCP.Routers {
				r.Service, r.Rule = "scribbled", "scribbled"
			}
		}
		prev = got
	}
	if n := len(cache.cur) + len(cache.prev); n == 0 || n > 8 {
		t.Errorf("cache holds %d entries after builds of at most 4 resources", n)
	}
}

// BenchmarkBuild10k is a build of 10,000 keys (2,500 routers and their
// services) without a cache, and with one after one key changed.
func BenchmarkBuild10k(b *testing.B) {
	pairs := scalePairs(2500)
	b.Run("cold", func(b *testing.B) {
		for range b.N {
			Build(pairs, Options{})
		}
	})
	b.Run("one-key-changed", func(b *testing.B) {
		opts := Options{Cache: &DecodeCache{}}
		Build(pairs, opts)
		last := len(pairs) - 1
		b.ResetTimer()
		for i := range b.N {
			pairs[last].Value = fmt.Sprintf("127.0.0.1:%d", 5000+i%2)
			Build(pairs, opts)
		}
	})
}
