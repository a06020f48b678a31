package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// healthPort answers a health probe ("PING\n") with "PONG" while healthy
// and closes it otherwise.
func healthPort(t *testing.T, healthy *atomic.Bool) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				var b [5]byte
				if _, err := io.ReadFull(c, b[:]); err == nil && string(b[:]) == "PING\n" && healthy.Load() {
					_, _ = io.WriteString(c, "PONG")
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// Traefik v3's forms, in one dynamic file served through the proxy on
// loopback: the deprecated ipWhiteList filters (127.0.0.1 passes, 127.0.0.2
// is refused) with a warning; Traefik 3.6's health checks apply (a server
// DOWN at the first probe comes back UP through unhealthyInterval, the
// interval being an hour; weighted healthCheck: {}); a router with an
// unknown key is dropped alone, naming the key, and the rest of the file
// serves.
func TestTraefikFormsThroughTheProxy(t *testing.T) {
	echo := itest.EchoServer(t, "")
	var healthy atomic.Bool
	hp := healthPort(t, &healthy)
	dyn := filepath.Join(t.TempDir(), "dynamic.yml")
	content := fmt.Sprintf(`tcp:
  routers:
    r:
      rule: "HostSNI(`+"`*`"+`)"
      service: w
      middlewares: [office]
    typo:
      rule: "ClientIP(`+"`127.0.0.3`"+`)"
      servce: w
  middlewares:
    office:
      ipWhiteList:
        sourceRange: ["127.0.0.1"]
  services:
    w:
      weighted:
        healthCheck: {}
        services:
          - name: s
    s:
      loadBalancer:
        servers:
          - address: %q
        healthCheck:
          port: %d
          send: "PING\n"
          expect: "PONG"
          interval: 1h
          unhealthyInterval: 100ms
          timeout: 1s
`, echo, hp)
	if err := os.WriteFile(dyn, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.tcp.address="+ep, "--providers.file.filename="+dyn)
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers["r@file"].Status == "enabled" }, "r@file not enabled")

	var raw struct {
		Middlewares map[string]struct {
			Status string   `json:"status"`
			Err    []string `json:"error"`
		} `json:"tcpMiddlewares"`
		Services map[string]struct {
			ServerStatus map[string]string `json:"serverStatus"`
		} `json:"tcpServices"`
	}
	rawdata := func() {
		resp, err := http.Get("http://" + p.API + "/api/rawdata")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
			t.Fatal(err)
		}
	}
	rawdata()
	if mw := raw.Middlewares["office@file"]; mw.Status != "warning" || !strings.Contains(strings.Join(mw.Err, " "), "ipWhiteList is deprecated") ||
		!strings.Contains(strings.Join(mw.Err, " "), "rename it ipAllowList") {
		t.Fatalf("office@file: %+v, want status warning saying deprecated, use ipAllowList", mw)
	}
	rd := p.Rawdata(t)
	if _, ok := rd.Routers["typo@file"]; ok {
		t.Fatal("typo@file, with an unknown key, is in the configuration")
	}
	if probs := strings.Join(rd.Provider("file").Problems, "\n"); !strings.Contains(probs, `line 9: tcp.routers.typo.servce: unknown key "servce": router "typo" is dropped`) {
		t.Fatalf("file provider problems %q, want the unknown key named with its line", probs)
	}

	// DOWN at the first probe: nothing is forwarded.
	itest.Eventually(t, 5*time.Second, func() bool { rawdata(); return raw.Services["s@file"].ServerStatus[echo] == "DOWN" }, "s@file's server not DOWN")
	if got := len(itest.Hold(t, 1, "127.0.0.1", ep)); got != 0 {
		t.Fatalf("server DOWN: %d of 1 forwarded", got)
	}
	// UP through unhealthyInterval (the interval is an hour).
	healthy.Store(true)
	start := time.Now()
	itest.Eventually(t, 5*time.Second, func() bool { rawdata(); return raw.Services["s@file"].ServerStatus[echo] == "UP" }, "s@file's server not back UP")
	t.Logf("server UP %v after its health port answered (unhealthyInterval 100ms, interval 1h)", time.Since(start).Round(time.Millisecond))
	if got := len(itest.Hold(t, 2, "127.0.0.1", ep)); got != 2 {
		t.Fatalf("127.0.0.1 (in the ipWhiteList): %d of 2 forwarded", got)
	}
	if got := len(itest.Hold(t, 2, "127.0.0.2", ep)); got != 0 {
		t.Fatalf("127.0.0.2 (not in the ipWhiteList): %d of 2 forwarded", got)
	}
}
