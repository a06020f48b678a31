package api

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/provider"
)

// TestDebugEndpoints: api.debug serves Go's profiles and expvar's variables
// without the command line; without it /debug/ is not found.
func TestDebugEndpoints(t *testing.T) {
	_, srv, _ := setup(t)
	on := httptest.NewServer(Handler(Sources{Server: srv, Watcher: &provider.Watcher{}, Debug: true}))
	t.Cleanup(on.Close)
	off := httptest.NewServer(Handler(Sources{Server: srv, Watcher: &provider.Watcher{}}))
	t.Cleanup(off.Close)

	code, body := get(t, on.URL+"/debug/pprof/heap")
	if code != 200 || !strings.HasPrefix(body, "\x1f\x8b") { // a gzipped profile
		t.Fatalf("GET /debug/pprof/heap: %d, %.40q", code, body)
	}
	if code, body := get(t, on.URL+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("GET /debug/pprof/: %d, %.200q", code, body)
	}
	code, body = get(t, on.URL+"/debug/vars")
	var vars map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &vars); code != 200 || err != nil {
		t.Fatalf("GET /debug/vars: %d %v: %.200q", code, err, body)
	}
	if _, ok := vars["memstats"]; !ok {
		t.Fatalf("GET /debug/vars has no memstats: %.200q", body)
	}
	if _, ok := vars["cmdline"]; ok {
		t.Fatalf("GET /debug/vars serves the command line")
	}
	if code, _ := get(t, on.URL+"/debug/pprof/cmdline"); code != 404 {
		t.Fatalf("GET /debug/pprof/cmdline: %d, want 404", code)
	}
	for _, p := range []string{"/debug/pprof/heap", "/debug/vars"} {
		if code, _ := get(t, off.URL+p); code != 404 {
			t.Fatalf("GET %s without api.debug: %d, want 404", p, code)
		}
	}
}
