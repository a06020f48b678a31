package main

import "testing"

func TestPerUnit(t *testing.T) {
	m := map[string]any{"proxy_user_s": 0.5, "proxy_sys_s": 1.5, "proxy_page_faults": int64(25000), "host_cpu_s": 4.0}
	perUnit(m, 100000, "conn")
	for key, want := range map[string]float64{
		"proxy_user_us_per_conn":     5,
		"proxy_sys_us_per_conn":      15,
		"host_cpu_us_per_conn":       40,
		"proxy_page_faults_per_conn": 0.25,
	} {
		if got, _ := m[key].(float64); got != want {
			t.Errorf("%s = %v, want %v", key, m[key], want)
		}
	}

	// The direct peer has no proxy: only the host's figure.
	m = map[string]any{"host_cpu_s": 2.0}
	perUnit(m, 1000, "rt")
	if _, ok := m["proxy_user_us_per_rt"]; ok {
		t.Errorf("proxy_user_us_per_rt recorded without a proxy: %v", m)
	}
	if got, _ := m["host_cpu_us_per_rt"].(float64); got != 2000 {
		t.Errorf("host_cpu_us_per_rt = %v, want 2000", m["host_cpu_us_per_rt"])
	}

	// No unit of work: nothing divided by zero.
	m = map[string]any{"host_cpu_s": 2.0}
	perUnit(m, 0, "conn")
	if _, ok := m["host_cpu_us_per_conn"]; ok {
		t.Errorf("a figure per connection recorded for 0 connections: %v", m)
	}
}

func TestStatTimes(t *testing.T) {
	// A /proc/PID/stat line (a comm with a space and a parenthesis, as the
	// kernel allows): minflt 1500 (field 10), majflt 7 (field 12), utime 250
	// and stime 1300 ticks (fields 14 and 15).
	line := []byte("4242 (tollgate (x)) S 1 4242 4242 0 -1 4194560 1500 0 7 0 250 1300 0 0 20 0 5 0 100 0 0\n")
	got, ok := statTimes(line)
	if !ok {
		t.Fatalf("statTimes(%q) failed", line)
	}
	if want := (cpuTime{user: 2.5, sys: 13, faults: 1507}); got != want {
		t.Fatalf("statTimes = %+v, want %+v", got, want)
	}
	if _, ok := statTimes([]byte("4242 (short) S 1 2 3")); ok {
		t.Fatal("statTimes accepted a line without the time fields")
	}
	if got := cpuTimes(0); got != (cpuTime{}) {
		t.Fatalf("cpuTimes(0) = %+v, want zero", got)
	}
	d := cpuTime{user: 3, sys: 5, faults: 9}.sub(cpuTime{user: 1, sys: 2, faults: 4})
	if d != (cpuTime{user: 2, sys: 3, faults: 5}) {
		t.Fatalf("sub = %+v, want {2 3 5}", d)
	}
}
