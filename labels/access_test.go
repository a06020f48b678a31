package labels

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
)

// geoIP and crowdSec decode from labels and Consul tags with no line of
// their own in labels (ARCHITECTURE.md, "Where the next pieces go"): lists
// split on commas, the interval as a duration, keys case-insensitive.
func TestDecodeGeoIPAndCrowdSec(t *testing.T) {
	iv := config.Duration(5 * time.Second)
	want := map[string]*config.TCPMiddleware{
		"geo": {GeoIP: &config.TCPGeoIP{
			Databases:      []string{"/var/lib/GeoIP/GeoLite2-Country.mmdb", "/var/lib/GeoIP/GeoLite2-ASN.mmdb"},
			AllowCountries: []string{"FR", "DE"},
			DenyASNs:       []string{"AS64512"},
			Unknown:        "deny",
			Loopback:       "deny",
		}},
		"cs": {CrowdSec: &config.TCPCrowdSec{
			LapiURL:        "https://crowdsec:8080",
			APIKeyFile:     "/run/secrets/bouncer-key",
			UpdateInterval: &iv,
			FailureMode:    "open",
			TLS:            &config.TCPCrowdSecTLS{CA: "/etc/crowdsec/ca.pem"},
		}},
	}
	lbls := map[string]string{
		"traefik.tcp.middlewares.geo.geoip.databases":        "/var/lib/GeoIP/GeoLite2-Country.mmdb,/var/lib/GeoIP/GeoLite2-ASN.mmdb",
		"traefik.tcp.middlewares.geo.geoIP.allowCountries":   "FR, DE",
		"traefik.tcp.middlewares.geo.geoip.denyasns":         "AS64512",
		"traefik.tcp.middlewares.geo.geoip.unknown":          "deny",
		"traefik.tcp.middlewares.geo.geoip.loopback":         "deny",
		"traefik.tcp.middlewares.cs.crowdsec.lapiurl":        "https://crowdsec:8080",
		"traefik.tcp.middlewares.cs.crowdSec.apiKeyFile":     "/run/secrets/bouncer-key",
		"traefik.tcp.middlewares.cs.crowdsec.updateinterval": "5s",
		"traefik.tcp.middlewares.cs.crowdsec.failuremode":    "open",
		"traefik.tcp.middlewares.cs.crowdsec.tls.ca":         "/etc/crowdsec/ca.pem",
	}
	var tags []string
	for k, v := range lbls {
		tags = append(tags, k+"="+v)
	}
	for form, m := range map[string]map[string]string{"labels": lbls, "tags": TagsToLabels(tags, "traefik")} {
		conf, dropped, err := DecodeResources(m)
		if err != nil || len(dropped) > 0 {
			t.Fatalf("%s: err %v, dropped %v", form, err, dropped)
		}
		if !reflect.DeepEqual(conf.TCP.Middlewares, want) {
			t.Errorf("%s: middlewares\ngeo %+v\ncs  %+v\nwant\ngeo %+v\ncs  %+v", form,
				conf.TCP.Middlewares["geo"].GeoIP, conf.TCP.Middlewares["cs"].CrowdSec, want["geo"].GeoIP, want["cs"].CrowdSec)
		}
	}
}

// A geoIP or crowdSec key that does not decode drops its middleware alone,
// with an error naming the label.
func TestDecodeGeoIPAndCrowdSecBadKeys(t *testing.T) {
	conf, dropped, err := DecodeResources(map[string]string{
		"traefik.tcp.middlewares.geo.geoip.allowcountry":     "FR",
		"traefik.tcp.middlewares.cs.crowdsec.updateinterval": "often",
		"traefik.tcp.middlewares.ok.geoip.denycountries":     "RU",
		"traefik.tcp.middlewares.ok.geoip.databases":         "/db.mmdb",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(conf.TCP.Middlewares) != 1 || conf.TCP.Middlewares["ok"] == nil {
		t.Errorf("middlewares %v, want ok alone", conf.TCP.Middlewares)
	}
	got := map[string]string{}
	for _, d := range dropped {
		var le *Error
		if !errors.As(d, &le) {
			t.Fatalf("dropped %T %v", d, d)
		}
		got[le.Name] = le.Key + ": " + le.Err.Error()
	}
	if !strings.Contains(got["geo"], "traefik.tcp.middlewares.geo.geoip.allowcountry") || !strings.Contains(got["geo"], "unknown key") {
		t.Errorf("geo dropped as %q", got["geo"])
	}
	if !strings.Contains(got["cs"], "traefik.tcp.middlewares.cs.crowdsec.updateinterval") {
		t.Errorf("cs dropped as %q", got["cs"])
	}
}
