// Package api is tollgate's admin listener: /ping, the Traefik-shaped
// /api/rawdata and /api/tcp/* views of the running configuration, Traefik's
// /api/version, /api/overview, /api/entrypoints, /api/certificates and its
// empty /api/http/* and /api/udp/* lists, live inFlightConn and rateLimit
// state, provider status, and /metrics (tollgate's series and Traefik's).
package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/middleware"
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
	// UpgradeToken is the token POST /api/upgrade takes
	// (api.upgradeTokenFile); empty, it refuses every request.
	UpgradeToken string
	// Log says what the API refuses (the zero Logger says nothing).
	Log zerolog.Logger
	// Static is the static configuration, for Traefik's views of it: the
	// entry points' configuration, the overview's providers and features.
	// Without it those views show what the proxy and the watcher know.
	Static *config.Static
	// Version and Started are GET /api/version's: tollgate's version and
	// when this process started.
	Version string
	Started time.Time
	// Dashboard serves /dashboard/ (api.dashboard); History the
	// per-second counts GET /api/history shows (nil leaves it out).
	Dashboard bool
	History   *History
	// Debug serves /debug/vars and /debug/pprof/ (api.debug, debug.go).
	Debug bool
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
	mux.HandleFunc("GET /api/version", src.version)
	mux.HandleFunc("GET /api/certificates", src.list(kindCertificates))
	mux.HandleFunc("GET /api/certificates/{name}", src.detail(kindCertificates))
	// Traefik's HTTP and UDP resources: tollgate routes TCP, so these are
	// Traefik's empty lists, with its query parameters, and a 404 for a name.
	for _, e := range []struct {
		path string
		k    kind
	}{
		{"/api/http/routers", kindHTTPRouters}, {"/api/http/services", kindHTTPServices}, {"/api/http/middlewares", kindHTTPMiddlewares},
		{"/api/udp/routers", kindUDPRouters}, {"/api/udp/services", kindUDPServices},
	} {
		mux.HandleFunc("GET "+e.path, src.list(e.k))
		mux.HandleFunc("GET "+e.path+"/{name}", src.detail(e.k))
	}
	if src.Metrics != nil {
		mux.Handle("GET /metrics", src.Metrics)
	}
	if src.Process != nil {
		mux.HandleFunc("GET /api/process", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, src.Process())
		})
	}
	if src.Upgrade != nil {
		mux.HandleFunc("POST /api/upgrade", src.upgradeHandler())
	}
	src.addDashboard(mux)
	if src.Debug {
		addDebug(mux)
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
	Routers     map[string]*proxy.RouterInfo  `json:"tcpRouters"`
	Services    map[string]*proxy.ServiceInfo `json:"tcpServices"`
	Middlewares map[string]shownMiddleware    `json:"tcpMiddlewares"`
	// ServersTransports and TLS are the applied configuration's, private
	// keys redacted (config.RedactTLS).
	ServersTransports map[string]*config.TCPServersTransport `json:"tcpServersTransports,omitempty"`
	TLS               *config.TLSConfiguration               `json:"tls,omitempty"`
	Providers         []provider.Status                      `json:"providers"`
}

// shownMiddleware is a middleware as the API shows it: v (its
// MiddlewareInfo, or Traefik's list item that embeds it) with the members
// its Live shows beside it (middleware.Viewer: inFlight, rateLimitState,
// geoIPDatabases, ...), which encoding/json cannot flatten from a value
// whose type it does not know.
type shownMiddleware struct {
	v    any
	info *proxy.MiddlewareInfo
	view map[string]any
}

// MarshalJSON writes v's object with the view's members after its own, by
// key.
func (m shownMiddleware) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(m.v)
	if err != nil || len(m.view) == 0 {
		return b, err
	}
	b = b[:len(b)-1] // v's closing brace
	for _, k := range slices.Sorted(maps.Keys(m.view)) {
		val, err := json.Marshal(m.view[k])
		if err != nil {
			return nil, err
		}
		key, _ := json.Marshal(k)
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(append(append(b, key...), ':'), val...)
	}
	return append(b, '}'), nil
}

// withLive returns the middlewares with what their live state shows (a
// middleware.Viewer's members, top bounding the clients listed).
func (s Sources) withLive(rt *proxy.Runtime, top int) map[string]shownMiddleware {
	out := make(map[string]shownMiddleware, len(rt.Middlewares))
	for name, mi := range rt.Middlewares {
		m := shownMiddleware{v: mi, info: mi}
		if v, ok := mi.Live().(middleware.Viewer); ok {
			m.view = v.View(top)
		}
		out[name] = m
	}
	return out
}

// withHealth returns copies of the service infos with live server status
// (UP for each server of a load balancer without a health check).
func (s Sources) withHealth(rt *proxy.Runtime) map[string]*proxy.ServiceInfo {
	out := make(map[string]*proxy.ServiceInfo, len(rt.Services))
	for name, si := range rt.Services {
		st, capa := s.Server.State().ServerStatus(name), s.Server.State().Capacity(name)
		if st == nil {
			st = si.AllUp()
		}
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
	kindCertificates
	kindHTTPRouters
	kindHTTPServices
	kindHTTPMiddlewares
	kindUDPRouters
	kindUDPServices
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
	name   string // the name sortBy=name sorts on (a qualified name; a certificate's common name)
	id     string // the key: equal to name but for certificates (their fingerprint)
	status string
	search []string          // what search= looks in (nil: the name)
	fields map[string]string // sortBy field -> value (besides name and status)
	num    int64             // the numeric sort key: a router's priority, a service's server count, a certificate's expiry
}

func (s Sources) items(k kind) map[string]item { return s.itemsIn(k, s.Server.Runtime()) }

// itemsIn is items of the routers, services and middlewares of rt.
func (s Sources) itemsIn(k kind, rt *proxy.Runtime) map[string]item {
	out := map[string]item{}
	switch k {
	case kindRouters:
		for n, v := range rt.Routers {
			nm := nameOf(n)
			if v.TCPRouter != nil && len(v.EntryPoints) == 0 && len(v.Using) > 0 {
				// Traefik gives a router that names no entry point the
				// default ones: those it serves on.
				cp, r := *v, *v.TCPRouter
				r.EntryPoints = v.Using
				cp.TCPRouter = &r
				v = &cp
			}
			out[n] = item{
				value: struct {
					*proxy.RouterInfo
					named
					// PriorityStr is Traefik's: the priority as a string,
					// exact where JavaScript's numbers are not.
					PriorityStr string `json:"priorityStr"`
				}{v, nm, strconv.Itoa(v.Priority)},
				name: n, status: v.Status, num: int64(v.Priority),
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
				name: n, status: v.Status, num: int64(servers),
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
		for n, m := range s.withLive(rt, s.TopLimit) {
			nm := nameOf(n)
			v := m.info
			typ := strings.ToLower(v.Type)
			m.v = struct {
				*proxy.MiddlewareInfo
				named
				// Type is Traefik's spelling: the configuration key
				// lower-cased (inflightconn); rawdata keeps the type's
				// name (InFlightConn).
				Type string `json:"type,omitempty"`
			}{v, nm, typ}
			out[n] = item{
				value: m,
				name:  n, status: v.Status,
				fields: map[string]string{"provider": nm.Provider, "type": typ},
			}
		}
	case kindCertificates:
		for _, c := range s.certificates() {
			out[c.Name] = item{
				value: c, name: c.CommonName, id: c.Name, status: c.Status, num: c.NotAfter.Unix(),
				search: append([]string{c.CommonName, c.IssuerOrg, c.IssuerCN}, c.SANs...),
				fields: map[string]string{"issuer": c.issuer()},
			}
		}
	}
	for k, it := range out {
		if it.id == "" {
			it.id = it.name
			out[k] = it
		}
	}
	return out
}

// only is rt with the router, service and middleware named name alone
// (what of them exists).
func only(rt *proxy.Runtime, name string) *proxy.Runtime {
	one := *rt
	one.Routers, one.Services, one.Middlewares = pick(rt.Routers, name), pick(rt.Services, name), pick(rt.Middlewares, name)
	return &one
}

func pick[V any](m map[string]V, name string) map[string]V {
	if v, ok := m[name]; ok {
		return map[string]V{name: v}
	}
	return nil
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
	kindCertificates:      {"cn", "issuer", "validUntil"},
	kindHTTPRouters:       {"provider", "rule", "service", "priority", "entryPoints", "middlewares", "tls"},
	kindHTTPServices:      {"provider", "type", "servers"},
	kindHTTPMiddlewares:   {"provider", "type"},
	kindUDPRouters:        {"provider", "service", "entryPoints"},
	kindUDPServices:       {"provider", "type", "servers"},
}

// statuses are the status= values a list takes: Traefik's resource
// statuses, and its certificates' (expired, and warning within 30 days of
// the end).
func statuses(k kind) []string {
	if k == kindCertificates {
		return []string{certEnabled, certWarning, certExpired}
	}
	return []string{proxy.StatusEnabled, proxy.StatusWarning, proxy.StatusDisabled}
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
		if st := statuses(k); status != "" && !slices.Contains(st, status) {
			writeError(w, http.StatusBadRequest, "status="+strconv.Quote(status)+": want "+strings.Join(st[:len(st)-1], ", ")+" or "+st[len(st)-1])
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
		svcName, mwName := q.Get("serviceName"), q.Get("middlewareName")

		var sel []item
		for _, it := range s.items(k) {
			in := it.search
			if in == nil {
				in = []string{it.name}
			}
			if search != "" && !slices.ContainsFunc(in, func(v string) bool { return strings.Contains(strings.ToLower(v), search) }) {
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
			case "name", "cn":
			case "status":
				c = strings.Compare(a.status, b.status)
			case "priority", "servers", "validUntil":
				c = cmp.Compare(a.num, b.num)
			default:
				c = strings.Compare(a.fields[sortBy], b.fields[sortBy])
			}
			if c == 0 {
				c = cmp.Or(strings.Compare(a.name, b.name), strings.Compare(a.id, b.id))
			}
			if desc {
				c = -c
			}
			return c
		})
		page, next, err := pageOf(q, len(sel))
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		out := make([]any, 0, len(page))
		for _, it := range sel[page[0]:page[1]] {
			out = append(out, it.value)
		}
		w.Header().Set(nextPageHeader, strconv.Itoa(next))
		writeJSON(w, http.StatusOK, out)
	}
}

// pageOf is Traefik's pagination of n items by page and per_page: the
// page's bounds and the next page's number (1 on the last). A bad
// parameter, or a page past the end, is an error that names it.
func pageOf(q url.Values, n int) (bounds [2]int, next int, err error) {
	page, err := intParam(q, "page", 1)
	if err != nil {
		return bounds, 0, err
	}
	perPage, err := intParam(q, "per_page", defaultPerPage)
	if err != nil {
		return bounds, 0, err
	}
	start := (page - 1) * perPage
	if start != 0 && start >= n {
		return bounds, 0, fmt.Errorf("page %d with per_page %d is past the end (%d items)", page, perPage, n)
	}
	next = 1
	if page*perPage < n {
		next = page + 1
	}
	return [2]int{start, min(start+perPage, n)}, next, nil
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
		// One resource's view, not every one's: at 100,000 routers the
		// whole list took a second to build.
		it, ok := s.itemsIn(k, only(s.Server.Runtime(), name))[name]
		if !ok {
			msg := strconv.Quote(name) + " not found"
			if k >= kindHTTPRouters {
				msg += ": tollgate routes TCP only (" + r.URL.Path + ")"
			}
			writeError(w, http.StatusNotFound, msg)
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
	l, ok := mi.Live().(middleware.ClientLister)
	if !ok {
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
	writeJSON(w, http.StatusOK, l.Clients(top))
}

// writeJSON writes v as the answer. Whatever field of v a private key was
// written in (a rule, an address, an error quoting a value), it is
// redacted: the configuration's own certificates and keys are shown
// without content already (config.RedactTLS), this is the net under
// everything else.
func writeJSON(w http.ResponseWriter, code int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		msg, _ := json.Marshal(map[string]string{"message": "encoding the answer: " + err.Error()})
		code, b = http.StatusInternalServerError, *bytes.NewBuffer(msg)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(config.RedactPrivateKeys(b.Bytes()))
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"message": msg})
}
