package accesslog

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Config says what happens when a proxied connection ends. The zero value
// observes nothing, and then a connection costs nothing extra: no clock
// read, no call.
type Config struct {
	// AccessLog, when set, receives one line per closed proxied connection,
	// with the fields AccessFields keeps, for the connections that lasted
	// AccessMinDuration or longer. Rejected connections are counted
	// (metrics), never logged here.
	AccessLog         *zerolog.Logger
	AccessFields      Fields
	AccessMinDuration time.Duration
	// Metrics counts bytes each way and the duration of every closed
	// connection per router (Routers).
	Metrics bool
	// Unlogged and Uncounted are the entry points whose connections the
	// access log and the per-router metrics leave out (Traefik's
	// entryPoints.<name>.observability.accessLogs and .metrics false).
	Unlogged, Uncounted map[string]bool
}

// Any reports whether anything observes connection ends.
func (o Config) Any() bool { return o.AccessLog != nil || o.Metrics }

// Observer is a load balancer's view of the observers, made once per
// Compile (New): a connection's end calls its Report, a concrete method.
type Observer struct {
	routers             *Routers
	log                 *zerolog.Logger // nil: no access log
	fields              Fields
	min                 time.Duration
	metrics             bool
	unlogged, uncounted map[string]bool // by entry point
}

// New is the observer of a Compile's load balancers: cfg's, counting per
// router in routers.
func New(cfg Config, routers *Routers) *Observer {
	return &Observer{routers: routers, log: cfg.AccessLog, fields: cfg.AccessFields, min: cfg.AccessMinDuration,
		metrics: cfg.Metrics, unlogged: cfg.Unlogged, uncounted: cfg.Uncounted}
}

// Report counts a closed connection in its router's metrics and writes its
// access log line, with each field kept, dropped or redacted.
func (o *Observer) Report(c *tcp.Conn, service, server string, d time.Duration, up, dn int64, failed bool) {
	if o.metrics && !o.uncounted[c.EntryPoint] {
		rs := o.routers.Get(c.Router)
		rs.BytesIn.Add(uint64(up))
		rs.BytesOut.Add(uint64(dn))
		rs.Duration.Observe(d)
	}
	if o.log == nil || d < o.min || o.unlogged[c.EntryPoint] {
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

// Fields is what accessLog.fields makes of each field of a line:
// kept, dropped or redacted. The zero value keeps every field.
type Fields struct{ modes [numFields]uint8 }

// NewFields compiles Traefik's accessLog.fields: defaultMode for
// every field, then each name's mode, a name being Traefik's (ClientHost)
// or tollgate's (client_ip). A name that is neither is Traefik's for an
// HTTP field, and names no field of a TCP line. Modes are keep, drop or
// redact, in any case (config.Static.Validate refused others).
func NewFields(defaultMode string, names map[string]string) Fields {
	var f Fields
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

func (f *Fields) str(ev *zerolog.Event, i int, v string) *zerolog.Event {
	switch f.modes[i] {
	case modeKeep:
		return ev.Str(accessFieldNames[i], v)
	case modeRedact:
		return ev.Str(accessFieldNames[i], redacted)
	}
	return ev
}

func (f *Fields) int(ev *zerolog.Event, i int, v int64) *zerolog.Event {
	switch f.modes[i] {
	case modeKeep:
		return ev.Int64(accessFieldNames[i], v)
	case modeRedact:
		return ev.Str(accessFieldNames[i], redacted)
	}
	return ev
}
