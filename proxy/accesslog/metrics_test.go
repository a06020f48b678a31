package accesslog

import (
	"testing"
	"time"
)

func TestDurationHistogramBuckets(t *testing.T) {
	var h DurationHistogram
	h.Observe(time.Millisecond)     // <= 0.005
	h.Observe(2 * time.Second)      // <= 5
	h.Observe(5 * time.Second)      // <= 5 (upper bounds are inclusive)
	h.Observe(10 * time.Hour)       // +Inf
	h.Observe(-1 * time.Nanosecond) // a clock step: counted, adds nothing to the sum
	n, sum, b := h.Snapshot()
	if n != 5 {
		t.Fatalf("count %d, want 5", n)
	}
	if want := 0.001 + 2 + 5 + 36000; sum < want-1e-6 || sum > want+1e-6 {
		t.Fatalf("sum %v, want %v", sum, want)
	}
	if b[0.005] != 2 || b[1] != 2 || b[5] != 4 || b[14400] != 4 {
		t.Fatalf("cumulative buckets %v", b)
	}
}
