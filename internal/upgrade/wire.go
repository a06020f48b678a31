package upgrade

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"time"

	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
)

// The state channel is a stream socket (one end of a socketpair) carrying
// frames: a type byte, a 4-byte big-endian length and the payload. Hello,
// ready, started and fail are JSON (once per upgrade); the snapshot and the
// per-connection messages are binary, so that a snapshot of 100,000 client
// keys is a few megabytes decoded in milliseconds while no process accepts.
//
//	old -> new  hello     JSON Hello: generation, listeners and their descriptors, health, providers
//	new -> old  ready     JSON Ready: configuration applied, listeners in hand, not accepting
//	new -> old  fail      text: why the new process gives up (before ready)
//	old -> new  snapshot  binary: every inFlightConn limiter's counts and totals (and the rateLimit buckets)
//	new -> old  started   JSON Started: the new process accepts
//	old -> new  releases  binary batch: (limiter, key) of connections that ended
//	old -> new  acquires  binary batch: (seq, limiter, key) of connections asking for a slot
//	new -> old  grants    binary batch: (seq, ok)
//	old -> new  bye       empty: every release was sent; the old process exits
//	old -> new  caps      binary batch: (service, server) of capped-server connections that ended
//	old -> new  capsTaken binary batch: (service, server) of capped-server connections it opened
//
// The connections the old process had not routed travel beside it, on the
// connection channel (conns.go).
const (
	msgHello byte = iota + 1
	msgReady
	msgFail
	msgSnapshot
	msgStarted
	msgReleases
	msgAcquires
	msgGrants
	msgBye
	msgCapReleases
	msgCapAcquires
)

// Version is the state channel's protocol version, in Hello.
const Version = 1

// maxFrame bounds a frame's payload: a snapshot of 2 million keys fits.
const maxFrame = 64 << 20

// maxName bounds a limiter's name in a snapshot.
const maxName = 4096

var errFrame = errors.New("malformed state channel message")

// Listener is a listening socket handed to the new process.
type Listener struct {
	// Name is the entry point's name, or "api.address",
	// "metrics.prometheus.address", "ping.entryPoint" or "ping.address" for
	// the admin listeners.
	Name string `json:"name"`
	// Address is the address it was configured with.
	Address string `json:"address"`
	// FD is its descriptor number in the new process.
	FD int `json:"fd"`
}

// Health is one health-checked server's UP/DOWN.
type Health struct {
	Service string `json:"service"`
	Server  string `json:"server"`
	Up      bool   `json:"up"`
}

// Hello is what the old process tells the new one first.
type Hello struct {
	Version    int        `json:"version"`
	Generation uint64     `json:"generation"` // the new process's
	PID        int        `json:"pid"`        // the old process's
	Listeners  []Listener `json:"listeners"`
	Health     []Health   `json:"health,omitempty"`
	// Providers delivered a configuration in the old process: the new one
	// is ready only once each of them has delivered one to it.
	Providers []string `json:"providers,omitempty"`
	// RateLimits: the old process sends the rateLimit buckets in the
	// snapshot to a new process that reads them (Ready.RateLimits).
	RateLimits bool `json:"rateLimits,omitempty"`
	// Capacities: the old process sends its capped servers' counts, and
	// their releases, to a new process that reads them (Ready.Capacities).
	Capacities bool `json:"capacities,omitempty"`
	// ConnsFD is the connection channel's descriptor in the new process
	// (conns.go); 0 from a tollgate from before connections were handed over.
	ConnsFD int `json:"connsFd,omitempty"`
}

// Ready is the new process's "configuration applied, not accepting".
type Ready struct {
	PID int `json:"pid"`
	// Uses names the inherited listeners it serves on; the old process
	// closes the others at once (their entry point is gone or moved).
	Uses []string `json:"uses"`
	// RateLimits: this process reads the rateLimit buckets in the snapshot
	// (Snapshot.WithRates). Absent from a tollgate from before they were
	// handed over, which gets a snapshot without them.
	RateLimits bool `json:"rateLimits,omitempty"`
	// Capacities: this process reads the capped servers' counts and their
	// releases (Snapshot.WithCaps, the caps message).
	Capacities bool `json:"capacities,omitempty"`
	// Connections: this process adopts the connections the old one had
	// not routed, from the connection channel (Hello.ConnsFD).
	Connections bool `json:"connections,omitempty"`
}

// Started is the new process's "accepting".
type Started struct {
	PID int `json:"pid"`
}

// release is a connection of the old process that ended: the limiter's
// index in the snapshot and the client key.
type release struct {
	idx uint16
	key netip.Addr
}

// acquire asks the new process for a slot.
type acquire struct {
	seq uint32
	idx uint16
	key netip.Addr
}

// grant answers an acquire.
type grant struct {
	seq uint32
	ok  bool
}

func writeFrame(w *bufio.Writer, typ byte, payload []byte) error {
	if len(payload) > maxFrame {
		return fmt.Errorf("state channel message of %d bytes: more than %d", len(payload), maxFrame)
	}
	var h [5]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

func writeJSON(w *bufio.Writer, typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := writeFrame(w, typ, b); err != nil {
		return err
	}
	return w.Flush()
}

// readFrame reads one frame. A frame longer than maxFrame or cut short is
// an error; io.EOF means the channel closed between frames.
func readFrame(r *bufio.Reader) (typ byte, payload []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:1]); err != nil {
		return 0, nil, err
	}
	if _, err := io.ReadFull(r, h[1:]); err != nil {
		return 0, nil, fmt.Errorf("%w: header cut short: %v", errFrame, err)
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("%w: length %d is more than %d", errFrame, n, maxFrame)
	}
	// Grown as the bytes arrive: a length alone allocates nothing.
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		return 0, nil, fmt.Errorf("%w: %d-byte payload cut short: %v", errFrame, n, err)
	}
	return h[0], buf.Bytes(), nil
}

// decodeHello parses and checks a hello.
func decodeHello(b []byte) (Hello, error) {
	var h Hello
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("%w: hello: %v", errFrame, err)
	}
	if h.Version != Version {
		return h, fmt.Errorf("hello: protocol version %d, this tollgate speaks %d", h.Version, Version)
	}
	if h.Generation < 2 || h.PID <= 0 {
		return h, fmt.Errorf("%w: hello: generation %d, pid %d", errFrame, h.Generation, h.PID)
	}
	seen := map[string]bool{}
	for _, l := range h.Listeners {
		if l.Name == "" || seen[l.Name] || l.FD < 3 || l.FD > 1<<20 {
			return h, fmt.Errorf("%w: hello: listener %q on descriptor %d", errFrame, l.Name, l.FD)
		}
		seen[l.Name] = true
	}
	if h.ConnsFD != 0 {
		taken := h.ConnsFD < 3 || h.ConnsFD > 1<<20
		for _, l := range h.Listeners {
			taken = taken || l.FD == h.ConnsFD
		}
		if taken {
			return h, fmt.Errorf("%w: hello: connection channel on descriptor %d", errFrame, h.ConnsFD)
		}
	}
	return h, nil
}

// appendAddr appends a key: its length (4 or 16) and bytes.
func appendAddr(b []byte, a netip.Addr) []byte {
	if a.Is4() {
		v := a.As4()
		return append(append(b, 4), v[:]...)
	}
	v := a.As16()
	return append(append(b, 16), v[:]...)
}

// reader decodes the binary payloads; every read checks what is left.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.err = errFrame
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *reader) name() string { return string(r.take(int(r.u16()))) }

func (r *reader) addr() netip.Addr {
	switch n := r.u8(); n {
	case 4:
		if v := r.take(4); v != nil {
			return netip.AddrFrom4([4]byte(v))
		}
	case 16:
		if v := r.take(16); v != nil {
			return netip.AddrFrom16([16]byte(v)).Unmap()
		}
	default:
		if r.err == nil {
			r.err = errFrame
		}
	}
	return netip.Addr{}
}

// Snapshot is what the old process hands over while neither process
// accepts: every inFlightConn limiter's counts and, for a new process that
// reads them (Ready.RateLimits), every rateLimit limiter's buckets.
type Snapshot struct {
	Limiters []inflightconn.Export
	// WithRates: the payload carries the rates section (Rates may be
	// empty). A tollgate from before rateLimit buckets were handed over
	// neither sends nor reads one: the old process sends it only to a new
	// process that reads it (Ready.RateLimits), and the new process expects
	// it only from an old process that sends it (Hello.RateLimits).
	WithRates bool
	Rates     []ratelimit.Export
	// WithCaps: the payload carries the capacities section (after the
	// rates section, if any), under the same rule (Hello.Capacities,
	// Ready.Capacities).
	WithCaps bool
	Caps     []CapExport
}

// CapExport is one capped service's per-server counts in the old process.
type CapExport struct {
	Service string
	Servers []CapCount
}

// CapCount is one server's connections counted in the old process (every
// capped server is listed, with none open too, so that later messages can
// name each).
type CapCount struct {
	Address string
	Open    uint32
}

// capRelease is a connection of the old process to a capped server that
// ended, or that it opened (msgCapAcquires): the service's and the
// server's indexes in the snapshot.
type capRelease struct {
	svc, srv uint16
}

// encodeSnapshot is the snapshot payload:
//
//	u16 limiters, then per limiter: u16 name length, name, i64 amount,
//	u8 dryRun, u8 ipv6Subnet bits, u64 admitted, u64 rejected, u32 keys,
//	then per key: key (u8 length, bytes), i64 count.
//
// With rates, a second section follows:
//
//	u16 rate limiters, then per limiter: u16 name length, name, u8
//	ipv6Subnet bits, u64 emission interval (ns), u64 admitted, u64
//	rejected, u32 keys, then per key: key, u64 ns ahead.
//
// With caps, the last section:
//
//	u16 services, then per service: u16 name length, name, u16 servers,
//	then per server: u16 address length, address, u32 connections.
func encodeSnapshot(snap Snapshot) ([]byte, error) {
	exs := snap.Limiters
	if len(exs) > math.MaxUint16 || len(snap.Rates) > math.MaxUint16 || len(snap.Caps) > math.MaxUint16 {
		return nil, fmt.Errorf("%d %s limiters, %d %s limiters and %d capped services: more than a snapshot holds", len(exs), inflightconn.Name, len(snap.Rates), ratelimit.Name, len(snap.Caps))
	}
	b := binary.BigEndian.AppendUint16(nil, uint16(len(exs)))
	for _, ex := range exs {
		if len(ex.Name) > maxName || len(ex.Keys) > math.MaxUint32 {
			return nil, sectionError(inflightconn.Name, ex.Name)
		}
		b = appendName(b, ex.Name)
		b = binary.BigEndian.AppendUint64(b, uint64(ex.Amount))
		dry := byte(0)
		if ex.DryRun {
			dry = 1
		}
		b = append(b, dry, byte(ex.V6Bits))
		b = appendTotals(b, ex.Admitted, ex.Rejected, len(ex.Keys))
		for _, kc := range ex.Keys {
			b = appendAddr(b, kc.Key)
			b = binary.BigEndian.AppendUint64(b, uint64(kc.Count))
		}
	}
	if snap.WithRates {
		var err error
		if b, err = appendRates(b, snap.Rates); err != nil {
			return nil, err
		}
	}
	if !snap.WithCaps {
		return b, nil
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(snap.Caps)))
	for _, ex := range snap.Caps {
		if len(ex.Service) > maxName || len(ex.Servers) > math.MaxUint16 {
			return nil, fmt.Errorf("capped service %.40q: name or servers too long for a snapshot", ex.Service)
		}
		b = binary.BigEndian.AppendUint16(appendName(b, ex.Service), uint16(len(ex.Servers)))
		for _, c := range ex.Servers {
			if len(c.Address) > maxName {
				return nil, fmt.Errorf("capped server %.40q: address too long for a snapshot", c.Address)
			}
			b = binary.BigEndian.AppendUint32(appendName(b, c.Address), c.Open)
		}
	}
	return b, nil
}

// appendRates appends the rates section.
func appendRates(b []byte, rates []ratelimit.Export) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, uint16(len(rates)))
	for _, ex := range rates {
		if len(ex.Name) > maxName || len(ex.Keys) > math.MaxUint32 {
			return nil, sectionError(ratelimit.Name, ex.Name)
		}
		b = append(appendName(b, ex.Name), byte(ex.V6Bits))
		b = binary.BigEndian.AppendUint64(b, uint64(ex.Interval))
		b = appendTotals(b, ex.Admitted, ex.Rejected, len(ex.Keys))
		for _, kd := range ex.Keys {
			b = appendAddr(b, kd.Key)
			b = binary.BigEndian.AppendUint64(b, uint64(kd.Ahead))
		}
	}
	return b, nil
}

// sectionError is the error of a limiter of the kind (its registered name:
// inFlightConn, rateLimit) that the snapshot's section of that kind cannot
// hold.
func sectionError(kind, name string) error {
	return fmt.Errorf("%s %.40q: name or keys too long for a snapshot", kind, name)
}

// appendName appends a limiter's name: u16 length, bytes.
func appendName(b []byte, name string) []byte {
	return append(binary.BigEndian.AppendUint16(b, uint16(len(name))), name...)
}

// appendTotals appends a limiter's admitted and rejected totals (u64 each)
// and its number of keys (u32).
func appendTotals(b []byte, admitted, rejected uint64, keys int) []byte {
	b = binary.BigEndian.AppendUint64(b, admitted)
	b = binary.BigEndian.AppendUint64(b, rejected)
	return binary.BigEndian.AppendUint32(b, uint32(keys))
}

// maxAhead bounds a bucket's debt in a snapshot (about 73 years, the
// limiter's own cap).
const maxAhead = math.MaxInt64 / 4

// decodeSnapshot parses a snapshot payload, with the rates section when
// withRates (the old process said it sends one: Hello.RateLimits) and the
// capacities section when withCaps (Hello.Capacities). Every
// value is checked: a negative amount or count, a subnet past 128 bits, a
// debt that is not positive or past maxAhead, debts without an interval, a
// missing section or trailing bytes make the whole snapshot an error (the
// upgrade then fails: nothing is imported half).
func decodeSnapshot(b []byte, withRates, withCaps bool) (Snapshot, error) {
	r := &reader{b: b}
	n := int(r.u16())
	var snap Snapshot
	for i := 0; i < n && r.err == nil; i++ {
		var ex inflightconn.Export
		ex.Name = r.name()
		ex.Amount = int64(r.u64())
		dry := r.u8()
		bits := r.u8()
		ex.Admitted, ex.Rejected = r.u64(), r.u64()
		keys := int(r.u32())
		if r.err != nil {
			break
		}
		if ex.Name == "" || ex.Amount < 0 || dry > 1 || bits > 128 || keys > len(r.b)/13 {
			r.err = errFrame
			break
		}
		ex.DryRun, ex.V6Bits = dry == 1, int(bits)
		ex.Keys = make([]inflightconn.KeyCount, 0, keys)
		for j := 0; j < keys && r.err == nil; j++ {
			k := r.addr()
			c := int64(r.u64())
			if r.err == nil && c <= 0 {
				r.err = errFrame
			}
			ex.Keys = append(ex.Keys, inflightconn.KeyCount{Key: k, Count: c})
		}
		snap.Limiters = append(snap.Limiters, ex)
	}
	if r.err == nil && withRates {
		snap.WithRates = true
		n := int(r.u16())
		snap.Rates = make([]ratelimit.Export, 0, min(n, len(r.b)/32))
		for i := 0; i < n && r.err == nil; i++ {
			var ex ratelimit.Export
			ex.Name = r.name()
			bits := r.u8()
			interval := r.u64()
			ex.Admitted, ex.Rejected = r.u64(), r.u64()
			keys := int(r.u32())
			if r.err != nil {
				break
			}
			if ex.Name == "" || bits > 128 || interval > maxAhead || (keys > 0 && interval == 0) || keys > len(r.b)/13 {
				r.err = errFrame
				break
			}
			ex.V6Bits, ex.Interval = int(bits), time.Duration(interval)
			ex.Keys = make([]ratelimit.KeyDebt, 0, keys)
			for j := 0; j < keys && r.err == nil; j++ {
				k := r.addr()
				a := r.u64()
				if r.err == nil && (a == 0 || a > maxAhead) {
					r.err = errFrame
				}
				ex.Keys = append(ex.Keys, ratelimit.KeyDebt{Key: k, Ahead: time.Duration(a)})
			}
			snap.Rates = append(snap.Rates, ex)
		}
	}
	if r.err == nil && withCaps {
		snap.WithCaps = true
		n := int(r.u16())
		snap.Caps = make([]CapExport, 0, min(n, len(r.b)/4))
		for i := 0; i < n && r.err == nil; i++ {
			ex := CapExport{Service: r.name()}
			m := int(r.u16())
			if r.err == nil && (ex.Service == "" || m > len(r.b)/6) {
				r.err = errFrame
			}
			for j := 0; j < m && r.err == nil; j++ {
				c := CapCount{Address: r.name(), Open: r.u32()}
				if r.err == nil && c.Address == "" {
					r.err = errFrame
				}
				ex.Servers = append(ex.Servers, c)
			}
			snap.Caps = append(snap.Caps, ex)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errFrame
	}
	if r.err != nil {
		return Snapshot{}, fmt.Errorf("%w: snapshot", errFrame)
	}
	return snap, nil
}

func appendRelease(b []byte, m release) []byte {
	return appendAddr(binary.BigEndian.AppendUint16(b, m.idx), m.key)
}

func decodeReleases(b []byte, f func(release) error) error {
	r := &reader{b: b}
	for len(r.b) > 0 && r.err == nil {
		m := release{idx: r.u16(), key: r.addr()}
		if r.err == nil {
			if err := f(m); err != nil {
				return err
			}
		}
	}
	if r.err != nil {
		return fmt.Errorf("%w: releases", errFrame)
	}
	return nil
}

func appendCapRelease(b []byte, m capRelease) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(b, m.svc), m.srv)
}

func decodeCapReleases(b []byte, f func(capRelease) error) error {
	r := &reader{b: b}
	for len(r.b) > 0 && r.err == nil {
		m := capRelease{svc: r.u16(), srv: r.u16()}
		if r.err == nil {
			if err := f(m); err != nil {
				return err
			}
		}
	}
	if r.err != nil {
		return fmt.Errorf("%w: capacity releases", errFrame)
	}
	return nil
}

func appendAcquire(b []byte, m acquire) []byte {
	b = binary.BigEndian.AppendUint32(b, m.seq)
	return appendAddr(binary.BigEndian.AppendUint16(b, m.idx), m.key)
}

func decodeAcquires(b []byte, f func(acquire)) error {
	r := &reader{b: b}
	for len(r.b) > 0 && r.err == nil {
		m := acquire{seq: r.u32(), idx: r.u16(), key: r.addr()}
		if r.err == nil {
			f(m)
		}
	}
	if r.err != nil {
		return fmt.Errorf("%w: acquires", errFrame)
	}
	return nil
}

func appendGrant(b []byte, m grant) []byte {
	ok := byte(0)
	if m.ok {
		ok = 1
	}
	return append(binary.BigEndian.AppendUint32(b, m.seq), ok)
}

func decodeGrants(b []byte, f func(grant)) error {
	r := &reader{b: b}
	for len(r.b) > 0 && r.err == nil {
		m := grant{seq: r.u32()}
		ok := r.u8()
		if r.err == nil && ok > 1 {
			r.err = errFrame
		}
		if r.err == nil {
			m.ok = ok == 1
			f(m)
		}
	}
	if r.err != nil {
		return fmt.Errorf("%w: grants", errFrame)
	}
	return nil
}
