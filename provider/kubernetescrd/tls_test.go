package kubernetescrd

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tollgate-proxy/tollgate/config"
)

// secretCluster is fakeCluster with Secrets and ConfigMaps.
type secretCluster struct {
	fakeCluster
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
}

func (s secretCluster) Secret(ns, name string) (*corev1.Secret, bool) {
	v, ok := s.secrets[ns+"/"+name]
	return v, ok
}

func (s secretCluster) ConfigMap(ns, name string) (*corev1.ConfigMap, bool) {
	v, ok := s.configMaps[ns+"/"+name]
	return v, ok
}

func tlsSecret(ns, name, crt, key string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: []byte(crt), corev1.TLSPrivateKeyKey: []byte(key)}}
}

func caSecret(ns, name, key, ca string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{key: []byte(ca)}}
}

// Traefik's CRDs for TLS: an IngressRouteTCP's tls (secretName, options,
// passthrough, certResolver, domains) and services[].serversTransport and
// tls; ServersTransportTCP, TLSOption and TLSStore with their Secrets.
func TestBuildTLSResources(t *testing.T) {
	k := secretCluster{
		fakeCluster: fakeCluster{
			services: map[string]*corev1.Service{"db/pg": svc("db", "pg", sport("pg", 5432))},
			slices:   map[string][]*discoveryv1.EndpointSlice{"db/pg": {slice(map[string]int32{"pg": 5432}, ep{"10.0.0.7", yes})}},
		},
		secrets: map[string]*corev1.Secret{
			"db/pg-cert":     tlsSecret("db", "pg-cert", "CRT-pg", "KEY-pg"),
			"db/client-cert": tlsSecret("db", "client-cert", "CRT-client", "KEY-client"),
			"db/ca":          caSecret("db", "ca", "ca.crt", "CA-1"),
			"db/ca2":         caSecret("db", "ca2", "tls.ca", "CA-2"),
			"edge/default":   tlsSecret("edge", "default", "CRT-default", "KEY-default"),
		},
		configMaps: map[string]*corev1.ConfigMap{
			"db/cas":   {ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "cas"}, Data: map[string]string{"ca.crt": "CA-3"}},
			"db/empty": {ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "empty"}, Data: map[string]string{"other": "x"}},
		},
	}
	dur := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	secs := intstr.FromInt32(30)
	routes := []IngressRouteTCP{{Namespace: "db", Name: "pg", Spec: IngressRouteTCPSpec{
		Routes: []RouteTCP{{Match: "HostSNI(`db.example`)", Services: []ServiceTCP{{Name: "pg", Port: port(5432), ServersTransport: "pg-transport", TLS: true}}}},
		TLS: &TLSTCP{SecretName: "pg-cert", Options: &ObjectReference{Name: "mtls"}, CertResolver: "le",
			Domains: []config.Domain{{Main: "db.example", SANs: []string{"a.db.example"}}}},
	}}, {Namespace: "db", Name: "other", Spec: IngressRouteTCPSpec{
		Routes: []RouteTCP{{Match: "HostSNI(`other.example`)", Services: []ServiceTCP{{Name: "pg", Port: port(5432), ServersTransport: "st@file"}}}},
		TLS:    &TLSTCP{Options: &ObjectReference{Name: "strict", Namespace: "edge"}},
	}}}
	in := tlsInputs{
		transports: []ServersTransportTCP{
			{Namespace: "db", Name: "pg-transport", Spec: ServersTransportTCPSpec{DialTimeout: dur("5s"), DialKeepAlive: &secs, TerminationDelay: dur("200ms"),
				ProxyProtocol: &config.ProxyProtocol{},
				TLS:           &TLSClientConfigTCP{ServerName: "db.internal", RootCAsSecrets: []string{"ca"}, CertificatesSecrets: []string{"client-cert"}, PeerCertURI: "spiffe://db"}}},
			{Namespace: "db", Name: "broken", Spec: ServersTransportTCPSpec{DialTimeout: dur("soon")}},
			{Namespace: "db", Name: "no-ca", Spec: ServersTransportTCPSpec{TLS: &TLSClientConfigTCP{RootCAsSecrets: []string{"missing"}}}},
			{Namespace: "db", Name: "new-form", Spec: ServersTransportTCPSpec{TLS: &TLSClientConfigTCP{RootCAs: []RootCA{{Secret: "ca2"}}}}},
			{Namespace: "db", Name: "configmap", Spec: ServersTransportTCPSpec{TLS: &TLSClientConfigTCP{RootCAs: []RootCA{{ConfigMap: "cas"}, {Secret: "ca"}}}}},
			{Namespace: "db", Name: "both", Spec: ServersTransportTCPSpec{TLS: &TLSClientConfigTCP{RootCAs: []RootCA{{Secret: "ca", ConfigMap: "cas"}}}}},
			{Namespace: "db", Name: "no-cm", Spec: ServersTransportTCPSpec{TLS: &TLSClientConfigTCP{RootCAs: []RootCA{{ConfigMap: "missing"}}}}},
			{Namespace: "db", Name: "empty-cm", Spec: ServersTransportTCPSpec{TLS: &TLSClientConfigTCP{RootCAs: []RootCA{{ConfigMap: "empty"}}}}},
		},
		options: []TLSOption{
			{Namespace: "db", Name: "mtls", Spec: TLSOptionSpec{MinVersion: "VersionTLS13", SniStrict: true, ALPNProtocols: []string{"postgresql"},
				ClientAuth: ClientAuthCRD{SecretNames: []string{"ca", "ca2"}, ClientAuthType: "RequireAndVerifyClientCert"}}},
			{Namespace: "db", Name: "no-ca", Spec: TLSOptionSpec{ClientAuth: ClientAuthCRD{SecretNames: []string{"nope"}}}},
			{Namespace: "edge", Name: "default", Spec: TLSOptionSpec{MinVersion: "VersionTLS12"}},
		},
		stores: []TLSStore{{Namespace: "edge", Name: "default", Spec: TLSStoreSpec{DefaultCertificate: &SecretRef{SecretName: "default"}}}},
	}
	got, problems := buildAll(nil, routes, in, k, options{allowCrossNamespace: true}) // the other route names edge's TLS option

	pgKey := makeID("db", makeServiceKey("HostSNI(`db.example`)", "pg"))
	otherKey := makeID("db", makeServiceKey("HostSNI(`other.example`)", "other"))
	if r := got.TCP.Routers[pgKey]; r == nil || !reflect.DeepEqual(r.TLS, &config.RouterTCPTLSConfig{Options: "db-mtls", CertResolver: "le",
		Domains: []config.Domain{{Main: "db.example", SANs: []string{"a.db.example"}}}}) {
		t.Errorf("router %s: %+v", pgKey, r)
	}
	if r := got.TCP.Routers[otherKey]; r == nil || r.TLS == nil || r.TLS.Options != "edge-strict" {
		t.Errorf("router %s: %+v", otherKey, r)
	}
	if lb := got.TCP.Services[pgKey].LoadBalancer; lb.ServersTransport != "db-pg-transport" || !lb.Servers[0].TLS {
		t.Errorf("service %s: %+v", pgKey, lb)
	}
	if lb := got.TCP.Services[otherKey].LoadBalancer; lb.ServersTransport != "st@file" || lb.Servers[0].TLS {
		t.Errorf("service %s: %+v", otherKey, lb)
	}
	wantTransports := map[string]*config.TCPServersTransport{"db-pg-transport": {
		DialTimeout: config.Duration(5 * time.Second), DialKeepAlive: config.Duration(30 * time.Second), TerminationDelay: ptr(config.Duration(200 * time.Millisecond)),
		ProxyProtocol: &config.ProxyProtocol{Version: 2},
		TLS: &config.TLSClientConfig{ServerName: "db.internal", RootCAs: []config.FileOrContent{"CA-1"}, PeerCertURI: "spiffe://db",
			Certificates: []config.Certificate{{CertFile: "CRT-client", KeyFile: "KEY-client"}}},
	}, "db-new-form": {TLS: &config.TLSClientConfig{RootCAs: []config.FileOrContent{"CA-2"}}},
		"db-configmap": {TLS: &config.TLSClientConfig{RootCAs: []config.FileOrContent{"CA-3", "CA-1"}}}}
	if !reflect.DeepEqual(got.TCP.ServersTransports, wantTransports) {
		t.Errorf("transports %s, want %s", dumpJSON(got.TCP.ServersTransports), dumpJSON(wantTransports))
	}
	wantTLS := &config.TLSConfiguration{
		Certificates: []*config.CertAndStores{{Certificate: config.Certificate{CertFile: "CRT-pg", KeyFile: "KEY-pg"}}},
		Options: map[string]config.TLSOptions{
			"db-mtls": {MinVersion: "VersionTLS13", SniStrict: true, ALPNProtocols: []string{"postgresql"}, CipherSuites: nil, CurvePreferences: nil,
				ClientAuth: config.ClientAuth{CAFiles: []config.FileOrContent{"CA-1", "CA-2"}, ClientAuthType: "RequireAndVerifyClientCert"}},
			"default": {MinVersion: "VersionTLS12"},
		},
		Stores: map[string]config.TLSStore{"default": {DefaultCertificate: &config.Certificate{CertFile: "CRT-default", KeyFile: "KEY-default"}}},
	}
	if !reflect.DeepEqual(got.TLS, wantTLS) {
		t.Errorf("tls %s, want %s", dumpJSON(got.TLS), dumpJSON(wantTLS))
	}
	wantProblems := []string{
		`ServersTransportTCP "db/both": tls.rootCAs[0]: set one of secret and configMap: dropped`,
		`ServersTransportTCP "db/broken": dialTimeout: "soon" is not a duration`,
		`ServersTransportTCP "db/empty-cm": tls.rootCAs[0]: ConfigMap "db/empty" has no tls.ca or ca.crt: dropped`,
		`ServersTransportTCP "db/no-ca": tls.rootCAsSecrets: Secret "db/missing" not found: dropped`,
		`ServersTransportTCP "db/no-cm": tls.rootCAs[0]: ConfigMap "db/missing" not found: dropped`,
		`TLSOption "db/no-ca": clientAuth.secretNames: Secret "db/nope" not found: dropped`,
	}
	if len(problems) != len(wantProblems) {
		t.Fatalf("problems %q, want %q", problems, wantProblems)
	}
	for i, w := range wantProblems {
		if !strings.Contains(problems[i], w) {
			t.Errorf("problem %d %q, want it to contain %q", i, problems[i], w)
		}
	}

	// Two TLSOptions named default: neither applies.
	in.options = append(in.options, TLSOption{Namespace: "db", Name: "default"})
	got, problems = buildAll(nil, nil, in, k, options{})
	if _, ok := got.TLS.Options["default"]; ok {
		t.Error("default TLSOption from two namespaces applies")
	}
	if !strings.Contains(strings.Join(problems, "\n"), `TLSOption "default" defined in several namespaces (db, edge)`) {
		t.Errorf("problems %q", problems)
	}

	// Without allowCrossNamespace, the route naming edge's TLS option is not
	// served (it would terminate with other options than it names).
	got, problems = buildAll(nil, routes, in, k, options{})
	if r := got.TCP.Routers[otherKey]; r != nil {
		t.Errorf("router %s served with another namespace's TLS option: %+v", otherKey, r)
	}
	if !strings.Contains(strings.Join(problems, "\n"), `tls.options: TLSOption "edge/strict" is not in the IngressRouteTCP's namespace "db"`) {
		t.Errorf("problems %q", problems)
	}
}

func dumpJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", " ")
	return string(b)
}

// FuzzDuration: a CRD duration never panics, and an accepted one is an
// integer of seconds or a Go duration.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"5s", "30", "-1", "1h2m", "soon", "", "9999999999999999999", "99999999999", "1e3s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := intstr.FromString(s)
		d, err := duration(&v)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("error %v does not name %q", err, s)
			}
			return
		}
		if _, perr := time.ParseDuration(s); perr != nil {
			if n, aerr := strconv.ParseInt(s, 10, 64); aerr != nil || time.Duration(d) != time.Duration(n)*time.Second || (n > 0) != (d > 0) {
				t.Fatalf("%q accepted as %v", s, time.Duration(d))
			}
		}
	})
}
