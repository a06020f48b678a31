package kubernetescrd

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// TestRunReportsUnreachableServer checks that a provider whose API server
// does not answer reports Message.Err (naming the resource) instead of
// staying silent, and stops when its context ends.
func TestRunReportsUnreachableServer(t *testing.T) {
	addr := itest.RefusedAddr(t) // nothing listens there

	p, err := New(&config.KubernetesCRDProvider{Endpoint: "http://" + addr, Token: "t"}, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan provider.Message, 16)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, out) }()
	select {
	case m := <-out:
		if m.Err == nil || !strings.Contains(m.Err.Error(), "listing ") {
			t.Fatalf("first message = %+v, want an Err naming what it watched", m)
		}
		t.Logf("reported: %v", m.Err)
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10 s from a provider whose server is down")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil after cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestRunReportsMissingCRDs checks the hint when the server does not know
// the resources (CRDs not applied).
func TestRunReportsMissingCRDs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`))
	}))
	defer srv.Close()
	p, err := New(&config.KubernetesCRDProvider{Endpoint: srv.URL}, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan provider.Message, 16)
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx, out) }()
	defer func() { cancel(); <-done }()
	select {
	case m := <-out:
		if m.Err == nil || !strings.Contains(m.Err.Error(), "middlewaretcps.traefik.io") || !strings.Contains(m.Err.Error(), "deploy/crds") {
			t.Fatalf("first message = %+v, want an Err naming the resource and the CRDs", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing reported within 10 s")
	}
}

func TestNamespaces(t *testing.T) {
	for _, tt := range []struct {
		in, want []string
	}{
		{nil, []string{""}},
		{[]string{"b", "a", "b"}, []string{"a", "b"}},
		{[]string{"a", ""}, []string{""}},
	} {
		if got := namespaces(tt.in); strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("namespaces(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
