package main

import (
	"flag"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// attackStats are shared by all attacker goroutines.
type attackStats struct {
	attempts, admitted, rejected, pending, dialFailed atomic.Int64
	cur, peak                                         []atomic.Int64 // per attacker address
	mu                                                sync.Mutex
	errs                                              counters
}

// observe records one more concurrently held, admitted connection for ip.
//
// The gauge is conservative: it rises only after the echo proves the proxy
// forwarded the connection and falls just before the client closes it, so
// it never exceeds what the proxy must itself be counting. A peak above the
// limit proves the limit was exceeded.
func (s *attackStats) observe(ip int) {
	v := s.cur[ip].Add(1)
	for {
		p := s.peak[ip].Load()
		if v <= p || s.peak[ip].CompareAndSwap(p, v) {
			return
		}
	}
}

type heldConn struct {
	c     *net.TCPConn
	until time.Time
}

// attack is one attacker goroutine: dial from one address as fast as
// possible; hold an admitted connection for `hold` (at most maxHeld at
// once), close a rejected one at once.
func attack(d *net.Dialer, ip int, target string, deadline time.Time, budget *atomic.Int64, maxHeld int,
	hold, pingTimeout time.Duration, st *attackStats) {
	var held []heldConn
	drop := func(h heldConn) { st.cur[ip].Add(-1); h.c.Close() }
	defer func() {
		for _, h := range held {
			drop(h)
		}
	}()
	for budget.Add(-1) >= 0 {
		now := time.Now()
		if !now.Before(deadline) {
			return
		}
		keep := held[:0]
		for _, h := range held {
			if now.After(h.until) {
				drop(h)
			} else {
				keep = append(keep, h)
			}
		}
		held = keep
		if len(held) >= maxHeld {
			drop(held[0])
			held = append(held[:0], held[1:]...)
		}
		st.attempts.Add(1)
		c, o, err := probe(d, target, pingTimeout)
		if err != nil {
			st.mu.Lock()
			st.errs[errClass(o.String(), err)]++
			st.mu.Unlock()
		}
		switch o {
		case Admitted:
			st.admitted.Add(1)
			st.observe(ip)
			held = append(held, heldConn{c, time.Now().Add(hold)})
		case Rejected:
			st.rejected.Add(1)
		case Pending:
			st.pending.Add(1)
		case DialFailed:
			st.dialFailed.Add(1)
			time.Sleep(time.Millisecond)
		}
	}
}

func floodCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	var f cycleFlags
	f.register(fs, "127.1.1.1", 8*time.Second)
	attackBase := fs.String("attack-ip-base", "127.3.0.1", "first attacker address")
	attackIPs := fs.Int("attack-ips", 2, "attacker addresses")
	attackWorkers := fs.Int("attack-workers", 16, "attacker goroutines per attacker address")
	attackHold := fs.Duration("attack-hold", 50*time.Millisecond, "how long an admitted attacker connection is held")
	attackMaxHeld := fs.Int("attack-max-held", 64, "connections one attacker goroutine holds at most (fd bound)")
	attackMax := fs.Int("attack-max", 5_000_000, "cap on attack attempts over all attackers (count bound)")
	pingTimeout := fs.Duration("attack-ping-timeout", 500*time.Millisecond, "attacker's wait for its 1-byte echo")
	return func() (*Result, error) {
		victim, err := f.load(c)
		if err != nil {
			return nil, err
		}
		aips, err := ipRange(*attackBase, *attackIPs)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		base := victim.run()
		base.report("victim_baseline_", m)

		st := &attackStats{cur: make([]atomic.Int64, len(aips)), peak: make([]atomic.Int64, len(aips)), errs: counters{}}
		var budget atomic.Int64
		budget.Store(int64(*attackMax))
		var wg sync.WaitGroup
		cpu := startCPU(c.pid)
		start := time.Now()
		deadline := start.Add(f.duration)
		for i, ip := range aips {
			d := newDialer(ip, c.dialTimeout)
			for w := 0; w < *attackWorkers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					attack(d, i, c.target, deadline, &budget, *attackMaxHeld, *attackHold, *pingTimeout, st)
				}()
			}
		}
		s := victim.run()
		wg.Wait()
		el := time.Since(start)
		pc := cpu.stop(m)
		s.report("victim_flood_", m)

		var peak int64
		for i := range st.peak {
			peak = max(peak, st.peak[i].Load())
		}
		att := st.attempts.Load()
		m["attacker_attempts"] = att
		m["attacker_attempts_per_s"] = round(float64(att)/el.Seconds(), 1)
		m["attacker_admitted_total"] = st.admitted.Load()
		m["attacker_rejected"] = st.rejected.Load()
		m["attacker_pending"] = st.pending.Load()
		m["attacker_dial_failed"] = st.dialFailed.Load()
		m["attacker_max_concurrent_per_ip"] = peak
		st.errs.put(m, "attacker_error_kinds")
		if pc > 0 && att > 0 {
			m["proxy_cpu_us_per_attempt"] = round(pc*1e6/float64(att+s.ok), 1)
		}
		if b := m["victim_baseline_conns_per_s"].(float64); b > 0 {
			m["victim_cps_ratio"] = round(m["victim_flood_conns_per_s"].(float64)/b, 3)
		}
		if c.limit > 0 {
			m["pass"] = peak <= int64(c.limit)
		}
		return &Result{Metrics: m, human: humanf(
			fmt.Sprintf("victim %v -> %v conns/s (x%v), p99 %v -> %v ms, errors %d",
				m["victim_baseline_conns_per_s"], m["victim_flood_conns_per_s"], m["victim_cps_ratio"],
				m["victim_baseline_p99_ms"], m["victim_flood_p99_ms"], s.errs.total()),
			fmt.Sprintf("attacker %v attempts/s, admitted %d, peak concurrent/IP %d (limit %d)",
				m["attacker_attempts_per_s"], st.admitted.Load(), peak, c.limit),
		)}, nil
	}
}
