package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// HistorySeconds is how far back GET /api/history goes: one sample a
// second for the last five minutes.
const HistorySeconds = 300

// series is one value per second, a ring indexed by the Unix second.
type series [HistorySeconds]uint32

func (s *series) at(sec int64) *uint32 { return &s[sec%HistorySeconds] }

// mwHistory is what History keeps of one middleware: its totals at the
// last sample, and its seconds while it has something to show.
type mwHistory struct {
	kind               string // inflightconn, ratelimit, ipallowlist
	prevAdm, prevRefus uint64
	quiet              int       // samples in a row with nothing to show
	s                  *mwSeries // nil once quiet for HistorySeconds
	seen               int64     // the second of the last sample that found it
}

// mwSeries is one middleware's seconds: admitted and refused per second
// (the counters' increase), and for inFlightConn the connections and
// distinct clients at each sample.
type mwSeries struct {
	admitted, refused, inFlight, clients series
}

// History samples, once a second on one goroutine (Run), the counters the
// proxy keeps anyway (the middlewares' admitted and rejected totals, the
// entry points' and capped services' refusals), and keeps their increase
// per second for HistorySeconds: admitted and refused per middleware, and
// the refusals of the whole process by reason (tcp.Reason). Nothing is
// added to a connection's path. A middleware's seconds are kept while it
// has something to show (memory: about 5 KB per busy middleware, none for
// an idle one). A zero History is not usable: use NewHistory.
type History struct {
	srv *proxy.Server

	mu      sync.Mutex
	end     int64 // the Unix second of the latest sample; 0 before the first
	samples int   // how many seconds hold samples (at most HistorySeconds)
	reasons [tcp.NumReasons]series
	prevRsn [tcp.NumReasons]uint64
	mws     map[string]*mwHistory
}

// reasonOrder is the reasons History counts, in tcp.Reason order.
var reasonOrder = tcp.Reasons()

// NewHistory returns the sampler of srv's counters; Run samples them.
func NewHistory(srv *proxy.Server) *History {
	return &History{srv: srv, mws: map[string]*mwHistory{}}
}

// Run samples every second until ctx ends.
func (h *History) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	h.sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.sample(now)
		}
	}
}

// delta is a counter's increase since prev; a counter that went back (a
// limiter made anew) counts from zero.
func delta(cur, prev uint64) uint32 {
	if cur < prev {
		return uint32(min(cur, 1<<32-1))
	}
	return uint32(min(cur-prev, 1<<32-1))
}

// sample reads the counters at now and files their increase since the last
// sample under now's second (a second without a sample, the process being
// stopped, stays zero: its increase lands in the next).
func (h *History) sample(now time.Time) {
	sec := now.Unix()
	var rsn [tcp.NumReasons]uint64
	add := func(r tcp.Reason, n uint64) { rsn[r] += n }

	h.mu.Lock()
	defer h.mu.Unlock()
	first := h.end == 0
	if !first && sec <= h.end {
		return // a second sampled already
	}
	// Zero the seconds from the last sample to this one.
	from := h.end + 1
	if first || sec-from >= HistorySeconds {
		from = sec - HistorySeconds + 1
	}
	for s := from; s <= sec; s++ {
		for i := range h.reasons {
			*h.reasons[i].at(s) = 0
		}
		for _, m := range h.mws {
			if m.s != nil {
				*m.s.admitted.at(s), *m.s.refused.at(s), *m.s.inFlight.at(s), *m.s.clients.at(s) = 0, 0, 0, 0
			}
		}
	}
	if first {
		h.samples = 1
	} else {
		h.samples = int(min(int64(h.samples)+sec-h.end, HistorySeconds))
	}
	st := h.srv.State()
	st.Keepers().Counts(func(name string, c middleware.Counts) {
		h.fileMiddleware(sec, first, name, c)
		if c.DryRun {
			return // would-be refusals: nothing was refused
		}
		for _, r := range c.Reasons {
			add(r.Reason, r.N)
		}
	})
	for _, name := range h.srv.EntryPointNames() {
		ep := h.srv.EntryPoint(name)
		u := ep.Unrouted(0)
		add(tcp.ReasonNoRoute, ep.NoRoute())
		add(tcp.ReasonUnrouted, u.Rejected)
		add(tcp.ReasonUnroutedTotal, u.RejectedMax)
	}
	st.EachCapacity(func(_ string, cs proxy.CapacityState) {
		add(tcp.ReasonQueueFull, cs.RejectedFull)
		add(tcp.ReasonQueueTimeout, cs.TimedOut)
		add(tcp.ReasonQueueEvicted, cs.Evicted)
	})
	for i, n := range rsn {
		if i == int(tcp.ReasonNone) {
			continue
		}
		if !first {
			*h.reasons[i].at(sec) = delta(n, h.prevRsn[i])
		}
		h.prevRsn[i] = n
	}
	for name, m := range h.mws {
		if m.seen != sec {
			delete(h.mws, name) // gone, with its counters: one made anew counts from zero
		}
	}
	h.end = sec
}

// fileMiddleware files one middleware's counts c under second sec (the
// first sample only sets where its counters start). Called under h.mu.
func (h *History) fileMiddleware(sec int64, first bool, name string, c middleware.Counts) {
	kind, adm, rej, inFlight, clients := c.Type, c.Admitted, c.Rejected, c.InFlight, c.Clients
	m := h.mws[name]
	if m == nil {
		m = &mwHistory{kind: kind}
		if first {
			m.prevAdm, m.prevRefus = adm, rej
		}
		h.mws[name] = m
	}
	m.seen = sec
	a, r := delta(adm, m.prevAdm), delta(rej, m.prevRefus)
	m.prevAdm, m.prevRefus, m.kind = adm, rej, kind
	if a == 0 && r == 0 && inFlight <= 0 {
		if m.quiet++; m.quiet >= HistorySeconds {
			m.s = nil // every second it kept is zero now
		}
		if m.s == nil {
			return
		}
	} else {
		m.quiet = 0
		if m.s == nil {
			m.s = new(mwSeries) // the seconds before were zero
		}
	}
	*m.s.admitted.at(sec), *m.s.refused.at(sec) = a, r
	*m.s.inFlight.at(sec), *m.s.clients.at(sec) = uint32(max(inFlight, 0)), uint32(max(clients, 0))
}

// historyView is GET /api/history's answer: per-second values, oldest
// first, the last at end.
type historyView struct {
	Interval    string                    `json:"interval"`
	End         time.Time                 `json:"end"`
	Seconds     int                       `json:"seconds"`
	Reasons     map[string][]uint32       `json:"reasons"`
	Middlewares map[string]*mwHistoryView `json:"middlewares,omitempty"`
}

type mwHistoryView struct {
	Type     string   `json:"type"`
	Admitted []uint32 `json:"admitted"`
	Refused  []uint32 `json:"refused"`
	InFlight []uint32 `json:"inFlight,omitempty"`
	Clients  []uint32 `json:"clients,omitempty"`
}

// view returns the last n seconds (every one kept when n is 0 or more
// than are kept) of the reasons and of the named middlewares (a name that
// is no middleware with counters is left out).
func (h *History) view(names []string, n int) historyView {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n <= 0 || n > h.samples {
		n = h.samples
	}
	v := historyView{Interval: "1s", Seconds: n, Reasons: map[string][]uint32{}}
	if h.end != 0 {
		v.End = time.Unix(h.end, 0).UTC()
	}
	read := func(s *series) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = *s.at(h.end - int64(n-1-i))
		}
		return out
	}
	for _, r := range reasonOrder {
		v.Reasons[r.String()] = read(&h.reasons[r])
	}
	for _, name := range names {
		if v.Middlewares == nil {
			v.Middlewares = map[string]*mwHistoryView{}
		}
		m := h.mws[name]
		if m == nil {
			continue // not a middleware with counters
		}
		ms := m.s
		if ms == nil {
			ms = &mwSeries{} // quiet for the whole window
		}
		mv := &mwHistoryView{Type: m.kind, Admitted: read(&ms.admitted), Refused: read(&ms.refused)}
		if m.kind == "inflightconn" {
			mv.InFlight, mv.Clients = read(&ms.inFlight), read(&ms.clients)
		}
		v.Middlewares[name] = mv
	}
	return v
}

// history serves GET /api/history: the refusals of the process per second
// by reason, and with middleware=<name> (repeated for several) that
// middleware's admitted and refused per second; seconds=<n> the last n
// only (at most HistorySeconds).
func (s Sources) history(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err := boundedParam(q, "seconds", HistorySeconds, HistorySeconds)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	names := q["middleware"]
	if len(names) > maxHistoryMiddlewares {
		writeError(w, http.StatusBadRequest, "at most 100 middleware= parameters")
		return
	}
	writeJSON(w, http.StatusOK, s.History.view(names, n))
}

// maxHistoryMiddlewares bounds the middlewares one /api/history asks for.
const maxHistoryMiddlewares = 100

// lastMinute returns, per named middleware, what it admitted and refused
// in the last 60 seconds sampled.
func (h *History) lastMinute(names []string) map[string][2]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][2]uint64, len(names))
	n := int64(min(h.samples, 60))
	for _, name := range names {
		m := h.mws[name]
		if m == nil || m.s == nil {
			continue
		}
		var sum [2]uint64
		for i := int64(0); i < n; i++ {
			sum[0] += uint64(*m.s.admitted.at(h.end - i))
			sum[1] += uint64(*m.s.refused.at(h.end - i))
		}
		out[name] = sum
	}
	return out
}
