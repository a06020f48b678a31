package tcp

import (
	"net/netip"
	"sync"
	"time"
	"unsafe"
)

// Reason is why a connection was refused, as the record of recent refusals
// (Refusals) keeps it. Its String is the reason label the metrics count it
// under.
type Reason uint8

// The reasons a connection is refused for. Those of a middleware name the
// middleware (Refusal.By), those of a capped service the service, those of
// an entry point (no route, the unrouted bounds) nothing.
const (
	ReasonNone             Reason = iota
	ReasonLimit                   // inFlightConn: the client holds amount connections
	ReasonStoreUnreachable        // inFlightConn: its shared store is unreachable (failureMode closed)
	ReasonStoreQueueFull          // inFlightConn: too many connections wait for its shared store
	ReasonAllowList               // ipAllowList: the client is not in sourceRange
	ReasonRate                    // rateLimit: the client's bucket is empty
	ReasonUnrouted                // the entry point's maxUnroutedPerIP
	ReasonUnroutedTotal           // the entry point's maxUnrouted
	ReasonNoRoute                 // no router matches
	ReasonQueueFull               // a capped service's queue is full
	ReasonQueueTimeout            // a capped service's queue timeout passed
	ReasonQueueEvicted            // a capped service gave the place to a client holding fewer
	ReasonGeoIP                   // geoIP: where the databases place the client is not admitted
	ReasonCrowdSec                // crowdSec: the Local API bans the client, or has not answered (failureMode closed)
	// NumReasons is one more than the last reason: arrays indexed by
	// Reason are [NumReasons]T.
	NumReasons
)

var reasonNames = [NumReasons]string{"", "inflightconn_limit", "store_unreachable", "store_queue_full", "ipallowlist_denied",
	"ratelimit", "unrouted_limit", "unrouted_total_limit", "no_route", "queue_full", "queue_timeout", "queue_evicted",
	"geoip", "crowdsec"}

// Reasons lists every reason, in their order.
func Reasons() []Reason {
	out := make([]Reason, 0, NumReasons-1)
	for r := ReasonLimit; r < NumReasons; r++ {
		out = append(out, r)
	}
	return out
}

// String is the reason's name: the reason label of the metric that counts
// it (tollgate_middleware_connections_total, tollgate_entrypoint_rejected_total;
// queue_* for tollgate_service_queue_rejected_total's full, timeout, evicted).
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// ParseReason is the reason named s (String's names).
func ParseReason(s string) (Reason, bool) {
	for i, n := range reasonNames {
		if i > 0 && n == s {
			return Reason(i), true
		}
	}
	return ReasonNone, false
}

// ByService reports whether Refusal.By names a service (a capped service's
// queue) rather than a middleware.
func (r Reason) ByService() bool { return r >= ReasonQueueFull && r <= ReasonQueueEvicted }

// Refusal is one entry of the record: the refusals of one client address,
// for one reason, by one middleware (or service) on one router and entry
// point, within a second of the first of them.
type Refusal struct {
	First, Last time.Time
	Count       uint32 // refusals folded into the entry, 1 or more
	Reason      Reason
	Client      netip.Addr
	EntryPoint  string
	Router      string // "" when refused before routing
	By          string // the middleware or service (Reason.ByService), "" for the entry point's own reasons
	Message     string // what was refused, without the client's address
}

// DefaultRefusals is the size of a process's record of recent refusals:
// the entries kept (each up to a second of one client's refusals for one
// reason and middleware), about 1.3 MB.
const DefaultRefusals = 10000

// foldSlots is the size of the table that finds a client's latest entry to
// fold a repeat into; a collision costs an entry, never a count.
const foldSlots = 4096

// foldWindow is how long after an entry's first refusal repeats fold into it.
const foldWindow = int64(time.Second)

// entry is a Refusal as kept: the times as Unix nanoseconds.
type entry struct {
	first, last int64
	count       uint32
	reason      Reason
	client      netip.Addr
	ep, router  string
	by, msg     string
}

// Refusals is a bounded, in-memory record of the latest refusals of a
// process, for "why was this client refused?" (GET /api/refusals). Every
// refusal is recorded, none sampled: a repeat of the same client, reason,
// middleware (or service), router and entry point within a second of an
// entry's first is counted in that entry, so one client's flood takes an
// entry a second; a spray of many addresses fills the ring with the latest
// ones. Writing is a copy into a fixed ring under a lock held for it alone,
// and allocates nothing. A nil *Refusals records nothing. It is safe for
// concurrent use.
type Refusals struct {
	mu    sync.Mutex
	ring  []entry
	n     uint64            // entries written, ever: the next goes to ring[n%len]
	fold  [foldSlots]uint64 // 1 + the index (n) of the latest entry whose key hashes here
	total uint64            // refusals recorded (the counts added up)
}

// NewRefusals returns a record that keeps the latest size entries
// (DefaultRefusals when size < 1).
func NewRefusals(size int) *Refusals {
	if size < 1 {
		size = DefaultRefusals
	}
	return &Refusals{ring: make([]entry, size)}
}

// Size is how many entries the record keeps.
func (r *Refusals) Size() int { return len(r.ring) }

// foldHash spreads a client address, reason, router and middleware over
// the fold table. The names are hashed by where their bytes are, not by
// content: the compiled configuration hands every connection the same
// strings, and a hash is only where to look (Add compares the values).
func foldHash(a netip.Addr, why Reason, router, by string) uint64 {
	b := a.As16()
	var hi, lo uint64
	for i := 0; i < 8; i++ {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	names := uint64(uintptr(unsafe.Pointer(unsafe.StringData(router))))*0xD6E8FEB86659FD93 ^ uint64(uintptr(unsafe.Pointer(unsafe.StringData(by))))
	h := (hi*0x9E3779B97F4A7C15 ^ lo*0xC2B2AE3D27D4EB4F ^ names ^ uint64(why)) * 0x165667B19E3779F9
	return h >> 52 // 12 bits: foldSlots
}

// Add records that c is refused for why by by (a middleware or a service,
// "" for the entry point) with msg; c's client, entry point and router are
// read from c.
func (r *Refusals) Add(c *Conn, why Reason, by, msg string) {
	if r == nil {
		return
	}
	now := time.Now().UnixNano()
	a := c.Client.Addr().Unmap()
	h := foldHash(a, why, c.Router, by)
	r.mu.Lock()
	r.total++
	if i := r.fold[h]; i != 0 && r.n-(i-1) <= uint64(len(r.ring)) {
		e := &r.ring[(i-1)%uint64(len(r.ring))]
		if now-e.first < foldWindow && e.reason == why && e.client == a && e.by == by && e.router == c.Router && e.ep == c.EntryPoint {
			e.count++
			e.last = now
			r.mu.Unlock()
			return
		}
	}
	r.ring[r.n%uint64(len(r.ring))] = entry{first: now, last: now, count: 1, reason: why, client: a,
		ep: c.EntryPoint, router: c.Router, by: by, msg: msg}
	r.n++
	r.fold[h] = r.n
	r.mu.Unlock()
}

// Total is the number of refusals recorded since the start (every one,
// folded or not, kept or overwritten since).
func (r *Refusals) Total() uint64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// Match selects entries of the record; the zero value selects every one.
type Match struct {
	Client     netip.Addr // exact (unmapped), when valid
	Prefix     netip.Prefix
	Reason     Reason
	Router, By string
	Since      time.Time // entries whose last refusal is at or after it
}

func (m *Match) matches(e *entry) bool {
	return (!m.Client.IsValid() || e.client == m.Client) &&
		(!m.Prefix.IsValid() || m.Prefix.Contains(e.client)) &&
		(m.Reason == ReasonNone || e.reason == m.Reason) &&
		(m.Router == "" || e.router == m.Router) &&
		(m.By == "" || e.by == m.By) &&
		(m.Since.IsZero() || e.last >= m.Since.UnixNano())
}

// findChunk is how many entries Find scans per hold of the lock: a few
// microseconds during which refusals wait.
const findChunk = 512

// Find returns the latest entries that m selects, newest first, at most
// limit (every one when limit < 1), and how many it selected in all, as
// the record stood when it began. It scans findChunk entries per hold of
// the lock, copying them as they are (the conversion is done after), so
// that refusals wait microseconds, not the whole scan; an entry overwritten
// meanwhile (the ring went round) ends the scan. With Since, the scan stops
// at the entries older than it: the ring is in the order of their first
// refusal.
func (r *Refusals) Find(m Match, limit int) (out []Refusal, matched int) {
	if r == nil {
		return nil, 0
	}
	m.Client = m.Client.Unmap()
	var since int64
	if !m.Since.IsZero() {
		since = m.Since.UnixNano() - foldWindow // an entry's last refusal is within a second of its first
	}
	var found []entry
	size := uint64(len(r.ring))
	r.mu.Lock()
	next := r.n // entries [next-k] for k >= 1, newest first, as of now
	r.mu.Unlock()
scan:
	for next > 0 {
		r.mu.Lock()
		oldest := uint64(0)
		if r.n > size {
			oldest = r.n - size
		}
		for end := next - min(next, findChunk); next > end; {
			next--
			if next < oldest {
				r.mu.Unlock()
				break scan
			}
			e := &r.ring[next%size]
			if since != 0 && e.first < since {
				r.mu.Unlock()
				break scan
			}
			if !m.matches(e) {
				continue
			}
			matched++
			if limit < 1 || len(found) < limit {
				found = append(found, *e)
			}
		}
		r.mu.Unlock()
	}
	out = make([]Refusal, len(found))
	for i, e := range found {
		out[i] = Refusal{First: time.Unix(0, e.first), Last: time.Unix(0, e.last), Count: e.count,
			Reason: e.reason, Client: e.client, EntryPoint: e.ep, Router: e.router, By: e.by, Message: e.msg}
	}
	return out, matched
}
