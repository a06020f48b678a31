package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The rateLimit middleware through the tollgate binary, one property per
// test: exactness of the burst under a simultaneous burst, one bucket per
// middleware name shared by routers, buckets that survive reloads, a
// changed average that applies at once without refilling, zero per-IP state
// after 100,000 client IPs, dryRun, the API's per-IP view, metrics and
// rate-limited logs.

// rateState is what /api/tcp/middlewares/<rateLimit>/clients returns.
type rateState struct {
	Average     int64  `json:"average"`
	Period      string `json:"period"`
	Burst       int64  `json:"burst"`
	DryRun      bool   `json:"dryRun"`
	DistinctIPs int64  `json:"distinctIPs"`
	Admitted    uint64 `json:"admittedTotal"`
	Rejected    uint64 `json:"rejectedTotal"`
	Top         []struct {
		IP        string `json:"ip"`
		Available int64  `json:"available"`
		FullIn    string `json:"fullIn"`
	} `json:"topClients"`
}

func rateOf(t *testing.T, p *itest.Tollgate, mw string) rateState {
	t.Helper()
	var st rateState
	p.GetJSON(t, "/api/tcp/middlewares/"+mw+"/clients", &st)
	return st
}

func (st rateState) client(ip string) (available int64, fullIn time.Duration, ok bool) {
	for _, c := range st.Top {
		if c.IP == ip {
			d, err := time.ParseDuration(c.FullIn)
			return c.Available, d, err == nil
		}
	}
	return 0, 0, false
}

// countingEcho is an echo backend that counts the connections it accepted.
func countingEcho(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String(), &n
}

// writeDynamic writes content to path atomically (the file provider must
// never see half a file).
func writeDynamic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// rateConfig is one service at be with the routers given (name -> entry
// point, every one through the middlewares listed) and the middleware
// blocks given (YAML, indented under tcp.middlewares).
func rateConfig(be string, routers map[string]string, chain, middlewares string) string {
	var b strings.Builder
	b.WriteString("tcp:\n  routers:\n")
	for name, ep := range routers {
		fmt.Fprintf(&b, "    %s:\n      entryPoints: [%s]\n      rule: \"HostSNI(`*`)\"\n      service: s\n      middlewares: [%s]\n", name, ep, chain)
	}
	b.WriteString("  middlewares:\n" + middlewares)
	fmt.Fprintf(&b, "  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: %q\n", be)
	return b.String()
}

// startRate starts tollgate with the entry points named (each on a free
// port) on the dynamic file content, and waits for router to be enabled.
func startRate(t *testing.T, content, router string, extra []string, eps ...string) (*itest.Tollgate, map[string]string, string) {
	t.Helper()
	dyn := filepath.Join(t.TempDir(), "dynamic.yml")
	writeDynamic(t, dyn, content)
	addrs := map[string]string{}
	args := []string{"--providers.file.filename=" + dyn}
	for _, ep := range eps {
		addrs[ep] = itest.FreeAddr(t)
		args = append(args, "--entryPoints."+ep+".address="+addrs[ep])
	}
	p := itest.StartTollgate(t, append(args, extra...)...)
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers[router].Status == "enabled" }, "router %s not enabled", router)
	return p, addrs, dyn
}

// simultaneous opens n connections from src to addr released together and
// returns how many were forwarded (their byte echoed); all are closed.
func simultaneous(t *testing.T, n int, src, addr string) int {
	t.Helper()
	var (
		wg        sync.WaitGroup
		forwarded atomic.Int64
		gate      = make(chan struct{})
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
			<-gate
			c, err := d.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			if itest.Echoes(c) {
				forwarded.Add(1)
			}
		}()
	}
	close(gate)
	wg.Wait()
	return int(forwarded.Load())
}

// attempts opens n connections from src to addr one after the other, each
// closed before the next, and returns how many were forwarded.
func attempts(t *testing.T, n int, src, addr string) int {
	t.Helper()
	forwarded := 0
	for i := 0; i < n; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			continue // refused, or reset before connect returned: not forwarded
		}
		if itest.Echoes(c) {
			forwarded++
		}
		c.Close()
	}
	return forwarded
}

// A burst of simultaneous attempts from one IP admits exactly burst, each IP
// has its own bucket, and refused connections never reach the backend.
func TestRateLimitBurstExactUnderConcurrency(t *testing.T) {
	be, accepted := countingEcho(t)
	conf := rateConfig(be, map[string]string{"r": "tcp"}, "rl",
		"    rl:\n      rateLimit:\n        average: 1\n        period: 1m\n        burst: 5\n")
	p, eps, _ := startRate(t, conf, "r@file", nil, "tcp")
	const n = 40
	for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
		if got := simultaneous(t, n, src, eps["tcp"]); got != 5 {
			t.Fatalf("%s: %d of %d simultaneous attempts forwarded, want exactly burst 5", src, got, n)
		}
	}
	if got := accepted.Load(); got != 10 {
		t.Fatalf("the backend accepted %d connections, want 10: a refused connection must never reach it", got)
	}
	st := rateOf(t, p, "rl@file")
	if st.Admitted != 10 || st.Rejected != 2*(n-5) || st.Burst != 5 || st.Average != 1 || st.Period != "1m0s" {
		t.Fatalf("API state %+v, want 10 admitted, %d rejected, average 1 per 1m0s, burst 5", st, 2*(n-5))
	}
}

// One bucket per middleware name: two routers on two entry points share it,
// and it survives reloads; a changed average applies at once to the buckets
// as they are (an emptied bucket is not refilled) and a changed rule refills
// at the new rate.
func TestRateLimitSharedSurvivesReloadsAndRateChanges(t *testing.T) {
	be := itest.EchoServer(t, "")
	mw := func(average int) string {
		return fmt.Sprintf("    rl:\n      rateLimit:\n        average: %d\n        period: 1m\n        burst: 3\n", average)
	}
	two := map[string]string{"a": "ep1", "b": "ep2"}
	p, eps, dyn := startRate(t, rateConfig(be, two, "rl", mw(1)), "b@file", nil, "ep1", "ep2")

	const src = "127.0.0.4"
	if got := attempts(t, 2, src, eps["ep1"]); got != 2 {
		t.Fatalf("router a: %d of 2 forwarded, want 2", got)
	}
	if got := attempts(t, 3, src, eps["ep2"]); got != 1 {
		t.Fatalf("router b after 2 through a: %d of 3 forwarded, want 1 (one bucket of 3 for both routers)", got)
	}

	// An unrelated change (a third router, another middleware) reloads
	// everything: the bucket stays empty.
	three := map[string]string{"a": "ep1", "b": "ep2", "c": "ep1"}
	writeDynamic(t, dyn, rateConfig(be, three, "rl", mw(1)+"    other:\n      inFlightConn:\n        amount: 5\n"))
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers["c@file"].Status == "enabled" }, "the reload (router c) not applied")
	if got := attempts(t, 2, src, eps["ep1"]); got != 0 {
		t.Fatalf("after a reload: %d forwarded, want 0 (the bucket survives reloads)", got)
	}
	_, before, ok := rateOf(t, p, "rl@file").client(src)
	if !ok || before < 100*time.Second {
		t.Fatalf("%s's bucket before the change: full in %v (listed %v), want about 3 minutes at 1/min", src, before, ok)
	}

	// average 1 -> 20 per minute (an interval of 60 s -> 3 s): the 3
	// connections used stay used (about 9 s to full, not 3 minutes, not 0).
	writeDynamic(t, dyn, rateConfig(be, three, "rl", mw(20)+"    other:\n      inFlightConn:\n        amount: 5\n"))
	itest.Eventually(t, 5*time.Second, func() bool { return rateOf(t, p, "rl@file").Average == 20 }, "average 20 not applied")
	changed := time.Now()
	avail, after, ok := rateOf(t, p, "rl@file").client(src)
	if !ok || avail != 0 || after > 9*time.Second || after < 5*time.Second {
		t.Fatalf("%s's bucket right after the change: %d available, full in %v (listed %v); want 0 available, full in 5-9 s (rescaled, not refilled)", src, avail, after, ok)
	}
	if time.Since(changed) < 2*time.Second { // the next connection is due about 2.8 s after the change
		if got := attempts(t, 1, src, eps["ep2"]); got != 0 {
			t.Fatal("right after the change an emptied bucket admitted: it was refilled")
		}
	}
	itest.Eventually(t, 15*time.Second, func() bool { return attempts(t, 1, src, eps["ep1"]) == 1 }, "no connection admitted within 15 s at 20/min (one every 3 s)")
	t.Logf("first connection at the new rate %v after the change (at the old rate: about a minute)", time.Since(changed).Round(time.Millisecond))
	if got := attempts(t, 5, "127.0.0.5", eps["ep2"]); got != 3 {
		t.Fatalf("a new client after the change: %d of 5 forwarded, want burst 3", got)
	}
}

// 100,000 distinct client IPs (10,000 with -short) each connect once; one
// period after the last, the limiter holds no per-IP entry.
func TestRateLimitManyIPsLeaveNoState(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	itest.ConntrackRoom(t, 2*n) // a client and a backend connection each
	be := itest.EchoServer(t, "")
	conf := rateConfig(be, map[string]string{"r": "tcp"}, "rl",
		"    rl:\n      rateLimit:\n        average: 1\n        period: 2s\n        burst: 1\n")
	p, eps, _ := startRate(t, conf, "r@file", []string{"--metrics.prometheus"}, "tcp")

	var next, ok, failed atomic.Int64
	var mu sync.Mutex
	var firstErrs []error
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				// 127.5.0.0 + i: every connection has a source IP of its own.
				var b [4]byte
				binary.BigEndian.PutUint32(b[:], 0x7f050000+uint32(i))
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: b[:]}, Timeout: 5 * time.Second}
				c, err := d.Dial("tcp", eps["tcp"])
				if err == nil {
					err = itest.Echo(c)
					c.Close()
				}
				if err != nil {
					if failed.Add(1) <= 5 {
						mu.Lock()
						firstErrs = append(firstErrs, fmt.Errorf("%s: %w", d.LocalAddr, err))
						mu.Unlock()
					}
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if got := ok.Load(); got != int64(n) {
		t.Fatalf("%d of %d connections forwarded (%d failed) in %v: each came from a fresh IP; first failures: %v", got, n, failed.Load(), elapsed, errors.Join(firstErrs...))
	}
	st := rateOf(t, p, "rl@file")
	if st.Admitted != uint64(n) || st.Rejected != 0 || st.DistinctIPs == 0 {
		t.Fatalf("state after %d clients: %+v; want all admitted and the last ones still tracked", n, st)
	}
	tracked := st.DistinctIPs
	last := time.Now()
	itest.Eventually(t, 2*time.Second+3*time.Second, func() bool {
		return rateOf(t, p, "rl@file").DistinctIPs == 0 && metricValue(t, p, `tollgate_ratelimit_clients{middleware="rl@file"}`) == 0
	}, "per-IP entries left one period (2 s) and a sweep after the last of %d clients", n)
	t.Logf("%d clients in %v; %d still tracked at the end; 0 entries %v later", n, elapsed.Round(time.Millisecond), tracked, time.Since(last).Round(time.Millisecond))
}

// dryRun admits everything, counts and logs what it would refuse.
func TestRateLimitDryRun(t *testing.T) {
	be, accepted := countingEcho(t)
	conf := rateConfig(be, map[string]string{"r": "tcp"}, "rl",
		"    rl:\n      rateLimit:\n        average: 1\n        period: 1m\n        burst: 2\n        dryRun: true\n")
	p, eps, _ := startRate(t, conf, "r@file", []string{"--metrics.prometheus"}, "tcp")
	if got := attempts(t, 6, "127.0.0.6", eps["tcp"]); got != 6 {
		t.Fatalf("dry run: %d of 6 forwarded, want all", got)
	}
	if accepted.Load() != 6 {
		t.Fatalf("the backend accepted %d, want 6", accepted.Load())
	}
	if st := rateOf(t, p, "rl@file"); !st.DryRun || st.Rejected != 4 || st.Admitted != 6 {
		t.Fatalf("state %+v, want dryRun with 4 would-be rejections of 6", st)
	}
	if v := metricValue(t, p, `tollgate_middleware_connections_total{middleware="rl@file",reason="ratelimit",result="would_reject"}`); v != 4 {
		t.Fatalf("would_reject metric %v, want 4", v)
	}
	itest.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(p.Out.String(), "Connection would be rejected (dry run)") &&
			strings.Contains(p.Out.String(), "connection rate limit reached for 127.0.0.6")
	}, "no dry-run log line")
}

// A flood from a few IPs: every refusal is counted in the metrics and the
// API, the log lines about it are bounded (one per IP per second, with a
// suppressed count), the API lists the clients' buckets, and the first
// refusal of an IP is an orderly close.
func TestRateLimitMetricsLogsAndAPI(t *testing.T) {
	be := itest.EchoServer(t, "")
	conf := rateConfig(be, map[string]string{"r": "tcp"}, "rl",
		"    rl:\n      rateLimit:\n        average: 1\n        period: 1m\n        burst: 2\n")
	p, eps, _ := startRate(t, conf, "r@file", []string{"--metrics.prometheus"}, "tcp")

	// The first refusal of a client in a second is gentle: an orderly
	// close, which the client reads as EOF, not a reset.
	attempts(t, 2, "127.0.0.10", eps["tcp"])
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.10")}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", eps["tcp"])
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c.Read(make([]byte, 1))
	c.Close()
	if !errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("first refusal: read %v, want EOF (an orderly close)", err)
	}

	const per = 100
	start := time.Now()
	total := 0
	for _, src := range []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"} {
		total += per
		if got := attempts(t, per, src, eps["tcp"]); got != 2 {
			t.Fatalf("%s: %d of %d forwarded, want burst 2", src, got, per)
		}
	}
	elapsed := time.Since(start)
	rejected := 1 + total - 3*2
	if v := metricValue(t, p, `tollgate_middleware_connections_total{middleware="rl@file",reason="ratelimit",result="rejected"}`); v != float64(rejected) {
		t.Fatalf("rejected metric %v, want %d: every refusal counts", v, rejected)
	}
	if v := metricValue(t, p, `tollgate_middleware_connections_total{middleware="rl@file",reason="",result="accepted"}`); v != 8 {
		t.Fatalf("accepted metric %v, want 8", v)
	}
	st := rateOf(t, p, "rl@file")
	if st.Rejected != uint64(rejected) || st.DistinctIPs != 4 || len(st.Top) != 4 {
		t.Fatalf("API state %+v, want %d rejected and 4 clients listed", st, rejected)
	}
	for _, ip := range []string{"127.0.0.10", "127.0.0.11", "127.0.0.12", "127.0.0.13"} {
		if avail, full, ok := st.client(ip); !ok || avail != 0 || full < time.Minute {
			t.Errorf("%s: listed %v, %d available, full in %v; want 0 available, full in about 2 minutes", ip, ok, avail, full)
		}
	}
	var top1 rateState
	p.GetJSON(t, "/api/tcp/middlewares/rl@file/clients?top=1", &top1)
	if len(top1.Top) != 1 {
		t.Fatalf("?top=1 listed %d clients", len(top1.Top))
	}
	var raw struct {
		Middlewares map[string]struct {
			Status    string                `json:"status"`
			Type      string                `json:"type"`
			RateLimit struct{ Burst int64 } `json:"rateLimit"`
			State     rateState             `json:"rateLimitState"`
		} `json:"tcpMiddlewares"`
	}
	p.GetJSON(t, "/api/rawdata", &raw)
	if m := raw.Middlewares["rl@file"]; m.Status != "enabled" || m.Type != "RateLimit" || m.RateLimit.Burst != 2 || m.State.Rejected != uint64(rejected) || len(m.State.Top) != 4 {
		t.Fatalf("rawdata %+v, want the configuration with the live state", m)
	}

	// Logs: bounded however many refusals, each line with the operators'
	// phrase; the flood's suppressed lines are counted.
	var lines []string
	itest.Eventually(t, 5*time.Second, func() bool {
		lines = lines[:0]
		for _, l := range strings.Split(p.Out.String(), "\n") {
			if strings.Contains(l, "Connection rejected") && strings.Contains(l, "connection rate limit reached for 127.0.0.1") {
				lines = append(lines, l)
			}
		}
		return len(lines) >= 4 // one per IP at least
	}, "fewer than 4 rejection lines")
	secs := int(elapsed/time.Second) + 2
	if len(lines) > 4*secs {
		t.Fatalf("%d rejection log lines for %d refusals from 4 IPs in %v, want at most one per IP per second (%d)", len(lines), rejected, elapsed, 4*secs)
	}
	// 127.0.0.11's flood was suppressed after its first line: the next line
	// written (127.0.0.12's first) says how many lines were left out.
	if !strings.Contains(strings.Join(lines, "\n"), `"suppressed"`) {
		t.Fatalf("no rejection line carries a suppressed count:\n%s", strings.Join(lines, "\n"))
	}
	t.Logf("%d refusals in %v: %d log lines", rejected, elapsed.Round(time.Millisecond), len(lines))
}

// The per-IP view also groups IPv6 clients by ipv6Subnet (keys in the API
// are the prefixes), and an IPv4-mapped client is keyed as IPv4.
func TestRateLimitIPv6Subnet(t *testing.T) {
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		ln.Close()
	}
	be := itest.EchoServer(t, "")
	conf := rateConfig(be, map[string]string{"r": "tcp"}, "rl",
		"    rl:\n      rateLimit:\n        average: 1\n        period: 1m\n        burst: 1\n        ipv6Subnet: 64\n")
	dyn := filepath.Join(t.TempDir(), "dynamic.yml")
	writeDynamic(t, dyn, conf)
	port := netip.MustParseAddrPort(itest.FreeAddr(t)).Port()
	ep := fmt.Sprintf("[::1]:%d", port)
	p := itest.StartTollgate(t, "--providers.file.filename="+dyn, "--entryPoints.tcp.address="+ep)
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers["r@file"].Status == "enabled" }, "router not enabled")
	if got := attempts(t, 2, "::1", fmt.Sprintf("[::1]:%d", port)); got != 1 {
		t.Fatalf("::1: %d of 2 forwarded, want burst 1", got)
	}
	if _, _, ok := rateOf(t, p, "rl@file").client("::"); !ok {
		t.Fatalf("the API does not list ::1 under its /64 (::): %+v", rateOf(t, p, "rl@file").Top)
	}
}

// The chain example of docs/reference/middlewares/index.md (ipAllowList ->
// rateLimit -> inFlightConn) works as written, with loopback in the allow list and a local backend: a client
// reconnecting one connection at a time gets the burst of 20; one holding
// its connections gets the 10 of inFlightConn; a source outside the allow
// list gets nothing and uses no rate state.
func TestDocsRateLimitChain(t *testing.T) {
	page := filepath.Join("docs", "reference", "middlewares", "index.md")
	readme, err := os.ReadFile(filepath.Join(itest.ModuleRoot(), page))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- example: ratelimit-chain")
	_, block, ok2 := strings.Cut(after, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("%s has no ratelimit-chain YAML block", page)
	}
	be := itest.EchoServer(t, "")
	for old, repl := range map[string]string{`"10.0.0.0/8"`: `"127.0.0.0/24"`, `"127.0.0.1:5432"`: strconvQuote(be)} {
		if !strings.Contains(block, old) {
			t.Fatalf("the example of %s no longer has %s", page, old)
		}
		block = strings.ReplaceAll(block, old, repl)
	}
	p, eps, _ := startRate(t, block, "db@file", nil, "tcp")
	start := time.Now()
	got := attempts(t, 25, "127.0.0.7", eps["tcp"])
	// 100 a minute is one every 600 ms: a slow machine may earn one more.
	if refill := int(time.Since(start) / (600 * time.Millisecond)); got < 20 || got > 20+refill {
		t.Fatalf("one connection at a time: %d of 25 forwarded in %v, want burst 20 (+%d refilled)", got, time.Since(start), refill)
	}
	if held := itest.Hold(t, 15, "127.0.0.8", eps["tcp"]); len(held) != 10 {
		t.Fatalf("held: %d of 15 forwarded, want inFlightConn's 10", len(held))
	}
	if got := attempts(t, 3, "127.0.1.9", eps["tcp"]); got != 0 {
		t.Fatalf("outside the allow list: %d forwarded", got)
	}
	st := rateOf(t, p, "db-rate@file")
	if _, _, listed := st.client("127.0.1.9"); listed || st.Average != 100 || st.Burst != 20 || st.Period != "1m0s" {
		t.Fatalf("rate state %+v: want average 100 per 1m0s, burst 20, and nothing for the refused source", st)
	}
}

func strconvQuote(s string) string { return fmt.Sprintf("%q", s) }
