package config

import (
	"strings"
	"testing"
	"time"
)

// providers.http's options are checked at start, each error naming the
// option; Traefik's providers that tollgate does not implement are
// refused, naming them.
func TestHTTPProviderAndRefusedProviders(t *testing.T) {
	http := func(f func(h *HTTPProvider)) *Providers {
		h := &HTTPProvider{}
		h.SetDefaults()
		h.Endpoint = "http://127.0.0.1:9000/api"
		f(h)
		return &Providers{HTTP: h}
	}
	for _, tc := range []struct {
		name string
		p    *Providers
		err  string
	}{
		{"http", http(func(*HTTPProvider) {}), ""},
		{"http no endpoint", http(func(h *HTTPProvider) { h.Endpoint = "" }), "providers.http.endpoint is required"},
		{"http bad scheme", http(func(h *HTTPProvider) { h.Endpoint = "ftp://x/y" }), `providers.http.endpoint="ftp://x/y": not an http or https URL`},
		{"http no host", http(func(h *HTTPProvider) { h.Endpoint = "http:///api" }), "not an http or https URL"},
		{"http interval", http(func(h *HTTPProvider) { h.PollInterval = 0 }), "providers.http.pollInterval=0s: must be positive"},
		{"http timeout", http(func(h *HTTPProvider) { h.PollTimeout = Duration(-time.Second) }), "providers.http.pollTimeout=-1s"},
		{"http body", http(func(h *HTTPProvider) { h.MaxResponseBodySize = 0 }), "providers.http.maxResponseBodySize=0"},
		{"gateway", &Providers{KubernetesGateway: &KubernetesHTTPProvider{}}, "providers.kubernetesGateway: Traefik's kubernetesGateway provider is refused"},
		{"nomad", &Providers{Nomad: &RefusedProviderOptions{}}, "providers.nomad: Traefik's nomad provider is refused"},
		{"ecs", &Providers{ECS: &RefusedProviderOptions{}}, "providers.ecs: Traefik's ecs provider is refused"},
		{"rest", &Providers{Rest: &RefusedProviderOptions{}}, "providers.rest: Traefik's rest provider is refused"},
		{"plugin", &Providers{Plugin: map[string]*RefusedProviderOptions{"x": {}}}, "providers.plugin: Traefik's plugin provider is refused"},
		{"ingress", &Providers{KubernetesIngress: &KubernetesHTTPProvider{}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Static{EntryPoints: map[string]*EntryPoint{"db": {Address: ":5432"}}, Providers: tc.p}
			err := s.Validate()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Validate: %v, want %q", err, tc.err)
			}
		})
	}
	for key, refused := range map[string]bool{"providers.NOMAD.endpoint.address": true, "Providers.plugin.x.y": true, "providers.kubernetesCRD.token": false, "nomad": false} {
		if got := RefusedProvider(key) != nil; got != refused {
			t.Errorf("RefusedProvider(%q) = %v, want %v", key, got, refused)
		}
	}
}
