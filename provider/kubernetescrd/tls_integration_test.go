package kubernetescrd

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

func secretObj(ns, name, typ string, data map[string]string) map[string]any {
	d := map[string]any{}
	for k, v := range data {
		d[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return map[string]any{"type": typ, "data": d}
}

// The TLS CRDs through the real API server (their schemas from
// deploy/crds): an IngressRouteTCP terminating with a Secret's certificate
// and a TLSOption with client CAs, a ServersTransportTCP with a root CA and
// a client certificate, another with its CA in a ConfigMap, the default
// TLSStore; a Secret rotated is a new
// snapshot; a Secret deleted drops the route (fail closed); the schema
// refuses an unknown clientAuthType at apply time.
func TestIntegrationTLSResources(t *testing.T) {
	k := kube(t)
	ns := namespace(t, k, "tls")
	msgs := runProvider(t, k, ns)
	create(t, k.Client, service(ns, "pg", 5432))
	create(t, k.Client, endpointSlice(ns, "pg-1", "pg", 15432, map[string]bool{"10.2.0.1": true}))
	cert := obj("v1", "Secret", ns, "pg-cert", secretObj(ns, "pg-cert", "kubernetes.io/tls", map[string]string{"tls.crt": "CRT-1", "tls.key": "KEY-1"}))
	create(t, k.Client, cert)
	create(t, k.Client, obj("v1", "Secret", ns, "ca", secretObj(ns, "ca", "Opaque", map[string]string{"ca.crt": "CA-1"})))
	create(t, k.Client, obj("v1", "Secret", ns, "client", secretObj(ns, "client", "kubernetes.io/tls", map[string]string{"tls.crt": "CRT-C", "tls.key": "KEY-C"})))
	create(t, k.Client, obj("traefik.io/v1alpha1", "TLSOption", ns, "mtls", map[string]any{"spec": map[string]any{
		"minVersion": "VersionTLS13", "sniStrict": true, "alpnProtocols": []any{"postgresql"},
		"clientAuth": map[string]any{"secretNames": []any{"ca"}, "clientAuthType": "RequireAndVerifyClientCert"},
	}}))
	create(t, k.Client, obj("traefik.io/v1alpha1", "ServersTransportTCP", ns, "pg-tr", map[string]any{"spec": map[string]any{
		"dialTimeout": "5s", "dialKeepAlive": int64(30), "terminationDelay": "100ms",
		"tls": map[string]any{"serverName": "db.internal", "rootCAsSecrets": []any{"ca"}, "certificatesSecrets": []any{"client"}},
	}}))
	cas := obj("v1", "ConfigMap", ns, "cas", map[string]any{"data": map[string]any{"tls.ca": "CA-CM"}})
	create(t, k.Client, cas)
	create(t, k.Client, obj("traefik.io/v1alpha1", "ServersTransportTCP", ns, "cm-tr", map[string]any{"spec": map[string]any{
		"tls": map[string]any{"rootCAs": []any{map[string]any{"configMap": "cas"}}},
	}}))
	create(t, k.Client, obj("traefik.io/v1alpha1", "TLSStore", ns, "default", map[string]any{"spec": map[string]any{
		"defaultCertificate": map[string]any{"secretName": "pg-cert"},
	}}))
	const match = "HostSNI(`db.example`)"
	create(t, k.Client, obj("traefik.io/v1alpha1", "IngressRouteTCP", ns, "pg", map[string]any{"spec": map[string]any{
		"entryPoints": []any{"db"},
		"tls": map[string]any{"secretName": "pg-cert", "options": map[string]any{"name": "mtls"},
			"domains": []any{map[string]any{"main": "db.example", "sans": []any{"a.db.example"}}}},
		"routes": []any{map[string]any{"match": match,
			"services": []any{map[string]any{"name": "pg", "port": int64(5432), "serversTransport": "pg-tr", "tls": true}}}},
	}}))
	key := makeID(ns, makeServiceKey(match, "pg"))
	certOf := func(m provider.Message) string {
		if m.Configuration.TLS == nil {
			return ""
		}
		for _, c := range m.Configuration.TLS.Certificates {
			return string(c.CertFile)
		}
		return ""
	}
	m := await(t, msgs, 10*time.Second, "the TLS route, its options, transport and store", func(m provider.Message) bool {
		return m.Configuration.TCP.Routers[key] != nil && certOf(m) == "CRT-1" && m.Configuration.TCP.ServersTransports[ns+"-pg-tr"] != nil &&
			m.Configuration.TCP.ServersTransports[ns+"-cm-tr"] != nil &&
			m.Configuration.TLS.Stores["default"].DefaultCertificate != nil
	})
	r := m.Configuration.TCP.Routers[key]
	if r.TLS == nil || r.TLS.Passthrough || r.TLS.Options != ns+"-mtls" || len(r.TLS.Domains) != 1 || r.TLS.Domains[0].SANs[0] != "a.db.example" {
		t.Fatalf("router tls %+v", r.TLS)
	}
	lb := m.Configuration.TCP.Services[key].LoadBalancer
	if lb.ServersTransport != ns+"-pg-tr" || len(lb.Servers) != 1 || !lb.Servers[0].TLS || lb.Servers[0].Address != "10.2.0.1:15432" {
		t.Fatalf("service %+v", lb)
	}
	o := m.Configuration.TLS.Options[ns+"-mtls"]
	if o.MinVersion != "VersionTLS13" || !o.SniStrict || len(o.ClientAuth.CAFiles) != 1 || o.ClientAuth.CAFiles[0] != "CA-1" || o.ClientAuth.ClientAuthType != "RequireAndVerifyClientCert" {
		t.Fatalf("options %+v", o)
	}
	st := m.Configuration.TCP.ServersTransports[ns+"-pg-tr"]
	if st.DialTimeout != config.Duration(5*time.Second) || st.DialKeepAlive != config.Duration(30*time.Second) || st.TLS == nil ||
		st.TLS.ServerName != "db.internal" || len(st.TLS.RootCAs) != 1 || st.TLS.RootCAs[0] != "CA-1" || len(st.TLS.Certificates) != 1 || st.TLS.Certificates[0].KeyFile != "KEY-C" {
		t.Fatalf("transport %+v (tls %+v)", st, st.TLS)
	}
	if cm := m.Configuration.TCP.ServersTransports[ns+"-cm-tr"]; cm.TLS == nil || len(cm.TLS.RootCAs) != 1 || cm.TLS.RootCAs[0] != "CA-CM" {
		t.Fatalf("transport with a ConfigMap CA %+v", cm.TLS)
	}
	if len(m.Problems) != 0 {
		t.Fatalf("problems %q", m.Problems)
	}

	// The merged view qualifies what the route names.
	merged := provider.Merge(map[string]*config.Dynamic{Name: m.Configuration})
	if mr := merged.Routers[key+"@"+Name]; mr.TLS.Options != ns+"-mtls@"+Name || merged.Services[key+"@"+Name].LoadBalancer.ServersTransport != ns+"-pg-tr@"+Name {
		t.Fatalf("merged router tls %+v", mr.TLS)
	}

	// A rotated ConfigMap, and a rotated Secret, are new snapshots with the
	// new CA and certificate.
	update(t, k.Client, cas, map[string]any{"data": map[string]any{"tls.ca": "CA-CM2"}})
	await(t, msgs, 10*time.Second, "the rotated ConfigMap CA", func(m provider.Message) bool {
		cm := m.Configuration.TCP.ServersTransports[ns+"-cm-tr"]
		return cm != nil && cm.TLS != nil && len(cm.TLS.RootCAs) == 1 && cm.TLS.RootCAs[0] == "CA-CM2"
	})
	start := time.Now()
	update(t, k.Client, cert, secretObj(ns, "pg-cert", "kubernetes.io/tls", map[string]string{"tls.crt": "CRT-2", "tls.key": "KEY-2"}))
	await(t, msgs, 10*time.Second, "the rotated certificate", func(m provider.Message) bool { return certOf(m) == "CRT-2" })
	t.Logf("Secret rotated -> snapshot with the new certificate after %v", time.Since(start))

	// The Secret deleted: the route is not served, with a problem naming it.
	remove(t, k.Client, cert)
	m = await(t, msgs, 10*time.Second, "the route dropped with its Secret", func(m provider.Message) bool {
		return m.Configuration.TCP.Routers[key] == nil
	})
	if !strings.Contains(strings.Join(m.Problems, "\n"), `tls.secretName: Secret "`+ns+`/pg-cert" not found: the route is not served`) {
		t.Fatalf("problems %q", m.Problems)
	}

	// The schema refuses an unknown clientAuthType at apply time.
	bad := obj("traefik.io/v1alpha1", "TLSOption", ns, "bad", map[string]any{"spec": map[string]any{
		"clientAuth": map[string]any{"clientAuthType": "RequireSomething"},
	}})
	_, err := resource(k.Client, bad).Create(context.Background(), bad, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "clientAuthType") {
		t.Fatalf("unknown clientAuthType: %v, want a refusal naming the field", err)
	}
}
