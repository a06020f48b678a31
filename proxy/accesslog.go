package proxy

import (
	"time"
	"unsafe"

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

// observedPair is a pair with what the access log and metrics need. The pair
// must stay the first field: observeEnd gets &op.pair from the copier and
// converts it back, which saves a closure allocation per connection.
type observedPair struct {
	pair
	began time.Time
	obs   *connObserver
	svc   string
}

// startObserved starts the copiers of a pair whose end is observed.
func (op *observedPair) startObserved() {
	op.onEnd = observeEnd
	op.start()
}

// observeEnd is the onEnd of every observedPair: it runs once, on the last
// copier, after both sockets are closed and before the connection finishes.
func observeEnd(p *pair) {
	op := (*observedPair)(unsafe.Pointer(p)) // p is &observedPair.pair (first field)
	d := time.Since(op.began)
	o := op.obs
	if o.metrics {
		rc := o.st.routerStats.get(p.c.Router)
		rc.BytesIn.Add(uint64(p.up))
		rc.BytesOut.Add(uint64(p.dn))
		rc.Duration.Observe(d)
	}
	if o.log != nil {
		end := "closed"
		if p.failed.Load() {
			end = "error"
		}
		ev := o.log.Log().
			Str("entrypoint", p.c.EntryPoint).
			Str("router", p.c.Router).
			Str("service", op.svc)
		if a := p.backend.RemoteAddr(); a != nil {
			ev = ev.Str("server", a.String())
		}
		ev.Str("client_ip", p.c.Client.Addr().String()).
			Uint16("client_port", p.c.Client.Port()).
			Float64("duration_ms", float64(d.Microseconds())/1e3).
			Int64("bytes_in", p.up).
			Int64("bytes_out", p.dn).
			Str("end", end).
			Send()
	}
}
