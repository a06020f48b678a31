package crowdsec

import (
	"maps"
	"math"
	"net/netip"
)

// noExpiry is the end of a ban whose duration did not parse: it lasts until
// the LAPI deletes it.
const noExpiry = math.MaxInt64

// table is the bans as Decide reads them: one map per prefix length present,
// per address family, from the prefix to the ban's end (nanoseconds on the
// bouncer's monotonic clock). A lookup masks the address once per length
// present (at most 33 for IPv4, 129 for IPv6; a LAPI sends addresses and a
// few range lengths) and reads a map: constant time, no allocation. A table
// is immutable once published; the puller publishes a new one that shares
// the maps of the lengths a pull did not touch.
type table struct {
	v4, v6 []lenMap
}

type lenMap struct {
	bits int
	m    map[netip.Prefix]int64
}

// lookup returns the ban covering a (unmapped, without zone) at now.
func (t *table) lookup(a netip.Addr, now int64) (netip.Prefix, bool) {
	ms := t.v6
	if a.Is4() {
		ms = t.v4
	}
	for i := range ms {
		p, err := a.Prefix(ms[i].bits)
		if err != nil {
			continue
		}
		if end, ok := ms[i].m[p]; ok && end > now {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// bans is the puller's own copy of every ban, by family and prefix length;
// it is touched only by the bouncer's pulling goroutine, which publishes a
// table after each change.
type bans struct {
	by      [2][129]map[netip.Prefix]int64 // [0] IPv4, [1] IPv6
	touched [2][129]bool
}

func family(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 0
	}
	return 1
}

// set bans p until end.
func (b *bans) set(p netip.Prefix, end int64) {
	f, n := family(p), p.Bits()
	if b.by[f][n] == nil {
		b.by[f][n] = map[netip.Prefix]int64{}
	}
	b.by[f][n][p] = end
	b.touched[f][n] = true
}

// get returns p's ban end.
func (b *bans) get(p netip.Prefix) (int64, bool) {
	m := b.by[family(p)][p.Bits()]
	end, ok := m[p]
	return end, ok
}

// del lifts p's ban.
func (b *bans) del(p netip.Prefix) {
	f, n := family(p), p.Bits()
	if _, ok := b.by[f][n][p]; ok {
		delete(b.by[f][n], p)
		b.touched[f][n] = true
	}
}

// reset drops every ban (a startup pull brings the whole set).
func (b *bans) reset() {
	for f := range b.by {
		for n := range b.by[f] {
			if b.by[f][n] != nil {
				b.by[f][n] = nil
				b.touched[f][n] = true
			}
		}
	}
}

// purge drops the bans that ended before now.
func (b *bans) purge(now int64) {
	for f := range b.by {
		for n, m := range b.by[f] {
			for p, end := range m {
				if end <= now {
					delete(m, p)
					b.touched[f][n] = true
				}
			}
		}
	}
}

// count returns the bans still running at now: addresses and ranges.
func (b *bans) count(now int64) (ips, ranges int) {
	for f := range b.by {
		for n, m := range b.by[f] {
			for _, end := range m {
				if end <= now {
					continue
				}
				if (f == 0 && n == 32) || (f == 1 && n == 128) {
					ips++
				} else {
					ranges++
				}
			}
		}
	}
	return ips, ranges
}

// publish returns the table after the changes since the previous publish,
// sharing with prev the maps of the lengths that did not change (nil prev:
// every length is built).
func (b *bans) publish(prev *table) *table {
	t := &table{}
	old := [2]map[int]map[netip.Prefix]int64{{}, {}}
	if prev != nil {
		for _, lm := range prev.v4 {
			old[0][lm.bits] = lm.m
		}
		for _, lm := range prev.v6 {
			old[1][lm.bits] = lm.m
		}
	}
	for f := range b.by {
		// Longest first: an address's own ban is the likeliest match.
		for n := len(b.by[f]) - 1; n >= 0; n-- {
			m := b.by[f][n]
			if len(m) == 0 {
				continue
			}
			pm, ok := old[f][n]
			if !ok || b.touched[f][n] || prev == nil {
				pm = maps.Clone(m)
			}
			lm := lenMap{bits: n, m: pm}
			if f == 0 {
				t.v4 = append(t.v4, lm)
			} else {
				t.v6 = append(t.v6, lm)
			}
		}
	}
	b.touched = [2][129]bool{}
	return t
}
