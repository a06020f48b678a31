package main

import (
	"bytes"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// cycleLoad runs workers for a bounded duration and count; each cycle dials
// from the next source address of a pool (round robin), writes a payload,
// reads its echo and closes. It is conn-rate, the victim of flood and the
// load of syscalls.
type cycleLoad struct {
	target    string
	dialers   []*net.Dialer
	workers   int
	duration  time.Duration
	maxCycles int // over all workers
	payload   int
	ioTimeout time.Duration
	tls       *tls.Config // tls-handshake: a full TLS handshake before the echo
}

type cycleStats struct {
	ok      int64
	errs    counters
	lat     latencies
	elapsed time.Duration
}

func (l cycleLoad) run() cycleStats {
	var (
		next, budget atomic.Int64
		mu           sync.Mutex
		wg           sync.WaitGroup
		total        = cycleStats{errs: counters{}}
	)
	budget.Store(int64(l.maxCycles))
	start := time.Now()
	deadline := start.Add(l.duration)
	for w := 0; w < l.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]byte, l.payload)
			for i := range out {
				out[i] = byte('a' + i%26)
			}
			in := make([]byte, l.payload)
			lat := make(latencies, 0, 4096)
			errs := counters{}
			for budget.Add(-1) >= 0 {
				t0 := time.Now()
				if !t0.Before(deadline) {
					break
				}
				d := l.dialers[int(next.Add(1)-1)%len(l.dialers)]
				if cls := l.cycle(d, out, in); cls != "" {
					errs[cls]++
					if localExhaustion(cls) {
						time.Sleep(time.Millisecond)
					}
					continue
				}
				lat.add(time.Since(t0))
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

// cycle returns "" on success, else an error class.
func (l cycleLoad) cycle(d *net.Dialer, out, in []byte) string {
	c, err := d.Dial("tcp", l.target)
	if err != nil {
		return errClass("dial", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(l.ioTimeout))
	if l.tls != nil {
		tc := tls.Client(c, l.tls)
		if err := tc.Handshake(); err != nil {
			return errClass("handshake", err)
		}
		c = tc
	}
	if _, err := c.Write(out); err != nil {
		return errClass("write", err)
	}
	if _, err := io.ReadFull(c, in); err != nil {
		return errClass("read", err)
	}
	if !bytes.Equal(in, out) {
		return "mismatch"
	}
	return ""
}

// cycleFlags are the flags of a cycleLoad.
type cycleFlags struct {
	workers   int
	duration  time.Duration
	maxCycles int
	payload   int
	ipBase    string
	ips       int
	ioTimeout time.Duration
}

func (f *cycleFlags) register(fs *flag.FlagSet, ipBase string, duration time.Duration) {
	fs.IntVar(&f.workers, "workers", 16, "concurrent client workers")
	fs.DurationVar(&f.duration, "duration", duration, "load duration (time bound)")
	fs.IntVar(&f.maxCycles, "max-cycles", 2_000_000, "cap on cycles over all workers (count bound)")
	fs.IntVar(&f.payload, "payload", 64, "bytes written and echoed per cycle")
	fs.StringVar(&f.ipBase, "ip-base", ipBase, "first source address of the pool")
	fs.IntVar(&f.ips, "ips", 64, "source addresses in the pool, used round robin")
	fs.DurationVar(&f.ioTimeout, "io-timeout", 2*time.Second, "per-cycle read/write timeout")
}

func (f *cycleFlags) load(c *common) (cycleLoad, error) {
	ips, err := ipRange(f.ipBase, f.ips)
	if err != nil {
		return cycleLoad{}, err
	}
	// Each worker holds at most one connection, so with workers <= ips*limit
	// and round robin no address can legitimately be over its limit.
	if c.limit > 0 && f.workers > f.ips*c.limit {
		return cycleLoad{}, fmt.Errorf("-workers %d could exceed -ips %d x limit %d", f.workers, f.ips, c.limit)
	}
	return cycleLoad{
		target: c.target, dialers: dialers(ips, c.dialTimeout), workers: f.workers,
		duration: f.duration, maxCycles: f.maxCycles, payload: f.payload, ioTimeout: f.ioTimeout,
	}, nil
}

// report adds the cycle metrics under prefix.
func (s cycleStats) report(prefix string, m map[string]any) {
	m[prefix+"conns"] = s.ok
	m[prefix+"conns_per_s"] = round(float64(s.ok)/s.elapsed.Seconds(), 1)
	m[prefix+"errors"] = s.errs.total()
	s.errs.put(m, prefix+"error_kinds")
	m[prefix+"elapsed_s"] = round(s.elapsed.Seconds(), 2)
	s.lat.summary(prefix, m)
}

func connRateCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	var f cycleFlags
	f.register(fs, "127.1.0.1", 10*time.Second)
	return func() (*Result, error) {
		l, err := f.load(c)
		if err != nil {
			return nil, err
		}
		cpu := startCPU(c.pid)
		s := l.run()
		m := map[string]any{}
		s.report("", m)
		if pc := cpu.stop(m); pc > 0 && s.ok > 0 {
			m["proxy_cpu_us_per_conn"] = round(pc*1e6/float64(s.ok), 1)
			m["proxy_ctx_switches_per_conn"] = round(float64(m["proxy_ctx_switches"].(int64))/float64(s.ok), 3)
		}
		perUnit(m, s.ok, "conn")
		return &Result{Metrics: m, human: humanf(
			fmt.Sprintf("%.0f conns/s", m["conns_per_s"]),
			fmt.Sprintf("errors=%d", s.errs.total()),
			fmt.Sprintf("p50=%vms p99=%vms", m["p50_ms"], m["p99_ms"]),
			"proxy_cpu="+opt(m, "proxy_cpu_us_per_conn")+"µs/conn",
			fmt.Sprintf("host_cpu=%v%%", m["host_cpu_busy_pct"]),
		)}, nil
	}
}
