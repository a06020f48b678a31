package kubernetescrd

import (
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// geoSpec and crowdSpec are MiddlewareTCP specs as the API server returns
// them (unstructured; the interval as a string, or an integer of seconds).
func geoSpec() map[string]any {
	return map[string]any{"geoIP": map[string]any{
		"databases":      []any{"/var/lib/GeoIP/GeoLite2-Country.mmdb"},
		"allowCountries": []any{"FR", "de"},
		"denyASNs":       []any{"AS64512"},
		"unknown":        "Deny",
		"loopback":       "lookup",
	}}
}

func crowdSpec(interval any) map[string]any {
	return map[string]any{"crowdSec": map[string]any{
		"lapiURL":        "http://crowdsec.security:8080",
		"apiKeyFile":     "/run/secrets/crowdsec/key",
		"updateInterval": interval,
		"failureMode":    "open",
	}}
}

// A MiddlewareTCP's geoIP and crowdSec decode into config's blocks, and
// build copies them (the informer's object is never shared with the
// configuration).
func TestGeoIPAndCrowdSecDecodeAndBuild(t *testing.T) {
	var geo, cs, csSeconds config.TCPMiddleware
	for _, d := range []struct {
		spec map[string]any
		dst  *config.TCPMiddleware
	}{{geoSpec(), &geo}, {crowdSpec("15s"), &cs}, {crowdSpec(int64(15)), &csSeconds}} {
		if err := decodeSpec(d.spec, d.dst); err != nil {
			t.Fatal(err)
		}
	}
	iv := config.Duration(15 * time.Second)
	wantGeo := &config.TCPGeoIP{Databases: []string{"/var/lib/GeoIP/GeoLite2-Country.mmdb"}, AllowCountries: []string{"FR", "de"},
		DenyASNs: []string{"AS64512"}, Unknown: "Deny", Loopback: "lookup"}
	wantCS := &config.TCPCrowdSec{LapiURL: "http://crowdsec.security:8080", APIKeyFile: "/run/secrets/crowdsec/key", UpdateInterval: &iv, FailureMode: "open"}
	if !reflect.DeepEqual(geo.GeoIP, wantGeo) || !reflect.DeepEqual(cs.CrowdSec, wantCS) || !reflect.DeepEqual(csSeconds.CrowdSec, wantCS) {
		t.Fatalf("decoded geoIP %+v, crowdSec %+v and %+v", geo.GeoIP, cs.CrowdSec, csSeconds.CrowdSec)
	}
	d, problems := build([]MiddlewareTCP{{Namespace: "db", Name: "geo", Spec: geo}, {Namespace: "db", Name: "cs", Spec: cs}}, nil, fakeCluster{})
	if len(problems) > 0 {
		t.Fatalf("problems %q", problems)
	}
	g, c := d.TCP.Middlewares["db-geo"], d.TCP.Middlewares["db-cs"]
	if g == nil || !reflect.DeepEqual(g.GeoIP, wantGeo) || c == nil || !reflect.DeepEqual(c.CrowdSec, wantCS) {
		t.Fatalf("built %+v and %+v", g, c)
	}
	geo.GeoIP.AllowCountries[0] = "XX"
	*cs.CrowdSec.UpdateInterval = 0
	if g.GeoIP.AllowCountries[0] != "FR" || *c.CrowdSec.UpdateInterval != iv {
		t.Fatal("the built configuration shares the spec's slices or pointers")
	}
}

// The CRD schema of deploy/crds keeps geoIP and crowdSec as written (a
// structural schema would prune unknown fields silently), and refuses with
// 422 what tollgate would refuse anyway, naming the field.
func TestIntegrationGeoIPAndCrowdSecSchema(t *testing.T) {
	k := kube(t)
	ns := namespace(t, k, "access")
	create(t, k.Client, obj("traefik.io/v1alpha1", "MiddlewareTCP", ns, "geo", map[string]any{"spec": geoSpec()}))
	create(t, k.Client, obj("traefik.io/v1alpha1", "MiddlewareTCP", ns, "cs", map[string]any{"spec": crowdSpec("15s")}))
	await(t, runProvider(t, k, ns), 10*time.Second, "geoIP and crowdSec kept whole", func(m provider.Message) bool {
		if m.Configuration == nil || m.Configuration.TCP == nil {
			return false
		}
		g, c := m.Configuration.TCP.Middlewares[ns+"-geo"], m.Configuration.TCP.Middlewares[ns+"-cs"]
		return g != nil && g.GeoIP != nil && g.GeoIP.Unknown == "Deny" && g.GeoIP.Loopback == "lookup" && reflect.DeepEqual(g.GeoIP.DenyASNs, []string{"AS64512"}) &&
			c != nil && c.CrowdSec != nil && c.CrowdSec.FailureMode == "open" && c.CrowdSec.UpdateInterval != nil && time.Duration(*c.CrowdSec.UpdateInterval) == 15*time.Second
	})
	for i, bad := range []struct {
		spec  map[string]any
		field string
	}{
		{map[string]any{"geoIP": map[string]any{"allowCountries": []any{"FR"}}}, "spec.geoIP.databases"},
		{map[string]any{"geoIP": map[string]any{"databases": []any{}, "allowCountries": []any{"FR"}}}, "spec.geoIP.databases"},
		{map[string]any{"geoIP": map[string]any{"databases": []any{"/db"}, "allowCountries": []any{"FRA"}}}, "spec.geoIP.allowCountries[0]"},
		{map[string]any{"geoIP": map[string]any{"databases": []any{"/db"}, "denyContinents": []any{"XX"}}}, "spec.geoIP.denyContinents[0]"},
		{map[string]any{"geoIP": map[string]any{"databases": []any{"/db"}, "denyASNs": []any{"ASN1"}}}, "spec.geoIP.denyASNs[0]"},
		{map[string]any{"geoIP": map[string]any{"databases": []any{"/db"}, "denyCountries": []any{"RU"}, "unknown": "maybe"}}, "spec.geoIP.unknown"},
		{map[string]any{"geoIP": map[string]any{"databases": []any{"/db"}, "denyCountries": []any{"RU"}, "unknown": "lookup"}}, "spec.geoIP.unknown"},
		{map[string]any{"geoIP": map[string]any{"databases": []any{"/db"}, "denyCountries": []any{"RU"}, "private": "maybe"}}, "spec.geoIP.private"},
		{map[string]any{"crowdSec": map[string]any{"apiKey": "k"}}, "spec.crowdSec.lapiURL"},
		{map[string]any{"crowdSec": map[string]any{"lapiURL": "ftp://lapi:8080", "apiKey": "k"}}, "spec.crowdSec.lapiURL"},
		{map[string]any{"crowdSec": map[string]any{"lapiURL": "http://lapi:8080", "apiKey": "k", "failureMode": "sometimes"}}, "spec.crowdSec.failureMode"},
		{map[string]any{"crowdSec": map[string]any{"lapiURL": "http://lapi:8080", "apiKey": "k", "tls": "yes"}}, "spec.crowdSec.tls"},
	} {
		err := createErr(k.Client, obj("traefik.io/v1alpha1", "MiddlewareTCP", ns, "bad"+string(rune('a'+i)), map[string]any{"spec": bad.spec}))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("%v: err = %v, want 422 naming %s", bad.spec, err, bad.field)
		}
	}
}
