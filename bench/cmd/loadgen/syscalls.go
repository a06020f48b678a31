package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// syscallCounts is strace -c's table: calls (and failed calls, such as
// EAGAIN reads) per syscall name.
type syscallCounts map[string]callCount

type callCount struct{ calls, errors int64 }

func (s syscallCounts) total() (n int64) {
	for _, v := range s {
		n += v.calls
	}
	return n
}

// top renders the n most frequent syscalls as "name=calls" per unit, with
// "(err x)" for the share of them that failed (EAGAIN, ECONNRESET, ...).
func (s syscallCounts) top(n int, per float64) string {
	names := make([]string, 0, len(s))
	for k := range s {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if s[names[i]].calls != s[names[j]].calls {
			return s[names[i]].calls > s[names[j]].calls
		}
		return names[i] < names[j]
	})
	var parts []string
	for _, k := range names[:min(n, len(names))] {
		p := fmt.Sprintf("%s=%.1f", k, float64(s[k].calls)/per)
		if e := float64(s[k].errors) / per; e >= 0.05 {
			p += fmt.Sprintf("(err %.1f)", e)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// parseStraceSummary reads the table strace -c writes:
//
//	% time     seconds  usecs/call     calls    errors syscall
//	------ ----------- ----------- --------- --------- ----------------
//	 45.00    0.000900           9       100        12 read
//	...
//	------ ----------- ----------- --------- --------- ----------------
//	100.00    0.002000                   300        12 total
//
// The errors column is empty for syscalls that never failed.
func parseStraceSummary(b []byte) (syscallCounts, error) {
	out := syscallCounts{}
	s := bufio.NewScanner(bytes.NewReader(b))
	inTable := false
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		switch {
		case strings.HasPrefix(line, "% time"):
			inTable = true
			continue
		case !inTable, strings.HasPrefix(line, "---"), line == "":
			continue
		}
		f := strings.Fields(line)
		if len(f) < 5 || f[len(f)-1] == "total" {
			continue
		}
		calls, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("strace -c line %q: no call count in the fourth column", line)
		}
		var errs int64
		if len(f) >= 6 {
			errs, _ = strconv.ParseInt(f[4], 10, 64)
		}
		cc := out[f[len(f)-1]]
		cc.calls += calls
		cc.errors += errs
		out[f[len(f)-1]] = cc
	}
	if !inTable {
		return nil, fmt.Errorf("no strace -c table in %q", lastLines(string(b), 3))
	}
	return out, nil
}

// traced attaches strace -c -f to every process of the proxy's tree, runs
// fn, detaches (SIGINT to the strace this function started) and returns the
// counts. strace slows the proxy down a lot: only the counts mean anything.
func traced(bin string, pid int, dir string, fn func()) (syscallCounts, error) {
	f, err := os.CreateTemp(dir, "strace-*.txt")
	if err != nil {
		return nil, err
	}
	f.Close()
	defer os.Remove(f.Name())
	args := []string{"-c", "-f", "-o", f.Name()}
	for _, p := range procTree(pid) {
		args = append(args, "-p", strconv.Itoa(p))
	}
	cmd := exec.Command(bin, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %v", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// strace reports each attached thread on stderr; give it time to attach
	// to all of them, and fail if it could not (ptrace not permitted).
	time.Sleep(700 * time.Millisecond)
	select {
	case err := <-done:
		return nil, fmt.Errorf("strace exited at once (%v): %s", err, lastLines(errb.String(), 2))
	default:
	}
	fn()
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		return nil, fmt.Errorf("strace did not detach within 10 s")
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return nil, err
	}
	return parseStraceSummary(b)
}

// syscallsCmd counts the proxy's syscalls per proxied connection (connect,
// 64-byte echo, close, from a pool of addresses), per rejected connection
// (an address already at its limit dials again) and per 100-byte round trip
// on a persistent connection.
func syscallsCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	bin := fs.String("strace", "strace", "strace binary")
	conns := fs.Int("conns", 2000, "proxied connections to count over (count bound)")
	rejects := fs.Int("rejects", 2000, "rejected connections to count over (count bound; 0 = skip)")
	workers := fs.Int("workers", 4, "concurrent clients")
	ipBase := fs.String("ip-base", "127.7.0.1", "first source address")
	roundTrips := fs.Int("round-trips", 4000, "100-byte round trips on persistent connections to count over (count bound; 0 = skip)")
	timeout := fs.Duration("timeout", 60*time.Second, "time bound for each phase")
	return func() (*Result, error) {
		if c.pid <= 0 {
			return nil, fmt.Errorf("-pid is required (there is no proxy to trace)")
		}
		ips, err := ipRange(*ipBase, 65)
		if err != nil {
			return nil, err
		}
		dir := os.TempDir()
		m := map[string]any{}
		load := cycleLoad{target: c.target, dialers: dialers(ips[:64], c.dialTimeout), workers: *workers,
			duration: *timeout, maxCycles: *conns, payload: 64, ioTimeout: 5 * time.Second}
		if err := warmup(c, "127.7.250.1", 32); err != nil {
			return nil, err
		}
		var st cycleStats
		counts, err := traced(*bin, c.pid, dir, func() { st = load.run() })
		if err != nil {
			return nil, err
		}
		if st.ok == 0 {
			return nil, fmt.Errorf("no connection completed under strace: %v", st.errs)
		}
		// The proxy finishes its side of each close a moment after the client;
		// counting stops a little late so that cost is in, at the price of a
		// few idle-loop calls (epoll_pwait, futex, nanosleep) from the wait.
		m["conns"] = st.ok
		m["conn_errors"] = st.errs.total()
		m["syscalls_per_conn"] = round(float64(counts.total())/float64(st.ok), 1)
		m["top_per_conn"] = counts.top(14, float64(st.ok))

		if *rejects > 0 && c.limit > 0 {
			d := newDialer(ips[64], c.dialTimeout)
			full := openBatch(d, c.target, c.limit, 2*time.Second)
			defer closeAll(full.conns)
			if full.admitted() != c.limit {
				return nil, fmt.Errorf("could not fill %s's %d slots (admitted %d)", ips[64], c.limit, full.admitted())
			}
			var other atomic.Int64
			counts, err := traced(*bin, c.pid, dir, func() {
				end := time.Now().Add(*timeout)
				parallel(*rejects, *workers, func(int) {
					if time.Now().After(end) {
						return
					}
					if cn, o, _ := probe(d, c.target, 2*time.Second); o != Rejected {
						other.Add(1)
						if cn != nil {
							cn.Close()
						}
					}
				})
			})
			if err != nil {
				return nil, err
			}
			if n := float64(*rejects); n > 0 {
				m["rejects"] = *rejects
				m["reject_not_rejected"] = other.Load()
				m["syscalls_per_reject"] = round(float64(counts.total())/n, 1)
				m["top_per_reject"] = counts.top(14, n)
			}
		}
		if *roundTrips > 0 {
			perRT, top, err := tracedRoundTrips(*bin, c, ips[:*workers], *roundTrips, dir, *timeout)
			if err != nil {
				return nil, err
			}
			m["round_trips"] = *roundTrips
			m["syscalls_per_round_trip"] = round(perRT, 2)
			m["top_per_round_trip"] = top
		}
		return &Result{Metrics: m, human: humanf(
			fmt.Sprintf("%v syscalls per proxied connection (%d conns): %v", m["syscalls_per_conn"], st.ok, m["top_per_conn"]),
			fmt.Sprintf("| %v per rejected connection: %v", opt(m, "syscalls_per_reject"), opt(m, "top_per_reject")),
			fmt.Sprintf("| %v per 100-byte round trip: %v", opt(m, "syscalls_per_round_trip"), opt(m, "top_per_round_trip")),
		)}, nil
	}
}

// tracedRoundTrips opens one persistent connection per address in ips and
// counts the proxy's syscalls while they do n 100-byte round trips in all.
func tracedRoundTrips(bin string, c *common, ips []netip.Addr, n int, dir string, timeout time.Duration) (float64, string, error) {
	conns := make([]*net.TCPConn, len(ips))
	defer closeAll(conns)
	for i, ip := range ips {
		cn, o, err := probe(newDialer(ip, c.dialTimeout), c.target, 2*time.Second)
		if o != Admitted {
			return 0, "", fmt.Errorf("round-trip connection from %s not admitted: %v (%v)", ip, o, err)
		}
		conns[i] = cn
	}
	var done, failed atomic.Int64
	counts, err := traced(bin, c.pid, dir, func() {
		end := time.Now().Add(timeout)
		var wg sync.WaitGroup
		for i, cn := range conns {
			share := n / len(conns)
			if i < n%len(conns) {
				share++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 100)
				cn.SetDeadline(end)
				for k := 0; k < share; k++ {
					if _, err := cn.Write(buf); err != nil {
						failed.Add(1)
						return
					}
					if _, err := io.ReadFull(cn, buf); err != nil {
						failed.Add(1)
						return
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
	})
	if err != nil {
		return 0, "", err
	}
	if failed.Load() > 0 || done.Load() == 0 {
		return 0, "", fmt.Errorf("round trips under strace: %d done, %d connections failed", done.Load(), failed.Load())
	}
	per := float64(done.Load())
	return float64(counts.total()) / per, counts.top(14, per), nil
}
