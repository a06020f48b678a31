package api

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy"
)

func setup(t *testing.T) (*httptest.Server, *proxy.Server, string) {
	t.Helper()
	be, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	go func() {
		for {
			c, err := be.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	ep := &config.EntryPoint{Address: "127.0.0.1:0"}
	ep.SetDefaults()
	ep.Transport.LifeCycle.GraceTimeOut = 0
	srv, err := proxy.NewServer(map[string]*config.EntryPoint{"tcp": ep}, proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	w := &provider.Watcher{Apply: func(c *config.TCPConfiguration) { srv.Apply(c) }}
	cfg := &config.Dynamic{TCP: &config.TCPConfiguration{
		Routers:  map[string]*config.TCPRouter{"r": {Rule: "HostSNI(`*`)", Service: "s", Middlewares: []string{"allow", "lim"}}},
		Services: map[string]*config.TCPService{"s": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: be.Addr().String()}}}}},
		Middlewares: map[string]*config.TCPMiddleware{
			"lim":   {InFlightConn: &config.TCPInFlightConn{Amount: 2}},
			"allow": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.1", "127.0.0.2"}}},
		},
	}}
	srv.Apply(provider.Merge(map[string]*config.Dynamic{"file": cfg}))
	h := httptest.NewServer(Handler(Sources{Server: srv, Watcher: w, Metrics: MetricsHandler(srv, w, nil, nil)}))
	t.Cleanup(h.Close)
	return h, srv, srv.EntryPoint("tcp").Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func dial(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil // rejected before connect returned
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte{1}); err != nil {
		return nil
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return nil
	}
	return c
}

func TestAPI(t *testing.T) {
	h, _, addr := setup(t)
	if code, body := get(t, h.URL+"/ping"); code != 200 || body != "OK" {
		t.Fatalf("/ping: %d %q", code, body)
	}
	// Admit 2 from 127.0.0.1, reject 1 by the limit, 1 by the allow list.
	a1, a2 := dial(t, "127.0.0.1", addr), dial(t, "127.0.0.1", addr)
	if a1 == nil || a2 == nil {
		t.Fatal("first two connections not forwarded")
	}
	if dial(t, "127.0.0.1", addr) != nil {
		t.Fatal("third connection from 127.0.0.1 forwarded with amount 2")
	}
	if dial(t, "127.0.0.3", addr) != nil {
		t.Fatal("127.0.0.3 is not in the allow list")
	}

	_, body := get(t, h.URL+"/api/rawdata")
	var raw struct {
		Routers     map[string]map[string]any `json:"tcpRouters"`
		Middlewares map[string]struct {
			Status   string   `json:"status"`
			UsedBy   []string `json:"usedBy"`
			InFlight *struct {
				InFlight    int64 `json:"inFlight"`
				DistinctIPs int64 `json:"distinctIPs"`
				Rejected    int64 `json:"rejectedTotal"`
				Top         []struct {
					IP    string `json:"ip"`
					Count int64  `json:"count"`
				} `json:"topClients"`
			} `json:"inFlight"`
		} `json:"tcpMiddlewares"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	lim := raw.Middlewares["lim@file"]
	if lim.Status != "enabled" || len(lim.UsedBy) != 1 || lim.UsedBy[0] != "r@file" || lim.InFlight == nil {
		t.Fatalf("lim@file: %+v", lim)
	}
	if st := lim.InFlight; st.InFlight != 2 || st.DistinctIPs != 1 || st.Rejected != 1 || len(st.Top) != 1 || st.Top[0].IP != "127.0.0.1" || st.Top[0].Count != 2 {
		t.Fatalf("live state %+v", *st)
	}
	if r := raw.Routers["r@file"]; r["status"] != "enabled" || r["rule"] != "HostSNI(`*`)" {
		t.Fatalf("router %v", r)
	}

	code, body := get(t, h.URL+"/api/tcp/middlewares/lim@file/clients")
	if code != 200 || !strings.Contains(body, `"ip": "127.0.0.1"`) {
		t.Fatalf("clients: %d %s", code, body)
	}
	a1.Close()
	a2.Close()
	itest.Eventually(t, 5*time.Second, func() bool {
		_, b := get(t, h.URL+"/api/tcp/middlewares/lim@file/clients")
		return !strings.Contains(b, "127.0.0.1")
	}, "clients list to empty after close")

	for path, want := range map[string]int{
		"/api/tcp/routers":                                200,
		"/api/tcp/routers/r@file":                         200,
		"/api/tcp/routers/nope@file":                      404,
		"/api/tcp/middlewares/allow@file/clients":         400,
		"/api/tcp/middlewares/lim@file/clients?top=x":     400,
		"/api/tcp/middlewares/lim@file/clients?top=1000":  200,
		"/api/tcp/middlewares/lim@file/clients?top=1001":  400, // capped (issue 10.5)
		"/api/tcp/middlewares/lim@file/clients?top=99999": 400,
		"/api/nope": 404,
	} {
		code, body := get(t, h.URL+path)
		if code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
		if code >= 400 && !strings.Contains(body, `"message"`) {
			t.Errorf("%s: error body %q is not {\"message\": ...}", path, body)
		}
	}

	_, metrics := get(t, h.URL+"/metrics")
	for _, line := range []string{
		`tollgate_middleware_connections_total{middleware="lim@file",reason="",result="accepted"} 2`,
		`tollgate_middleware_connections_total{middleware="lim@file",reason="inflightconn_limit",result="rejected"} 1`,
		`tollgate_middleware_connections_total{middleware="allow@file",reason="ipallowlist_denied",result="rejected"} 1`,
		`tollgate_middleware_connections_total{middleware="allow@file",reason="",result="accepted"} 3`,
		`tollgate_entrypoint_connections_total{entrypoint="tcp"} 4`,
		`tollgate_config_reloads_total 1`,
	} {
		if !strings.Contains(metrics, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}
