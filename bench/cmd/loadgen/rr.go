package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// rrCmd is the database case: a fixed set of persistent connections, each
// doing one small request and waiting for its response before the next
// (no pipelining), as a client of PostgreSQL, Redis or a broker does. What
// it measures is the proxy's cost per forwarded small message in each
// direction, with the connection set-up excluded.
func rrCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	conns := fs.Int("conns", 32, "persistent connections (one client goroutine each)")
	ipBase := fs.String("ip-base", "127.6.0.1", "first source address")
	perIP := fs.Int("per-ip", 4, "connections per source address (must be <= limit)")
	size := fs.Int("size", 100, "request and response size in bytes")
	duration := fs.Duration("duration", 10*time.Second, "load duration (time bound)")
	maxRT := fs.Int("max-round-trips", 20_000_000, "cap on round trips over all connections (count bound)")
	ioTimeout := fs.Duration("io-timeout", 2*time.Second, "per-round-trip timeout")
	return func() (*Result, error) {
		if *perIP < 1 || (c.limit > 0 && *perIP > c.limit) {
			return nil, fmt.Errorf("-per-ip %d must be between 1 and the limit %d", *perIP, c.limit)
		}
		ips, err := ipRange(*ipBase, (*conns+*perIP-1) / *perIP)
		if err != nil {
			return nil, err
		}
		cs := make([]*net.TCPConn, *conns)
		defer closeAll(cs)
		for i := range cs {
			cn, o, err := probe(newDialer(ips[i / *perIP], c.dialTimeout), c.target, 2*time.Second)
			if o != Admitted {
				return nil, fmt.Errorf("connection %d from %s not admitted: %v (%v)", i, ips[i / *perIP], o, err)
			}
			cs[i] = cn
		}

		var (
			budget atomic.Int64
			mu     sync.Mutex
			wg     sync.WaitGroup
			lat    latencies
			errs   = counters{}
			gate   = make(chan struct{})
		)
		budget.Store(int64(*maxRT))
		cpu := startCPU(c.pid)
		start := time.Now()
		deadline := start.Add(*duration)
		for _, cn := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, in := make([]byte, *size), make([]byte, *size)
				for i := range out {
					out[i] = byte('A' + i%26)
				}
				my := make(latencies, 0, 1<<14)
				myErrs := counters{}
				<-gate
				for budget.Add(-1) >= 0 {
					t0 := time.Now()
					if !t0.Before(deadline) {
						break
					}
					cn.SetDeadline(t0.Add(*ioTimeout))
					if _, err := cn.Write(out); err != nil {
						myErrs[errClass("write", err)]++
						break
					}
					if _, err := io.ReadFull(cn, in); err != nil {
						myErrs[errClass("read", err)]++
						break
					}
					if !bytes.Equal(in, out) {
						myErrs["mismatch"]++
						break
					}
					my.add(time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, my...)
				errs.add(myErrs)
				mu.Unlock()
			}()
		}
		close(gate)
		wg.Wait()
		el := time.Since(start)
		m := map[string]any{}
		pc := cpu.stop(m)
		n := int64(len(lat))
		m["round_trips"] = n
		m["round_trips_per_s"] = round(float64(n)/el.Seconds(), 1)
		m["elapsed_s"] = round(el.Seconds(), 2)
		m["errors"] = errs.total()
		errs.put(m, "error_kinds")
		lat.summary("", m)
		if pc > 0 && n > 0 {
			m["proxy_cpu_us_per_rt"] = round(pc*1e6/float64(n), 2)
			m["proxy_ctx_switches_per_rt"] = round(float64(m["proxy_ctx_switches"].(int64))/float64(n), 3)
		}
		perUnit(m, n, "rt")
		return &Result{Metrics: m, human: humanf(
			fmt.Sprintf("%.0f round trips/s over %d conns", m["round_trips_per_s"], *conns),
			fmt.Sprintf("errors=%d", errs.total()),
			fmt.Sprintf("p50=%vms p99=%vms", m["p50_ms"], m["p99_ms"]),
			"proxy_cpu="+opt(m, "proxy_cpu_us_per_rt")+"µs/rt",
			fmt.Sprintf("host_cpu=%v%%", m["host_cpu_busy_pct"]),
		)}, nil
	}
}
