package kubernetescrd

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/kubernetescrd/internal/kubetest"
)

// kinds maps the kinds in deploy/ to their resources.
var kinds = map[string]schema.GroupVersionResource{
	"Namespace":           {Version: "v1", Resource: "namespaces"},
	"ServiceAccount":      {Version: "v1", Resource: "serviceaccounts"},
	"EndpointSlice":       endpointSlicesGVR,
	"Service":             {Version: "v1", Resource: "services"},
	"ClusterRole":         {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding":  {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Deployment":          {Group: "apps", Version: "v1", Resource: "deployments"},
	"MiddlewareTCP":       middlewaresGVR,
	"IngressRouteTCP":     routesGVR,
	"ServersTransportTCP": transportsGVR,
	"TLSOption":           tlsOptionsGVR,
	"TLSStore":            tlsStoresGVR,
	"Secret":              secretsGVR,
	"ConfigMap":           configMapsGVR,
}

// apply creates every object in the manifest file (server-side validated).
func apply(t *testing.T, k *kubetest.Server, file string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := kubetest.ReadManifests(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		gvr, ok := kinds[u.GetKind()]
		if !ok {
			t.Fatalf("%s: kind %s not known to the test", file, u.GetKind())
		}
		r := k.Client.Resource(gvr)
		var err error
		if u.GetNamespace() != "" {
			_, err = r.Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{})
		} else {
			_, err = r.Create(context.Background(), u, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) { // -count=N reuses the server
			t.Fatalf("%s: creating %s %s: %v", file, u.GetKind(), u.GetName(), err)
		}
	}
	return objs
}

// saToken asks the API server for a token of service account ns/name.
func saToken(t *testing.T, k *kubetest.Server, ns, name string) string {
	t.Helper()
	req := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"expirationSeconds": int64(3600)},
	}}
	got, err := k.Client.Resource(kinds["ServiceAccount"]).Namespace(ns).Create(context.Background(), req, metav1.CreateOptions{}, "token")
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	tok, _, _ := unstructured.NestedString(got.Object, "status", "token")
	if tok == "" {
		t.Fatalf("token request for %s/%s: no token in %v", ns, name, got.Object)
	}
	return tok
}

// TestIntegrationDeployManifests applies deploy/ as a user would (the API
// server validates the Deployment, and the example against the CRD schemas),
// then runs the provider with the token of deploy/rbac.yaml's service
// account: the ClusterRole must let it list and watch everything it reads,
// while a service account without the binding is refused and reported.
func TestIntegrationDeployManifests(t *testing.T) {
	k := kube(t)
	deploy := filepath.Join(itest.ModuleRoot(), "deploy")
	if err := createErr(k.Client, obj("v1", "Namespace", "", "tollgate", nil)); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	apply(t, k, filepath.Join(deploy, "rbac.yaml"))
	apply(t, k, filepath.Join(deploy, "deployment.yaml"))
	apply(t, k, filepath.Join(deploy, "example.yaml"))

	// Service accounts get no token without a controller; a TokenRequest works.
	run := func(token string) <-chan provider.Message {
		p, err := New(&config.KubernetesCRDProvider{Endpoint: k.URL, Token: token, CertAuthFilePath: k.CAFile}, provider.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		out := make(chan provider.Message, 16)
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx, out) }()
		t.Cleanup(func() { cancel(); <-done })
		return out
	}

	msgs := run(saToken(t, k, "tollgate", "tollgate"))
	m := await(t, msgs, 10*time.Second, "the example's route and middleware", func(m provider.Message) bool {
		return m.Configuration.TCP.Routers[routeKey("default", "db")] != nil && amount(m, "default-test-inflightconn") == 10
	})
	found := false
	for _, p := range m.Problems {
		found = found || strings.Contains(p, `Service "default/postgres" port 5432: service not found`)
	}
	if !found {
		t.Errorf("problems = %q, want the example's missing postgres Service named", m.Problems)
	}

	if err := createErr(k.Client, obj("v1", "ServiceAccount", "tollgate", "nobody", nil)); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	denied := run(saToken(t, k, "tollgate", "nobody"))
	select {
	case m := <-denied:
		if m.Err == nil || !strings.Contains(m.Err.Error(), "forbidden") {
			t.Fatalf("unbound service account: first message %+v, want a forbidden Err", m)
		}
		t.Logf("unbound service account reported: %v", m.Err)
	case <-time.After(10 * time.Second):
		t.Fatal("unbound service account: nothing reported within 10 s")
	}
}
