package proxy

import (
	"time"

	"github.com/rs/zerolog"
)

// ConnObservers says what happens when a proxied connection ends. The zero
// value observes nothing, and then a connection costs nothing extra: no clock
// read, no callback.
type ConnObservers struct {
	// AccessLog, when set, receives one line per closed proxied connection.
	// Rejected connections are counted (metrics), never logged here.
	AccessLog *zerolog.Logger
	// Metrics counts bytes each way and the duration of every closed
	// connection per router (State.RouterCounters).
	Metrics bool
}

func (o ConnObservers) any() bool { return o.AccessLog != nil || o.Metrics }

// SetConnObservers sets what configurations compiled from now on observe.
// Call it before the first Apply; a later call applies from the next reload.
func (s *State) SetConnObservers(o ConnObservers) {
	s.mu.Lock()
	s.observers = o
	s.mu.Unlock()
}

func (s *State) connObservers() ConnObservers {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.observers
}

// connObserver is a load balancer's view of the observers.
type connObserver struct {
	st      *State
	log     *zerolog.Logger // nil: no access log
	metrics bool
}

// observe reports a proxied connection's end to the observers: per-router
// bytes and duration, and the access log line. It runs once, on the loop,
// after both sockets are closed and before the connection finishes.
func (rc *rconn) observe() {
	d := time.Since(rc.began)
	o := rc.lb.obs
	c := &rc.c
	if o.metrics {
		rs := o.st.routerStats.get(c.Router)
		rs.BytesIn.Add(uint64(rc.up.n))
		rs.BytesOut.Add(uint64(rc.dn.n))
		rs.Duration.Observe(d)
	}
	if o.log != nil {
		end := "closed"
		if rc.failed {
			end = "error"
		}
		o.log.Log().
			Str("entrypoint", c.EntryPoint).
			Str("router", c.Router).
			Str("service", rc.lb.name).
			Str("server", rc.srv.address).
			Str("client_ip", c.Client.Addr().String()).
			Uint16("client_port", c.Client.Port()).
			Float64("duration_ms", float64(d.Microseconds())/1e3).
			Int64("bytes_in", rc.up.n).
			Int64("bytes_out", rc.dn.n).
			Str("end", end).
			Send()
	}
}
