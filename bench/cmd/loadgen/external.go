package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// runTool runs an external client (pgbench, redis-benchmark) with a hard
// time bound and returns its stdout; stderr is folded into the error.
func runTool(limit time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.Bytes(), fmt.Errorf("%s did not finish within %v", name, limit)
	}
	if err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, lastLines(errb.String(), 3))
	}
	return out.Bytes(), nil
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], " | ")
}

var (
	pgTPS     = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	pgTxns    = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	pgFailed  = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
	pgLatency = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
)

// parsePgbench reads pgbench's summary: transactions, tps, mean latency.
func parsePgbench(out []byte) (txns int64, tps, latMs float64, failed int64, err error) {
	num := func(re *regexp.Regexp) (string, bool) {
		m := re.FindSubmatch(out)
		if m == nil {
			return "", false
		}
		return string(m[1]), true
	}
	s, ok1 := num(pgTxns)
	t, ok2 := num(pgTPS)
	if !ok1 || !ok2 {
		return 0, 0, 0, 0, fmt.Errorf("pgbench output has no transaction count or tps: %q", lastLines(string(out), 4))
	}
	txns, _ = strconv.ParseInt(s, 10, 64)
	tps, _ = strconv.ParseFloat(t, 64)
	if l, ok := num(pgLatency); ok {
		latMs, _ = strconv.ParseFloat(l, 64)
	}
	if f, ok := num(pgFailed); ok {
		failed, _ = strconv.ParseInt(f, 10, 64)
	}
	return txns, tps, latMs, failed, nil
}

// pgbenchCmd runs pgbench's built-in select-only script (-S: one indexed
// SELECT per transaction, one small round trip) through the target, with
// persistent connections. libpq cannot choose a source address, so every
// client connects from 127.0.0.1: -clients must stay within the limit.
// pgbench is bounded by -T; loadgen kills it at twice that.
func pgbenchCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	bin := fs.String("pgbench", "pgbench", "pgbench binary")
	clients := fs.Int("clients", 8, "pgbench -c (all from 127.0.0.1, so <= limit)")
	threads := fs.Int("threads", 2, "pgbench -j")
	duration := fs.Duration("duration", 10*time.Second, "pgbench -T (time bound)")
	db := fs.String("db", "bench", "database (initialised by run.sh with pgbench -i)")
	user := fs.String("user", "postgres", "database user (trust authentication on loopback)")
	return func() (*Result, error) {
		if c.limit > 0 && *clients > c.limit {
			return nil, fmt.Errorf("-clients %d exceeds the limit %d (all pgbench clients share 127.0.0.1)", *clients, c.limit)
		}
		host, port, _ := net.SplitHostPort(c.target)
		secs := max(1, int(duration.Seconds()))
		cpu := startCPU(c.pid)
		out, err := runTool(2*time.Duration(secs)*time.Second+30*time.Second, *bin,
			"-h", host, "-p", port, "-U", *user, "-n", "-S", "-c", strconv.Itoa(*clients),
			"-j", strconv.Itoa(*threads), "-T", strconv.Itoa(secs), *db)
		m := map[string]any{}
		pc := cpu.stop(m)
		if err != nil {
			return nil, err
		}
		txns, tps, lat, failed, err := parsePgbench(out)
		if err != nil {
			return nil, err
		}
		m["transactions"] = txns
		m["tps"] = round(tps, 1)
		m["latency_avg_ms"] = lat
		m["failed"] = failed
		if pc > 0 && txns > 0 {
			m["proxy_cpu_us_per_txn"] = round(pc*1e6/float64(txns), 2)
		}
		return &Result{Metrics: m, human: humanf(
			fmt.Sprintf("%.0f tps (%d clients)", tps, *clients),
			fmt.Sprintf("latency avg %v ms", lat),
			"proxy_cpu="+opt(m, "proxy_cpu_us_per_txn")+"µs/txn",
			fmt.Sprintf("host_cpu=%v%%", m["host_cpu_busy_pct"]),
		)}, nil
	}
}

// redisRow is one test line of redis-benchmark --csv.
type redisRow struct {
	test     string
	rps      float64
	avgMs    float64
	p99Ms    float64
	hasP99   bool
	fieldsOK bool
}

// parseRedisCSV reads redis-benchmark --csv output: a header line
// ("test","rps","avg_latency_ms",...) then one row per test. Older versions
// print only "test","rps" without a header; both are accepted.
func parseRedisCSV(out []byte) ([]redisRow, error) {
	recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("redis-benchmark csv: %v", err)
	}
	col := map[string]int{"test": 0, "rps": 1}
	var rows []redisRow
	for _, r := range recs {
		if len(r) > 0 && r[0] == "test" {
			for i, h := range r {
				col[h] = i
			}
			continue
		}
		get := func(name string) (float64, bool) {
			i, ok := col[name]
			if !ok || i >= len(r) {
				return 0, false
			}
			v, err := strconv.ParseFloat(r[i], 64)
			return v, err == nil
		}
		row := redisRow{test: r[0]}
		row.rps, row.fieldsOK = get("rps")
		row.avgMs, _ = get("avg_latency_ms")
		row.p99Ms, row.hasP99 = get("p99_latency_ms")
		if row.fieldsOK {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("redis-benchmark printed no results: %q", lastLines(string(out), 3))
	}
	return rows, nil
}

// redisCmd runs redis-benchmark's GET and SET through the target with
// persistent connections and no pipelining (one small round trip per
// request). Like pgbench, it connects from 127.0.0.1 only. Each test is its
// own redis-benchmark run, -gap apart: within one run, redis-benchmark
// closes one test's clients and opens the next test's at once, and a proxy
// that frees a slot a few milliseconds after the client's close would
// reject some of them (the limit counts them all on one address).
func redisCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	bin := fs.String("redis-benchmark", "redis-benchmark", "redis-benchmark binary")
	clients := fs.Int("clients", 8, "redis-benchmark -c (all from 127.0.0.1, so < limit: it opens one more to read the server's config)")
	requests := fs.Int("requests", 200_000, "requests per test (count bound)")
	size := fs.Int("size", 100, "SET value size in bytes")
	tests := fs.String("tests", "get,set", "redis-benchmark tests, each run on its own")
	gap := fs.Duration("gap", 500*time.Millisecond, "pause between two tests, for the previous clients' slots to be freed")
	limitT := fs.Duration("timeout", 60*time.Second, "time bound for each test")
	return func() (*Result, error) {
		if c.limit > 0 && *clients >= c.limit {
			return nil, fmt.Errorf("-clients %d must be below the limit %d (all connections share 127.0.0.1)", *clients, c.limit)
		}
		host, port, _ := net.SplitHostPort(c.target)
		m := map[string]any{}
		var parts []string
		var reqs int64
		var cpuTotal float64
		for i, t := range strings.Split(*tests, ",") {
			if i > 0 {
				time.Sleep(*gap)
			}
			cpu := startCPU(c.pid)
			out, err := runTool(*limitT, *bin, "-h", host, "-p", port, "-c", strconv.Itoa(*clients),
				"-n", strconv.Itoa(*requests), "-d", strconv.Itoa(*size), "-t", t, "--csv")
			tm := map[string]any{}
			cpuTotal += cpu.stop(tm)
			if err != nil {
				return nil, err
			}
			rows, err := parseRedisCSV(out)
			if err != nil {
				return nil, err
			}
			for _, r := range rows {
				k := strings.ToLower(strings.Fields(r.test)[0])
				m[k+"_rps"] = round(r.rps, 1)
				m[k+"_avg_ms"] = r.avgMs
				if r.hasP99 {
					m[k+"_p99_ms"] = r.p99Ms
				}
				reqs += int64(*requests)
				parts = append(parts, fmt.Sprintf("%s %.0f req/s", r.test, r.rps))
			}
			m["host_cpu_busy_pct_"+t] = tm["host_cpu_busy_pct"]
		}
		m["requests"] = reqs
		if c.pid > 0 {
			m["proxy_cpu_s"] = round(cpuTotal, 2)
		}
		if cpuTotal > 0 && reqs > 0 {
			m["proxy_cpu_us_per_req"] = round(cpuTotal*1e6/float64(reqs), 2)
		}
		parts = append(parts, "proxy_cpu="+opt(m, "proxy_cpu_us_per_req")+"µs/req")
		return &Result{Metrics: m, human: humanf(parts...)}, nil
	}
}
