package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// One inFlightConn budget across three tollgate processes sharing one
// redis-server (docs/operations/replicas.md): exact totals per
// client IP, slots freed cluster-wide, a SIGKILLed replica's shares expired,
// and both failure modes while Redis is stopped.

// ppBackend is a backend behind PROXY protocol v1 that knows each
// connection's client IP: it counts the open connections per IP and the
// most ever open at once per IP, and greets each with "hi".
type ppBackend struct {
	addr string
	mu   sync.Mutex
	open map[string]int
	peak map[string]int
}

func startPPBackend(t *testing.T) *ppBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	b := &ppBackend{addr: ln.Addr().String(), open: map[string]int{}, peak: map[string]int{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.serve(c)
		}
	}()
	return b
}

func (b *ppBackend) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := r.ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) < 3 || f[0] != "PROXY" {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	ip := f[2]
	b.mu.Lock()
	b.open[ip]++
	b.peak[ip] = max(b.peak[ip], b.open[ip])
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.open[ip]--
		b.mu.Unlock()
	}()
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, r)
}

func (b *ppBackend) counts(ip string) (open, peak int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open[ip], b.peak[ip]
}

type replicaSet struct {
	procs []*itest.Tollgate
	eps   []string
}

const replicaExpiry = 1500 * time.Millisecond

// startReplicas starts n tollgates on one dynamic configuration: a router
// through inFlightConn "limit" (amount, store "shared" on redisAddr, the
// failure mode given) to the backend, with PROXY protocol v1 to it.
func startReplicas(t *testing.T, n int, redisAddr, backend string, amount int, mode string, extra ...string) *replicaSet {
	t.Helper()
	rs := startReplicasUnready(t, n, redisAddr, backend, amount, mode, extra...)
	for i, p := range rs.procs {
		itest.Eventually(t, 10*time.Second, func() bool { return storeReachable(t, p) },
			"replica %d: limit@file not enabled with a reachable store:\n%s", i+1, p.Out.String())
	}
	return rs
}

// startReplicasUnready is startReplicas without waiting for the store.
func startReplicasUnready(t *testing.T, n int, redisAddr, backend string, amount int, mode string, extra ...string) *replicaSet {
	t.Helper()
	dyn := filepath.Join(t.TempDir(), "dynamic.yml")
	fm := ""
	if mode != "" {
		fm = "\n        failureMode: " + mode
	}
	writeDynamic(t, dyn, fmt.Sprintf(`tcp:
  routers:
    r:
      rule: "HostSNI(`+"`*`"+`)"
      service: s
      middlewares: [limit]
  middlewares:
    limit:
      inFlightConn:
        amount: %d
        store: shared%s
  services:
    s:
      loadBalancer:
        proxyProtocol:
          version: 1
        servers:
          - address: %q
`, amount, fm, backend))
	rs := &replicaSet{}
	for range n {
		ep := itest.FreeAddr(t)
		p := itest.StartTollgate(t, append([]string{"--providers.file.filename=" + dyn, "--entryPoints.tcp.address=" + ep,
			"--stores.shared.redis.endpoints=" + redisAddr, "--stores.shared.redis.leaseExpiry=" + replicaExpiry.String(),
			"--stores.shared.redis.timeout=200ms", "--metrics.prometheus"}, extra...)...)
		rs.procs = append(rs.procs, p)
		rs.eps = append(rs.eps, ep)
	}
	return rs
}

// spread opens n connections from src round robin over the replicas from
// the first-th on and returns those that were greeted (admitted), closing
// the others.
func (rs *replicaSet) spread(t *testing.T, src string, n, first int) []net.Conn {
	t.Helper()
	var held []net.Conn
	for i := range n {
		ep := rs.eps[(first+i)%len(rs.eps)]
		c, banner := itest.DialBanner(t, src, ep)
		if banner == "hi" {
			held = append(held, c)
		} else {
			c.Close()
		}
	}
	return held
}

// sampler polls the backend's open count of ip until stop, and reports
// the most seen.
func sampleMax(b *ppBackend, ip string, stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		most := 0
		for {
			open, _ := b.counts(ip)
			most = max(most, open)
			select {
			case <-stop:
				out <- most
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return out
}

// Three replicas, amount 10: one client IP spreading 30 connections over
// them gets exactly 10 in total; another IP gets its own 10; closing frees
// slots cluster-wide; a replica SIGKILLed while its clients hold 5 has them
// freed after the lease expiry, and the others admit 5 more; never more
// than 10 open at once.
func TestReplicasShareOneBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("three tollgate processes: skipped with -short")
	}
	rd := itest.StartRedis(t)
	be := startPPBackend(t)
	rs := startReplicas(t, 3, rd.Addr, be.addr, 10, "")
	const a, b = "127.0.0.2", "127.0.0.3"

	stop := make(chan struct{})
	maxA := sampleMax(be, a, stop)

	heldA := rs.spread(t, a, 30, 0)
	if len(heldA) != 10 {
		t.Fatalf("client %s spreading 30 connections over 3 replicas got %d admitted, want exactly 10", a, len(heldA))
	}
	heldB := rs.spread(t, b, 30, 1)
	if len(heldB) != 10 {
		t.Fatalf("client %s got %d admitted, want its own 10", b, len(heldB))
	}
	itest.CloseAll(heldB)

	// Close 4 of a's (each replica's share goes down), reopen through the
	// replicas round robin: exactly 4 more.
	itest.CloseAll(heldA[:4])
	heldA = heldA[4:]
	itest.Eventually(t, 5*time.Second, func() bool { open, _ := be.counts(a); return open == 6 }, "backend still counts %s's closed connections", a)
	more := rs.spread(t, a, 12, 2)
	if len(more) != 4 {
		t.Fatalf("after closing 4 of 10, %d of 12 new connections admitted over the replicas, want 4 (slots freed cluster-wide)", len(more))
	}
	heldA = append(heldA, more...)

	// Arrange for replica 0 to hold exactly 5 of a's: close everything,
	// open 5 through it and 5 through the others.
	itest.CloseAll(heldA)
	itest.Eventually(t, 5*time.Second, func() bool { open, _ := be.counts(a); return open == 0 }, "backend still counts %s's connections", a)
	var onVictim, onOthers []net.Conn
	for i := 0; i < 5; i++ {
		c, banner := itest.DialBanner(t, a, rs.eps[0])
		if banner != "hi" {
			t.Fatalf("connection %d through replica 1 refused with 0 of 10 open", i+1)
		}
		onVictim = append(onVictim, c)
	}
	survivors := &replicaSet{procs: rs.procs[1:], eps: rs.eps[1:]}
	onOthers = survivors.spread(t, a, 8, 0)
	if len(onOthers) != 5 {
		t.Fatalf("with 5 open on replica 1, the others admitted %d of 8, want 5", len(onOthers))
	}
	if err := rs.procs[0].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-rs.procs[0].Exited()
	// The killed process's sockets close with it: the backend sees 5 now.
	itest.Eventually(t, 5*time.Second, func() bool { open, _ := be.counts(a); return open == 5 }, "backend's open count of %s after the kill: %v", a, func() int { n, _ := be.counts(a); return n }())
	itest.CloseAll(onVictim)
	// Until the expiry the dead replica's 5 still count: nothing admitted.
	if early := survivors.spread(t, a, 2, 0); len(early) != 0 && time.Since(killed) < replicaExpiry {
		t.Fatalf("%d connections admitted %s after the kill, before the lease expiry %s: the dead replica's shares must count until then", len(early), time.Since(killed), replicaExpiry)
	} else {
		itest.CloseAll(early)
	}
	var after []net.Conn
	itest.Eventually(t, 3*replicaExpiry+5*time.Second, func() bool {
		got := survivors.spread(t, a, 1, len(after))
		after = append(after, got...)
		return len(after) >= 1
	}, "no connection admitted after the killed replica's lease expired")
	after = append(after, survivors.spread(t, a, 10, 0)...)
	if len(after) != 5 {
		t.Fatalf("after the killed replica's expiry the others admitted %d, want exactly 5 more (5 open of 10)", len(after))
	}
	t.Logf("the killed replica's shares stopped counting %s after SIGKILL (lease expiry %s)", time.Since(killed).Round(10*time.Millisecond), replicaExpiry)
	itest.CloseAll(after)
	itest.CloseAll(onOthers)
	close(stop)
	if most := <-maxA; most > 10 {
		t.Fatalf("the backend saw %d connections of %s open at once: more than the amount 10", most, a)
	}
	if _, peak := be.counts(a); peak > 10 {
		t.Fatalf("peak %d open connections of %s, over the amount", peak, a)
	}
}

// Redis stopped: with failureMode closed every new connection is refused;
// with open each replica admits up to the amount by itself. Redis back
// (empty, as after a crash): each replica asserts its shares again, so
// within one expiry the total is exact again.
func TestReplicasStoreOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("tollgate processes and redis-server: skipped with -short")
	}
	for _, mode := range []string{"closed", "open"} {
		t.Run(mode, func(t *testing.T) {
			rd := itest.StartRedis(t)
			be := startPPBackend(t)
			rs := startReplicas(t, 2, rd.Addr, be.addr, 4, mode)
			const a = "127.0.0.4"
			held := rs.spread(t, a, 2, 0) // one on each replica
			if len(held) != 2 {
				t.Fatalf("%d of 2 admitted with the store up", len(held))
			}
			rd.Stop()
			switch mode {
			case "closed":
				itest.Eventually(t, 3*replicaExpiry, func() bool {
					c, banner := itest.DialBanner(t, a, rs.eps[0])
					c.Close()
					return banner == ""
				}, "failureMode closed still admits with Redis stopped")
				if got := rs.spread(t, a, 4, 0); len(got) != 0 {
					t.Fatalf("failureMode closed admitted %d with Redis stopped", len(got))
				}
				metrics := metricsOf(t, rs.procs[0])
				for _, want := range []string{
					`tollgate_inflightconn_store_up{failure_mode="closed",middleware="limit@file",store="shared"} 0`,
					`tollgate_middleware_connections_total{middleware="limit@file",reason="store_unreachable",result="rejected"}`,
				} {
					if !strings.Contains(metrics, want) {
						t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "store"))
					}
				}
				itest.Eventually(t, 2*time.Second, func() bool {
					return strings.Contains(rs.procs[0].Out.String(), "shared store shared unreachable (failureMode closed)")
				}, "no rejection log line naming the unreachable store:\n%s", rs.procs[0].Out.String())
				var st struct {
					Store struct {
						FailureMode string `json:"failureMode"`
						Unreachable uint64 `json:"rejectedUnreachableTotal"`
					} `json:"store"`
				}
				rs.procs[0].GetJSON(t, "/api/tcp/middlewares/limit@file", &st)
				if st.Store.FailureMode != "closed" || st.Store.Unreachable == 0 {
					t.Errorf("API store state %+v: want failureMode closed and the rejections counted", st.Store)
				}
			case "open":
				// Each replica alone: amount 4 minus the one it holds.
				itest.Eventually(t, 3*replicaExpiry, func() bool { return !storeReachable(t, rs.procs[0]) }, "replica 1 does not report the store unreachable")
				itest.Eventually(t, 3*replicaExpiry, func() bool { return !storeReachable(t, rs.procs[1]) }, "replica 2 does not report the store unreachable")
				for i, ep := range rs.eps {
					one := &replicaSet{eps: []string{ep}}
					got := one.spread(t, a, 5, 0)
					if len(got) != 3 {
						t.Fatalf("failureMode open, Redis stopped: replica %d admitted %d of 5 holding 1, want 3 (its own amount 4)", i+1, len(got))
					}
					held = append(held, got...)
				}
				if !strings.Contains(rs.procs[0].Out.String(), "shared store unreachable") {
					t.Errorf("no log line about the unreachable store:\n%s", rs.procs[0].Out.String())
				}
				metrics := metricsOf(t, rs.procs[0])
				if !strings.Contains(metrics, `tollgate_inflightconn_store_fallbacks_total{middleware="limit@file"} 3`) {
					t.Errorf("fallbacks not metered:\n%s", grepLines(metrics, "store"))
				}
			}
			// Redis back, empty: within one expiry (plus a refresh) the
			// replicas' shares are asserted again and the total is exact.
			rd.Start()
			for i, p := range rs.procs {
				itest.Eventually(t, replicaExpiry+2*time.Second, func() bool { return storeReachable(t, p) }, "replica %d did not reach Redis again within one expiry", i+1)
			}
			want := 4 - len(held)
			if want < 0 {
				want = 0 // open mode: 8 held of 4; nothing until 4 close
			}
			if got := rs.spread(t, a, 6, 0); len(got) != want {
				t.Fatalf("after Redis returned with %d held, %d admitted, want %d", len(held), len(got), want)
			} else {
				held = append(held, got...)
			}
			// Close all but 2: exactly 2 more, cluster-wide.
			itest.CloseAll(held[2:])
			held = held[:2]
			itest.Eventually(t, 5*time.Second, func() bool { open, _ := be.counts(a); return open == 2 }, "backend open count")
			itest.Eventually(t, 5*time.Second, func() bool {
				got := rs.spread(t, a, 3, 0)
				defer itest.CloseAll(got)
				return len(got) == 2
			}, "after closing down to 2 of 4, not exactly 2 admitted")
			itest.CloseAll(held)
		})
	}
}

// The store over TLS, as an ACL user, to a redis-server that serves only
// TLS: two replicas keep one budget; a replica that does not trust the
// server's certificate (another CA) never reaches it, and refuses
// connections for it (failureMode closed, the default).
func TestReplicasShareOneBudgetOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("three tollgate processes: skipped with -short")
	}
	selfSigned := func() (cert, key string) {
		c, _ := itest.SelfSigned(t, "localhost", "127.0.0.1")
		return itest.WritePEM(t, t.TempDir(), c)
	}
	cert, key := selfSigned()
	other, _ := selfSigned()
	port := itest.FreePort(t)
	itest.StartRedis(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", cert, "--tls-auth-clients", "no", "--user", "tollgate", "on", ">s3cret", "~*", "&*", "+@all")
	addr := "127.0.0.1:" + strconv.Itoa(port)
	be := startPPBackend(t)
	login := []string{"--stores.shared.redis.username=tollgate", "--stores.shared.redis.password=s3cret"}
	rs := startReplicas(t, 2, addr, be.addr, 2, "", append(login, "--stores.shared.redis.tls.ca="+cert)...)
	if held := rs.spread(t, "127.0.0.2", 6, 0); len(held) != 2 {
		t.Fatalf("6 connections over 2 replicas sharing amount 2 through Redis over TLS: %d admitted", len(held))
	} else {
		itest.CloseAll(held)
	}

	// The same configuration, but trusting another CA.
	bad := startReplicasUnready(t, 1, addr, be.addr, 2, "", append(login, "--stores.shared.redis.tls.ca="+other)...)
	var st struct {
		Store struct {
			Reachable   bool   `json:"reachable"`
			Unreachable uint64 `json:"rejectedUnreachableTotal"`
		} `json:"store"`
	}
	itest.Eventually(t, 10*time.Second, func() bool {
		c, banner := itest.DialBanner(t, "127.0.0.3", bad.eps[0])
		c.Close()
		if banner == "hi" {
			t.Fatal("a replica that cannot verify its store admitted a connection (failureMode closed)")
		}
		bad.procs[0].GetJSON(t, "/api/tcp/middlewares/limit@file", &st)
		return st.Store.Unreachable >= 1 && !st.Store.Reachable
	}, "a replica trusting another CA: want its store unreachable and connections refused for it")
}

// storeReachable reports whether the replica's limit@file is enabled with
// its store reachable.
func storeReachable(t *testing.T, p *itest.Tollgate) bool {
	t.Helper()
	var st struct {
		Status string `json:"status"`
		Store  struct {
			Reachable bool `json:"reachable"`
		} `json:"store"`
	}
	p.GetJSON(t, "/api/tcp/middlewares/limit@file", &st)
	return st.Status == "enabled" && st.Store.Reachable
}

func metricsOf(t *testing.T, p *itest.Tollgate) string {
	t.Helper()
	resp, err := http.Get("http://" + p.API + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A hung Redis (SIGSTOP: connected, silent) never holds up the event
// loops: a route without the store keeps serving, the store's route applies
// its failure mode (closed) once a round trip times out, and Redis back
// (SIGCONT), admissions go through the store again.
func TestStoreHungNeverBlocksLoops(t *testing.T) {
	if testing.Short() {
		t.Skip("tollgate process and redis-server: skipped with -short")
	}
	rd := itest.StartRedis(t)
	t.Cleanup(func() { _ = syscall.Kill(rd.PID(), syscall.SIGCONT) }) // before the Stop registered first
	be := startPPBackend(t)
	echo := itest.EchoServer(t, "")
	dyn := filepath.Join(t.TempDir(), "dynamic.yml")
	writeDynamic(t, dyn, fmt.Sprintf(`tcp:
  routers:
    limited:
      entryPoints: [limited]
      rule: "HostSNI(`+"`*`"+`)"
      service: s
      middlewares: [limit]
    plain:
      entryPoints: [plain]
      rule: "HostSNI(`+"`*`"+`)"
      service: e
  middlewares:
    limit:
      inFlightConn:
        amount: 5
        store: shared
  services:
    s:
      loadBalancer:
        proxyProtocol:
          version: 1
        servers:
          - address: %q
    e:
      loadBalancer:
        servers:
          - address: %q
`, be.addr, echo))
	limited, plain := itest.FreeAddr(t), itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--providers.file.filename="+dyn, "--entryPoints.limited.address="+limited, "--entryPoints.plain.address="+plain,
		"--stores.shared.redis.endpoints="+rd.Addr, "--stores.shared.redis.leaseExpiry=1500ms", "--stores.shared.redis.timeout=200ms")
	itest.Eventually(t, 10*time.Second, func() bool { return storeReachable(t, p) }, "store not reachable")
	rs := &replicaSet{eps: []string{limited}}
	if got := rs.spread(t, "127.0.0.5", 2, 0); len(got) != 2 {
		t.Fatalf("%d of 2 admitted with the store up", len(got))
	} else {
		defer itest.CloseAll(got)
	}

	if err := syscall.Kill(rd.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Connections waiting for the hung store, and the plain route beside them.
	type res struct{ banner string }
	waiting := make(chan res, 3)
	for range 3 {
		go func() { // not DialBanner: no t.Fatal off the test's goroutine
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}}
			c, err := d.Dial("tcp", limited)
			if err != nil {
				waiting <- res{}
				return
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			waiting <- res{strings.TrimSpace(line)}
		}()
	}
	for i := range 20 {
		c, err := net.DialTimeout("tcp", plain, 2*time.Second)
		if err != nil {
			t.Fatalf("plain route, connection %d, Redis hung: %v", i+1, err)
		}
		if !itest.Echoes(c) {
			c.Close()
			t.Fatalf("plain route, connection %d: no echo while Redis hangs (an event loop waits for the store)", i+1)
		}
		c.Close()
	}
	for range 3 {
		if r := <-waiting; r.banner != "" {
			t.Fatalf("a connection was admitted with Redis hung and failureMode closed (banner %q)", r.banner)
		}
	}
	itest.Eventually(t, 5*time.Second, func() bool { return !storeReachable(t, p) }, "a hung store still counts as reachable")

	if err := syscall.Kill(rd.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	itest.Eventually(t, 5*time.Second, func() bool { return storeReachable(t, p) }, "the store did not come back after SIGCONT")
	got := rs.spread(t, "127.0.0.5", 5, 0)
	defer itest.CloseAll(got)
	if len(got) != 3 {
		t.Fatalf("after Redis resumed, %d of 5 admitted holding 2 of 5: want 3", len(got))
	}
}

// An upgrade in place of one replica keeps the cluster's budget exact: the
// old process keeps its shares in the store while it drains (releasing them
// as its connections end), the new one admits through the store.
func TestReplicaUpgradeWithSharedStore(t *testing.T) {
	if testing.Short() {
		t.Skip("tollgate processes and redis-server: skipped with -short")
	}
	rd := itest.StartRedis(t)
	be := startPPBackend(t)
	rs := startReplicas(t, 2, rd.Addr, be.addr, 5, "", "--entryPoints.tcp.transport.lifeCycle.graceTimeOut=15s")
	const a = "127.0.0.6"
	one := &replicaSet{eps: rs.eps[:1]}
	two := &replicaSet{eps: rs.eps[1:]}
	old := one.spread(t, a, 3, 0)
	other := two.spread(t, a, 2, 0)
	if len(old) != 3 || len(other) != 2 {
		t.Fatalf("held %d through replica 1 and %d through replica 2, want 3 and 2", len(old), len(other))
	}
	defer itest.CloseAll(other)
	if err := rs.procs[0].Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	itest.Eventually(t, 35*time.Second, func() bool {
		v := processView(t, rs.procs[0].API)
		if v.Generation == 2 {
			itest.StopAtCleanup(t, v.PID)
			return storeReachable(t, rs.procs[0])
		}
		return false
	}, "no new process serving replica 1 with a reachable store after SIGUSR2")
	if n := len(one.spread(t, a, 2, 0)) + len(two.spread(t, a, 2, 0)); n != 0 {
		t.Fatalf("%d admitted with 5 of 5 held (3 in the draining old process): the old process's shares must still count", n)
	}
	for i, c := range old {
		_ = c.Close()
		// The slot is free once the client's side is finished
		// (docs/reference/middlewares/inflightconn.md, "What the limit counts"), which can be before
		// the backend has read the end: wait for it, so that the backend's
		// peak is the limit's.
		itest.Eventually(t, 5*time.Second, func() bool { open, _ := be.counts(a); return open == 4 },
			"the backend still counts the closed connection %d of %s", i+1, a)
		var got []net.Conn
		itest.Eventually(t, 5*time.Second, func() bool {
			got = append(got, two.spread(t, a, 1, 0)...)
			return len(got) >= 1
		}, "close %d of an old connection did not free a slot cluster-wide", i+1)
		got = append(got, one.spread(t, a, 1, 0)...)
		if len(got) != 1 {
			t.Fatalf("after close %d of an old connection, %d admitted across the replicas, want exactly 1", i+1, len(got))
		}
		defer itest.CloseAll(got)
	}
	if _, peak := be.counts(a); peak > 5 {
		t.Fatalf("the backend saw %d connections of %s at once, over the amount 5", peak, a)
	}
}

// The Redis loses the shares while it answers (issue 41): three FLUSHALLs
// in a row while one client holds the amount through replica 1. Each time,
// within one lease refresh the replica has asserted its shares again: the
// store counts the client's 3, and connections through either replica are
// refused. The server's maxmemory-policy (allkeys-lru here, with no
// maxmemory: nothing is evicted in this test) is reported as an eviction
// risk in the log, the API and the metrics.
func TestReplicasStoreLosesShares(t *testing.T) {
	if testing.Short() {
		t.Skip("tollgate processes and redis-server: skipped with -short")
	}
	rd := itest.StartRedis(t, "--maxmemory-policy", "allkeys-lru")
	rdb := goredis.NewClient(&goredis.Options{Addr: rd.Addr, DisableIdentity: true})
	defer rdb.Close()
	be := startPPBackend(t)
	rs := startReplicas(t, 2, rd.Addr, be.addr, 3, "")
	const a = "127.0.0.7"
	counted := func() int64 { // the client's count as the admissions see it
		n, err := rdb.Eval(context.Background(), `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HGETALL', KEYS[1])
local sum = 0
for i = 1, #f, 2 do
  local dl = redis.call('HGET', KEYS[2], f[i])
  if dl and tonumber(dl) > now then sum = sum + tonumber(f[i + 1]) end
end
return sum`, []string{"tollgate:{limit@file}:ip:" + a, "tollgate:{limit@file}:replicas"}).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	var st struct {
		Store struct {
			MaxmemoryPolicy string `json:"maxmemoryPolicy"`
			EvictionRisk    bool   `json:"evictionRisk"`
			Warning         string `json:"warning"`
		} `json:"store"`
	}
	rs.procs[0].GetJSON(t, "/api/tcp/middlewares/limit@file", &st)
	if st.Store.MaxmemoryPolicy != "allkeys-lru" || !st.Store.EvictionRisk || !strings.Contains(st.Store.Warning, "noeviction") {
		t.Errorf("API store state %+v: want maxmemoryPolicy allkeys-lru, evictionRisk, a warning naming noeviction", st.Store)
	}
	if m := metricsOf(t, rs.procs[0]); !strings.Contains(m, `tollgate_store_eviction_risk{maxmemory_policy="allkeys-lru",store="shared"} 1`) {
		t.Errorf("metrics lack the eviction risk:\n%s", grepLines(m, "store"))
	}
	if out := rs.procs[0].Out.String(); !strings.Contains(out, "maxmemory-policy may evict") {
		t.Errorf("no warning about the eviction policy in the log:\n%s", out)
	}

	one := &replicaSet{eps: rs.eps[:1]}
	held := one.spread(t, a, 3, 0)
	defer itest.CloseAll(held)
	if len(held) != 3 {
		t.Fatalf("%d of 3 admitted", len(held))
	}
	itest.Eventually(t, 5*time.Second, func() bool { return counted() == 3 }, "the store does not count the 3 held: %d", counted())
	refresh := replicaExpiry / 3
	for round := 1; round <= 3; round++ {
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		flushed := time.Now()
		itest.Eventually(t, refresh+time.Second, func() bool { return counted() == 3 },
			"flush %d: the store counts %d of the 3 held (lease refresh every %s)", round, counted(), refresh)
		t.Logf("flush %d: the 3 held counted again after %s", round, time.Since(flushed).Round(time.Millisecond))
		if got := rs.spread(t, a, 4, round); len(got) != 0 {
			itest.CloseAll(got)
			t.Fatalf("flush %d: %d more admitted over the replicas with 3 of 3 held", round, len(got))
		}
	}
	if _, peak := be.counts(a); peak > 3 {
		t.Fatalf("the backend saw %d connections of %s at once, over the amount 3", peak, a)
	}
	if m := metricsOf(t, rs.procs[0]); !strings.Contains(m, `tollgate_store_shares_lost_total{store="shared"} 3`) {
		t.Errorf("metrics do not count the 3 losses:\n%s", grepLines(m, "shares_lost"))
	}
	if out := rs.procs[0].Out.String(); !strings.Contains(out, "shared store lost this replica's shares") {
		t.Errorf("no log line about the lost shares:\n%s", out)
	}
}
