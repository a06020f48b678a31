package api

import (
	"cmp"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// refusalView is one entry of the record of recent refusals as the API
// shows it (tcp.Refusal).
type refusalView struct {
	First      time.Time `json:"first"`
	Last       time.Time `json:"last"`
	Count      uint32    `json:"count"`
	Reason     string    `json:"reason"`
	ClientIP   string    `json:"clientIP"`
	EntryPoint string    `json:"entryPoint"`
	Router     string    `json:"router,omitempty"`
	Middleware string    `json:"middleware,omitempty"`
	Service    string    `json:"service,omitempty"`
	Message    string    `json:"message"`
}

func viewOf(e tcp.Refusal) refusalView {
	v := refusalView{First: e.First.UTC(), Last: e.Last.UTC(), Count: e.Count, Reason: e.Reason.String(), ClientIP: e.Client.String(),
		EntryPoint: e.EntryPoint, Router: e.Router, Message: e.Message}
	if e.Reason.ByService() {
		v.Service = e.By
	} else {
		v.Middleware = e.By
	}
	return v
}

// refusalsView is GET /api/refusals's answer.
type refusalsView struct {
	// Size is how many entries the record keeps; RecordedTotal the
	// refusals recorded since the start; Matched the entries kept that the
	// query selects, of which Refusals holds the newest (limit).
	Size          int           `json:"size"`
	RecordedTotal uint64        `json:"recordedTotal"`
	Matched       int           `json:"matched"`
	Refusals      []refusalView `json:"refusals"`
}

// Bounds of GET /api/refusals' limit.
const (
	defaultRefusalsLimit = 100
	maxRefusalsLimit     = 1000
)

// matchOf reads the selection of the record's entries from the query:
// ip (an address, or a prefix: 10.0.0.0/24), reason, router, middleware or
// service, since (a duration: the last 5m). A bad value is an error naming
// the parameter.
func matchOf(r *http.Request) (tcp.Match, error) {
	q := r.URL.Query()
	var m tcp.Match
	if ip := strings.TrimSpace(q.Get("ip")); ip != "" {
		if strings.Contains(ip, "/") {
			p, err := netip.ParsePrefix(ip)
			if err != nil {
				return m, fmt.Errorf("ip=%q: want an IP address or a prefix (10.0.0.0/24)", ip)
			}
			m.Prefix = p.Masked()
			if m.Prefix.Addr().Is4In6() {
				m.Prefix = netip.PrefixFrom(m.Prefix.Addr().Unmap(), max(m.Prefix.Bits()-96, 0))
			}
		} else {
			a, err := netip.ParseAddr(strings.Trim(ip, "[]"))
			if err != nil {
				return m, fmt.Errorf("ip=%q: want an IP address or a prefix (10.0.0.0/24)", ip)
			}
			m.Client = a.WithZone("").Unmap()
		}
	}
	if v := q.Get("reason"); v != "" {
		rs, ok := tcp.ParseReason(v)
		if !ok {
			var names []string
			for _, r := range tcp.Reasons() {
				names = append(names, r.String())
			}
			return m, fmt.Errorf("reason=%q: want one of %s", v, strings.Join(names, ", "))
		}
		m.Reason = rs
	}
	m.Router = q.Get("router")
	m.By = cmp.Or(q.Get("middleware"), q.Get("service"))
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return m, fmt.Errorf("since=%q: want a positive duration (30s, 5m)", v)
		}
		m.Since = time.Now().Add(-d)
	}
	return m, nil
}

// refusals serves GET /api/refusals: the record of recent refusals
// (tcp.Refusals), newest first, selected by matchOf's parameters, at most
// limit (default 100, at most 1000) entries.
func (s Sources) refusals(w http.ResponseWriter, r *http.Request) {
	m, err := matchOf(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := boundedParam(r.URL.Query(), "limit", defaultRefusalsLimit, maxRefusalsLimit)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rec := s.Server.Refusals()
	found, matched := rec.Find(m, limit)
	out := refusalsView{Size: rec.Size(), RecordedTotal: rec.Total(), Matched: matched, Refusals: make([]refusalView, 0, len(found))}
	for _, e := range found {
		out.Refusals = append(out.Refusals, viewOf(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// boundedParam reads the integer query parameter key, from 1 to most, def
// when absent; the error names the parameter.
func boundedParam(q url.Values, key string, def, most int) (int, error) {
	v := q.Get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, fmt.Errorf("%s=%q: want an integer from 1 to %d", key, v, most)
	}
	return n, nil
}

// refusedClient is one client of GET /api/tcp/middlewares/<name>/refused.
type refusedClient struct {
	ClientIP  string    `json:"clientIP"`
	Refused   uint64    `json:"refused"`
	PerSecond float64   `json:"perSecond"`
	Last      time.Time `json:"lastRefused"`
	Reason    string    `json:"reason"`
	Message   string    `json:"message"`
}

// refusedView is GET /api/tcp/middlewares/<name>/refused's answer.
type refusedView struct {
	Middleware string          `json:"middleware"`
	Window     string          `json:"window"`
	Clients    int             `json:"clients"`
	Refused    uint64          `json:"refused"`
	Top        []refusedClient `json:"topClients"`
}

// refused serves GET /api/tcp/middlewares/<name>/refused: the clients the
// middleware refused in the last window (since=, default 1m, at most 5m),
// most refused first (top=, default 20), with their rate over the window,
// read from the record of recent refusals.
func (s Sources) refused(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, ok := s.Server.Runtime().Middlewares[name]; !ok {
		writeError(w, http.StatusNotFound, "middleware "+strconv.Quote(name)+" not found")
		return
	}
	q := r.URL.Query()
	window := time.Minute
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > HistorySeconds*time.Second {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("since=%q: want a duration from 1s to 5m", v))
			return
		}
		window = d
	}
	top, err := boundedParam(q, "top", 20, MaxTop)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	found, _ := s.Server.Refusals().Find(tcp.Match{By: name, Since: time.Now().Add(-window)}, 0)
	by := map[netip.Addr]*refusedClient{}
	out := refusedView{Middleware: name, Window: window.String(), Top: []refusedClient{}}
	var list []*refusedClient
	for _, e := range found { // newest first: the first seen of a client is its latest
		out.Refused += uint64(e.Count)
		c := by[e.Client]
		if c == nil {
			c = &refusedClient{ClientIP: e.Client.String(), Last: e.Last.UTC(), Reason: e.Reason.String(), Message: e.Message}
			by[e.Client] = c
			list = append(list, c)
		}
		c.Refused += uint64(e.Count)
	}
	slices.SortStableFunc(list, func(a, b *refusedClient) int { return cmp.Compare(b.Refused, a.Refused) })
	out.Clients = len(list)
	for _, c := range list[:min(top, len(list))] {
		c.PerSecond = float64(c.Refused) / window.Seconds()
		out.Top = append(out.Top, *c)
	}
	writeJSON(w, http.StatusOK, out)
}

// storeView is one shared store as GET /api/stores shows it: its state and
// the inFlightConn middlewares that keep their counts in it.
type storeView struct {
	inflightconn.StoreState
	Middlewares []string `json:"middlewares"`
}

// stores serves GET /api/stores: the shared stores the inFlightConn
// middlewares use (docs/operations/replicas.md), by name.
func (s Sources) stores(w http.ResponseWriter, _ *http.Request) {
	byStore := map[*inflightconn.Store][]string{}
	inflightconn.Limiters(s.Server.State().Keepers()).Each(func(name string, l *inflightconn.Limiter) {
		if st := l.Store(); st != nil {
			byStore[st] = append(byStore[st], name)
		}
	})
	out := []storeView{}
	for st, mws := range byStore {
		slices.Sort(mws)
		v := storeView{StoreState: st.State(nil), Middlewares: mws}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b storeView) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}

// limiterView is one limiting middleware as GET /api/limiters shows it:
// its live counters without its clients (GET .../clients has those), and
// what it refused in the last minute (from the history, when kept).
type limiterView struct {
	Name        string `json:"name"`
	Type        string `json:"type"` // inflightconn or ratelimit
	Status      string `json:"status"`
	DryRun      bool   `json:"dryRun,omitempty"`
	Amount      int64  `json:"amount,omitempty"` // inFlightConn
	InFlight    int64  `json:"inFlight"`
	DistinctIPs int64  `json:"distinctIPs"`
	// Average, Period and Burst are a rateLimit's rule.
	Average         int64  `json:"average,omitempty"`
	Period          string `json:"period,omitempty"`
	Burst           int64  `json:"burst,omitempty"`
	Admitted        uint64 `json:"admittedTotal"`
	Rejected        uint64 `json:"rejectedTotal"`
	RefusedLastMin  uint64 `json:"refusedLastMinute"`
	AdmittedLastMin uint64 `json:"admittedLastMinute"`
	Store           string `json:"store,omitempty"`
	StoreReachable  *bool  `json:"storeReachable,omitempty"`
}

// limitersView is GET /api/limiters's answer.
type limitersView struct {
	Total    int           `json:"total"`
	Limiters []limiterView `json:"limiters"`
}

// limiters serves GET /api/limiters: the enabled inFlightConn and rateLimit
// middlewares with their counters, busiest first (refused in the last
// minute, then connections in flight, then admitted in the last minute,
// then name), at most top (default 100, at most 1000); search= keeps those
// whose name holds the text. It reads counters, not clients: cheap at
// thousands of middlewares.
func (s Sources) limiters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	top, err := boundedParam(q, "top", 100, MaxTop)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	search := strings.ToLower(q.Get("search"))
	var out []limiterView
	var names []string
	for name, mi := range s.Server.Runtime().Middlewares {
		if search != "" && !strings.Contains(strings.ToLower(name), search) {
			continue
		}
		v := limiterView{Name: name, Status: mi.Status}
		switch l := mi.Live().(type) {
		case *inflightconn.Limiter:
			st := l.Stats()
			v.Type, v.DryRun, v.Amount, v.InFlight, v.DistinctIPs, v.Admitted, v.Rejected = "inflightconn", st.DryRun, st.Amount, st.InFlight, st.DistinctIPs, st.Admitted, st.Rejected
			if store := l.Store(); store != nil {
				up := store.Reachable()
				v.Store, v.StoreReachable = store.Name(), &up
			}
		case *ratelimit.Limiter:
			st := l.Stats()
			v.Type, v.DryRun, v.DistinctIPs, v.Admitted, v.Rejected = "ratelimit", st.DryRun, st.DistinctIPs, st.Admitted, st.Rejected
			v.Average, v.Period, v.Burst = st.Average, time.Duration(st.Period).String(), st.Burst
		default:
			continue
		}
		out = append(out, v)
		names = append(names, name)
	}
	if s.History != nil {
		last := s.History.lastMinute(names)
		for i := range out {
			out[i].AdmittedLastMin, out[i].RefusedLastMin = last[out[i].Name][0], last[out[i].Name][1]
		}
	}
	slices.SortFunc(out, func(a, b limiterView) int {
		return cmp.Or(cmp.Compare(b.RefusedLastMin, a.RefusedLastMin), cmp.Compare(b.InFlight, a.InFlight),
			cmp.Compare(b.AdmittedLastMin, a.AdmittedLastMin), strings.Compare(a.Name, b.Name))
	})
	res := limitersView{Total: len(out), Limiters: out[:min(top, len(out))]}
	if res.Limiters == nil {
		res.Limiters = []limiterView{}
	}
	writeJSON(w, http.StatusOK, res)
}
