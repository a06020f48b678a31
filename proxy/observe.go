package proxy

import "github.com/tollgate-proxy/tollgate/proxy/accesslog"

// What a proxied connection's end reports (package accesslog), under the
// names the API, the metrics and main use.
type (
	// ConnObservers says what happens when a proxied connection ends
	// (accesslog.Config).
	ConnObservers = accesslog.Config
	// AccessFields is what accessLog.fields makes of each field of a line
	// (accesslog.Fields).
	AccessFields = accesslog.Fields
	// RouterCounters is what a router's closed connections add up to
	// (accesslog.RouterCounters).
	RouterCounters = accesslog.RouterCounters
	// DurationHistogram is a connection duration histogram
	// (accesslog.DurationHistogram).
	DurationHistogram = accesslog.DurationHistogram
)

// DurationBuckets are the upper bounds, in seconds, of the connection
// duration histogram (accesslog.DurationBuckets).
var DurationBuckets = accesslog.DurationBuckets

// NewAccessFields compiles Traefik's accessLog.fields (accesslog.NewFields).
func NewAccessFields(defaultMode string, names map[string]string) AccessFields {
	return accesslog.NewFields(defaultMode, names)
}

func (s *State) connObservers() ConnObservers {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.observers
}

// RouterCounters returns the traffic counters of the named router.
func (s *State) RouterCounters(name string) *RouterCounters { return s.routerStats.Get(name) }

// EachRouterCounters calls f for every router that has traffic counters.
func (s *State) EachRouterCounters(f func(name string, rc *RouterCounters)) { s.routerStats.Each(f) }
