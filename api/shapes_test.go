package api

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// A shape is how a value of Traefik's API looks, written from Traefik's
// own pkg/api/testdata and the types its handlers encode (v3.7): "string",
// "number", "bool", "time" (an RFC 3339 string), obj (field -> shape; a
// field written "name?" is one Traefik leaves out when empty), list (every
// element) and dict (every value of an object with any keys). Fields
// tollgate adds are allowed.
type (
	obj  map[string]any
	list struct{ elem any }
	dict struct{ elem any }
)

func conform(t *testing.T, path string, v, shape any) {
	t.Helper()
	switch sh := shape.(type) {
	case string:
		ok := false
		switch sh {
		case "string":
			_, ok = v.(string)
		case "number":
			_, ok = v.(float64)
		case "bool":
			_, ok = v.(bool)
		case "time":
			s, isStr := v.(string)
			_, err := time.Parse(time.RFC3339Nano, s)
			ok = isStr && err == nil
		}
		if !ok {
			t.Errorf("%s: %#v, want a %s", path, v, sh)
		}
	case obj:
		m, ok := v.(map[string]any)
		if !ok {
			t.Errorf("%s: %#v, want an object", path, v)
			return
		}
		for k, fs := range sh {
			name, optional := strings.CutSuffix(k, "?")
			fv, present := m[name]
			if !present {
				if !optional {
					t.Errorf("%s.%s: missing (Traefik always writes it)", path, name)
				}
				continue
			}
			conform(t, path+"."+name, fv, fs)
		}
	case list:
		a, ok := v.([]any)
		if !ok {
			t.Errorf("%s: %#v, want a list", path, v)
			return
		}
		for i, e := range a {
			conform(t, fmt.Sprintf("%s[%d]", path, i), e, sh.elem)
		}
	case dict:
		m, ok := v.(map[string]any)
		if !ok {
			t.Errorf("%s: %#v, want an object", path, v)
			return
		}
		for k, e := range m {
			conform(t, path+"."+k, e, sh.elem)
		}
	default:
		t.Fatalf("%s: bad shape %#v", path, shape)
	}
}

// Traefik's shapes.
var (
	shapeSection  = obj{"total": "number", "warnings": "number", "errors": "number"}
	shapeOverview = obj{
		"http":          obj{"routers": shapeSection, "services": shapeSection, "middlewares": shapeSection},
		"tcp":           obj{"routers": shapeSection, "services": shapeSection, "middlewares": shapeSection},
		"udp":           obj{"routers": shapeSection, "services": shapeSection},
		"certificates?": shapeSection,
		"features":      obj{"tracing": "string", "metrics": "string", "accessLog": "bool"},
		"providers?":    list{"string"},
	}
	shapeVersion = obj{"Version": "string", "Codename": "string", "startDate": "time",
		"uuid?": "string", "disableDashboardAd?": "bool", "dashboardName?": "string"}
	// An entry point with every field of testdata/entrypoints.json's "web".
	shapeEntryPoint = obj{
		"name": "string", "address": "string", "http": obj{},
		"transport": obj{
			"lifeCycle":          obj{"graceTimeOut": "string", "requestAcceptGraceTimeout": "string"},
			"respondingTimeouts": obj{"idleTimeout": "string", "readTimeout": "string", "writeTimeout": "string"},
		},
		"proxyProtocol":    obj{"insecure": "bool", "trustedIPs": list{"string"}},
		"forwardedHeaders": obj{"insecure": "bool", "trustedIPs": list{"string"}},
	}
	shapeTCPRouter = obj{"entryPoints": list{"string"}, "name": "string", "provider": "string", "priorityStr": "string",
		"rule": "string", "service": "string", "status": "string", "using": list{"string"},
		"priority?": "number", "middlewares?": list{"string"}, "tls?": obj{}, "error?": list{"string"}}
	shapeTCPService = obj{"loadBalancer": obj{"servers": list{obj{"address": "string"}}}, "name": "string", "provider": "string",
		"serverStatus": dict{"string"}, "status": "string", "type": "string", "usedBy": list{"string"}}
	shapeTCPMiddleware = obj{"name": "string", "provider": "string", "status": "string", "type": "string", "usedBy": list{"string"}}
	shapeCertificate   = obj{"name": "string", "sans": list{"string"}, "notAfter": "time", "notBefore": "time", "serialNumber": "string",
		"commonName": "string", "issuerOrg?": "string", "issuerCN?": "string", "issuerCountry?": "string", "organization?": "string",
		"country?": "string", "version": "string", "keyType": "string", "keySize?": "number", "signatureAlgorithm": "string",
		"certFingerprint": "string", "publicKeyFingerprint": "string", "status": "string"}
)

// getJSON decodes GET url into any, with the X-Next-Page header.
func getJSON(t *testing.T, url string) (int, any, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, v, resp.Header.Get(nextPageHeader)
}

// Acceptance (issue 42, point 3): Traefik's API, shape for shape, against
// the shapes of Traefik's pkg/api/testdata: /api/version, /api/overview
// (HTTP and UDP with zeros, certificates, features, providers as Traefik
// names them), /api/entrypoints[/name] with their configuration,
// /api/http/* and /api/udp/* as Traefik's empty lists, /api/certificates,
// the TCP lists with priorityStr and the middleware types lower-cased;
// tollgate's fields stay.
func TestTraefikAPIShapes(t *testing.T) {
	kp, _ := itest.SelfSigned(t, "db.example", "127.0.0.1")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "db.crt"), filepath.Join(dir, "db.key")
	kb, err := x509.MarshalPKCS8PrivateKey(kp.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.Certificate[0]}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
	be := itest.EchoServer(t, "127.0.0.1:0")

	ep := &config.EntryPoint{Address: "127.0.0.1:0"}
	ep.SetDefaults()
	ep.Transport.LifeCycle.GraceTimeOut = config.Duration(time.Millisecond)
	ep.Transport.LifeCycle.RequestAcceptGraceTimeout = config.Duration(time.Millisecond)
	ep.Transport.RespondingTimeouts.WriteTimeout = config.Duration(time.Second)
	ep.Transport.RespondingTimeouts.IdleTimeout = config.Duration(time.Minute)
	ep.ProxyProtocol = &config.EntryPointProxyProto{Insecure: true, TrustedIPs: []string{"10.0.0.1"}}
	ep.ForwardedHeaders = &config.ForwardedHeaders{Insecure: true, TrustedIPs: []string{"10.0.0.2"}}
	eps := map[string]*config.EntryPoint{"db": ep}
	srv, err := proxy.NewServer(eps, proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	rt := srv.Apply(&config.TCPConfiguration{
		Routers: map[string]*config.TCPRouter{
			"db@file":    {EntryPoints: []string{"db"}, Rule: "HostSNI(`db.example`)", Service: "s@file", Middlewares: []string{"allow@file", "lim@file"}, TLS: &config.RouterTCPTLSConfig{}},
			"plain@file": {Rule: "HostSNI(`*`)", Service: "s@file", Priority: 3},
		},
		Services: map[string]*config.TCPService{"s@file": {LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: be}}}}},
		Middlewares: map[string]*config.TCPMiddleware{
			"allow@file": {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"127.0.0.1/32"}}},
			"lim@file":   {InFlightConn: &config.TCPInFlightConn{Amount: 2}},
		},
		TLS: &config.TLSConfiguration{Certificates: []*config.CertAndStores{{Certificate: config.Certificate{CertFile: config.FileOrContent(certFile), KeyFile: config.FileOrContent(keyFile)}}}},
	})
	if ri := rt.Routers["db@file"]; ri.Status != proxy.StatusEnabled {
		t.Fatalf("db@file: %s %v", ri.Status, ri.Err)
	}
	prom := &config.Prometheus{}
	prom.SetDefaults()
	st := &config.Static{
		EntryPoints: eps,
		Providers:   &config.Providers{File: &config.FileProvider{Filename: "dyn.yml"}, ConsulCatalog: &config.ConsulCatalogProvider{}},
		Metrics:     &config.Metrics{Prometheus: prom},
		AccessLog:   &config.AccessLog{},
	}
	started := time.Now().Add(-time.Minute).Truncate(time.Second)
	w := &provider.Watcher{Apply: func(*config.TCPConfiguration) {}}
	h := httptest.NewServer(Handler(Sources{Server: srv, Watcher: w, Static: st, Version: "v1.2.3", Started: started}))
	t.Cleanup(h.Close)

	_, v, _ := getJSON(t, h.URL+"/api/version")
	conform(t, "version", v, shapeVersion)
	if m := v.(map[string]any); m["Version"] != "v1.2.3" || m["startDate"] != started.Format(time.RFC3339) {
		t.Errorf("version %v", m)
	}

	_, v, _ = getJSON(t, h.URL+"/api/overview")
	conform(t, "overview", v, shapeOverview)
	ov, _ := json.Marshal(v)
	for _, want := range []string{
		`"features":{"accessLog":true,"metrics":"Prometheus","tracing":""}`,
		`"providers":["File","ConsulCatalog"]`,
		`"tcp":{"middlewares":{"errors":0,"total":2,"warnings":0},"routers":{"errors":0,"total":2,"warnings":0},"services":{"errors":0,"total":1,"warnings":0}}`,
		`"udp":{"routers":{"errors":0,"total":0,"warnings":0},"services":{"errors":0,"total":0,"warnings":0}}`,
		// db.example has a day left (within Traefik's 30 days); the
		// generated default certificate, a year.
		`"certificates":{"errors":0,"total":2,"warnings":1}`,
	} {
		if !strings.Contains(string(ov), want) {
			t.Errorf("overview %s: want %s", ov, want)
		}
	}

	_, v, next := getJSON(t, h.URL+"/api/entrypoints")
	conform(t, "entrypoints", v, list{shapeEntryPoint})
	if a := v.([]any); len(a) != 1 || next != "1" {
		t.Fatalf("entrypoints %v, next page %q", a, next)
	}
	_, v, _ = getJSON(t, h.URL+"/api/entrypoints/db")
	conform(t, "entrypoint", v, shapeEntryPoint)
	e := v.(map[string]any)
	if e["address"] != srv.EntryPoint("db").Addr().String() || e["acceptedTotal"] == nil || e["unrouted"] == nil {
		t.Errorf("entry point db %v: want the bound address and tollgate's counters", e)
	}
	if code, _, _ := getJSON(t, h.URL+"/api/entrypoints?page=2"); code != http.StatusBadRequest {
		t.Errorf("entrypoints page 2 of 1: %d, want 400", code)
	}

	for _, path := range []string{"/api/http/routers", "/api/http/services", "/api/http/middlewares", "/api/udp/routers", "/api/udp/services"} {
		code, v, next := getJSON(t, h.URL+path+"?search=x&status=enabled&sortBy=name&direction=desc")
		if a, ok := v.([]any); code != 200 || !ok || len(a) != 0 || next != "1" {
			t.Errorf("%s: %d %v next page %q, want Traefik's empty list", path, code, v, next)
		}
		code, v, _ = getJSON(t, h.URL+path+"/x@file")
		if m, ok := v.(map[string]any); code != 404 || !ok || m["message"] == nil {
			t.Errorf("%s/x@file: %d %v, want 404 with a message", path, code, v)
		}
	}

	_, v, _ = getJSON(t, h.URL+"/api/tcp/routers")
	conform(t, "tcp routers", v, list{shapeTCPRouter})
	_, v, _ = getJSON(t, h.URL+"/api/tcp/routers/plain@file")
	conform(t, "tcp router", v, shapeTCPRouter)
	if m := v.(map[string]any); m["priorityStr"] != "3" || m["priority"] != 3.0 || fmt.Sprint(m["entryPoints"]) != "[db]" {
		t.Errorf("plain@file %v: want priority 3, priorityStr \"3\", and the entry points it serves on (it names none)", m)
	}
	_, v, _ = getJSON(t, h.URL+"/api/tcp/services")
	conform(t, "tcp services", v, list{shapeTCPService})
	_, v, _ = getJSON(t, h.URL+"/api/tcp/middlewares")
	conform(t, "tcp middlewares", v, list{shapeTCPMiddleware})
	types := map[string]any{}
	for _, m := range v.([]any) {
		types[m.(map[string]any)["name"].(string)] = m.(map[string]any)["type"]
	}
	if types["allow@file"] != "ipallowlist" || types["lim@file"] != "inflightconn" {
		t.Errorf("middleware types %v, want Traefik's ipallowlist and inflightconn", types)
	}
	_, v, _ = getJSON(t, h.URL+"/api/tcp/middlewares/allow@file")
	conform(t, "tcp middleware", v, obj{"ipAllowList": obj{"sourceRange": list{"string"}}, "type": "string"})
	_, v, _ = getJSON(t, h.URL+"/api/tcp/middlewares/lim@file")
	if m := v.(map[string]any); m["type"] != "inflightconn" || m["inFlight"] == nil {
		t.Errorf("lim@file %v: want type inflightconn and tollgate's live state", m)
	}
	_, v, _ = getJSON(t, h.URL+"/api/rawdata")
	if mw := v.(map[string]any)["tcpMiddlewares"].(map[string]any)["lim@file"].(map[string]any); mw["type"] != "InFlightConn" {
		t.Errorf("rawdata keeps tollgate's type name: %v", mw["type"])
	}

	_, v, next = getJSON(t, h.URL+"/api/certificates")
	conform(t, "certificates", v, list{shapeCertificate})
	var c, def map[string]any
	for _, x := range v.([]any) {
		switch m := x.(map[string]any); m["commonName"] {
		case "db.example":
			c = m
		case "TOLLGATE DEFAULT CERT":
			def = m
		}
	}
	if c == nil || def == nil || len(v.([]any)) != 2 || next != "1" {
		t.Fatalf("certificates %v: want db.example's and the generated default one", v)
	}
	if c["commonName"] != "db.example" || fmt.Sprint(c["sans"]) != "[127.0.0.1 db.example]" || c["serialNumber"] != kp.Leaf.SerialNumber.String() ||
		c["keyType"] != "ECDSA" || c["keySize"] != 256.0 || c["status"] != "warning" || c["version"] != "v3" || fmt.Sprint(c["usedBy"]) != "[db@file]" {
		t.Errorf("certificate %v", c)
	}
	if def["status"] != "enabled" || def["default"] != true {
		t.Errorf("default certificate %v", def)
	}
	code, v, _ := getJSON(t, h.URL+"/api/certificates/"+c["name"].(string))
	conform(t, "certificate", v, shapeCertificate)
	if code != 200 || v.(map[string]any)["certFingerprint"] != c["name"] {
		t.Errorf("certificate by fingerprint: %d %v", code, v)
	}
	for q, n := range map[string]int{"search=DB.EXAMPLE": 1, "search=127.0.0": 1, "search=other": 0, "status=warning": 1, "status=enabled": 1, "status=expired": 0, "per_page=1&page=2": 1} {
		if code, v, _ := getJSON(t, h.URL+"/api/certificates?"+q); code != 200 || len(v.([]any)) != n {
			t.Errorf("certificates?%s: %d %v, want %d", q, code, v, n)
		}
	}
	for q, want := range map[string]string{"sortBy=validUntil": "db.example TOLLGATE DEFAULT CERT", "sortBy=validUntil&direction=desc": "TOLLGATE DEFAULT CERT db.example", "sortBy=cn": "TOLLGATE DEFAULT CERT db.example"} {
		_, v, _ := getJSON(t, h.URL+"/api/certificates?"+q)
		var got []string
		for _, x := range v.([]any) {
			got = append(got, x.(map[string]any)["commonName"].(string))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("certificates?%s: %q, want %q", q, got, want)
		}
	}
	if code, _, _ := getJSON(t, h.URL+"/api/certificates?status=disabled"); code != 400 {
		t.Errorf("certificates?status=disabled: %d, want 400 (enabled, warning or expired)", code)
	}
	if code, _, _ := getJSON(t, h.URL+"/api/certificates/nope"); code != 404 {
		t.Errorf("certificate nope: %d, want 404", code)
	}
}

// Without the static configuration (a Sources built by a test) the
// overview's providers are the watcher's, spelled as Traefik's options.
func TestOverviewProvidersFromWatcher(t *testing.T) {
	r := newRig(t, rigOptions{log: zerolog.Nop()})
	r.send(t, "consulcatalog-prod", limitConfig(r.be, &config.TCPInFlightConn{Amount: 1}))
	r.send(t, "kubernetescrd", limitConfig(r.be, &config.TCPInFlightConn{Amount: 1}))
	_, v, _ := getJSON(t, r.h.URL+"/api/overview")
	if got := fmt.Sprint(v.(map[string]any)["providers"]); got != "[ConsulCatalog KubernetesCRD]" {
		t.Errorf("providers %s, want [ConsulCatalog KubernetesCRD]", got)
	}
}
