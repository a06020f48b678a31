package itest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helpers of the provider scale tests (docs/performance.md, "Providers at
// scale"): each provider package fills its real source (a Consul agent, the
// Docker engine, a kube-apiserver, etcd) with a fleet, runs the tollgate
// binary on it, and measures how soon a new route is live, as the first
// connection through the entry point that reaches the new route's backend.
// They run only when TOLLGATE_SCALE is set: they take minutes and load the
// machine, and their figures are measurements, not the suite's assertions.

// ScaleEnv turns the provider scale tests on.
const ScaleEnv = "TOLLGATE_SCALE"

// NeedScale skips t unless TOLLGATE_SCALE is set (to anything but "" or
// "0"). It is not a missing component: the skip is not counted by Main and
// TOLLGATE_REQUIRE_INTEGRATION does not turn it into a failure.
func NeedScale(t testing.TB) {
	t.Helper()
	if v := os.Getenv(ScaleEnv); v == "" || v == "0" {
		t.Skipf("scale measurement: set %s=1 to run it (docs/performance.md, \"Providers at scale\")", ScaleEnv)
	}
}

// ScaleAssert reports whether TOLLGATE_SCALE_ASSERT=1: the scale tests then
// fail when a figure misses its target. Without it they only log the
// figures and the verdict (a shared 2-CPU host moves them a lot).
func ScaleAssert() bool { return os.Getenv("TOLLGATE_SCALE_ASSERT") == "1" }

// Target logs a measured figure against its target and, under
// ScaleAssert, fails t when it is over.
func Target(t testing.TB, what string, got, target time.Duration) {
	t.Helper()
	verdict := "met"
	if got > target {
		verdict = "MISSED"
		if ScaleAssert() {
			t.Errorf("%s: %s, target <= %s", what, Ms(got), Ms(target))
		}
	}
	t.Logf("%s: %s (target <= %s: %s)", what, Ms(got), Ms(target), verdict)
}

// Ms formats d in milliseconds with one decimal.
func Ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// Latencies are the durations of one measurement's rounds.
type Latencies []time.Duration

// Quantile returns the nearest-rank q-quantile (0 when there is none).
func (l Latencies) Quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// String is "p50 … ms, p95 … ms, max … ms (n=…)".
func (l Latencies) String() string {
	return fmt.Sprintf("p50 %s, p95 %s, max %s (n=%d)", Ms(l.Quantile(0.5)), Ms(l.Quantile(0.95)), Ms(l.Quantile(1)), len(l))
}

// CPUTime returns the user plus system CPU time process pid has used, from
// /proc/<pid>/stat (in clock ticks of 1/100 s, the kernel's USER_HZ).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count the fields
	// after its closing one (state is field 3, utime 14, stime 15).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, field := range f[11:13] {
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// CPUDuring returns the CPU time process pid uses during d, while the test
// does nothing.
func CPUDuring(t testing.TB, pid int, d time.Duration) time.Duration {
	t.Helper()
	before, err := CPUTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(d) // the measurement is of an idle window: nothing to poll
	after, err := CPUTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	return after - before
}

// Machine describes the host for a measurement's log line: its name, its
// CPUs and the load average now.
func Machine() string {
	host, _ := os.Hostname()
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("host %s, %d CPUs (%s), load average %s", host, runtime.NumCPU(), model, LoadAverage())
}

// LoadAverage is the first three figures of /proc/loadavg.
func LoadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// BannerServer is a backend on a free port of ip (loopback when empty)
// that writes banner and a newline on every connection, then echoes (the
// echo image's behaviour, on the host); it returns its address.
func BannerServer(t testing.TB, ip, banner string) string {
	t.Helper()
	if ip == "" {
		ip = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	b := StartBackend(t, ln, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, banner+"\n"); err != nil {
			return
		}
		_, _ = io.Copy(c, c)
	})
	return b.Addr()
}

// ReadBanner connects to addr and returns the first line it reads within
// timeout, trimmed; "" when the connection fails or is closed first (no
// route, or one being replaced). It never fails the test: it is a probe.
func ReadBanner(addr string, timeout time.Duration) string {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// UntilBanner polls addr with fresh connections, a millisecond apart, until
// one reads want as its banner, and returns the time since start; it fails
// t after within. The banner is the end-to-end observable of a new route:
// the router is compiled, swapped in, and its server dialled.
func UntilBanner(t testing.TB, addr, want string, start time.Time, within time.Duration) time.Duration {
	t.Helper()
	last := ""
	for {
		if last = ReadBanner(addr, time.Second); last == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("after %s: %s still answers %q, want %q", within, addr, last, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// Bounded runs f(0), …, f(n-1) with at most workers calls at a time and
// returns the errors, joined in index order (nil when none). It is how the
// scale tests talk to a shared engine or server: never more than workers
// requests in flight.
func Bounded(n, workers int, f func(i int) error) error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(max(workers, 1), max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	var msgs []string
	failed := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		if failed++; failed <= 5 {
			msgs = append(msgs, fmt.Sprintf("%d: %v", i, err))
		}
	}
	if failed == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d failed: %s", failed, n, strings.Join(msgs, "; "))
}
