package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// batch is the outcome of opening several connections at once from one
// address.
type batch struct {
	conns  []*net.TCPConn // admitted, still open
	counts map[Outcome]int
	errs   counters // error classes of the connections not admitted
}

func (b batch) admitted() int { return b.counts[Admitted] }

// openBatch opens n connections from d together (released by one barrier)
// and probes each with a 1-byte ping.
func openBatch(d *net.Dialer, target string, n int, timeout time.Duration) batch {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		gate = make(chan struct{})
		b    = batch{counts: map[Outcome]int{}, errs: counters{}}
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			c, o, err := probe(d, target, timeout)
			mu.Lock()
			defer mu.Unlock()
			b.counts[o]++
			if err != nil {
				b.errs[errClass(o.String(), err)]++
			}
			if c != nil {
				b.conns = append(b.conns, c)
			}
		}()
	}
	close(gate)
	wg.Wait()
	return b
}

// readmit runs `want` re-admitters at once, each probing from d every
// `every` until it is admitted or `timeout` passes, and returns the
// admitted connections with the time from start to the first and to the
// last admission (-1 when none or not all got in).
func readmit(d *net.Dialer, target string, want int, start time.Time, every, pingTimeout, timeout time.Duration) (held []*net.TCPConn, first, all float64, attempts int) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		times []time.Duration
	)
	for i := 0; i < want; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for time.Since(start) < timeout {
				n++
				c, o, _ := probe(d, target, pingTimeout)
				if o == Admitted {
					el := time.Since(start)
					mu.Lock()
					held, times = append(held, c), append(times, el)
					attempts += n
					mu.Unlock()
					return
				}
				time.Sleep(every)
			}
			mu.Lock()
			attempts += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	first, all = -1, -1
	if len(times) > 0 {
		first = ms(slices.Min(times))
	}
	if len(times) == want {
		all = ms(slices.Max(times))
	}
	return held, first, all, attempts
}

func limitExactCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	extra := fs.Int("extra", 5, "connections beyond the limit to attempt from each address")
	ipA := fs.String("ip-a", "127.2.0.1", "address A")
	ipB := fs.String("ip-b", "127.2.0.2", "address B (independence check)")
	cycles := fs.Int("cycles", 5, "close-and-readmit cycles; release times are their median and max")
	pingTimeout := fs.Duration("ping-timeout", time.Second, "wait for the 1-byte echo before calling a connection pending")
	releaseTimeout := fs.Duration("release-timeout", 5*time.Second, "give up waiting for released slots after this")
	retryEvery := fs.Duration("retry-every", time.Millisecond, "pause between one re-admitter's attempts")
	return func() (*Result, error) {
		a, err1 := netip.ParseAddr(*ipA)
		b, err2 := netip.ParseAddr(*ipB)
		if err1 != nil || err2 != nil || !a.IsLoopback() || !b.IsLoopback() {
			return nil, fmt.Errorf("-ip-a and -ip-b must be loopback addresses")
		}
		want := c.limit
		if want <= 0 {
			want = 10 // no limit (direct): every attempt should be admitted
		}
		n := want + *extra
		if c.limit <= 0 {
			want = n
		}
		da, db := newDialer(a, c.dialTimeout), newDialer(b, c.dialTimeout)
		m := map[string]any{"attempted_per_ip": n, "expected_admitted": want}

		// 1. N+extra at once from A: exactly N get through.
		t0 := time.Now()
		ba := openBatch(da, c.target, n, *pingTimeout)
		m["a_batch_ms"] = ms(time.Since(t0))
		m["a_admitted"] = ba.admitted()
		m["a_rejected"] = ba.counts[Rejected]
		m["a_pending"] = ba.counts[Pending]
		m["a_dial_failed"] = ba.counts[DialFailed]
		ba.errs.put(m, "a_error_kinds")
		passExact := ba.admitted() == want

		// 2. The same from B while A is full: B has its own N.
		bb := openBatch(db, c.target, n, *pingTimeout)
		defer closeAll(bb.conns)
		m["b_admitted"] = bb.admitted()
		m["b_rejected"] = bb.counts[Rejected]
		m["b_pending"] = bb.counts[Pending]
		passIndep := bb.admitted() == want

		// 3. Close A's connections; N re-admitters retry at once until all
		// are in. Then the limit must hold again. Repeated `cycles` times.
		held := ba.conns
		defer func() { closeAll(held) }()
		var firsts, alls []float64
		passRelease := true
		var over, attempts int
		for cy := 0; cy < *cycles; cy++ {
			closeAll(held)
			rel := time.Now()
			var first, all float64
			var at int
			held, first, all, at = readmit(da, c.target, want, rel, *retryEvery, *pingTimeout, *releaseTimeout)
			attempts += at
			firsts, alls = append(firsts, first), append(alls, all)
			ov := openBatch(da, c.target, *extra, *pingTimeout)
			closeAll(ov.conns)
			if c.limit > 0 {
				over += ov.admitted()
				passRelease = passRelease && ov.admitted() == 0
			}
			passRelease = passRelease && all >= 0
		}
		m["readmit_attempts"] = attempts
		m["over_admitted_after_release"] = over
		m["release_first_ms"] = medianOrNever(firsts)
		m["release_all_ms"] = medianOrNever(alls)
		m["release_all_max_ms"] = maxOrNever(alls)

		m["pass_exact"] = passExact
		m["pass_independent"] = passIndep
		m["pass_release"] = passRelease
		m["pass"] = passExact && passIndep && passRelease
		return &Result{Metrics: m, human: humanf(
			fmt.Sprintf("A %d/%d admitted (want %d)", ba.admitted(), n, want),
			fmt.Sprintf("B %d/%d", bb.admitted(), n),
			fmt.Sprintf("slots free after close: first %vms all %vms (median of %d, max %vms), %d over limit after",
				m["release_first_ms"], m["release_all_ms"], *cycles, m["release_all_max_ms"], over),
			fmt.Sprintf("pass=%v", m["pass"]),
		)}, nil
	}
}

// medianOrNever is the median of xs, or -1 ("never") if any is -1.
func medianOrNever(xs []float64) float64 {
	if len(xs) == 0 || slices.Contains(xs, -1) {
		return -1
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return round((s[n/2-1]+s[n/2])/2, 3)
	}
	return s[len(s)/2]
}

func maxOrNever(xs []float64) float64 {
	if len(xs) == 0 || slices.Contains(xs, -1) {
		return -1
	}
	return slices.Max(xs)
}
