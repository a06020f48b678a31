// Package clientkey is what the per-client middlewares (inFlightConn,
// rateLimit) share about the key a client is counted under and the shard of
// their locked maps it falls in, so that both count a client the same way.
package clientkey

import "net/netip"

// ShardBits is log2 of the number of shards a limiter spreads its keys
// over: 64 independently locked maps.
const ShardBits = 6

// Key returns the key a client address is counted under: the address
// itself (IPv4-mapped IPv6 unmapped), or its /v6Bits prefix for an IPv6
// address when 0 < v6Bits < 128.
func Key(a netip.Addr, v6Bits int) netip.Addr {
	a = a.Unmap()
	if v6Bits > 0 && a.Is6() && v6Bits < 128 {
		p, _ := a.Prefix(v6Bits)
		return p.Addr()
	}
	return a
}

// Shard returns the shard, in [0, 1<<ShardBits), that key k falls in.
// Fibonacci hashing spreads sequential addresses over the shards.
func Shard(k netip.Addr) int {
	var h uint64
	if k.Is4() {
		b := k.As4()
		h = uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	} else {
		b := k.As16()
		for _, x := range b {
			h = h*31 + uint64(x)
		}
	}
	h *= 0x9E3779B97F4A7C15
	return int(h >> (64 - ShardBits))
}
