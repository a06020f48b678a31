package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// The geoIP and crowdSec middlewares through the proxy with the file
// provider (docs/reference/middlewares/geoip.md, crowdsec.md): decided at
// accept, so that a refused client reads nothing, and the backend never
// sees it.

// echoBackend is an echo backend that counts the connections it accepted.
func echoBackend(t *testing.T) *itest.Backend {
	t.Helper()
	return itest.StartBackend(t, itest.Loopback(t), func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// refusedBeforeAnyByte dials ep from src and requires the connection to
// end without one byte from the proxy while the client has written
// nothing, and the backend to have accepted nothing more.
func refusedBeforeAnyByte(t *testing.T, src, ep string, be *itest.Backend) {
	t.Helper()
	before := be.Accepted()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", ep)
	if err == nil {
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		var b [1]byte
		n, rerr := c.Read(b[:])
		c.Close()
		var ne net.Error
		if n > 0 || (errors.As(rerr, &ne) && ne.Timeout()) {
			t.Fatalf("%s: read %d bytes, %v: want the connection ended at once, without a byte", src, n, rerr)
		}
	}
	if got := be.Accepted(); got != before {
		t.Fatalf("%s refused, yet the backend accepted %d connections", src, got-before)
	}
}

// rawMiddleware is one middleware of /api/rawdata, with the keys geoIP and
// crowdSec add beside the configuration.
type rawMiddleware struct {
	Status         string          `json:"status"`
	Err            []string        `json:"error"`
	CrowdSec       json.RawMessage `json:"crowdSec"`
	GeoIPDatabases []struct {
		Path     string `json:"path"`
		Reloads  uint64 `json:"reloads"`
		Networks int    `json:"networks"`
	} `json:"geoIPDatabases"`
	CrowdSecBouncer *struct {
		Ready    bool      `json:"ready"`
		LastPull time.Time `json:"lastPull"`
		IPs      int       `json:"ips"`
	} `json:"crowdSecBouncer"`
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
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

// refusalEntry is one entry of /api/refusals.
type refusalEntry struct {
	Reason     string `json:"reason"`
	ClientIP   string `json:"clientIP"`
	Middleware string `json:"middleware"`
	Message    string `json:"message"`
}

// refusal returns the newest refusal of ip for reason in /api/refusals,
// nil when there is none.
func refusal(t *testing.T, api, reason, ip string) *refusalEntry {
	t.Helper()
	body := getBody(t, "http://"+api+"/api/refusals?reason="+reason+"&ip="+ip)
	var rs struct {
		Refusals []refusalEntry `json:"refusals"`
	}
	if err := json.Unmarshal([]byte(body), &rs); err != nil {
		t.Fatalf("/api/refusals: %v\n%s", err, body)
	}
	if len(rs.Refusals) == 0 {
		return nil
	}
	return &rs.Refusals[0]
}

func rawMiddlewares(t *testing.T, api string) (map[string]rawMiddleware, string) {
	t.Helper()
	body := getBody(t, "http://"+api+"/api/rawdata")
	var raw struct {
		Middlewares map[string]rawMiddleware `json:"tcpMiddlewares"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatalf("rawdata: %v\n%s", err, body)
	}
	return raw.Middlewares, body
}

// A client whose (loopback) address the database places in a denied
// country is refused before any byte, an allowed one is served, one the
// database does not place follows unknown (deny, with an allow list); a
// database replaced while serving changes the outcome without a restart.
func TestGeoIPThroughTheProxy(t *testing.T) {
	be := echoBackend(t)
	dir := t.TempDir()
	v1 := itest.MMDB(t, "Test-Country",
		itest.GeoNet{CIDR: "127.0.0.2/32", Country: "RU", Continent: "EU"},
		itest.GeoNet{CIDR: "127.0.0.3/32", Country: "FR", Continent: "EU"})
	db := itest.WriteRenamed(t, dir, "country.mmdb", v1)
	dyn := filepath.Join(dir, "dynamic.yml")
	content := fmt.Sprintf(`tcp:
  routers:
    r:
      rule: "HostSNI(`+"`*`"+`)"
      service: s
      middlewares: [geo]
  middlewares:
    geo:
      geoIP:
        databases: [%q]
        allowCountries: [FR]
        loopback: lookup
  services:
    s:
      loadBalancer:
        servers:
          - address: %q
`, db, be.Addr())
	if err := os.WriteFile(dyn, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.tcp.address="+ep, "--providers.file.filename="+dyn, "--metrics.prometheus=true")
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers["r@file"].Status == "enabled" }, "r@file not enabled")

	if got := len(itest.Hold(t, 2, "127.0.0.3", ep)); got != 2 {
		t.Fatalf("127.0.0.3 (FR, allowed): %d of 2 forwarded", got)
	}
	refusedBeforeAnyByte(t, "127.0.0.2", ep, be) // RU
	refusedBeforeAnyByte(t, "127.0.0.4", ep, be) // unknown: denied with an allow list

	mws, _ := rawMiddlewares(t, p.API)
	geo := mws["geo@file"]
	if geo.Status != "enabled" || len(geo.GeoIPDatabases) != 1 || geo.GeoIPDatabases[0].Networks == 0 {
		t.Fatalf("geo@file in rawdata: %+v", geo)
	}
	if r := refusal(t, p.API, "geoip", "127.0.0.2"); r == nil || r.Middleware != "geo@file" || r.Message != "denied: not in the allow lists" {
		t.Fatalf("/api/refusals?reason=geoip for 127.0.0.2: %+v", r)
	}
	if r := refusal(t, p.API, "geoip", "127.0.0.4"); r == nil || !strings.Contains(r.Message, "geoIP.unknown") {
		t.Fatalf("/api/refusals?reason=geoip for 127.0.0.4: %+v", r)
	}
	metrics := getBody(t, "http://"+p.API+"/metrics")
	if !strings.Contains(metrics, `reason="geoip"`) {
		t.Fatalf("/metrics counts no geoip refusal:\n%s", metrics)
	}

	// Replaced while serving (written aside, renamed over, as geoipupdate
	// does): 127.0.0.2 moves to France, 127.0.0.3 to Russia.
	itest.WriteRenamed(t, dir, "country.mmdb", itest.MMDB(t, "Test-Country",
		itest.GeoNet{CIDR: "127.0.0.2/32", Country: "FR", Continent: "EU"},
		itest.GeoNet{CIDR: "127.0.0.3/32", Country: "RU", Continent: "EU"}))
	start := time.Now()
	itest.Eventually(t, 10*time.Second, func() bool { return len(itest.Hold(t, 1, "127.0.0.2", ep)) == 1 }, "127.0.0.2 not served after the database placed it in France")
	t.Logf("the replaced database applied %v after the rename", time.Since(start).Round(time.Millisecond))
	refusedBeforeAnyByte(t, "127.0.0.3", ep, be)
	mws, _ = rawMiddlewares(t, p.API)
	if g := mws["geo@file"]; len(g.GeoIPDatabases) != 1 || g.GeoIPDatabases[0].Reloads != 1 {
		t.Fatalf("geo@file after the replacement: %+v, want one reload", g)
	}
	select {
	case <-p.Exited():
		t.Fatal("tollgate exited")
	default:
	}
}

// With a real CrowdSec LAPI: an address banned with cscli is refused
// within one interval, before any byte, and admitted again within one
// interval of its deletion; the bouncer's state is in the API and the
// metrics, and its API key in neither.
func TestCrowdSecThroughTheProxy(t *testing.T) {
	l := itest.StartLAPI(t, nil)
	be := echoBackend(t)
	dir := t.TempDir()
	const interval = time.Second
	dyn := filepath.Join(dir, "dynamic.yml")
	content := fmt.Sprintf(`tcp:
  routers:
    r:
      rule: "HostSNI(`+"`*`"+`)"
      service: s
      middlewares: [cs]
  middlewares:
    cs:
      crowdSec:
        lapiURL: %q
        apiKey: %q
        updateInterval: %s
  services:
    s:
      loadBalancer:
        servers:
          - address: %q
`, l.URL, l.Key, interval, be.Addr())
	if err := os.WriteFile(dyn, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.tcp.address="+ep, "--providers.file.filename="+dyn, "--metrics.prometheus=true")
	itest.Eventually(t, 10*time.Second, func() bool {
		mws, _ := rawMiddlewares(t, p.API)
		b := mws["cs@file"].CrowdSecBouncer
		return b != nil && b.Ready
	}, "the bouncer never pulled")

	if got := len(itest.Hold(t, 1, "127.0.0.5", ep)); got != 1 {
		t.Fatalf("127.0.0.5 before any ban: %d of 1 forwarded", got)
	}
	l.CSCLI("decisions", "add", "--ip", "127.0.0.5", "--duration", "1h", "--reason", "tollgate end-to-end test")
	start := time.Now()
	// Within one interval, plus what a pull takes on a loaded machine.
	itest.Eventually(t, interval+3*time.Second, func() bool { return len(itest.Hold(t, 1, "127.0.0.5", ep)) == 0 }, "127.0.0.5 still served after its ban")
	t.Logf("ban applied %v after cscli decisions add (interval %v)", time.Since(start).Round(time.Millisecond), interval)
	refusedBeforeAnyByte(t, "127.0.0.5", ep, be)
	if got := len(itest.Hold(t, 1, "127.0.0.6", ep)); got != 1 {
		t.Fatalf("127.0.0.6 (not banned): %d of 1 forwarded", got)
	}

	mws, body := rawMiddlewares(t, p.API)
	if b := mws["cs@file"].CrowdSecBouncer; b == nil || b.IPs != 1 || b.LastPull.IsZero() {
		t.Fatalf("cs@file's bouncer in rawdata: %+v", b)
	}
	var shown struct {
		APIKey string `json:"apiKey"`
	}
	_ = json.Unmarshal(mws["cs@file"].CrowdSec, &shown)
	if strings.Contains(body, l.Key) || shown.APIKey != "REDACTED" {
		t.Fatalf("rawdata shows the API key, or not as REDACTED: %s", mws["cs@file"].CrowdSec)
	}
	if mw := getBody(t, "http://"+p.API+"/api/tcp/middlewares/cs@file"); strings.Contains(mw, l.Key) {
		t.Fatalf("/api/tcp/middlewares/cs@file shows the API key: %s", mw)
	}
	if r := refusal(t, p.API, "crowdsec", "127.0.0.5"); r == nil || r.Middleware != "cs@file" || r.Message != "banned by CrowdSec" {
		t.Fatalf("/api/refusals?reason=crowdsec for 127.0.0.5: %+v", r)
	}
	metrics := getBody(t, "http://"+p.API+"/metrics")
	for _, want := range []string{`tollgate_crowdsec_ready{middleware="cs@file"} 1`, `tollgate_crowdsec_bans{middleware="cs@file",scope="ip"} 1`, `reason="crowdsec"`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}

	l.CSCLI("decisions", "delete", "--ip", "127.0.0.5")
	start = time.Now()
	itest.Eventually(t, interval+3*time.Second, func() bool { return len(itest.Hold(t, 1, "127.0.0.5", ep)) == 1 }, "127.0.0.5 still refused after its ban was deleted")
	t.Logf("ban lifted %v after cscli decisions delete", time.Since(start).Round(time.Millisecond))
}
