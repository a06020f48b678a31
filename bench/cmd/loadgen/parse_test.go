package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseStraceSummary(t *testing.T) {
	in := `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 60.00    0.000600           3       200           splice
 30.00    0.000300           1       300        12 epoll_ctl
 10.00    0.000100           1       100           accept4
------ ----------- ----------- --------- --------- ----------------
100.00    0.001000           1       600        12 total
`
	got, err := parseStraceSummary([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := syscallCounts{"splice": {200, 0}, "epoll_ctl": {300, 12}, "accept4": {100, 0}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %+v, want %+v", k, got[k], v)
		}
	}
	if got.total() != 600 {
		t.Errorf("total %d, want 600", got.total())
	}
	if s := got.top(2, 100); s != "epoll_ctl=3.0(err 0.1) splice=2.0" {
		t.Errorf("top: %q", s)
	}
	if _, err := parseStraceSummary([]byte("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n")); err == nil {
		t.Error("no table: want an error")
	}
}

func TestParsePgbench(t *testing.T) {
	out := `pgbench (15.14 (Debian 15.14-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 10
query mode: simple
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 3 s
number of transactions actually processed: 49467
number of failed transactions: 0 (0.000%)
latency average = 0.485 ms
initial connection time = 9.102 ms
tps = 16489.383702 (without initial connection time)
`
	txns, tps, lat, failed, err := parsePgbench([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if txns != 49467 || tps != 16489.383702 || lat != 0.485 || failed != 0 {
		t.Errorf("got txns=%d tps=%v lat=%v failed=%d", txns, tps, lat, failed)
	}
	if _, _, _, _, err := parsePgbench([]byte("connection to server failed\n")); err == nil {
		t.Error("no summary: want an error")
	}
}

func TestParseRedisCSV(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","30769.23","0.219","0.040","0.207","0.375","0.511","8.935"
"GET","28735.63","0.233","0.032","0.223","0.399","0.535","4.247"
`
	rows, err := parseRedisCSV([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].test != "SET" || rows[0].rps != 30769.23 || rows[1].p99Ms != 0.535 || !rows[1].hasP99 {
		t.Errorf("got %+v", rows)
	}
	// Older redis-benchmark: no header, test and rps only.
	rows, err = parseRedisCSV([]byte("\"PING_INLINE\",\"1000.00\"\n"))
	if err != nil || len(rows) != 1 || rows[0].rps != 1000 || rows[0].hasP99 {
		t.Errorf("old format: %+v, %v", rows, err)
	}
}

func TestConntrackDrops(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nf_conntrack")
	in := "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error\n" +
		"00000008  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000010 00000002 00000000\n" +
		"00000008  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000\n"
	if err := os.WriteFile(p, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := conntrackDrops(p); got != 1+16+2+1 {
		t.Errorf("drops %d, want 20", got)
	}
}

func TestIPRange(t *testing.T) {
	ips, err := ipRange("127.0.0.254", 3)
	if err != nil {
		t.Fatal(err)
	}
	if ips[0].String() != "127.0.0.254" || ips[1].String() != "127.0.1.1" || ips[2].String() != "127.0.1.2" {
		t.Errorf("got %v (want .0 and .255 skipped)", ips)
	}
	if _, err := ipRange("127.255.255.250", 10); err == nil {
		t.Error("leaving 127.0.0.0/8: want an error")
	}
	if _, err := ipRange("10.0.0.1", 1); err == nil {
		t.Error("non-loopback base: want an error")
	}
}

func TestMaxInWindow(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		ts   []time.Duration
		want int
	}{
		{nil, 0},
		{ms(0), 1},
		{ms(0, 999), 2},
		{ms(0, 1000), 1},                        // the window is half-open: [t, t+1s)
		{ms(0, 0, 0, 500, 1200, 1300, 1400), 4}, // 500..1400 holds 4
	} {
		if got := maxInWindow(tc.ts, time.Second); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.ts, got, tc.want)
		}
	}
}

func TestParseNetstat(t *testing.T) {
	in := "TcpExt: SyncookiesSent TCPRcvQDrop TCPTimeouts\nTcpExt: 0 14 28\nIpExt: InNoRoutes\nIpExt: 3\n"
	got := parseNetstat([]byte(in), "TcpExt:")
	if got["TCPRcvQDrop"] != 14 || got["TCPTimeouts"] != 28 || len(got) != 3 {
		t.Errorf("TcpExt = %v", got)
	}
	if got := parseNetstat([]byte("TcpExt: A B\nTcpExt: 1\n"), "TcpExt:"); got != nil {
		t.Errorf("a value line one short parsed as %v", got)
	}
	if got := parseNetstat([]byte(in), "MPTcpExt:"); got != nil {
		t.Errorf("a missing prefix parsed as %v", got)
	}
}
