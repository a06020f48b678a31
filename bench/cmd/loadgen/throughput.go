package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// throughputCmd: S streams, each from its own address, write B bytes
// through the target to the echo and read them back, full duplex. Every
// payload byte crosses the proxy twice (in and back out), so MB/s is of
// payload echoed and CPU s/GB is per GB of payload echoed.
func throughputCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	streams := fs.Int("streams", 8, "parallel streams, one source address each")
	size := fs.Int64("bytes", 128<<20, "payload bytes each stream sends and reads back (count bound)")
	chunk := fs.Int("chunk", 64<<10, "write and read size")
	ipBase := fs.String("ip-base", "127.4.0.1", "first source address")
	timeout := fs.Duration("timeout", 60*time.Second, "deadline for the whole transfer (time bound)")
	return func() (*Result, error) {
		ips, err := ipRange(*ipBase, *streams)
		if err != nil {
			return nil, err
		}
		conns := make([]*net.TCPConn, *streams)
		defer closeAll(conns)
		for i, ip := range ips {
			cn, o, err := probe(newDialer(ip, c.dialTimeout), c.target, 2*time.Second)
			if o != Admitted {
				return nil, fmt.Errorf("stream %d from %s not admitted: %v (%v)", i, ip, o, err)
			}
			conns[i] = cn
		}

		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs = counters{}
			got  int64
			gate = make(chan struct{})
			took = make([]time.Duration, *streams)
		)
		kernelBefore := netstat()
		cpu := startCPU(c.pid)
		start := time.Now()
		deadline := start.Add(*timeout)
		for i, cn := range conns {
			cn.SetDeadline(deadline)
			wg.Add(2)
			go func() { // writer
				defer wg.Done()
				buf := make([]byte, *chunk)
				<-gate
				for left := *size; left > 0; {
					n := int(min(left, int64(len(buf))))
					if _, err := cn.Write(buf[:n]); err != nil {
						mu.Lock()
						errs[errClass("write", err)]++
						mu.Unlock()
						return
					}
					left -= int64(n)
				}
			}()
			go func() { // reader
				defer wg.Done()
				buf := make([]byte, *chunk)
				<-gate
				n, err := io.CopyBuffer(io.Discard, io.LimitReader(cn, *size), buf)
				took[i] = time.Since(start)
				if err == nil && n < *size {
					err = io.ErrUnexpectedEOF
				}
				mu.Lock()
				got += n
				if err != nil {
					errs[errClass("read", err)]++
				}
				mu.Unlock()
			}()
		}
		close(gate)
		wg.Wait()
		el := time.Since(start)
		m := map[string]any{}
		pc := cpu.stop(m)
		slowest, fastest := took[0], took[0]
		for _, d := range took {
			slowest, fastest = max(slowest, d), min(fastest, d)
		}
		m["elapsed_s"] = round(el.Seconds(), 3)
		m["bytes_echoed"] = got
		m["mb_per_s"] = round(float64(got)/el.Seconds()/1e6, 1)
		m["stream_fastest_s"] = round(fastest.Seconds(), 3)
		m["stream_slowest_s"] = round(slowest.Seconds(), 3)
		m["errors"] = errs.total()
		errs.put(m, "error_kinds")
		// Segments the kernel dropped at a full receive queue, and the
		// retransmission timeouts that resend them (host-wide; one peer runs
		// at a time): each can stall a stream for the sender's backoff
		// (bench/README.md, "Traps in these measurements").
		if after := netstat(); kernelBefore != nil && after != nil {
			m["kernel_rcvq_drops"] = after["TCPRcvQDrop"] - kernelBefore["TCPRcvQDrop"]
			m["kernel_rto_timeouts"] = after["TCPTimeouts"] - kernelBefore["TCPTimeouts"]
		}
		if pc > 0 && got > 0 {
			m["proxy_cpu_s_per_gb"] = round(pc/(float64(got)/1e9), 3)
		}
		// What the client pays per GB too: on loopback a proxy can move
		// work onto its peers (bench/results/2026-12-04-1839-intel-xeon.md: a
		// splice passes pages on untouched, and the client's copies of them
		// cost more), so its own CPU is not the whole story on a shared host.
		if lc, ok := m["loadgen_cpu_s"].(float64); ok && got > 0 {
			m["client_cpu_s_per_gb"] = round(lc/(float64(got)/1e9), 3)
		}
		return &Result{Metrics: m, human: humanf(
			fmt.Sprintf("%v MB/s of payload echoed (%d streams x %d MiB)", m["mb_per_s"], *streams, *size>>20),
			"proxy_cpu="+opt(m, "proxy_cpu_s_per_gb")+" s/GB",
			fmt.Sprintf("errors=%d", errs.total()),
			fmt.Sprintf("host_cpu=%v%%", m["host_cpu_busy_pct"]),
		)}, nil
	}
}
