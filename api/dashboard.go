package api

import (
	"net/http"

	"github.com/tollgate-proxy/tollgate/api/dashboard"
)

// addDashboard registers what the dashboard reads beside the rest of the
// API (the record of recent refusals, the per-second history, the shared
// stores), and with Sources.Dashboard the dashboard itself
// (docs/operations/dashboard.md): /dashboard/, and / and /dashboard
// redirected there, as in Traefik.
func (s Sources) addDashboard(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/refusals", s.refusals)
	mux.HandleFunc("GET /api/tcp/middlewares/{name}/refused", s.refused)
	mux.HandleFunc("GET /api/stores", s.stores)
	mux.HandleFunc("GET /api/limiters", s.limiters)
	if s.History != nil {
		mux.HandleFunc("GET /api/history", s.history)
	}
	if !s.Dashboard {
		return
	}
	mux.Handle("GET "+dashboard.Prefix, dashboard.Handler())
	mux.HandleFunc("GET /dashboard", toDashboard)
	mux.HandleFunc("GET /{$}", toDashboard)
}

// toDashboard redirects / and /dashboard to /dashboard/ with a relative
// location ("dashboard/"), which the browser resolves against the path it
// asked for: under api.basePath too, which this handler does not see
// (http.Redirect would make it absolute from the path stripped of it).
func toDashboard(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Location", "dashboard/")
	w.WriteHeader(http.StatusFound)
}
