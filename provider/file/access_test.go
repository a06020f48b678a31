package file

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
)

// geoIP and crowdSec decode from YAML (the fast path and paerser alike) and
// TOML into config's types, with no line of their own in this package.
func TestDecodeGeoIPAndCrowdSec(t *testing.T) {
	iv := config.Duration(30 * time.Second)
	want := map[string]*config.TCPMiddleware{
		"geo": {GeoIP: &config.TCPGeoIP{
			Databases:       []string{"/var/lib/GeoIP/GeoLite2-Country.mmdb"},
			AllowCountries:  []string{"FR", "DE"},
			DenyContinents:  []string{"AN"},
			AllowASNs:       []string{"AS64512", "3215"},
			Unknown:         "allow",
			Private:         "deny",
			Loopback:        "deny",
			AllowContinents: []string{"EU"},
		}},
		"cs": {CrowdSec: &config.TCPCrowdSec{
			LapiURL:        "https://127.0.0.1:8080",
			APIKey:         "0123456789abcdef",
			UpdateInterval: &iv,
			FailureMode:    "closed",
			TLS:            &config.TCPCrowdSecTLS{CA: "/ca.pem", Cert: "/bouncer.pem", Key: "/bouncer-key.pem", InsecureSkipVerify: true},
		}},
	}
	yml := `tcp:
  middlewares:
    geo:
      geoIP:
        databases:
          - /var/lib/GeoIP/GeoLite2-Country.mmdb
        allowCountries: [FR, DE]
        allowContinents: [EU]
        denyContinents: [AN]
        allowASNs: ["AS64512", "3215"]
        unknown: allow
        private: deny
        loopback: deny
    cs:
      crowdSec:
        lapiURL: https://127.0.0.1:8080
        apiKey: 0123456789abcdef
        updateInterval: 30s
        failureMode: closed
        tls:
          ca: /ca.pem
          cert: /bouncer.pem
          key: /bouncer-key.pem
          insecureSkipVerify: true
`
	toml := `[tcp.middlewares.geo.geoIP]
  databases = ["/var/lib/GeoIP/GeoLite2-Country.mmdb"]
  allowCountries = ["FR", "DE"]
  allowContinents = ["EU"]
  denyContinents = ["AN"]
  allowASNs = ["AS64512", "3215"]
  unknown = "allow"
  private = "deny"
  loopback = "deny"
[tcp.middlewares.cs.crowdSec]
  lapiURL = "https://127.0.0.1:8080"
  apiKey = "0123456789abcdef"
  updateInterval = "30s"
  failureMode = "closed"
  [tcp.middlewares.cs.crowdSec.tls]
    ca = "/ca.pem"
    cert = "/bouncer.pem"
    key = "/bouncer-key.pem"
    insecureSkipVerify = true
`
	if !checkSame(t, "geoIP and crowdSec", yml) {
		t.Error("the fast path left geoIP and crowdSec to paerser")
	}
	for ext, content := range map[string]string{".yml": yml, ".toml": toml} {
		d, err := DecodeContent(content, ext, "dyn"+ext)
		if err != nil {
			t.Fatalf("%s: %v", ext, err)
		}
		if !reflect.DeepEqual(d.TCP.Middlewares, want) {
			t.Errorf("%s: decoded geo %+v cs %+v", ext, d.TCP.Middlewares["geo"].GeoIP, d.TCP.Middlewares["cs"].CrowdSec)
		}
		// What is shown of it (JSON: the API, check) has no key.
		b, err := json.Marshal(d.TCP)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "0123456789abcdef") || !strings.Contains(string(b), `"apiKey":"REDACTED"`) {
			t.Errorf("%s: shown as %s", ext, b)
		}
	}
}

// A misspelt geoIP key drops its middleware alone, placed on its line.
func TestDecodeGeoIPUnknownKey(t *testing.T) {
	content := "tcp:\n  middlewares:\n    ok:\n      crowdSec:\n        lapiURL: http://127.0.0.1:8080\n    geo:\n      geoIP:\n        databases: [/db.mmdb]\n        allowCountry: [FR]\n"
	d, dropped, err := DecodeResources(content, ".yml", "dyn.yml")
	if err != nil {
		t.Fatal(err)
	}
	if d.TCP.Middlewares["ok"] == nil || d.TCP.Middlewares["geo"] != nil {
		t.Errorf("middlewares %v, want ok alone", d.TCP.Middlewares)
	}
	if len(dropped) != 1 || !strings.Contains(dropped[0].Error(), "line 9") || !strings.Contains(dropped[0].Error(), "allowCountry") {
		t.Errorf("dropped %v, want geo's allowCountry on line 9", dropped)
	}
}
