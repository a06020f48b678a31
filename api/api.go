// Package api is tollgate's admin listener: /ping, the Traefik-shaped
// /api/rawdata and /api/tcp/* views of the running configuration, live
// inFlightConn state, provider status, and /metrics.
package api

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// Sources is what the API reads. Both fields must be set.
type Sources struct {
	Server   *proxy.Server
	Watcher  *provider.Watcher
	Metrics  http.Handler // nil when metrics are off
	TopLimit int          // top clients shown per limiter in rawdata (default 10)
}

// Handler returns the admin API's HTTP handler.
func Handler(src Sources) http.Handler {
	if src.TopLimit == 0 {
		src.TopLimit = 10
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("OK"))
	})
	mux.HandleFunc("GET /api/rawdata", src.rawdata)
	mux.HandleFunc("GET /api/providers", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, src.Watcher.Statuses())
	})
	mux.HandleFunc("GET /api/tcp/routers", src.list(kindRouters))
	mux.HandleFunc("GET /api/tcp/services", src.list(kindServices))
	mux.HandleFunc("GET /api/tcp/middlewares", src.list(kindMiddlewares))
	mux.HandleFunc("GET /api/tcp/routers/{name}", src.detail(kindRouters))
	mux.HandleFunc("GET /api/tcp/services/{name}", src.detail(kindServices))
	mux.HandleFunc("GET /api/tcp/middlewares/{name}", src.detail(kindMiddlewares))
	mux.HandleFunc("GET /api/tcp/middlewares/{name}/clients", src.clients)
	if src.Metrics != nil {
		mux.Handle("GET /metrics", src.Metrics)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	})
	return mux
}

type rawData struct {
	Routers     map[string]*proxy.RouterInfo     `json:"tcpRouters"`
	Services    map[string]*proxy.ServiceInfo    `json:"tcpServices"`
	Middlewares map[string]*proxy.MiddlewareInfo `json:"tcpMiddlewares"`
	Providers   []provider.Status                `json:"providers"`
}

// withLive returns copies of the middleware infos with live limiter state.
func (s Sources) withLive(rt *proxy.Runtime, top int) map[string]*proxy.MiddlewareInfo {
	out := make(map[string]*proxy.MiddlewareInfo, len(rt.Middlewares))
	for name, mi := range rt.Middlewares {
		if l := mi.LiveLimiter(); l != nil {
			cp := *mi
			st := l.Snapshot(top)
			cp.Limiter = &st
			mi = &cp
		}
		out[name] = mi
	}
	return out
}

// withHealth returns copies of the service infos with live server status.
func (s Sources) withHealth(rt *proxy.Runtime) map[string]*proxy.ServiceInfo {
	out := make(map[string]*proxy.ServiceInfo, len(rt.Services))
	for name, si := range rt.Services {
		if st := s.Server.State().ServerStatus(name); st != nil {
			cp := *si
			cp.ServerStatus = st
			si = &cp
		}
		out[name] = si
	}
	return out
}

func (s Sources) rawdata(w http.ResponseWriter, _ *http.Request) {
	rt := s.Server.Runtime()
	writeJSON(w, http.StatusOK, rawData{
		Routers:     rt.Routers,
		Services:    s.withHealth(rt),
		Middlewares: s.withLive(rt, s.TopLimit),
		Providers:   s.Watcher.Statuses(),
	})
}

type kind int

const (
	kindRouters kind = iota
	kindServices
	kindMiddlewares
)

// named adds Traefik's list fields to a resource.
type named struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
}

func (s Sources) items(k kind) map[string]any {
	rt := s.Server.Runtime()
	out := map[string]any{}
	switch k {
	case kindRouters:
		for n, v := range rt.Routers {
			out[n] = struct {
				*proxy.RouterInfo
				named
			}{v, nameOf(n)}
		}
	case kindServices:
		for n, v := range s.withHealth(rt) {
			out[n] = struct {
				*proxy.ServiceInfo
				named
			}{v, nameOf(n)}
		}
	case kindMiddlewares:
		for n, v := range s.withLive(rt, s.TopLimit) {
			out[n] = struct {
				*proxy.MiddlewareInfo
				named
			}{v, nameOf(n)}
		}
	}
	return out
}

func nameOf(q string) named {
	_, prov, _ := strings.Cut(q, "@")
	return named{Name: q, Provider: prov}
}

func (s Sources) list(k kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		items := s.items(k)
		names := make([]string, 0, len(items))
		for n := range items {
			names = append(names, n)
		}
		sort.Strings(names)
		out := make([]any, 0, len(names))
		for _, n := range names {
			out = append(out, items[n])
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func (s Sources) detail(k kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		v, ok := s.items(k)[name]
		if !ok {
			writeError(w, http.StatusNotFound, strconv.Quote(name)+" not found")
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func (s Sources) clients(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	mi, ok := s.Server.Runtime().Middlewares[name]
	if !ok {
		writeError(w, http.StatusNotFound, "middleware "+strconv.Quote(name)+" not found")
		return
	}
	l := mi.LiveLimiter()
	if l == nil {
		writeError(w, http.StatusBadRequest, "middleware "+strconv.Quote(name)+" is not an enabled inFlightConn")
		return
	}
	top := 100
	if v := r.URL.Query().Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "top="+strconv.Quote(v)+": want a positive integer")
			return
		}
		top = n
	}
	writeJSON(w, http.StatusOK, l.Snapshot(top))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"message": msg})
}
