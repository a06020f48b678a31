package kubernetescrd

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Traefik v3's MiddlewareTCP has ipWhiteList (deprecated): its spec, as the
// API server returns it, decodes and builds into the middleware's
// IPWhiteList, which the proxy applies as ipAllowList with a warning. A
// ServersTransportTCP's tls.spiffe is kept, so that the proxy disables the
// transport naming it instead of dialling without it.
func TestFormsDecodeAndBuild(t *testing.T) {
	var spec config.TCPMiddleware
	if err := decodeSpec(map[string]any{"ipWhiteList": map[string]any{"sourceRange": []any{"127.0.0.1", "10.0.0.0/8"}}}, &spec); err != nil {
		t.Fatal(err)
	}
	k := fakeCluster{
		services: map[string]*corev1.Service{"default/db": svc("default", "db", sport("", 5432))},
		slices:   map[string][]*discoveryv1.EndpointSlice{"default/db": {slice(map[string]int32{"": 4000}, ep{"127.0.0.1", yes})}},
	}
	d, problems := build([]MiddlewareTCP{{Namespace: "default", Name: "old", Spec: spec}},
		[]IngressRouteTCP{route("default", "db", "HostSNI(`*`)", []ObjectReference{{Name: "old"}}, ServiceTCP{Name: "db", Port: port(5432)})}, k)
	if len(problems) > 0 {
		t.Fatalf("problems %q", problems)
	}
	want := &config.TCPMiddleware{IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.1", "10.0.0.0/8"}}}
	if got := d.TCP.Middlewares["default-old"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("middleware %+v, want %+v", got, want)
	}
	if r := d.TCP.Routers["default-db-"+anyKey]; r == nil || !reflect.DeepEqual(r.Middlewares, []string{"default-old"}) {
		t.Fatalf("router %+v, want it to use default-old", r)
	}

	var ts ServersTransportTCPSpec
	if err := decodeSpec(map[string]any{"tls": map[string]any{"spiffe": map[string]any{"ids": []any{"spiffe://example.org/db"}, "trustDomain": "example.org"}}}, &ts); err != nil {
		t.Fatal(err)
	}
	tr, err := serversTransport(k, ServersTransportTCP{Namespace: "default", Name: "workload", Spec: ts})
	if err != nil {
		t.Fatal(err)
	}
	if tr.TLS == nil || !reflect.DeepEqual(tr.TLS.Spiffe, &config.SpiffeTransport{IDs: []string{"spiffe://example.org/db"}, TrustDomain: "example.org"}) {
		t.Fatalf("transport TLS %+v, want tls.spiffe kept", tr.TLS)
	}
}

// The CRD schemas of deploy/crds keep ipWhiteList and tls.spiffe (a
// structural schema drops the fields it does not list, silently): the
// provider sees them as written.
func TestIntegrationFormsKeptByTheSchema(t *testing.T) {
	k := kube(t)
	ns := namespace(t, k, "forms")
	create(t, k.Client, obj("traefik.io/v1alpha1", "MiddlewareTCP", ns, "old", map[string]any{
		"spec": map[string]any{"ipWhiteList": map[string]any{"sourceRange": []any{"127.0.0.1"}}},
	}))
	create(t, k.Client, obj("traefik.io/v1alpha1", "ServersTransportTCP", ns, "workload", map[string]any{
		"spec": map[string]any{"tls": map[string]any{"spiffe": map[string]any{"trustDomain": "example.org"}}},
	}))
	await(t, runProvider(t, k, ns), 10*time.Second, "the MiddlewareTCP's ipWhiteList and the transport's tls.spiffe", func(m provider.Message) bool {
		if m.Configuration == nil || m.Configuration.TCP == nil {
			return false
		}
		mw := m.Configuration.TCP.Middlewares[ns+"-old"]
		tr := m.Configuration.TCP.ServersTransports[ns+"-workload"]
		return mw != nil && mw.IPWhiteList != nil && reflect.DeepEqual(mw.IPWhiteList.SourceRange, []string{"127.0.0.1"}) &&
			tr != nil && tr.TLS != nil && tr.TLS.Spiffe != nil && tr.TLS.Spiffe.TrustDomain == "example.org"
	})
}
