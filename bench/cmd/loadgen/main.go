// Command loadgen is the client side of the comparison harness. Each
// subcommand is one scenario: it drives load at one target (a proxy's
// listener, or the backend itself for the "direct" peer), reads the proxy's
// CPU and memory from /proc, and prints one JSON line on stdout (appended to
// results.jsonl by run.sh) and one human line on stderr.
//
//	loadgen <scenario> -target 127.0.0.1:PORT [-peer NAME] [-rep N] [-pid PID] [-limit N] [flags]
//
// Every load loop is bounded both by a count and by time. All traffic goes
// to loopback; clients bind distinct source addresses in 127.0.0.0/8.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"
)

// common holds the flags every scenario takes.
type common struct {
	target      string
	peer        string
	rep         int
	pid         int
	limit       int
	rate        int64 // per-IP connections per second the peer admits in the long run; 0 = no rate limit
	burst       int   // the peer's per-IP burst, with rate
	dialTimeout time.Duration
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.target, "target", "127.0.0.1:29100", "loopback ip:port to load (a proxy's listener, or the backend for direct)")
	fs.StringVar(&c.peer, "peer", "unknown", "peer name recorded with the result")
	fs.IntVar(&c.rep, "rep", 1, "repetition number recorded with the result")
	fs.IntVar(&c.pid, "pid", 0, "proxy PID: CPU and memory are summed over its process tree; 0 = no proxy process")
	fs.IntVar(&c.limit, "limit", 0, "per-IP connection limit the peer enforces; 0 = none (direct)")
	fs.Int64Var(&c.rate, "rate", 0, "per-IP connection rate (per second) the peer enforces; 0 = none")
	fs.IntVar(&c.burst, "burst", 0, "per-IP burst the peer allows on top of -rate")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 2*time.Second, "TCP connect timeout")
}

// Result is one scenario run. Metrics are flat (name -> number, bool or
// string) so the report can tabulate them without knowing the scenario.
type Result struct {
	Scenario string         `json:"scenario"`
	Peer     string         `json:"peer"`
	Rep      int            `json:"rep"`
	Time     string         `json:"time"`
	Params   map[string]any `json:"params"`
	Metrics  map[string]any `json:"metrics"`
	human    string
}

// A scenario registers its flags on fs and returns the function that runs
// it. The function may return a nil Result (the "wait" probe does).
type scenario struct {
	help  string
	setup func(fs *flag.FlagSet, c *common) func() (*Result, error)
}

// scenarios is the registry. Adding a scenario means adding an entry here
// and a line in run.sh's SCENARIO table (bench/README.md, "Adding a scenario").
var scenarios = map[string]scenario{
	"conn-rate":       {"connect, echo 64 B, close: conns/s, latency, proxy CPU per connection", connRateCmd},
	"rr":              {"persistent connections doing small request/response round trips", rrCmd},
	"limit-exact":     {"per-IP limit is exact and independent per IP; slot release time after close", limitExactCmd},
	"flood":           {"victim conn rate with and without attacker IPs dialing in a tight loop", floodCmd},
	"reconnect":       {"attackers reconnecting in a tight loop, one connection at a time, beside paced victims", reconnectCmd},
	"throughput":      {"parallel full-duplex bulk streams: MB/s and proxy CPU per GB", throughputCmd},
	"idle-memory":     {"proxy RSS per idle proxied connection", idleMemoryCmd},
	"tls-idle-memory": {"proxy RSS per idle terminated TLS connection", tlsIdleMemoryCmd},
	"ip-spray":        {"proxy RSS growth across rounds of fresh client IPs", ipSprayCmd},
	"pgbench":         {"pgbench select-only through the target (a PostgreSQL behind it)", pgbenchCmd},
	"redis":           {"redis-benchmark GET/SET through the target (a redis-server behind it)", redisCmd},
	"tls-handshake":   {"connect, full TLS handshake (no resumption), echo 64 B, close: handshakes/s, proxy CPU per handshake", tlsHandshakeCmd},
	"syscalls":        {"syscalls per proxied connection, counted with strace -c -f on the proxy", syscallsCmd},
	"wait":            {"readiness probe: wait until the target echoes (or holds a connection open)", waitCmd},
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: loadgen <scenario> [flags]\n\nscenarios:\n")
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-12s %s\n", n, scenarios[n].help)
	}
	fmt.Fprintf(os.Stderr, "\n'loadgen <scenario> -h' lists its flags\n")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	name := os.Args[1]
	sc, ok := scenarios[name]
	if !ok {
		usage()
	}
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	var c common
	c.register(fs)
	run := sc.setup(fs, &c)
	fs.Parse(os.Args[2:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "loadgen %s: unexpected arguments %v\n", name, fs.Args())
		os.Exit(2)
	}
	if ap, err := netip.ParseAddrPort(c.target); err != nil || !ap.Addr().IsLoopback() {
		fmt.Fprintf(os.Stderr, "loadgen %s: -target %q: want a loopback ip:port\n", name, c.target)
		os.Exit(2)
	}

	ct := readConntrack()
	res, err := run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "[%s] %s: %v\n", c.peer, name, err)
		os.Exit(1)
	}
	if res == nil {
		return
	}
	// Drops or failed inserts in the connection-tracking table mean SYNs
	// were lost to a full table: the figures then measure retransmit
	// timers, not the peer. Recorded so the report can flag them.
	if d := readConntrack().sub(ct); d.present {
		res.Metrics["conntrack_count_start"] = ct.count
		res.Metrics["conntrack_drops"] = d.drops
	}
	res.Scenario, res.Peer, res.Rep = name, c.peer, c.rep
	res.Time = time.Now().UTC().Format(time.RFC3339)
	res.Params = map[string]any{}
	fs.VisitAll(func(f *flag.Flag) {
		switch f.Name {
		case "peer", "rep", "pid", "target":
		default:
			res.Params[f.Name] = f.Value.String()
		}
	})
	b, err := json.Marshal(res)
	if err != nil {
		fmt.Fprintf(os.Stderr, "[%s] %s: encoding result: %v\n", c.peer, name, err)
		os.Exit(1)
	}
	fmt.Println(string(b))
	fmt.Fprintf(os.Stderr, "[%s] %s r%d: %s\n", c.peer, name, c.rep, res.human)
}

// humanf joins the parts of a one-line human summary.
func humanf(parts ...string) string { return strings.Join(parts, "  ") }

// opt renders metric key of m for a human line, "n/a" when absent (no
// proxy process to measure, for direct).
func opt(m map[string]any, key string) string {
	if v, ok := m[key]; ok {
		return fmt.Sprint(v)
	}
	return "n/a"
}
