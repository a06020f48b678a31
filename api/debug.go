package api

import (
	"encoding/json"
	"expvar"
	"net/http"
	"net/http/pprof"
)

// addDebug serves Traefik's debug endpoints (api.debug) under the API:
// /debug/vars (expvar: the runtime's memstats and what else is published)
// and /debug/pprof/ (Go's profiles by name: heap, allocs, goroutine,
// profile for CPU, trace, ...), for `go tool pprof http://<api>/debug/pprof/heap`.
//
// Two deliberate differences from Traefik: the command line is left out
// (/debug/pprof/cmdline and expvar's "cmdline" var), because flags can carry
// tokens and passwords that the API's other views redact; and the block and
// mutex profiles keep Go's default rates (off), because sampling every
// blocking event costs the data plane even when no one asks for a profile.
func addDebug(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/vars", debugVars)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "the command line is not served: its flags can carry secrets")
	})
}

// debugVars is expvar's handler without the "cmdline" var.
func debugVars(w http.ResponseWriter, _ *http.Request) {
	vars := map[string]json.RawMessage{}
	expvar.Do(func(kv expvar.KeyValue) {
		if kv.Key != "cmdline" {
			vars[kv.Key] = json.RawMessage(kv.Value.String())
		}
	})
	writeJSON(w, http.StatusOK, vars)
}
