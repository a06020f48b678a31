package ratelog

import (
	"net/netip"
	"testing"
)

func TestOneLinePerKeyPerSecondAndBoundedInAll(t *testing.T) {
	var l Limiter
	allowed := 0
	var suppressed uint64
	// 1,000 events about 3 keys, then 1,000 about 1,000 keys, all within a
	// second or two: a key is written at most once a second, and at most
	// DefaultPerSecond lines a second in all.
	for i := 0; i < 1000; i++ {
		if ok, s := l.Allow(uint64(i % 3)); ok {
			allowed++
			suppressed += s
		}
	}
	for i := 0; i < 1000; i++ {
		if ok, s := l.Allow(Addr(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))); ok {
			allowed++
			suppressed += s
		}
	}
	if allowed < 3 || allowed > 3*DefaultPerSecond {
		t.Fatalf("%d lines allowed for 2,000 events, want between 3 and %d", allowed, 3*DefaultPerSecond)
	}
	// Every refused line is reported by a later allowed one, except those
	// refused after the last allowed line.
	if suppressed == 0 || suppressed > uint64(2000-allowed) {
		t.Fatalf("suppressed %d, allowed %d of 2000", suppressed, allowed)
	}
}

func TestKeysDiffer(t *testing.T) {
	if Addr(netip.MustParseAddr("10.0.0.1")) == Addr(netip.MustParseAddr("10.0.0.2")) {
		t.Fatal("two addresses share a key")
	}
	if String("a") == String("b") {
		t.Fatal("two strings share a key")
	}
}
