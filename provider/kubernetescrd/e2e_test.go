package kubernetescrd

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider/kubernetescrd/internal/kubetest"
)

// tollgate is the real binary running as a subprocess, stopped by PID.
type tollgate struct {
	*itest.Tollgate
	ep string
}

// startTollgate runs tollgate with one entry point "db" and the Kubernetes
// CRD provider limited to ns, finding the API server through KUBECONFIG as a
// user's shell would, and waits for /ping.
func startTollgate(t *testing.T, k *kubetest.Server, ns string) *tollgate {
	t.Helper()
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KUBERNETES_SERVICE_") && !strings.HasPrefix(e, "KUBECONFIG=") {
			env = append(env, e)
		}
	}
	tg := &tollgate{ep: itest.FreeAddr(t)}
	g := itest.StartTollgateEnv(t, append(env, "KUBECONFIG="+k.Kubeconfig),
		"--entryPoints.db.address="+tg.ep,
		"--providers.kubernetesCRD=true",
		"--providers.kubernetesCRD.namespaces="+ns,
		"--log.level=INFO",
	)
	tg.Tollgate = g
	return tg
}

// localIP is an IPv4 address of this machine outside 127.0.0.0/8. The API
// server refuses loopback (and link-local) addresses in EndpointSlices, so the
// echo backends listen on the machine's own address instead: Linux delivers
// traffic to a local address through the loopback device, so nothing leaves
// the machine.
func localIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip := n.IP.To4(); ip != nil && ip.IsGlobalUnicast() && !ip.IsLoopback() {
					return ip.String()
				}
			}
		}
		err = fmt.Errorf("no global unicast IPv4 address among %v", addrs)
	}
	itest.Need(t, "a local non-loopback IPv4 address for EndpointSlice backends", err)
	return ""
}

// startEcho is a backend on ip that echoes every byte.
func startEcho(t *testing.T, ip string) (addr string, port int) {
	t.Helper()
	addr = itest.EchoServer(t, net.JoinHostPort(ip, "0"))
	_, p, _ := net.SplitHostPort(addr)
	port, _ = strconv.Atoi(p)
	return addr, port
}

// dialEcho opens a connection from src to addr and reports whether a byte
// round-trips through it (the proxy forwarded it). A forwarded connection is
// returned open.
func dialEcho(src, addr string) (net.Conn, bool) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, false
	}
	if !itest.Echoes(c) {
		c.Close()
		return nil, false
	}
	return c, true
}

// TestE2E runs the tollgate binary against a real kube-apiserver: the
// MiddlewareTCP of deploy/example.yaml (amount 10) and an IngressRouteTCP on HostSNI(`*`) to a Service whose
// EndpointSlice names a local echo server (on the machine's own address: the
// API server refuses 127.0.0.0/8 in EndpointSlices). The proxy forwards and admits
// exactly 10 connections per client IP; an amount change applies to new
// connections without resetting held counts; endpoint changes propagate
// (p50/p95 measured through /api/rawdata); a route naming a missing
// middleware is disabled alone; deleting the route removes it.
func TestE2E(t *testing.T) {
	k := kube(t)
	ns := namespace(t, k, "e2e")
	ip := localIP(t)
	echo1, port1 := startEcho(t, ip)
	echo2, port2 := startEcho(t, ip)

	mw := middlewareTCP(ns, "test-inflightconn", 10)
	create(t, k.Client, mw)
	create(t, k.Client, service(ns, "db", 5432))
	eps := endpointSlice(ns, "db-1", "db", int64(port1), map[string]bool{ip: true})
	create(t, k.Client, eps)
	route := ingressRouteTCP(ns, "db", "db", 5432, "test-inflightconn")
	create(t, k.Client, route)

	start := time.Now()
	tg := startTollgate(t, k, ns)
	router := routeKey(ns, "db") + "@" + Name
	mwName := makeID(ns, "test-inflightconn") + "@" + Name
	itest.Eventually(t, 10*time.Second, func() bool {
		rd := tg.Rawdata(t)
		return rd.Routers[router].Status == "enabled" && rd.AmountOf(mwName) == 10 && rd.ServersOf(router) == echo1
	}, "router %s enabled with amount 10 and server %s in /api/rawdata", router, echo1)
	t.Logf("tollgate start -> route served: %v", time.Since(start))

	top := t
	var held1 []net.Conn
	t.Run("amount 10 per client IP, exactly", func(t *testing.T) {
		held1 = itest.Hold(top, 15, "127.0.0.1", tg.ep)
		if len(held1) != 10 {
			t.Fatalf("127.0.0.1: %d of 15 forwarded, want exactly 10", len(held1))
		}
		held2 := itest.Hold(t, 15, "127.0.0.2", tg.ep)
		if len(held2) != 10 {
			t.Fatalf("127.0.0.2: %d of 15 forwarded, want exactly 10 (its own budget)", len(held2))
		}
		itest.CloseAll(held2)
	})

	t.Run("amount change applies to new connections without resetting held counts", func(t *testing.T) {
		if len(held1) != 10 {
			t.Skip("needs the 10 connections held by the previous subtest")
		}
		start := time.Now()
		update(t, k.Client, mw, map[string]any{"spec": map[string]any{"inFlightConn": map[string]any{"amount": int64(12)}}})
		itest.Eventually(t, 5*time.Second, func() bool { return tg.Rawdata(t).AmountOf(mwName) == 12 }, "amount 12 in /api/rawdata")
		t.Logf("MiddlewareTCP update -> amount 12 applied: %v", time.Since(start))
		for i, c := range held1 {
			if !itest.Echoes(c) {
				t.Fatalf("held connection %d was cut by the reload", i)
			}
		}
		more := itest.Hold(t, 5, "127.0.0.1", tg.ep)
		if len(more) != 2 {
			t.Fatalf("127.0.0.1 holding 10 under amount 12: %d of 5 new forwarded, want exactly 2 (held counts kept)", len(more))
		}
		itest.CloseAll(more)
		itest.CloseAll(held1)
		held1 = nil
	})

	t.Run("endpoint changes propagate", func(t *testing.T) {
		const n = 20
		var lat []time.Duration
		for i := range n {
			addr, port := echo1, port1
			if i%2 == 0 {
				addr, port = echo2, port2
			}
			start := time.Now()
			update(t, k.Client, eps, endpointFields(int64(port), map[string]bool{ip: true}))
			deadline := time.Now().Add(5 * time.Second)
			for tg.Rawdata(t).ServersOf(router) != addr {
				if time.Now().After(deadline) {
					t.Fatalf("server %s not applied within 5 s", addr)
				}
				time.Sleep(2 * time.Millisecond)
			}
			lat = append(lat, time.Since(start))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("EndpointSlice update -> server applied in tollgate (/api/rawdata), %d updates: p50 %v, p95 %v, max %v", n, lat[n/2], lat[n*95/100], lat[n-1])
		if lat[n/2] > 100*time.Millisecond {
			t.Errorf("p50 %v > 100 ms", lat[n/2])
		}
		// The last update named echo1 (i = 19): traffic goes there.
		c, ok := dialEcho("127.0.0.3", tg.ep)
		if !ok {
			t.Fatal("not forwarded after the endpoint changes")
		}
		c.Close()
		update(t, k.Client, eps, endpointFields(int64(port1), map[string]bool{ip: false}))
		itest.Eventually(t, 5*time.Second, func() bool { return tg.Rawdata(t).Routers[router].Status == "disabled" }, "router disabled when no endpoint is ready")
		if c, ok := dialEcho("127.0.0.3", tg.ep); ok {
			c.Close()
			t.Fatal("forwarded with no ready endpoint")
		}
		update(t, k.Client, eps, endpointFields(int64(port1), map[string]bool{ip: true}))
		itest.Eventually(t, 5*time.Second, func() bool { return tg.Rawdata(t).Routers[router].Status == "enabled" }, "router enabled again")
	})

	t.Run("a route naming a missing middleware is disabled alone", func(t *testing.T) {
		bad := obj("traefik.io/v1alpha1", "IngressRouteTCP", ns, "bad", map[string]any{"spec": map[string]any{
			"entryPoints": []any{"db"},
			"routes": []any{map[string]any{
				"match":       "HostSNI(`*`) && ClientIP(`127.0.0.9`)",
				"middlewares": []any{map[string]any{"name": "nope"}},
				"services":    []any{map[string]any{"name": "db", "port": int64(5432)}},
			}},
		}})
		create(t, k.Client, bad)
		badRouter := makeID(ns, makeServiceKey("HostSNI(`*`) && ClientIP(`127.0.0.9`)", "bad")) + "@" + Name
		itest.Eventually(t, 5*time.Second, func() bool {
			rd := tg.Rawdata(t)
			r := rd.Routers[badRouter]
			named := false
			for _, p := range rd.Provider(Name).Problems {
				named = named || (strings.Contains(p, fmt.Sprintf("IngressRouteTCP %q", ns+"/bad")) && strings.Contains(p, "nope"))
			}
			return r.Status == "disabled" && strings.Contains(strings.Join(r.Err, " "), "does not exist") && named
		}, "router %s disabled with the missing middleware named", badRouter)
		if rd := tg.Rawdata(t); rd.Routers[router].Status != "enabled" {
			t.Fatalf("the good route is %q, want enabled", rd.Routers[router].Status)
		}
		c, ok := dialEcho("127.0.0.1", tg.ep)
		if !ok {
			t.Fatal("good route stopped forwarding")
		}
		c.Close()
		remove(t, k.Client, bad)
	})

	t.Run("deleting the route removes it", func(t *testing.T) {
		held := itest.Hold(t, 1, "127.0.0.1", tg.ep)
		if len(held) != 1 {
			t.Fatal("not forwarded before the deletion")
		}
		remove(t, k.Client, route)
		itest.Eventually(t, 5*time.Second, func() bool {
			_, ok := tg.Rawdata(t).Routers[router]
			return !ok
		}, "router %s gone from /api/rawdata", router)
		if c, ok := dialEcho("127.0.0.1", tg.ep); ok {
			c.Close()
			t.Fatal("a new connection was forwarded after the route's deletion")
		}
		if !itest.Echoes(held[0]) {
			t.Fatal("the connection held across the deletion was cut")
		}
	})
}
