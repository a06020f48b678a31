package main

import (
	"flag"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// reconnect: attackers that reconnect in a tight loop while holding at most
// one connection each (concurrency never exceeds 1, so a per-IP concurrency
// limit never bites), next to victims that connect at a modest paced rate.
// With a per-IP rate limit of `rate` per second and `burst`, each attacker
// gets at most rate+burst connections through in any one-second window and
// rate*duration+burst in all; the victims, each under the rate, are not
// slowed.

// pacedVictims runs one goroutine per dialer, each doing a connect, echo,
// close cycle every `every` until the deadline (a cycle that runs late is
// followed at once by the next, never by a burst to catch up).
type pacedVictims struct {
	load     cycleLoad // target, payload, timeouts; its dialers are the victims
	every    time.Duration
	duration time.Duration
}

func (v pacedVictims) run() cycleStats {
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		total = cycleStats{errs: counters{}}
	)
	start := time.Now()
	deadline := start.Add(v.duration)
	for i, d := range v.load.dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]byte, v.load.payload)
			in := make([]byte, v.load.payload)
			var lat latencies
			errs := counters{}
			// Spread the victims' first cycles over one interval.
			next := start.Add(v.every * time.Duration(i) / time.Duration(len(v.load.dialers)))
			for n := 0; n < v.load.maxCycles; n++ {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				t0 := time.Now()
				if !t0.Before(deadline) {
					break
				}
				if cls := v.load.cycle(d, out, in); cls != "" {
					errs[cls]++
				} else {
					lat.add(time.Since(t0))
				}
				if next = next.Add(v.every); next.Before(time.Now()) {
					next = time.Now()
				}
			}
			mu.Lock()
			total.ok += int64(len(lat))
			total.lat = append(total.lat, lat...)
			total.errs.add(errs)
			mu.Unlock()
		}()
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	return total
}

// reconnector is one attacker address's tight loop: connect, ping, close,
// again, one connection at a time.
type reconnector struct {
	attempts, admitted, rejected, pending, dialFailed int64
	times                                             []time.Duration // when each admitted ping came back, from start
	errs                                              counters
}

func (r *reconnector) run(d *net.Dialer, target string, start, deadline time.Time, budget *atomic.Int64, pingTimeout time.Duration) {
	r.errs = counters{}
	for budget.Add(-1) >= 0 && time.Now().Before(deadline) {
		r.attempts++
		c, o, err := probe(d, target, pingTimeout)
		if err != nil {
			r.errs[errClass(o.String(), err)]++
		}
		switch o {
		case Admitted:
			r.admitted++
			r.times = append(r.times, time.Since(start))
			c.Close()
		case Rejected:
			r.rejected++
		case Pending:
			r.pending++
		case DialFailed:
			r.dialFailed++
			time.Sleep(time.Millisecond)
		}
	}
}

// maxInWindow is the largest number of sorted times within any window of
// length w (sliding).
func maxInWindow(ts []time.Duration, w time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i]-ts[j] >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func reconnectCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	duration := fs.Duration("duration", 10*time.Second, "length of each phase (victims alone, then under attack)")
	attackBase := fs.String("attack-ip-base", "127.4.0.1", "first attacker address")
	attackIPs := fs.Int("attack-ips", 2, "attacker addresses, one reconnecting loop each")
	attackMax := fs.Int("attack-max", 2_000_000, "cap on attack attempts over all attackers (count bound)")
	pingTimeout := fs.Duration("ping-timeout", 500*time.Millisecond, "an attacker's wait for its 1-byte echo")
	victimBase := fs.String("victim-ip-base", "127.4.1.1", "first victim address")
	victimIPs := fs.Int("victim-ips", 32, "victim addresses, one paced loop each")
	victimEvery := fs.Duration("victim-every", 200*time.Millisecond, "pause between one victim's cycles (keep it under the rate)")
	payload := fs.Int("payload", 64, "bytes a victim writes and reads back per cycle")
	period := fs.Duration("period", time.Second, "the rate's period, the window the per-period count is taken over")
	return func() (*Result, error) {
		vips, err := ipRange(*victimBase, *victimIPs)
		if err != nil {
			return nil, err
		}
		aips, err := ipRange(*attackBase, *attackIPs)
		if err != nil {
			return nil, err
		}
		if c.rate > 0 && float64(time.Second)/float64(*victimEvery) > float64(c.rate) {
			return nil, fmt.Errorf("-victim-every %v exceeds the rate %d/s: the victims would be limited themselves", *victimEvery, c.rate)
		}
		victims := pacedVictims{
			load: cycleLoad{target: c.target, dialers: dialers(vips, c.dialTimeout), payload: *payload,
				ioTimeout: 2 * time.Second, maxCycles: int(*duration / *victimEvery * 2)},
			every: *victimEvery, duration: *duration,
		}
		m := map[string]any{}
		base := victims.run()
		base.report("victim_baseline_", m)

		var budget atomic.Int64
		budget.Store(int64(*attackMax))
		rs := make([]*reconnector, len(aips))
		var wg sync.WaitGroup
		cpu := startCPU(c.pid)
		start := time.Now()
		deadline := start.Add(*duration)
		for i, ip := range aips {
			rs[i] = &reconnector{}
			d := newDialer(ip, c.dialTimeout)
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs[i].run(d, c.target, start, deadline, &budget, *pingTimeout)
			}()
		}
		s := victims.run()
		wg.Wait()
		el := time.Since(start)
		pc := cpu.stop(m)
		s.report("victim_attack_", m)

		var attempts, admitted, rejected, pending, failed int64
		worstWindow, worstTotal := 0, int64(0)
		errs := counters{}
		for _, r := range rs {
			attempts += r.attempts
			admitted += r.admitted
			rejected += r.rejected
			pending += r.pending
			failed += r.dialFailed
			errs.add(r.errs)
			slices.Sort(r.times)
			worstWindow = max(worstWindow, maxInWindow(r.times, *period))
			worstTotal = max(worstTotal, r.admitted)
		}
		n := float64(len(rs))
		m["attacker_attempts"] = attempts
		m["attacker_attempts_per_s"] = round(float64(attempts)/el.Seconds(), 1)
		m["attacker_admitted_total"] = admitted
		m["attacker_admitted_per_s_per_ip"] = round(float64(admitted)/el.Seconds()/n, 1)
		m["attacker_rejected"] = rejected
		m["attacker_pending"] = pending
		m["attacker_dial_failed"] = failed
		m["attacker_max_per_period_per_ip"] = worstWindow
		m["attacker_max_total_per_ip"] = worstTotal
		errs.put(m, "attacker_error_kinds")
		if pc > 0 && attempts > 0 {
			m["proxy_cpu_us_per_attempt"] = round(pc*1e6/float64(attempts+s.ok), 1)
		}
		if b := m["victim_baseline_conns_per_s"].(float64); b > 0 {
			m["victim_cps_ratio"] = round(m["victim_attack_conns_per_s"].(float64)/b, 3)
		}
		human := []string{
			fmt.Sprintf("victims %v -> %v conns/s (x%v), p99 %v -> %v ms, errors %d",
				m["victim_baseline_conns_per_s"], m["victim_attack_conns_per_s"], m["victim_cps_ratio"],
				m["victim_baseline_p99_ms"], m["victim_attack_p99_ms"], s.errs.total()),
			fmt.Sprintf("attackers %v attempts/s, %v admitted/s per IP, at most %d in a %v window",
				m["attacker_attempts_per_s"], m["attacker_admitted_per_s_per_ip"], worstWindow, *period),
		}
		if c.rate > 0 {
			// Admission is seen from the client (the echo coming back), so a
			// window of client times may hold one more than the proxy's.
			perPeriod := int(c.rate*int64(*period/time.Second)) + c.burst
			total := int64(float64(c.rate)*el.Seconds()) + int64(c.burst)
			m["attacker_bound_per_period"] = perPeriod
			m["attacker_bound_total_per_ip"] = total
			m["pass_bound"] = worstWindow <= perPeriod+1 && worstTotal <= total+1
			m["pass_victim"] = s.errs.total() == 0 && m["victim_cps_ratio"] != nil && m["victim_cps_ratio"].(float64) >= 0.9
			m["pass"] = m["pass_bound"].(bool) && m["pass_victim"].(bool)
			human = append(human, fmt.Sprintf("bound %d per period, %d in all: pass=%v", perPeriod, total, m["pass"]))
		}
		return &Result{Metrics: m, human: humanf(human...)}, nil
	}
}
