// Package ratelog bounds the log lines written about events that can arrive
// in floods: rejected connections, failed accepts, failed backend dials. A
// flood must not become a log flood, but an operator must still see that it
// happens and how much of it was not written: every line that is written
// carries the number of lines suppressed since the previous one. Metrics, not
// logs, count every event.
package ratelog

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"time"
)

// DefaultPerSecond is the number of lines a Limiter writes per second when
// PerSecond is zero.
const DefaultPerSecond = 10

// slots is the size of the per-key table. Two keys that share a slot only
// make each other's lines more likely to be written, never less.
const slots = 256

// Limiter decides which lines to write: at most one per key per second and
// PerSecond lines per second in all. The zero value is ready to use and
// writes DefaultPerSecond lines a second. A Limiter is safe for concurrent
// use; it must not be copied after first use.
type Limiter struct {
	// PerSecond bounds the lines written per second over every key.
	PerSecond int

	mu         sync.Mutex
	second     int64
	lines      int
	suppressed uint64
	// slot is made by the first Allow: a limiter sits in every service and
	// middleware, most of which never log (a configuration of 100,000
	// services held 400 MB of empty tables).
	slot *[slots]struct {
		key    uint64
		second int64
	}
}

// Allow reports whether a line about key may be written now. When it may,
// suppressed is the number of lines refused since the last one allowed; the
// caller writes it with the line (as "suppressed") so that nothing is lost
// silently.
func (l *Limiter) Allow(key uint64) (ok bool, suppressed uint64) {
	now := time.Now().Unix()
	per := l.PerSecond
	if per <= 0 {
		per = DefaultPerSecond
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.slot == nil {
		l.slot = new([slots]struct {
			key    uint64
			second int64
		})
	}
	s := &l.slot[key%slots]
	if now != l.second {
		l.second, l.lines = now, 0
	}
	if (s.key == key && s.second == now) || l.lines >= per {
		l.suppressed++
		return false, 0
	}
	s.key, s.second = key, now
	l.lines++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

var seed = maphash.MakeSeed()

// Addr returns the key of a client address.
func Addr(a netip.Addr) uint64 {
	b := a.As16()
	return maphash.Bytes(seed, b[:])
}

// String returns the key of a string (a server address, an error).
func String(s string) uint64 { return maphash.String(seed, s) }
