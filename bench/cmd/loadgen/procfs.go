package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clkTck is USER_HZ, the unit of utime/stime in /proc/PID/stat on Linux.
const clkTck = 100

// procTree returns root and its live descendants (nginx's master and
// workers, a master-worker HAProxy, or a single process).
func procTree(root int) []int {
	children := map[int][]int{}
	ents, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, e := range ents {
		b, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		if pid, ppid, ok := parseStatIDs(b); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// statFields returns the fields of /proc/PID/stat after "(comm)"; index 0
// is field 3 (state). comm may contain spaces and parentheses.
func statFields(b []byte) []string {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

func parseStatIDs(b []byte) (pid, ppid int, ok bool) {
	sp := bytes.IndexByte(b, ' ')
	f := statFields(b)
	if sp < 0 || len(f) < 2 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(string(b[:sp]))
	ppid, err2 := strconv.Atoi(f[1])
	return pid, ppid, err1 == nil && err2 == nil
}

// Mem is a memory reading of a process tree, in KiB.
type Mem struct {
	RSS   int64 // sum of VmRSS (shared pages counted once per process)
	PSS   int64 // sum of Pss from smaps_rollup (shared pages split)
	FDs   int   // open file descriptors
	Procs int
}

func readMem(root int) Mem {
	var m Mem
	if root <= 0 {
		return m
	}
	for _, pid := range procTree(root) {
		p := "/proc/" + strconv.Itoa(pid)
		if v, ok := kibField(p+"/status", "VmRSS:"); ok {
			m.RSS += v
			m.Procs++
		}
		if v, ok := kibField(p+"/smaps_rollup", "Pss:"); ok {
			m.PSS += v
		}
		if ents, err := os.ReadDir(p + "/fd"); err == nil {
			m.FDs += len(ents)
		}
	}
	return m
}

func kibField(path, key string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := s.Text(); strings.HasPrefix(line, key) {
			if fs := strings.Fields(line[len(key):]); len(fs) > 0 {
				v, err := strconv.ParseInt(fs[0], 10, 64)
				return v, err == nil
			}
		}
	}
	return 0, false
}

// cpuTime is CPU time in seconds, split as the kernel accounts it: user
// space (utime) and the kernel working for the process (stime: its system
// calls, and the softirq work for packets it sends over loopback, which the
// kernel runs in the sender's context), and the page faults it took (minor
// and major: a fault is kernel time without a system call, as when a heap
// returned to the kernel is touched again).
type cpuTime struct {
	user, sys float64
	faults    int64
}

func (c cpuTime) total() float64 { return c.user + c.sys }

func (c cpuTime) sub(prev cpuTime) cpuTime {
	return cpuTime{user: c.user - prev.user, sys: c.sys - prev.sys, faults: c.faults - prev.faults}
}

// cpuTimes returns utime, stime and the page faults of root's live process
// tree. Threads that exited still count (the kernel folds them into the
// process); processes that exited do not, which is why peers must keep their
// workers.
func cpuTimes(root int) cpuTime {
	var sum cpuTime
	if root <= 0 {
		return sum
	}
	for _, pid := range procTree(root) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		if t, ok := statTimes(b); ok {
			sum = cpuTime{user: sum.user + t.user, sys: sum.sys + t.sys, faults: sum.faults + t.faults}
		}
	}
	return sum
}

// statTimes reads one /proc/PID/stat line's utime, stime (in USER_HZ ticks)
// and page faults.
func statTimes(b []byte) (cpuTime, bool) {
	f := statFields(b) // f[0] is field 3, the state
	if len(f) <= 12 {
		return cpuTime{}, false
	}
	field := func(n int) int64 {
		v, _ := strconv.ParseInt(f[n-3], 10, 64)
		return v
	}
	return cpuTime{
		user:   float64(field(14)) / clkTck,
		sys:    float64(field(15)) / clkTck,
		faults: field(10) + field(12), // minflt + majflt
	}, true
}

// contextSwitches returns the voluntary and involuntary context switches of
// every thread of root's live process tree (/proc/PID/task/TID/status).
// Threads that exited no longer count: the peers here keep theirs.
func contextSwitches(root int) int64 {
	if root <= 0 {
		return 0
	}
	var n int64
	for _, pid := range procTree(root) {
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/[0-9]*/status")
		for _, t := range tasks {
			for _, key := range []string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
				if v, ok := kibField(t, key); ok {
					n += v
				}
			}
		}
	}
	return n
}

// hostCPU is a /proc/stat snapshot for the machine's busy share.
type hostCPU struct{ busy, total int64 }

func readHostCPU() hostCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostCPU{}
	}
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	var h hostCPU
	for i, v := range strings.Fields(string(line))[1:] {
		if i >= 8 { // guest time is already in user/nice
			break
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		h.total += n
		if i != 3 && i != 4 { // idle, iowait
			h.busy += n
		}
	}
	return h
}

func (h hostCPU) busyPctSince(prev hostCPU) float64 {
	if h.total == prev.total {
		return 0
	}
	return 100 * float64(h.busy-prev.busy) / float64(h.total-prev.total)
}

// cpuMeter measures the proxy's CPU (user and kernel) and context
// switches, loadgen's own CPU and the host's busy share over an interval.
type cpuMeter struct {
	pid         int
	proxy, self cpuTime
	switches    int64
	host        hostCPU
}

func startCPU(pid int) cpuMeter {
	return cpuMeter{pid: pid, proxy: cpuTimes(pid), switches: contextSwitches(pid), self: cpuTimes(os.Getpid()), host: readHostCPU()}
}

// stop records proxy_cpu_s, its user and kernel parts and proxy_ctx_switches
// (with a proxy), loadgen_cpu_s, host_cpu_busy_pct and host_cpu_s (every
// CPU's busy time: the client's, the backends', the proxy's and the kernel's
// wherever it ran), and returns the proxy's CPU seconds.
func (c cpuMeter) stop(m map[string]any) (proxyCPU float64) {
	if c.pid > 0 {
		p := cpuTimes(c.pid).sub(c.proxy)
		proxyCPU = p.total()
		m["proxy_cpu_s"] = round(proxyCPU, 2)
		m["proxy_user_s"] = round(p.user, 2)
		m["proxy_sys_s"] = round(p.sys, 2)
		m["proxy_page_faults"] = p.faults
		m["proxy_ctx_switches"] = contextSwitches(c.pid) - c.switches
	}
	m["loadgen_cpu_s"] = round(cpuTimes(os.Getpid()).sub(c.self).total(), 2)
	h := readHostCPU()
	m["host_cpu_busy_pct"] = round(h.busyPctSince(c.host), 1)
	m["host_cpu_s"] = round(float64(h.busy-c.host.busy)/clkTck, 2)
	return proxyCPU
}

// perUnit records, for a scenario whose unit of work is n (connections,
// round trips), the proxy's CPU per unit split into user and kernel time and
// the whole host's busy CPU per unit, in µs under the given suffix
// ("conn": proxy_user_us_per_conn, proxy_sys_us_per_conn,
// host_cpu_us_per_conn). On a host the client, backend and proxy share,
// the host's figure is what bounds the rate. With a proxy, its page faults
// per unit too (proxy_page_faults_per_conn).
func perUnit(m map[string]any, n int64, suffix string) {
	if n <= 0 {
		return
	}
	per := func(key string) float64 {
		v, _ := m[key].(float64)
		return v * 1e6 / float64(n)
	}
	if _, ok := m["proxy_user_s"]; ok {
		m["proxy_user_us_per_"+suffix] = round(per("proxy_user_s"), 2)
		m["proxy_sys_us_per_"+suffix] = round(per("proxy_sys_s"), 2)
		if f, ok := m["proxy_page_faults"].(int64); ok {
			m["proxy_page_faults_per_"+suffix] = round(float64(f)/float64(n), 3)
		}
	}
	m["host_cpu_us_per_"+suffix] = round(per("host_cpu_s"), 2)
}

// conntrack is a reading of netfilter's connection-tracking table.
type conntrack struct {
	present bool
	count   int64
	drops   int64 // drop + early_drop + insert_failed, summed over CPUs
}

func readConntrack() conntrack {
	var ct conntrack
	b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
	if err != nil {
		return ct
	}
	ct.present = true
	ct.count, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	ct.drops = conntrackDrops("/proc/net/stat/nf_conntrack")
	return ct
}

func (c conntrack) sub(prev conntrack) conntrack {
	return conntrack{present: c.present && prev.present, count: c.count, drops: c.drops - prev.drops}
}

// conntrackDrops sums the drop, early_drop and insert_failed columns of
// /proc/net/stat/nf_conntrack (a header line, then one hex row per CPU).
func conntrackDrops(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 2 {
		return 0
	}
	want := map[string]bool{"drop": true, "early_drop": true, "insert_failed": true}
	var cols []int
	for i, h := range strings.Fields(lines[0]) {
		if want[h] {
			cols = append(cols, i)
		}
	}
	var n int64
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		for _, i := range cols {
			if i < len(f) {
				v, _ := strconv.ParseInt(f[i], 16, 64)
				n += v
			}
		}
	}
	return n
}

// netstat reads the kernel's TCP extended counters (/proc/net/netstat, the
// "TcpExt:" header and value lines) by name; nil when it cannot.
func netstat() map[string]int64 {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return nil
	}
	return parseNetstat(b, "TcpExt:")
}

// parseNetstat pairs the names of prefix's header line with the numbers of
// the line after it.
func parseNetstat(b []byte, prefix string) map[string]int64 {
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != prefix || len(vals) != len(names) || vals[0] != prefix {
			continue
		}
		out := make(map[string]int64, len(names)-1)
		for j := 1; j < len(names); j++ {
			if v, err := strconv.ParseInt(vals[j], 10, 64); err == nil {
				out[names[j]] = v
			}
		}
		return out
	}
	return nil
}
