package kubernetescrd

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tollgate-proxy/tollgate/config"
)

// The TLS resources (docs/reference/providers/kubernetes-crd.md): ServersTransportTCP, TLSOption
// and TLSStore, named `<namespace>-<name>` as in Traefik but for a
// TLSOption or TLSStore named `default`, which is the default one (two in
// different namespaces: neither applies, with a problem). The keys and
// certificates they name are Secrets of their own namespace, read into the
// configuration as PEM; a Secret that is missing or lacks its keys drops
// the resource that names it, with a problem, so nothing serves with other
// settings than it says (fail closed).

// secretReader is the part of cluster that reads Secrets. A cluster without
// it (the pure tests') has none.
type secretReader interface {
	Secret(namespace, name string) (*corev1.Secret, bool)
}

// configMapReader is the part of cluster that reads ConfigMaps (CAs named
// by a ServersTransportTCP's tls.rootCAs).
type configMapReader interface {
	ConfigMap(namespace, name string) (*corev1.ConfigMap, bool)
}

// tlsInputs are the TLS resources build reads besides the routes.
type tlsInputs struct {
	transports []ServersTransportTCP
	options    []TLSOption
	stores     []TLSStore
}

// defaultName is the TLSOption and TLSStore name that is not qualified.
const defaultName = "default"

func secretOf(k cluster, ns, name string) (*corev1.Secret, error) {
	sr, ok := k.(secretReader)
	if !ok {
		return nil, fmt.Errorf("Secret %q not found", ns+"/"+name)
	}
	s, ok := sr.Secret(ns, name)
	if !ok {
		return nil, fmt.Errorf("Secret %q not found", ns+"/"+name)
	}
	return s, nil
}

// keyPair reads a kubernetes.io/tls Secret's tls.crt and tls.key.
func keyPair(k cluster, ns, name string) (config.Certificate, error) {
	s, err := secretOf(k, ns, name)
	if err != nil {
		return config.Certificate{}, err
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return config.Certificate{}, fmt.Errorf("Secret %q has no %s and %s", ns+"/"+name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	return config.Certificate{CertFile: config.FileOrContent(crt), KeyFile: config.FileOrContent(key)}, nil
}

// caOf reads a CA Secret: tls.ca, else ca.crt (Traefik's keys).
func caOf(k cluster, ns, name string) (config.FileOrContent, error) {
	s, err := secretOf(k, ns, name)
	if err != nil {
		return "", err
	}
	for _, key := range []string{"tls.ca", "ca.crt"} {
		if b := s.Data[key]; len(b) > 0 {
			return config.FileOrContent(b), nil
		}
	}
	return "", fmt.Errorf("Secret %q has no tls.ca or ca.crt", ns+"/"+name)
}

// caOfConfigMap reads a CA ConfigMap: tls.ca, else ca.crt (Traefik's keys).
func caOfConfigMap(k cluster, ns, name string) (config.FileOrContent, error) {
	cr, ok := k.(configMapReader)
	var cm *corev1.ConfigMap
	if ok {
		cm, ok = cr.ConfigMap(ns, name)
	}
	if !ok {
		return "", fmt.Errorf("ConfigMap %q not found", ns+"/"+name)
	}
	for _, key := range []string{"tls.ca", "ca.crt"} {
		if v := cm.Data[key]; v != "" {
			return config.FileOrContent(v), nil
		}
	}
	return "", fmt.Errorf("ConfigMap %q has no tls.ca or ca.crt", ns+"/"+name)
}

// duration reads Traefik's CRD durations: an integer is seconds, a string
// a Go duration.
func duration(v *intstr.IntOrString) (config.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if v.Type == intstr.Int {
		return config.Duration(time.Duration(v.IntVal) * time.Second), nil
	}
	if n, err := strconv.ParseInt(v.StrVal, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
			return 0, fmt.Errorf("%q seconds is out of range", v.StrVal)
		}
		return config.Duration(time.Duration(n) * time.Second), nil
	}
	d, err := time.ParseDuration(v.StrVal)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (e.g. 5s) or a number of seconds", v.StrVal)
	}
	return config.Duration(d), nil
}

// buildTLS adds the TLS resources to tcp and tls, and returns the problems.
func buildTLS(in tlsInputs, k cluster, tcp *config.TCPConfiguration, tls *config.TLSConfiguration) []string {
	var problems []string
	for _, st := range sortedByName(in.transports, func(t ServersTransportTCP) (string, string) { return t.Namespace, t.Name }) {
		desc := fmt.Sprintf("ServersTransportTCP %q", st.Namespace+"/"+st.Name)
		t, err := serversTransport(k, st)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v: dropped", desc, err))
			continue
		}
		if tcp.ServersTransports == nil {
			tcp.ServersTransports = map[string]*config.TCPServersTransport{}
		}
		tcp.ServersTransports[makeID(st.Namespace, st.Name)] = t
	}

	var defaultOptions []string
	for _, o := range sortedByName(in.options, func(o TLSOption) (string, string) { return o.Namespace, o.Name }) {
		desc := fmt.Sprintf("TLSOption %q", o.Namespace+"/"+o.Name)
		opts := config.TLSOptions{
			MinVersion: o.Spec.MinVersion, MaxVersion: o.Spec.MaxVersion,
			CipherSuites: append([]string(nil), o.Spec.CipherSuites...), CurvePreferences: append([]string(nil), o.Spec.CurvePreferences...),
			SniStrict: o.Spec.SniStrict, ALPNProtocols: append([]string(nil), o.Spec.ALPNProtocols...),
			DisableSessionTickets: o.Spec.DisableSessionTickets, PreferServerCipherSuites: o.Spec.PreferServerCipherSuites,
			ClientAuth: config.ClientAuth{ClientAuthType: o.Spec.ClientAuth.ClientAuthType},
		}
		var err error
		for _, name := range o.Spec.ClientAuth.SecretNames {
			var ca config.FileOrContent
			if ca, err = caOf(k, o.Namespace, name); err != nil {
				break
			}
			opts.ClientAuth.CAFiles = append(opts.ClientAuth.CAFiles, ca)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: clientAuth.secretNames: %v: dropped, and the routes that use it are disabled", desc, err))
			continue
		}
		id := makeID(o.Namespace, o.Name)
		if o.Name == defaultName {
			id = defaultName
			defaultOptions = append(defaultOptions, o.Namespace)
		}
		if tls.Options == nil {
			tls.Options = map[string]config.TLSOptions{}
		}
		tls.Options[id] = opts
	}
	if len(defaultOptions) > 1 {
		delete(tls.Options, defaultName)
		problems = append(problems, fmt.Sprintf("TLSOption %q defined in several namespaces (%s): none of them applies", defaultName, strings.Join(defaultOptions, ", ")))
	}

	var defaultStores []string
	for _, s := range sortedByName(in.stores, func(s TLSStore) (string, string) { return s.Namespace, s.Name }) {
		desc := fmt.Sprintf("TLSStore %q", s.Namespace+"/"+s.Name)
		id := makeID(s.Namespace, s.Name)
		if s.Name == defaultName {
			id = defaultName
		}
		store := config.TLSStore{DefaultGeneratedCert: s.Spec.DefaultGeneratedCert}
		var certs []*config.CertAndStores
		var err error
		if s.Spec.DefaultCertificate != nil {
			var c config.Certificate
			if c, err = keyPair(k, s.Namespace, s.Spec.DefaultCertificate.SecretName); err == nil {
				store.DefaultCertificate = &c
			}
		}
		for _, ref := range s.Spec.Certificates {
			if err != nil {
				break
			}
			var c config.Certificate
			if c, err = keyPair(k, s.Namespace, ref.SecretName); err == nil {
				certs = append(certs, &config.CertAndStores{Certificate: c, Stores: []string{id}})
			}
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v: dropped", desc, err))
			continue
		}
		if s.Name == defaultName {
			defaultStores = append(defaultStores, s.Namespace)
		}
		if tls.Stores == nil {
			tls.Stores = map[string]config.TLSStore{}
		}
		tls.Stores[id] = store
		tls.Certificates = append(tls.Certificates, certs...)
	}
	if len(defaultStores) > 1 {
		delete(tls.Stores, defaultName)
		problems = append(problems, fmt.Sprintf("TLSStore %q defined in several namespaces (%s): none of them applies", defaultName, strings.Join(defaultStores, ", ")))
	}
	return problems
}

func serversTransport(k cluster, st ServersTransportTCP) (*config.TCPServersTransport, error) {
	out := &config.TCPServersTransport{}
	var err error
	if out.DialTimeout, err = duration(st.Spec.DialTimeout); err != nil {
		return nil, fmt.Errorf("dialTimeout: %w", err)
	}
	if out.DialKeepAlive, err = duration(st.Spec.DialKeepAlive); err != nil {
		return nil, fmt.Errorf("dialKeepAlive: %w", err)
	}
	if st.Spec.TerminationDelay != nil { // unset is 100 ms; an explicit 0 is no time
		d, err := duration(st.Spec.TerminationDelay)
		if err != nil {
			return nil, fmt.Errorf("terminationDelay: %w", err)
		}
		out.TerminationDelay = &d
	}
	if st.Spec.ProxyProtocol != nil {
		pp := config.ProxyProtocol{}
		pp.SetDefaults()
		if st.Spec.ProxyProtocol.Version != 0 {
			pp.Version = st.Spec.ProxyProtocol.Version
		}
		out.ProxyProtocol = &pp
	}
	if t := st.Spec.TLS; t != nil {
		tc := &config.TLSClientConfig{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, PeerCertURI: t.PeerCertURI}
		if t.Spiffe != nil { // kept, so that the transport is disabled naming it
			sp := config.SpiffeTransport{IDs: append([]string(nil), t.Spiffe.IDs...), TrustDomain: t.Spiffe.TrustDomain}
			tc.Spiffe = &sp
		}
		for i, r := range t.RootCAs {
			var ca config.FileOrContent
			var err error
			switch {
			case (r.Secret == "") == (r.ConfigMap == ""):
				return nil, fmt.Errorf("tls.rootCAs[%d]: set one of secret and configMap", i)
			case r.Secret != "":
				ca, err = caOf(k, st.Namespace, r.Secret)
			default:
				ca, err = caOfConfigMap(k, st.Namespace, r.ConfigMap)
			}
			if err != nil {
				return nil, fmt.Errorf("tls.rootCAs[%d]: %w", i, err)
			}
			tc.RootCAs = append(tc.RootCAs, ca)
		}
		for _, name := range t.RootCAsSecrets {
			ca, err := caOf(k, st.Namespace, name)
			if err != nil {
				return nil, fmt.Errorf("tls.rootCAsSecrets: %w", err)
			}
			tc.RootCAs = append(tc.RootCAs, ca)
		}
		for _, name := range t.CertificatesSecrets {
			c, err := keyPair(k, st.Namespace, name)
			if err != nil {
				return nil, fmt.Errorf("tls.certificatesSecrets: %w", err)
			}
			tc.Certificates = append(tc.Certificates, c)
		}
		out.TLS = tc
	}
	return out, nil
}

// routeTLS is a route's router TLS section and, with a secretName, its
// certificate (nil otherwise).
func routeTLS(k cluster, ir IngressRouteTCP, opt options) (*config.RouterTCPTLSConfig, *config.CertAndStores, error) {
	t := ir.Spec.TLS
	out := &config.RouterTCPTLSConfig{Passthrough: t.Passthrough, CertResolver: t.CertResolver}
	for _, d := range t.Domains {
		out.Domains = append(out.Domains, config.Domain{Main: d.Main, SANs: append([]string(nil), d.SANs...)})
	}
	if o := t.Options; o != nil && o.Name != "" {
		switch {
		case strings.Contains(o.Name, "@"):
			out.Options = o.Name
		case o.Name == defaultName && o.Namespace == "":
			out.Options = defaultName
		default:
			ns := o.Namespace
			if ns == "" {
				ns = ir.Namespace
			}
			if err := opt.crossNamespace(ir.Namespace, "TLSOption", ns, o.Name); err != nil {
				return nil, nil, fmt.Errorf("tls.options: %w", err)
			}
			out.Options = makeID(ns, o.Name)
		}
	}
	if t.SecretName == "" || t.Passthrough {
		return out, nil, nil
	}
	c, err := keyPair(k, ir.Namespace, t.SecretName)
	if err != nil {
		return nil, nil, fmt.Errorf("tls.secretName: %w", err)
	}
	return out, &config.CertAndStores{Certificate: c}, nil
}

// transportRef is a route service's serversTransport: `<namespace>-<name>`
// of a ServersTransportTCP of the route's namespace, or a name with "@"
// (another provider's) as it is. `<namespace>-<name>@kubernetescrd` may
// name another namespace's, so, as in Traefik, it is refused unless
// cross-namespace references are allowed.
func transportRef(ns, name string, opt options) (string, error) {
	if !opt.allowCrossNamespace && strings.HasSuffix(name, "@kubernetescrd") {
		return "", fmt.Errorf("serversTransport %q: the namespace-name@kubernetescrd form can name another namespace's, which is not allowed (set providers.kubernetesCRD.allowCrossNamespace to allow it)", name)
	}
	if name == "" || strings.Contains(name, "@") {
		return name, nil
	}
	return makeID(ns, name), nil
}

func sortedByName[T any](in []T, key func(T) (string, string)) []T {
	out := append([]T(nil), in...)
	sort.Slice(out, func(i, j int) bool {
		ni, mi := key(out[i])
		nj, mj := key(out[j])
		if ni != nj {
			return ni < nj
		}
		return mi < mj
	})
	return out
}
