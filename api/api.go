// Package api is tollgate's admin listener: /ping, the Traefik-shaped
// /api/rawdata and /api/tcp/* views of the running configuration, live
// inFlightConn and rateLimit state, provider status, and /metrics.
package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// Sources is what the API reads. Both fields must be set.
type Sources struct {
	Server   *proxy.Server
	Watcher  *provider.Watcher
	Metrics  http.Handler // nil when metrics are off
	TopLimit int          // top clients shown per limiter in rawdata (default 10)
	// Process is this process's generation and handover counters
	// (GET /api/process); nil leaves the endpoint out.
	Process func() upgrade.View
	// Upgrade starts a binary upgrade and returns its outcome
	// (POST /api/upgrade); nil leaves the endpoint out.
	Upgrade func(context.Context) (upgrade.Result, error)
}

// MaxTop bounds ?top= on the clients endpoint: a snapshot sorts every client
// key, but what it returns (and the JSON it writes) stays small.
const MaxTop = 1000

// Handler returns the admin API's HTTP handler.
func Handler(src Sources) http.Handler {
	if src.TopLimit == 0 {
		src.TopLimit = 10
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", ping)
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
	// Traefik spells it serverstransports; the key is serversTransports.
	for _, p := range []string{"/api/tcp/serverstransports", "/api/tcp/serversTransports"} {
		mux.HandleFunc("GET "+p, src.list(kindServersTransports))
		mux.HandleFunc("GET "+p+"/{name}", src.detail(kindServersTransports))
	}
	mux.HandleFunc("GET /api/tcp/middlewares/{name}/clients", src.clients)
	mux.HandleFunc("GET /api/tls/certificates", func(w http.ResponseWriter, _ *http.Request) {
		// The default TLS store's certificates as the last Compile loaded
		// them: names, issuer, expiry, which routers they serve; never a
		// key. Then what the certificate resolvers hold now, and the names
		// they have none for yet.
		certs := append([]proxy.CertificateInfo{}, src.Server.Runtime().Certificates...)
		certs = append(certs, src.Server.ResolverCertificates()...)
		writeJSON(w, http.StatusOK, certs)
	})
	mux.HandleFunc("GET /api/overview", src.overview)
	mux.HandleFunc("GET /api/entrypoints", src.entryPoints)
	mux.HandleFunc("GET /api/entrypoints/{name}", src.entryPoint)
	if src.Metrics != nil {
		mux.Handle("GET /metrics", src.Metrics)
	}
	if src.Process != nil {
		mux.HandleFunc("GET /api/process", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, src.Process())
		})
	}
	if src.Upgrade != nil {
		mux.HandleFunc("POST /api/upgrade", src.upgradeHandler)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// Every endpoint but POST /api/upgrade is read-only: say so
			// rather than "not found".
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed: the admin API is read-only (GET), but for POST /api/upgrade")
			return
		}
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	})
	return mux
}

type rawData struct {
	Routers     map[string]*proxy.RouterInfo     `json:"tcpRouters"`
	Services    map[string]*proxy.ServiceInfo    `json:"tcpServices"`
	Middlewares map[string]*proxy.MiddlewareInfo `json:"tcpMiddlewares"`
	// ServersTransports and TLS are the applied configuration's, private
	// keys redacted (config.RedactTLS).
	ServersTransports map[string]*config.TCPServersTransport `json:"tcpServersTransports,omitempty"`
	TLS               *config.TLSConfiguration               `json:"tls,omitempty"`
	Providers         []provider.Status                      `json:"providers"`
}

// withLive returns copies of the middleware infos with live limiter state.
func (s Sources) withLive(rt *proxy.Runtime, top int) map[string]*proxy.MiddlewareInfo {
	out := make(map[string]*proxy.MiddlewareInfo, len(rt.Middlewares))
	for name, mi := range rt.Middlewares {
		if l := mi.LiveLimiter(); l != nil {
			cp := *mi
			st := l.Snapshot(top)
			cp.Limiter = &st
			if store := l.Store(); store != nil {
				ss := store.State(l)
				cp.Store = &ss
			}
			mi = &cp
		}
		if l := mi.LiveRateLimiter(); l != nil {
			cp := *mi
			st := l.Snapshot(top)
			cp.RateLimiter = &st
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
		st, capa := s.Server.State().ServerStatus(name), s.Server.State().Capacity(name)
		if st != nil || capa != nil {
			cp := *si
			if st != nil {
				cp.ServerStatus = st
			}
			cp.Capacity = capa
			si = &cp
		}
		out[name] = si
	}
	return out
}

func (s Sources) rawdata(w http.ResponseWriter, _ *http.Request) {
	rt := s.Server.Runtime()
	applied := s.Watcher.Applied()
	if applied == nil {
		applied = &config.TCPConfiguration{}
	}
	writeJSON(w, http.StatusOK, rawData{
		Routers:           rt.Routers,
		Services:          s.withHealth(rt),
		Middlewares:       s.withLive(rt, s.TopLimit),
		ServersTransports: s.transports(applied),
		TLS:               config.RedactTLS(applied.TLS),
		Providers:         s.Watcher.Statuses(),
	})
}

// transports are the applied configuration's servers transports, keys
// redacted, and default@internal: the static tcpServersTransport, or
// Traefik's defaults (as Traefik lists it).
func (s Sources) transports(applied *config.TCPConfiguration) map[string]*config.TCPServersTransport {
	var m map[string]*config.TCPServersTransport
	if applied != nil {
		m = config.RedactTransports(applied.ServersTransports)
	}
	if m == nil {
		m = map[string]*config.TCPServersTransport{}
	}
	if _, ok := m[config.DefaultTransportName]; !ok {
		d := s.Server.State().DefaultTransport()
		if d == nil {
			d = &config.TCPServersTransport{}
		}
		m[config.DefaultTransportName] = d
	}
	return m
}

type kind int

const (
	kindRouters kind = iota
	kindServices
	kindMiddlewares
	kindServersTransports
)

// named adds Traefik's list fields to a resource.
type named struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
}

// serviceType adds Traefik's service type ("loadbalancer" or "weighted").
type serviceType struct {
	Type string `json:"type,omitempty"`
}

// item is one resource of a list: its JSON value and what the query
// parameters filter and sort on.
type item struct {
	value  any
	name   string
	status string
	fields map[string]string // sortBy field -> value (besides name and status)
	num    int               // the numeric sort key: a router's priority, a service's server count
}

func (s Sources) items(k kind) map[string]item {
	rt := s.Server.Runtime()
	out := map[string]item{}
	switch k {
	case kindRouters:
		for n, v := range rt.Routers {
			nm := nameOf(n)
			out[n] = item{
				value: struct {
					*proxy.RouterInfo
					named
				}{v, nm},
				name: n, status: v.Status, num: v.Priority,
				fields: map[string]string{"provider": nm.Provider, "rule": v.Rule, "service": v.Service,
					"entryPoints": strings.Join(v.EntryPoints, ","), "middlewares": strings.Join(v.Middlewares, ",")},
			}
		}
	case kindServices:
		for n, v := range s.withHealth(rt) {
			nm := nameOf(n)
			typ := ""
			servers := 0
			switch {
			case v.LoadBalancer != nil:
				typ, servers = "loadbalancer", len(v.LoadBalancer.Servers)
			case v.Weighted != nil:
				typ, servers = "weighted", len(v.Weighted.Services)
			}
			out[n] = item{
				value: struct {
					*proxy.ServiceInfo
					named
					serviceType
				}{v, nm, serviceType{typ}},
				name: n, status: v.Status, num: servers,
				fields: map[string]string{"provider": nm.Provider, "type": typ},
			}
		}
	case kindServersTransports:
		for n, v := range s.transports(s.Watcher.Applied()) {
			nm := nameOf(n)
			out[n] = item{
				value: struct {
					*config.TCPServersTransport
					named
				}{v, nm},
				name: n, status: proxy.StatusEnabled,
				fields: map[string]string{"provider": nm.Provider},
			}
		}
	case kindMiddlewares:
		for n, v := range s.withLive(rt, s.TopLimit) {
			nm := nameOf(n)
			out[n] = item{
				value: struct {
					*proxy.MiddlewareInfo
					named
				}{v, nm},
				name: n, status: v.Status,
				fields: map[string]string{"provider": nm.Provider, "type": strings.ToLower(v.Type)},
			}
		}
	}
	return out
}

func nameOf(q string) named {
	_, prov, _ := strings.Cut(q, "@")
	return named{Name: q, Provider: prov}
}

// sortFields lists the sortBy values each list accepts (besides name and status).
var sortFields = map[kind][]string{
	kindRouters:           {"provider", "rule", "service", "priority", "entryPoints", "middlewares"},
	kindServices:          {"provider", "type", "servers"},
	kindMiddlewares:       {"provider", "type"},
	kindServersTransports: {"provider"},
}

// Pagination defaults, as in Traefik's API.
const (
	defaultPerPage = 100
	nextPageHeader = "X-Next-Page"
)

// list serves a list endpoint with Traefik's query parameters: search (a
// case-insensitive substring of the qualified name), status, serviceName and
// middlewareName (routers), sortBy and direction (asc|desc), page and
// per_page. X-Next-Page holds the next page number, 1 on the last page. A bad
// parameter is a 400 naming it; a page past the end is a 400 too (as in Traefik).
func (s Sources) list(k kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		search := strings.ToLower(q.Get("search"))
		status := q.Get("status")
		switch status {
		case "", proxy.StatusEnabled, proxy.StatusWarning, proxy.StatusDisabled:
		default:
			writeError(w, http.StatusBadRequest, "status="+strconv.Quote(status)+": want enabled, warning or disabled")
			return
		}
		sortBy := q.Get("sortBy")
		if sortBy == "" {
			sortBy = "name"
		}
		if sortBy != "name" && sortBy != "status" && !slices.Contains(sortFields[k], sortBy) {
			writeError(w, http.StatusBadRequest, "sortBy="+strconv.Quote(sortBy)+": want one of name, status, "+strings.Join(sortFields[k], ", "))
			return
		}
		desc := false
		switch d := q.Get("direction"); d {
		case "", "asc":
		case "desc":
			desc = true
		default:
			writeError(w, http.StatusBadRequest, "direction="+strconv.Quote(d)+": want asc or desc")
			return
		}
		page, err := intParam(q, "page", 1)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		perPage, err := intParam(q, "per_page", defaultPerPage)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		svcName, mwName := q.Get("serviceName"), q.Get("middlewareName")

		var sel []item
		for _, it := range s.items(k) {
			if search != "" && !strings.Contains(strings.ToLower(it.name), search) {
				continue
			}
			if status != "" && it.status != status {
				continue
			}
			if k == kindRouters {
				if svcName != "" && it.fields["service"] != svcName {
					continue
				}
				if mwName != "" && !slices.Contains(strings.Split(it.fields["middlewares"], ","), mwName) {
					continue
				}
			}
			sel = append(sel, it)
		}
		slices.SortFunc(sel, func(a, b item) int {
			c := 0
			switch sortBy {
			case "name":
			case "status":
				c = strings.Compare(a.status, b.status)
			case "priority", "servers":
				c = cmp.Compare(a.num, b.num)
			default:
				c = strings.Compare(a.fields[sortBy], b.fields[sortBy])
			}
			if c == 0 {
				c = strings.Compare(a.name, b.name)
			}
			if desc {
				c = -c
			}
			return c
		})
		start := (page - 1) * perPage
		if start != 0 && start >= len(sel) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("page %d with per_page %d is past the end (%d items)", page, perPage, len(sel)))
			return
		}
		end := min(start+perPage, len(sel))
		next := 1
		if page*perPage < len(sel) {
			next = page + 1
		}
		out := make([]any, 0, end-start)
		for _, it := range sel[start:end] {
			out = append(out, it.value)
		}
		w.Header().Set(nextPageHeader, strconv.Itoa(next))
		writeJSON(w, http.StatusOK, out)
	}
}

// intParam reads a positive integer query parameter, def when absent.
func intParam(q url.Values, key string, def int) (int, error) {
	v := q.Get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", key, v)
	}
	return n, nil
}

func (s Sources) detail(k kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		it, ok := s.items(k)[name]
		if !ok {
			writeError(w, http.StatusNotFound, strconv.Quote(name)+" not found")
			return
		}
		writeJSON(w, http.StatusOK, it.value)
	}
}

func (s Sources) clients(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	mi, ok := s.Server.Runtime().Middlewares[name]
	if !ok {
		writeError(w, http.StatusNotFound, "middleware "+strconv.Quote(name)+" not found")
		return
	}
	l, rl := mi.LiveLimiter(), mi.LiveRateLimiter()
	if l == nil && rl == nil {
		writeError(w, http.StatusBadRequest, "middleware "+strconv.Quote(name)+" is not an enabled inFlightConn or rateLimit")
		return
	}
	top := 100
	if v := r.URL.Query().Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxTop {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("top=%q: want an integer from 1 to %d", v, MaxTop))
			return
		}
		top = n
	}
	if rl != nil {
		writeJSON(w, http.StatusOK, rl.Snapshot(top))
		return
	}
	writeJSON(w, http.StatusOK, l.Snapshot(top))
}

// sectionCount is Traefik's overview count of one kind of resource.
type sectionCount struct {
	Total    int `json:"total"`
	Warnings int `json:"warnings"`
	Errors   int `json:"errors"`
}

func count[V any](m map[string]V, status func(V) string) sectionCount {
	var c sectionCount
	for _, v := range m {
		c.Total++
		switch status(v) {
		case proxy.StatusWarning:
			c.Warnings++
		case proxy.StatusDisabled:
			c.Errors++
		}
	}
	return c
}

// overview is Traefik's /api/overview for the TCP part: how many routers,
// services and middlewares, with warnings and errors, and the providers.
func (s Sources) overview(w http.ResponseWriter, _ *http.Request) {
	rt := s.Server.Runtime()
	var provs []string
	for _, st := range s.Watcher.Statuses() {
		provs = append(provs, st.Name)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"tcp": map[string]sectionCount{
			"routers":     count(rt.Routers, func(v *proxy.RouterInfo) string { return v.Status }),
			"services":    count(rt.Services, func(v *proxy.ServiceInfo) string { return v.Status }),
			"middlewares": count(rt.Middlewares, func(v *proxy.MiddlewareInfo) string { return v.Status }),
		},
		"providers": provs,
	})
}

// entryPointInfo is an entry point as /api/entrypoints shows it.
type entryPointInfo struct {
	Name         string `json:"name"`
	Address      string `json:"address"`
	Open         int64  `json:"openConnections"`
	Accepted     uint64 `json:"acceptedTotal"`
	NoRoute      uint64 `json:"noRouteTotal"`
	AcceptErrors uint64 `json:"acceptErrorsTotal"`
	// Unrouted is the connections accepted and not yet routed (reading a
	// PROXY header or a ClientHello), with the clients holding most of them.
	Unrouted proxy.UnroutedState `json:"unrouted"`
}

// epTopUnrouted is how many client IPs /api/entrypoints shows per entry point
// by connections waiting to be routed.
const epTopUnrouted = 10

func epInfo(ep *proxy.EntryPoint) entryPointInfo {
	return entryPointInfo{Name: ep.Name(), Address: ep.Addr().String(), Open: ep.Open(), Accepted: ep.Accepted(),
		NoRoute: ep.NoRoute(), AcceptErrors: ep.AcceptErrors(), Unrouted: ep.Unrouted(epTopUnrouted)}
}

func (s Sources) entryPoints(w http.ResponseWriter, _ *http.Request) {
	out := []entryPointInfo{}
	for _, name := range s.Server.EntryPointNames() {
		out = append(out, epInfo(s.Server.EntryPoint(name)))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s Sources) entryPoint(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ep := s.Server.EntryPoint(name)
	if ep == nil {
		writeError(w, http.StatusNotFound, "entry point "+strconv.Quote(name)+" not found")
		return
	}
	writeJSON(w, http.StatusOK, epInfo(ep))
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
