package proxy

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// ConnObservers says what happens when a proxied connection ends. The zero
// value observes nothing, and then a connection costs nothing extra: no clock
// read, no callback.
type ConnObservers struct {
	// AccessLog, when set, receives one line per closed proxied connection,
	// with the fields AccessFields keeps, for the connections that lasted
	// AccessMinDuration or longer. Rejected connections are counted
	// (metrics), never logged here.
	AccessLog         *zerolog.Logger
	AccessFields      AccessFields
	AccessMinDuration time.Duration
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
	fields  AccessFields
	min     time.Duration
	metrics bool
}

// observe reports a proxied connection's end to the observers: per-router
// bytes and duration, and the access log line. It runs once, on the loop,
// after both sockets are closed and before the connection finishes.
func (rc *rconn) observe() {
	rc.lb.obs.report(&rc.c, rc.lb.name, rc.srv.address, time.Since(rc.began), rc.up.n, rc.dn.n, rc.failed)
}

// report counts a closed connection in its router's metrics and writes its
// access log line, with each field kept, dropped or redacted.
func (o *connObserver) report(c *tcp.Conn, service, server string, d time.Duration, up, dn int64, failed bool) {
	if o.metrics {
		rs := o.st.routerStats.get(c.Router)
		rs.BytesIn.Add(uint64(up))
		rs.BytesOut.Add(uint64(dn))
		rs.Duration.Observe(d)
	}
	if o.log == nil || d < o.min {
		return
	}
	end := "closed"
	if failed {
		end = "error"
	}
	f := &o.fields
	ev := o.log.Log()
	ev = f.str(ev, fieldEntryPoint, c.EntryPoint)
	ev = f.str(ev, fieldRouter, c.Router)
	ev = f.str(ev, fieldService, service)
	ev = f.str(ev, fieldServer, server)
	switch f.modes[fieldClientIP] {
	case modeKeep:
		ev = ev.Str(accessFieldNames[fieldClientIP], c.Client.Addr().String())
	case modeRedact:
		ev = ev.Str(accessFieldNames[fieldClientIP], redacted)
	}
	switch f.modes[fieldClientPort] {
	case modeKeep:
		ev = ev.Uint16(accessFieldNames[fieldClientPort], c.Client.Port())
	case modeRedact:
		ev = ev.Str(accessFieldNames[fieldClientPort], redacted)
	}
	switch f.modes[fieldDuration] {
	case modeKeep:
		ev = ev.Float64(accessFieldNames[fieldDuration], float64(d.Microseconds())/1e3)
	case modeRedact:
		ev = ev.Str(accessFieldNames[fieldDuration], redacted)
	}
	ev = f.int(ev, fieldBytesIn, up)
	ev = f.int(ev, fieldBytesOut, dn)
	ev.Str("end", end).Send()
}

// The access log's fields, in the order of a line ("end" and "time" are
// always written).
const (
	fieldEntryPoint = iota
	fieldRouter
	fieldService
	fieldServer
	fieldClientIP
	fieldClientPort
	fieldDuration
	fieldBytesIn
	fieldBytesOut
	numFields
)

var accessFieldNames = [numFields]string{"entrypoint", "router", "service", "server", "client_ip", "client_port", "duration_ms", "bytes_in", "bytes_out"}

// traefikFields are Traefik's access log field names (accessLog.fields.names)
// and the fields of a TCP line they stand for.
var traefikFields = map[string][]int{
	"EntryPointName":        {fieldEntryPoint},
	"RouterName":            {fieldRouter},
	"ServiceName":           {fieldService},
	"ServiceAddr":           {fieldServer},
	"ServiceURL":            {fieldServer},
	"ServiceHost":           {fieldServer},
	"ClientAddr":            {fieldClientIP, fieldClientPort},
	"ClientHost":            {fieldClientIP},
	"ClientPort":            {fieldClientPort},
	"Duration":              {fieldDuration},
	"RequestContentSize":    {fieldBytesIn},
	"DownstreamContentSize": {fieldBytesOut},
}

const (
	modeKeep uint8 = iota
	modeDrop
	modeRedact
)

// redacted is what a redacted field says, as in Traefik.
const redacted = "REDACTED"

// AccessFields is what accessLog.fields makes of each field of a line:
// kept, dropped or redacted. The zero value keeps every field.
type AccessFields struct{ modes [numFields]uint8 }

// NewAccessFields compiles Traefik's accessLog.fields: defaultMode for
// every field, then each name's mode, a name being Traefik's (ClientHost)
// or tollgate's (client_ip). A name that is neither is Traefik's for an
// HTTP field, and names no field of a TCP line. Modes are keep, drop or
// redact, in any case (config.Static.Validate refused others).
func NewAccessFields(defaultMode string, names map[string]string) AccessFields {
	var f AccessFields
	for i := range f.modes {
		f.modes[i] = modeOf(defaultMode)
	}
	// Traefik's names first, then tollgate's, so that a field named both
	// ways takes the more precise.
	for _, name := range slices.Sorted(maps.Keys(names)) {
		for _, i := range traefikFields[name] {
			f.modes[i] = modeOf(names[name])
		}
	}
	for i, n := range accessFieldNames {
		if m, ok := names[n]; ok {
			f.modes[i] = modeOf(m)
		}
	}
	return f
}

func modeOf(s string) uint8 {
	switch strings.ToLower(s) {
	case "drop":
		return modeDrop
	case "redact":
		return modeRedact
	}
	return modeKeep
}

func (f *AccessFields) str(ev *zerolog.Event, i int, v string) *zerolog.Event {
	switch f.modes[i] {
	case modeKeep:
		return ev.Str(accessFieldNames[i], v)
	case modeRedact:
		return ev.Str(accessFieldNames[i], redacted)
	}
	return ev
}

func (f *AccessFields) int(ev *zerolog.Event, i int, v int64) *zerolog.Event {
	switch f.modes[i] {
	case modeKeep:
		return ev.Int64(accessFieldNames[i], v)
	case modeRedact:
		return ev.Str(accessFieldNames[i], redacted)
	}
	return ev
}
