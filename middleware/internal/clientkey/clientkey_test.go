package clientkey

import (
	"net/netip"
	"testing"
)

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		bits int
		want string
	}{
		{"10.0.0.1", 0, "10.0.0.1"},
		{"::ffff:10.0.0.1", 0, "10.0.0.1"},
		{"::ffff:10.0.0.1", 64, "10.0.0.1"},
		{"2001:db8:1:2:3:4:5:6", 0, "2001:db8:1:2:3:4:5:6"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"},
	} {
		if got := Key(netip.MustParseAddr(tc.in), tc.bits); got != netip.MustParseAddr(tc.want) {
			t.Errorf("Key(%s, %d) = %s, want %s", tc.in, tc.bits, got, tc.want)
		}
	}
}

// Sequential addresses spread over every shard.
func TestShardSpreads(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 1024; i++ {
		s := Shard(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
		if s < 0 || s >= 1<<ShardBits {
			t.Fatalf("shard %d out of range", s)
		}
		seen[s] = true
	}
	if len(seen) != 1<<ShardBits {
		t.Fatalf("1024 sequential addresses fell in %d of %d shards", len(seen), 1<<ShardBits)
	}
}
