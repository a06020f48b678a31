// Command report turns results.jsonl (one line per peer, scenario and
// repetition, written by loadgen) into a markdown table: rows are metrics,
// columns are peers, each cell the median over repetitions with [min–max]
// when they differ, plus ratio columns such as tollgate/haproxy.
//
// The rows of known scenarios are listed below. A scenario with no listed
// rows (a new one) gets every numeric metric it reports, so it shows up
// before anyone edits this file.
//
// `report publish` (publish.go) then keeps the run: it writes
// bench/results/<date>-<time>-<host>.md, lists it in bench/results/README.md
// and, after a full run, makes its table bench/README.md's latest one.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
)

type record struct {
	Scenario string         `json:"scenario"`
	Peer     string         `json:"peer"`
	Rep      int            `json:"rep"`
	Params   map[string]any `json:"params"`
	Metrics  map[string]any `json:"metrics"`
}

// row is one line of the table.
type row struct {
	scenario, metric, label, format string
}

var rows = []row{
	{"conn-rate", "conns_per_s", "conn-rate: conns/s", "%.0f"},
	{"conn-rate", "p50_ms", "conn-rate: p50 ms", "%.2f"},
	{"conn-rate", "p99_ms", "conn-rate: p99 ms", "%.2f"},
	{"conn-rate", "proxy_cpu_us_per_conn", "conn-rate: proxy CPU µs/conn", "%.1f"},
	{"conn-rate", "proxy_user_us_per_conn", "conn-rate: proxy user-space CPU µs/conn", "%.1f"},
	{"conn-rate", "proxy_sys_us_per_conn", "conn-rate: proxy kernel CPU µs/conn", "%.1f"},
	{"conn-rate", "proxy_page_faults_per_conn", "conn-rate: proxy page faults/conn", "%.3f"},
	{"conn-rate", "host_cpu_us_per_conn", "conn-rate: whole host's CPU µs/conn", "%.1f"},
	{"conn-rate", "proxy_ctx_switches_per_conn", "conn-rate: proxy context switches/conn", "%.2f"},
	{"conn-rate", "errors", "conn-rate: errors", "%.0f"},
	{"conn-rate", "host_cpu_busy_pct", "conn-rate: host CPU busy %", "%.0f"},
	{"tls-handshake", "handshakes_per_s", "tls-handshake: full handshakes/s", "%.0f"},
	{"tls-handshake", "proxy_cpu_us_per_handshake", "tls-handshake: proxy CPU µs/handshake", "%.1f"},
	{"tls-handshake", "p50_ms", "tls-handshake: p50 ms", "%.2f"},
	{"tls-handshake", "errors", "tls-handshake: errors", "%.0f"},

	{"rr", "round_trips_per_s", "rr: round trips/s (100 B each way)", "%.0f"},
	{"rr", "p50_ms", "rr: p50 ms", "%.3f"},
	{"rr", "p99_ms", "rr: p99 ms", "%.3f"},
	{"rr", "proxy_cpu_us_per_rt", "rr: proxy CPU µs/round trip", "%.2f"},
	{"rr", "proxy_user_us_per_rt", "rr: proxy user-space CPU µs/round trip", "%.2f"},
	{"rr", "proxy_sys_us_per_rt", "rr: proxy kernel CPU µs/round trip", "%.2f"},
	{"rr", "proxy_page_faults_per_rt", "rr: proxy page faults/round trip", "%.4f"},
	{"rr", "host_cpu_us_per_rt", "rr: whole host's CPU µs/round trip", "%.2f"},
	{"rr", "proxy_ctx_switches_per_rt", "rr: proxy context switches/round trip", "%.3f"},
	{"rr", "errors", "rr: errors", "%.0f"},

	{"pgbench", "tps", "pgbench -S: transactions/s", "%.0f"},
	{"pgbench", "latency_avg_ms", "pgbench -S: latency avg ms", "%.3f"},
	{"pgbench", "proxy_cpu_us_per_txn", "pgbench -S: proxy CPU µs/txn", "%.2f"},
	{"redis", "get_rps", "redis-benchmark: GET req/s", "%.0f"},
	{"redis", "set_rps", "redis-benchmark: SET req/s", "%.0f"},
	{"redis", "proxy_cpu_us_per_req", "redis-benchmark: proxy CPU µs/req", "%.2f"},

	{"limit-exact", "a_admitted", "limit-exact: A admitted of N+5", "%.0f"},
	{"limit-exact", "b_admitted", "limit-exact: B admitted while A full", "%.0f"},
	{"limit-exact", "over_admitted_after_release", "limit-exact: over limit after release", "%.0f"},
	{"limit-exact", "release_first_ms", "limit-exact: first slot free after close, ms", "%.2f"},
	{"limit-exact", "release_all_ms", "limit-exact: all N slots free after close, ms", "%.2f"},
	{"limit-exact", "release_all_max_ms", "limit-exact: all N free, worst cycle, ms", "%.2f"},
	{"limit-exact", "pass", "limit-exact: pass", ""},

	{"flood", "attacker_attempts_per_s", "flood: attacker attempts absorbed/s", "%.0f"},
	{"flood", "victim_baseline_conns_per_s", "flood: victim conns/s, no attack", "%.0f"},
	{"flood", "victim_flood_conns_per_s", "flood: victim conns/s, under attack", "%.0f"},
	{"flood", "victim_cps_ratio", "flood: victim rate under attack / without", "%.2f"},
	{"flood", "victim_flood_p99_ms", "flood: victim p99 ms under attack", "%.2f"},
	{"flood", "victim_flood_errors", "flood: victim errors under attack", "%.0f"},
	{"flood", "proxy_cpu_us_per_attempt", "flood: proxy CPU µs/attempt", "%.1f"},
	{"flood", "attacker_max_concurrent_per_ip", "flood: attacker peak concurrent per IP", "%.0f"},
	{"flood", "pass", "flood: peak <= N", ""},

	{"reconnect", "attacker_attempts_per_s", "reconnect: attacker attempts/s (one conn at a time per IP)", "%.0f"},
	{"reconnect", "attacker_admitted_per_s_per_ip", "reconnect: attacker conns reaching the backend/s per IP", "%.1f"},
	{"reconnect", "attacker_max_per_period_per_ip", "reconnect: attacker max in any 1 s per IP", "%.0f"},
	{"reconnect", "attacker_bound_per_period", "reconnect: bound per 1 s (rate+burst)", "%.0f"},
	{"reconnect", "victim_baseline_conns_per_s", "reconnect: victim conns/s, no attack", "%.0f"},
	{"reconnect", "victim_cps_ratio", "reconnect: victim rate under attack / without", "%.2f"},
	{"reconnect", "victim_attack_p99_ms", "reconnect: victim p99 ms under attack", "%.2f"},
	{"reconnect", "victim_attack_errors", "reconnect: victim errors under attack", "%.0f"},
	{"reconnect", "proxy_cpu_us_per_attempt", "reconnect: proxy CPU µs/attempt", "%.1f"},
	{"reconnect", "pass", "reconnect: within the bound, victims unaffected", ""},

	{"throughput", "mb_per_s", "throughput: MB/s echoed", "%.0f"},
	{"throughput", "proxy_cpu_s_per_gb", "throughput: proxy CPU s/GB", "%.3f"},
	{"throughput", "client_cpu_s_per_gb", "throughput: load generator CPU s/GB", "%.3f"},
	{"throughput", "errors", "throughput: errors", "%.0f"},
	{"throughput", "stream_slowest_s", "throughput: slowest stream, s", "%.2f"},
	{"throughput", "kernel_rcvq_drops", "throughput: segments dropped at a full receive queue (TCPRcvQDrop)", "%.0f"},
	{"throughput", "kernel_rto_timeouts", "throughput: retransmission timeouts (TCPTimeouts)", "%.0f"},

	{"idle-memory", "admitted", "idle-memory: conns admitted", "%.0f"},
	{"idle-memory", "kib_per_conn", "idle-memory: RSS KiB/conn", "%.2f"},
	{"idle-memory", "pss_kib_per_conn", "idle-memory: PSS KiB/conn", "%.2f"},
	{"idle-memory", "fds_per_conn", "idle-memory: proxy fds/conn", "%.2f"},
	{"idle-memory", "before_rss_kib", "idle-memory: RSS before, KiB", "%.0f"},
	{"idle-memory", "closed_rss_kib", "idle-memory: RSS after close, KiB", "%.0f"},
	{"tls-idle-memory", "admitted", "tls-idle-memory: conns admitted", "%.0f"},
	{"tls-idle-memory", "kib_per_conn", "tls-idle-memory: RSS KiB/conn", "%.2f"},
	{"tls-idle-memory", "fds_per_conn", "tls-idle-memory: proxy fds/conn", "%.2f"},

	{"ip-spray", "ips_total", "ip-spray: distinct client IPs", "%.0f"},
	{"ip-spray", "failed", "ip-spray: failed conns", "%.0f"},
	{"ip-spray", "r1_growth_kib", "ip-spray: RSS growth round 1, KiB", "%.0f"},
	{"ip-spray", "later_growth_kib", "ip-spray: RSS growth after round 1, KiB", "%.0f"},
	{"ip-spray", "bytes_per_new_ip_after_r1", "ip-spray: bytes per new IP after round 1", "%.1f"},
	{"ip-spray", "final_rss_kib", "ip-spray: RSS final, KiB", "%.0f"},

	{"syscalls", "syscalls_per_conn", "syscalls per proxied conn (strace -c)", "%.1f"},
	{"syscalls", "syscalls_per_reject", "syscalls per rejected conn (strace -c)", "%.1f"},
	{"syscalls", "syscalls_per_round_trip", "syscalls per 100 B round trip (strace -c)", "%.2f"},
}

// noRatio lists metrics where a ratio column says nothing useful.
var noRatio = map[string]bool{
	"errors": true, "host_cpu_busy_pct": true, "a_admitted": true, "b_admitted": true,
	"over_admitted_after_release": true, "victim_flood_errors": true, "attacker_max_concurrent_per_ip": true,
	"admitted": true, "failed": true, "ips_total": true, "r1_growth_kib": true, "later_growth_kib": true,
	"bytes_per_new_ip_after_r1": true, "attacker_max_per_period_per_ip": true, "attacker_bound_per_period": true,
	"victim_attack_errors": true, "kernel_rcvq_drops": true, "kernel_rto_timeouts": true,
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "publish" {
		if err := publish(os.Args[2:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	in := flag.String("in", "results.jsonl", "loadgen JSON lines")
	peersFlag := flag.String("peers", "", "column order, comma or space separated (default: order of appearance)")
	ratiosFlag := flag.String("ratios", "", "ratio columns A/B, comma or space separated; those whose peers have no data are left out")
	mdOut := flag.String("md", "", "write the markdown here (default stdout)")
	jsonOut := flag.String("json", "", "write the per-peer samples here as JSON")
	title := flag.String("title", "", "heading line")
	envFile := flag.String("env", "", "environment summary to quote under the title")
	flag.Parse()

	recs, err := load(*in)
	if err != nil {
		log.Fatal(err)
	}
	peers := order(recs, split(*peersFlag))

	// values[scenario][peer][metric] -> samples over repetitions
	values := map[string]map[string]map[string][]any{}
	// byRep[scenario][peer][metric][repetition] -> value, for the ratios
	// taken within each repetition
	byRep := map[string]map[string]map[string]map[int]float64{}
	params := map[string]map[string]any{}
	var scenOrder []string
	var warnings []string
	for _, r := range recs {
		if values[r.Scenario] == nil {
			values[r.Scenario] = map[string]map[string][]any{}
			scenOrder = append(scenOrder, r.Scenario)
		}
		if values[r.Scenario][r.Peer] == nil {
			values[r.Scenario][r.Peer] = map[string][]any{}
		}
		if byRep[r.Scenario] == nil {
			byRep[r.Scenario] = map[string]map[string]map[int]float64{}
		}
		if byRep[r.Scenario][r.Peer] == nil {
			byRep[r.Scenario][r.Peer] = map[string]map[int]float64{}
		}
		for k, v := range r.Metrics {
			values[r.Scenario][r.Peer][k] = append(values[r.Scenario][r.Peer][k], v)
			if f, ok := v.(float64); ok {
				if byRep[r.Scenario][r.Peer][k] == nil {
					byRep[r.Scenario][r.Peer][k] = map[int]float64{}
				}
				byRep[r.Scenario][r.Peer][k][r.Rep] = f
			}
		}
		if r.Peer != "direct" || params[r.Scenario] == nil {
			params[r.Scenario] = r.Params
		}
		if d, ok := r.Metrics["conntrack_drops"].(float64); ok && d > 0 {
			warnings = append(warnings, fmt.Sprintf("%s %s r%d: %.0f connection-tracking drops during the run: its figures measure SYN retransmits, not the peer",
				r.Peer, r.Scenario, r.Rep, d))
		}
	}
	var ratios [][2]string
	for _, q := range split(*ratiosFlag) {
		a, b, ok := strings.Cut(q, "/")
		if ok && slices.Contains(peers, a) && slices.Contains(peers, b) {
			ratios = append(ratios, [2]string{a, b})
		}
	}

	var md strings.Builder
	if *title != "" {
		fmt.Fprintf(&md, "%s\n\n", *title)
	}
	if *envFile != "" {
		if b, err := os.ReadFile(*envFile); err == nil {
			fmt.Fprintf(&md, "```\n%s```\n\n", b)
		}
	}
	hdr := slices.Clone(peers)
	for _, q := range ratios {
		hdr = append(hdr, q[0]+"/"+q[1])
	}
	fmt.Fprintf(&md, "| metric | %s |\n|---|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	for _, rw := range tableRows(scenOrder, values) {
		byPeer := values[rw.scenario]
		n := 0
		for _, p := range peers {
			n = max(n, len(byPeer[p][rw.metric]))
		}
		if n == 0 {
			continue
		}
		cells := make([]string, 0, len(hdr))
		for _, p := range peers {
			cells = append(cells, cell(rw, byPeer[p][rw.metric], n))
		}
		for _, q := range ratios {
			a, okA := median(byPeer[q[0]][rw.metric])
			b, okB := median(byPeer[q[1]][rw.metric])
			if !okA || !okB || b == 0 || a < 0 || b < 0 || noRatio[rw.metric] || rw.format == "" {
				cells = append(cells, "")
				continue
			}
			cells = append(cells, ratioCell(a/b, byRep[rw.scenario][q[0]][rw.metric], byRep[rw.scenario][q[1]][rw.metric]))
		}
		fmt.Fprintf(&md, "| %s | %s |\n", rw.label, strings.Join(cells, " | "))
	}
	md.WriteString("\nEach cell: median over repetitions, [min–max] when they differ; (n=k) when a peer has fewer samples than the others " +
		"(a run failed: see run.log). n/a: not measured for that peer (direct has no proxy process and no limit). " +
		"Ratio columns divide medians, with [min–max] of the same ratio taken within each repetition (the two peers measured " +
		"minutes apart, not across the run's drift) when they differ: for rates higher is better, for CPU, latency, memory and release times lower is better.\n")
	if len(warnings) > 0 {
		md.WriteString("\n**Warnings**\n\n")
		for _, w := range warnings {
			fmt.Fprintf(&md, "- %s\n", w)
		}
	}
	md.WriteString("\nScenario parameters (the same for every peer):\n\n")
	for _, s := range scenOrder {
		fmt.Fprintf(&md, "- %s: %s\n", s, flagsLine(params[s]))
	}
	if strs := stringMetrics(scenOrder, values, peers); strs != "" {
		md.WriteString("\n" + strs)
	}

	if *mdOut == "" {
		fmt.Print(md.String())
	} else if err := os.WriteFile(*mdOut, []byte(md.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	if *jsonOut != "" {
		j, _ := json.MarshalIndent(map[string]any{"peers": peers, "values": values, "params": params}, "", "  ")
		if err := os.WriteFile(*jsonOut, j, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// tableRows returns the listed rows of every scenario present, then, for
// scenarios with no listed rows, one row per numeric metric they report.
func tableRows(scenOrder []string, values map[string]map[string]map[string][]any) []row {
	known := map[string]bool{}
	for _, r := range rows {
		known[r.scenario] = true
	}
	out := slices.Clone(rows)
	for _, s := range scenOrder {
		if known[s] {
			continue
		}
		ms := map[string]bool{}
		for _, byMetric := range values[s] {
			for k, v := range byMetric {
				switch v[0].(type) {
				case float64:
					ms[k] = true
				case bool:
					ms[k] = true
				}
			}
		}
		keys := make([]string, 0, len(ms))
		for k := range ms {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, row{s, k, s + ": " + k, "%.4g"})
		}
	}
	return out
}

// stringMetrics lists the descriptive (string) metrics worth reading, such
// as the syscall breakdowns and error kinds, per peer.
func stringMetrics(scenOrder []string, values map[string]map[string]map[string][]any, peers []string) string {
	var b strings.Builder
	for _, s := range scenOrder {
		for _, p := range peers {
			byMetric := values[s][p]
			keys := make([]string, 0, len(byMetric))
			for k, v := range byMetric {
				if _, ok := v[0].(string); ok {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				vs := make([]string, 0, len(byMetric[k]))
				for _, v := range byMetric[k] {
					vs = append(vs, fmt.Sprint(v))
				}
				fmt.Fprintf(&b, "- %s %s %s: %s\n", s, p, k, strings.Join(vs, " ; "))
			}
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "Details (one value per repetition):\n\n" + b.String()
}

func load(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []record
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; s.Scan(); line++ {
		t := strings.TrimSpace(s.Text())
		if !strings.HasPrefix(t, "{") {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(t), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		recs = append(recs, r)
	}
	return recs, s.Err()
}

func split(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

func order(recs []record, explicit []string) []string {
	if len(explicit) > 0 {
		return explicit
	}
	var peers []string
	for _, r := range recs {
		if !slices.Contains(peers, r.Peer) {
			peers = append(peers, r.Peer)
		}
	}
	return peers
}

func floats(samples []any) []float64 {
	var xs []float64
	for _, s := range samples {
		if f, ok := s.(float64); ok {
			xs = append(xs, f)
		}
	}
	return xs
}

func median(samples []any) (float64, bool) {
	xs := floats(samples)
	if len(xs) == 0 {
		return 0, false
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2, true
	}
	return xs[len(xs)/2], true
}

// cell renders one peer's samples; n is the most samples any peer has.
func cell(rw row, samples []any, n int) string {
	if len(samples) == 0 {
		return "n/a"
	}
	var out string
	if _, isBool := samples[0].(bool); isBool {
		pass := 0
		for _, s := range samples {
			if s == true {
				pass++
			}
		}
		switch {
		case pass == len(samples):
			out = "PASS"
		case len(samples) == 1:
			out = "**FAIL**"
		default:
			out = fmt.Sprintf("**FAIL** (%d/%d pass)", pass, len(samples))
		}
	} else if v, ok := median(samples); !ok {
		out = fmt.Sprint(samples[0])
	} else if xs := floats(samples); strings.HasPrefix(rw.metric, "release") && slices.Min(xs) < 0 {
		out = "never" // loadgen records -1 when the slots were not all free in time
	} else {
		f := rw.format
		if f == "" {
			f = "%.4g"
		}
		out = fmt.Sprintf(f, v)
		if lo, hi := slices.Min(xs), slices.Max(xs); lo != hi {
			if a, b := fmt.Sprintf(f, lo), fmt.Sprintf(f, hi); a != b {
				out += fmt.Sprintf(" [%s–%s]", a, b)
			}
		}
		if math.IsInf(v, 0) || math.IsNaN(v) {
			out = "n/a"
		}
	}
	if len(samples) < n {
		out += fmt.Sprintf(" (n=%d)", len(samples))
	}
	return out
}

// ratioCell renders the ratio of two peers' medians and, when the two
// have two or more repetitions in common, the range of the ratios taken
// within each of them. Peers are measured one after another in every
// repetition, in a new order each time, so a repetition's ratio compares
// them under the same load on the host; a range that straddles 1.00× says
// the difference is within what the host does from one repetition to the
// next.
func ratioCell(ratio float64, a, b map[int]float64) string {
	out := fmt.Sprintf("%.2f×", ratio)
	var rs []float64
	for rep, x := range a {
		if y, ok := b[rep]; ok && y > 0 && x >= 0 {
			rs = append(rs, x/y)
		}
	}
	if len(rs) < 2 {
		return out
	}
	if lo, hi := fmt.Sprintf("%.2f", slices.Min(rs)), fmt.Sprintf("%.2f", slices.Max(rs)); lo != hi {
		out += fmt.Sprintf(" [%s–%s]", lo, hi)
	}
	return out
}

// flagsLine renders a scenario's own flags, without the per-peer ones.
func flagsLine(p map[string]any) string {
	skip := map[string]bool{"limit": true, "dial-timeout": true}
	keys := make([]string, 0, len(p))
	for k := range p {
		if !skip[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("-%s %v", k, p[k])
	}
	return strings.Join(parts, " ")
}
