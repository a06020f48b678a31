package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// Issue 41.1, through the binary: a readable file that is not PEM and a
// private key, each named as a certFile, and a key pasted where a CIDR
// goes: none of their content is in /api/rawdata, /api/tls/certificates or
// the log. The paths as written are, and the fingerprint of the
// certificate that loads.
func TestFileContentsNeverShown(t *testing.T) {
	dir := t.TempDir()
	kp, _ := itest.SelfSigned(t, "a.example")
	certFile, keyFile := writeCert(t, dir, kp)
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "password.txt")
	if err := os.WriteFile(secret, []byte("TOPSECRET-host-password-42\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	be := itest.EchoServer(t, "")
	indent := func(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n          ") }
	dyn := itest.WriteFile(t, "dyn.yml", fmt.Sprintf(`tls:
  certificates:
    - certFile: %q
      keyFile: %q
    - certFile: %q
      keyFile: %q
    - certFile: %q
      keyFile: %q
tcp:
  routers:
    a:
      rule: "HostSNI(`+"`a.example`"+`)"
      service: s
      tls: {}
    b:
      rule: "HostSNI(`+"`b.example`"+`)"
      service: s
      middlewares: [allow]
      tls: {}
  middlewares:
    allow:
      ipAllowList:
        sourceRange:
        - |
          %s
  services:
    s:
      loadBalancer:
        servers:
          - address: %q
`, secret, keyFile, keyFile, keyFile, certFile, keyFile, indent(string(keyPEM)), be))
	ep := itest.FreeAddr(t)
	g := itest.StartTollgate(t, "--entryPoints.tls.address="+ep, "--providers.file.filename="+dyn, "--log.level=DEBUG")
	itest.Eventually(t, 5*time.Second, func() bool { return g.Rawdata(t).Routers["a@file"].Status != "" }, "the configuration was not applied")
	get := func(path string) string {
		resp, err := noKeepAlive.Get("http://" + g.API + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	rawdata, certs := get("/api/rawdata"), get("/api/tls/certificates")
	keyBody := strings.Split(string(keyPEM), "\n")[1] // a line of the key's base64
	for what, text := range map[string]string{"/api/rawdata": rawdata, "/api/tls/certificates": certs, "the log": g.Out.String()} {
		for _, leak := range []string{"TOPSECRET", "PRIVATE KEY", keyBody} {
			if strings.Contains(text, leak) {
				t.Errorf("%s shows %q:\n%s", what, leak, text)
			}
		}
	}
	for _, want := range []string{`"certFile": "` + secret + `"`, `"certFile": "` + keyFile + `"`, `"keyFile": "` + keyFile + `"`, `"certFile": "` + certFile + `"`} {
		if !strings.Contains(rawdata, want) {
			t.Errorf("/api/rawdata lacks %s:\n%s", want, rawdata)
		}
	}
	for _, want := range []string{`"source": "` + secret + `"`, `"source": "` + keyFile + `"`, `"source": "` + certFile + `"`, `"sha256": "` + config.Fingerprint(kp.Certificate[0]) + `"`} {
		if !strings.Contains(certs, want) {
			t.Errorf("/api/tls/certificates lacks %s:\n%s", want, certs)
		}
	}
	if !strings.Contains(rawdata, "REDACTED private key") || !strings.Contains(g.Out.String(), "REDACTED private key") {
		t.Errorf("the key pasted as a CIDR is not shown redacted in the API and the log:\n%s", g.Out.String())
	}
}

// Issue 41.2, through the binary: a request to the loopback admin
// listener naming a Host that could be rebound (evil.example) is refused,
// on the API and on /ping; an IP, localhost and a name the operator
// allowed pass.
func TestAdminRefusesRebindingHosts(t *testing.T) {
	g := itest.StartTollgate(t, "--entryPoints.db.address="+itest.FreeAddr(t), "--api.allowedHosts=tollgate.internal")
	_, port, _ := net.SplitHostPort(g.API)
	status := func(host, path string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+g.API+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := noKeepAlive.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		host string
		code int
	}{
		{"evil.example", 403},
		{"evil.example:" + port, 403},
		{"127.0.0.1:" + port, 200},
		{"localhost:" + port, 200},
		{"[::1]:" + port, 200},
		{"tollgate.internal:" + port, 200},
	} {
		for _, path := range []string{"/api/rawdata", "/ping"} {
			code, body := status(tc.host, path)
			if code != tc.code {
				t.Errorf("GET %s with Host %s: %d, want %d: %s", path, tc.host, code, tc.code, body)
			}
			if code == 403 && (strings.Contains(body, "tcpRouters") || !strings.Contains(body, "DNS rebinding")) {
				t.Errorf("the refusal does not say why, or serves data: %s", body)
			}
		}
	}
}

// Issue 41.4, through the binary: 80 slow partial requests from 127.0.0.2
// hold its share of the admin listener's slots and no more: /ping from
// 127.0.0.1 is answered at once.
func TestAdminPingAnsweredBesideSlowClients(t *testing.T) {
	g := itest.StartTollgate(t, "--entryPoints.db.address="+itest.FreeAddr(t))
	var held []net.Conn
	defer func() { itest.CloseAll(held) }()
	for i := 0; i < 80; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", g.API)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
		held = append(held, c)
	}
	for i := 0; i < 3; i++ { // over the header timeout: the slow ones come back
		start := time.Now()
		resp, err := (&http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + g.API + "/ping")
		if err != nil {
			t.Fatalf("/ping from 127.0.0.1 beside 80 slow requests from 127.0.0.2: %v", err)
		}
		resp.Body.Close()
		t.Logf("/ping answered in %v", time.Since(start).Round(time.Microsecond))
		for j := 0; j < 80 && i < 2; j++ { // the slots freed by the header timeout are taken again
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Second}
			if c, err := d.Dial("tcp", g.API); err == nil {
				_, _ = io.WriteString(c, "GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
				held = append(held, c)
			}
		}
		time.Sleep(time.Second)
	}
}
