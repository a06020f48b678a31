package kubernetescrd

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider/kubernetescrd/internal/kubetest"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/kubernetescrd/*.golden.json")

// storesFrom puts manifests into informer stores (never run), as the
// informers would after listing them.
func storesFrom(t *testing.T, objs []*unstructured.Unstructured) []*informers {
	t.Helper()
	mk := func(extra cache.Indexers) cache.SharedIndexInformer {
		idx := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
		for k, v := range extra {
			idx[k] = v
		}
		return cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, idx)
	}
	in := &informers{middlewares: mk(nil), routes: mk(nil), services: mk(nil), endpoints: mk(cache.Indexers{serviceIndex: indexByService})}
	for _, u := range objs {
		var inf cache.SharedIndexInformer
		switch u.GetKind() {
		case "MiddlewareTCP":
			inf = in.middlewares
		case "IngressRouteTCP":
			inf = in.routes
		case "Service":
			inf = in.services
		case "EndpointSlice":
			inf = in.endpoints
		default:
			t.Fatalf("kind %s not read by the provider", u.GetKind())
		}
		if err := inf.GetIndexer().Add(u); err != nil {
			t.Fatal(err)
		}
	}
	return []*informers{in}
}

// TestGolden turns the manifests under testdata/kubernetescrd (as users write
// them) into the provider's configuration and problems, compared with the
// .golden.json beside each (go test -run TestGolden -update rewrites them).
func TestGolden(t *testing.T) {
	dir := filepath.Join(itest.ModuleRoot(), "testdata", "kubernetescrd")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			objs, err := kubetest.ReadManifests(f)
			if err != nil {
				t.Fatal(err)
			}
			// A manifest says which provider settings it is built with.
			raw, _ := os.ReadFile(f)
			p := &Provider{opt: options{allowCrossNamespace: strings.Contains(string(raw), "# providers.kubernetesCRD.allowCrossNamespace=true")}}
			conf, problems := p.build(storesFrom(t, objs))
			got, err := json.MarshalIndent(struct {
				Configuration *config.Dynamic `json:"configuration"`
				Problems      []string        `json:"problems"`
			}{conf, problems}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join(dir, name+".golden.json")
			if *updateGolden {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from %s:\n%s", f, golden, got)
			}
			// Same input, same output: the decode cache changes nothing.
			conf2, problems2 := p.build(storesFrom(t, objs))
			again, _ := json.MarshalIndent(struct {
				Configuration *config.Dynamic `json:"configuration"`
				Problems      []string        `json:"problems"`
			}{conf2, problems2}, "", "  ")
			if string(append(again, '\n')) != string(got) {
				t.Error("a second build differs from the first")
			}
		})
	}
}
