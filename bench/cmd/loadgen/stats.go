package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// latencies is a per-worker sample buffer, merged after a run.
type latencies []time.Duration

// maxSamples bounds one worker's buffer (8 MiB); past it, samples are
// dropped and the quantiles describe the first maxSamples cycles.
const maxSamples = 1 << 20

func (l *latencies) add(d time.Duration) {
	if len(*l) < maxSamples {
		*l = append(*l, d)
	}
}

// summary adds p50, p99, p99.9 and max (milliseconds) under prefix.
func (l latencies) summary(prefix string, m map[string]any) {
	if len(l) == 0 {
		return
	}
	s := slices.Clone(l)
	slices.Sort(s)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return ms(s[max(0, min(i, len(s)-1))])
	}
	m[prefix+"p50_ms"] = q(0.50)
	m[prefix+"p99_ms"] = q(0.99)
	m[prefix+"p999_ms"] = q(0.999)
	m[prefix+"max_ms"] = ms(s[len(s)-1])
}

func ms(d time.Duration) float64 { return round(float64(d)/1e6, 3) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// counters is a small histogram of error classes.
type counters map[string]int64

func (c counters) add(o counters) {
	for k, v := range o {
		c[k] += v
	}
}

func (c counters) total() (n int64) {
	for _, v := range c {
		n += v
	}
	return n
}

// put records the histogram under key when it is not empty.
func (c counters) put(m map[string]any, key string) {
	if len(c) > 0 {
		m[key] = fmt.Sprint(map[string]int64(c))
	}
}
