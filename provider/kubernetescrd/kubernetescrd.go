package kubernetescrd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Name is the provider's name in qualified resource names (`mw@kubernetescrd`).
const Name = "kubernetescrd"

// The resources the provider watches.
var (
	middlewaresGVR    = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "middlewaretcps"}
	routesGVR         = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "ingressroutetcps"}
	servicesGVR       = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	endpointSlicesGVR = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	transportsGVR     = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "serverstransporttcps"}
	tlsOptionsGVR     = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "tlsoptions"}
	tlsStoresGVR      = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "tlsstores"}
	secretsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	configMapsGVR     = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// watched are the resources Run watches and probes, in that order.
var watched = []schema.GroupVersionResource{middlewaresGVR, routesGVR, servicesGVR, endpointSlicesGVR, transportsGVR, tlsOptionsGVR, tlsStoresGVR, secretsGVR, configMapsGVR}

// serviceIndex indexes EndpointSlices by "namespace/service" (label
// kubernetes.io/service-name), so a build reads only the slices it needs.
const serviceIndex = "service"

// Provider watches MiddlewareTCP and IngressRouteTCP resources and the
// Services and EndpointSlices they name. Create it with New.
type Provider struct {
	opt          options
	selector     string        // providers.kubernetesCRD.labelSelector: of the traefik.io resources listed
	ingressClass string        // providers.kubernetesCRD.ingressClass
	throttle     time.Duration // providers.kubernetesCRD.throttleDuration: the least time between two builds sent
	rest         *rest.Config
	namespaces   []string // "" alone means every namespace
	log          zerolog.Logger
	backoff      provider.Backoff
	decoded      decodeCache // used by Run's goroutine only
}

var _ provider.Provider = (*Provider)(nil)

// New checks cfg and finds how to reach the API server: cfg.Endpoint (with
// cfg.Token and cfg.CertAuthFilePath) when set, else the in-cluster service
// account when running in a pod, else the kubeconfig named by KUBECONFIG (or
// ~/.kube/config). It does not contact the server; Run does.
func New(cfg *config.KubernetesCRDProvider, po provider.Options) (*Provider, error) {
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.LabelSelector != "" {
		if _, err := labels.Parse(cfg.LabelSelector); err != nil {
			return nil, fmt.Errorf("providers.kubernetesCRD.labelSelector=%q: %w", cfg.LabelSelector, err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "tollgate"
	logger := po.Log.With().Str("provider", Name).Logger()
	rc.WarningHandler = warningLogger{logger}
	if cfg.ThrottleDuration < 0 {
		return nil, fmt.Errorf("providers.kubernetesCRD.throttleDuration=%s: must not be negative", cfg.ThrottleDuration)
	}
	return &Provider{rest: rc, namespaces: namespaces(cfg.Namespaces), log: logger, backoff: po.Backoff, selector: cfg.LabelSelector, ingressClass: cfg.IngressClass,
		throttle: time.Duration(cfg.ThrottleDuration),
		opt: options{allowCrossNamespace: cfg.AllowCrossNamespace, allowEmptyServices: cfg.AllowEmptyServices,
			allowExternalNameServices: cfg.AllowExternalNameServices, nativeLBByDefault: cfg.NativeLBByDefault}}, nil
}

// ingressClassAnnotation is the annotation that gives an IngressRouteTCP
// to one ingress controller (Traefik's).
const ingressClassAnnotation = "kubernetes.io/ingress.class"

// defaultIngressClass is the class an IngressRouteTCP may carry to be
// served when no ingressClass is configured: Traefik's.
const defaultIngressClass = "traefik"

// servesClass reports whether a route annotated with class is this
// provider's, as Traefik decides it: the configured ingressClass exactly;
// without one, no annotation or "traefik". A route given to another
// controller is not served here.
func (p *Provider) servesClass(class string) bool {
	return class == p.ingressClass || p.ingressClass == "" && class == defaultIngressClass
}

func restConfig(cfg *config.KubernetesCRDProvider) (*rest.Config, error) {
	switch {
	case cfg.Endpoint != "":
		rc := &rest.Config{Host: cfg.Endpoint, BearerToken: cfg.Token}
		rc.TLSClientConfig.CAFile = cfg.CertAuthFilePath
		if _, err := rest.HTTPClientFor(rc); err != nil {
			return nil, fmt.Errorf("providers.kubernetesCRD.endpoint=%q: %w", cfg.Endpoint, err)
		}
		return rc, nil
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != "":
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("providers.kubernetesCRD: in-cluster configuration: %w", err)
		}
		return rc, nil
	default:
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("providers.kubernetesCRD: no endpoint set, not in a cluster, and no usable kubeconfig (KUBECONFIG=%q): %w", os.Getenv("KUBECONFIG"), err)
		}
		return rc, nil
	}
}

// namespaces dedupes and sorts the configured namespaces; none (or "") means all.
func namespaces(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, ns := range in {
		if ns == "" || ns == metav1.NamespaceAll {
			return []string{metav1.NamespaceAll}
		}
		if !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	if len(out) == 0 {
		return []string{metav1.NamespaceAll}
	}
	sort.Strings(out)
	return out
}

// Name returns "kubernetescrd".
func (p *Provider) Name() string { return Name }

// informers are one namespace's (or every namespace's) caches. The TLS
// ones (transports, tlsOptions, tlsStores, secrets) may be nil in tests.
type informers struct {
	namespace                                string
	middlewares, routes, services, endpoints cache.SharedIndexInformer
	transports, tlsOptions, tlsStores        cache.SharedIndexInformer
	secrets, configMaps                      cache.SharedIndexInformer
}

func (in *informers) all() []cache.SharedIndexInformer {
	var out []cache.SharedIndexInformer
	for _, inf := range []cache.SharedIndexInformer{in.middlewares, in.routes, in.services, in.endpoints, in.transports, in.tlsOptions, in.tlsStores, in.secrets, in.configMaps} {
		if inf != nil {
			out = append(out, inf)
		}
	}
	return out
}

// list is inf's objects (none for a nil informer).
func list(inf cache.SharedIndexInformer) []any {
	if inf == nil {
		return nil
	}
	return inf.GetStore().List()
}

// Run follows the API server until ctx is done, on the provider runtime
// (provider.Loop): each attempt (follow) asks the server, starts an
// informer per resource and namespace, waits for their first lists, then
// builds and sends a complete configuration after every change (a wake-up
// channel of one coalesces bursts: the build that follows reads
// everything). Informers retry refused connections silently, so the
// attempt also lists one object of each resource itself, every probeEvery
// once synced and every second otherwise: a failure (server down, CRDs not
// applied, forbidden) ends it, the runtime reports it once while the last
// configuration keeps serving and starts another attempt after its
// backoff, whose fresh informers relist as soon as the server answers
// (their own backoff can reach half a minute). Run returns nil when ctx is
// done.
func (p *Provider) Run(ctx context.Context, out chan<- provider.Message) error {
	client, err := dynamic.NewForConfig(p.rest)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	provider.Loop{Name: Name, What: "Kubernetes API", Log: p.log, Backoff: p.backoff,
		Attempt: func(ctx context.Context, s *provider.Sink) error { return p.follow(ctx, client, s) }}.Run(ctx, out)
	return nil
}

// follow is one attempt of Run: it returns why the server stopped
// answering, or ctx's error.
func (p *Provider) follow(ctx context.Context, client dynamic.Interface, s *provider.Sink) error {
	if err := p.probe(ctx, client); err != nil {
		return err
	}
	w := p.watch(ctx, client)
	defer w.stop()
	synced := false
	dirty := true // something changed since the last build sent
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	probe := time.NewTimer(time.Second)
	defer probe.Stop()
	for {
		if !synced && allSynced(w.sets) {
			synced = true
			poll.Stop() // the probe due within the second goes on, then every probeEvery
			p.log.Info().Strs("namespaces", p.namespaces).Msg("Kubernetes caches synced")
		}
		switch err := w.failed(); {
		case err != nil:
			p.log.Debug().Err(err).Msg("Kubernetes API not readable; the last configuration keeps serving while the client retries")
			if !s.Fail(ctx, err) {
				return ctx.Err()
			}
			dirty = true // the next build clears the error
		case synced && dirty:
			dirty = false
			conf, problems := p.build(w.sets)
			if !s.Snapshot(ctx, provider.Message{Configuration: conf, Problems: problems}) {
				return ctx.Err()
			}
			// throttleDuration: changes in the meantime wait, and the next
			// build takes them all.
			if !provider.Sleep(ctx, p.throttle) {
				return ctx.Err()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.wake:
			dirty = true
		case <-poll.C:
		case <-probe.C:
			// Informers retry refused connections silently, so ask the
			// server directly: every second until the caches fill, slowly
			// afterwards.
			if err := p.probe(ctx, client); err != nil {
				return err
			}
			next := time.Second
			if synced {
				next = probeEvery
			}
			probe.Reset(next)
		}
	}
}

// watching is one attempt's informers: one per resource and namespace
// (sets), the wake-up their changes send, and the last error of their
// watches.
type watching struct {
	sets []*informers
	wake chan struct{}
	stop func() // ends the informers and waits for them

	mu  sync.Mutex
	err error
}

// failed returns the watches' error since the last call, if any.
func (w *watching) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.err
	w.err = nil
	return err
}

func (w *watching) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// watch creates and runs one informer per resource and namespace.
func (p *Provider) watch(ctx context.Context, client dynamic.Interface) *watching {
	w := &watching{wake: make(chan struct{}, 1)}
	onWatchError := func(gvr schema.GroupVersionResource, ns string) cache.WatchErrorHandlerWithContext {
		return func(_ context.Context, _ *cache.Reflector, err error) {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return // a watch ending normally; the reflector resumes it
			}
			where := gvr.Resource
			if ns != "" {
				where += " in namespace " + ns
			}
			w.mu.Lock()
			w.err = fmt.Errorf("watching %s: %w", where, err)
			w.mu.Unlock()
			w.poke()
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.poke() },
		UpdateFunc: func(any, any) { w.poke() },
		DeleteFunc: func(any) { w.poke() },
	}
	for _, ns := range p.namespaces {
		in := &informers{namespace: ns}
		mk := func(gvr schema.GroupVersionResource, indexers cache.Indexers) cache.SharedIndexInformer {
			selector := ""
			if gvr.Group == middlewaresGVR.Group { // the labelSelector is of Traefik's resources only, as in Traefik
				selector = p.selector
			}
			inf := newInformer(client, gvr, ns, selector, indexers)
			_ = inf.SetWatchErrorHandlerWithContext(onWatchError(gvr, ns))
			_, _ = inf.AddEventHandler(handler)
			return inf
		}
		in.middlewares = mk(middlewaresGVR, nil)
		in.routes = mk(routesGVR, nil)
		in.services = mk(servicesGVR, nil)
		in.endpoints = mk(endpointSlicesGVR, cache.Indexers{serviceIndex: indexByService})
		in.transports = mk(transportsGVR, nil)
		in.tlsOptions = mk(tlsOptionsGVR, nil)
		in.tlsStores = mk(tlsStoresGVR, nil)
		in.secrets = mk(secretsGVR, nil)
		in.configMaps = mk(configMapsGVR, nil)
		w.sets = append(w.sets, in)
	}
	ictx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, in := range w.sets {
		for _, inf := range in.all() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				inf.RunWithContext(ictx)
			}()
		}
	}
	w.stop = func() { cancel(); wg.Wait() }
	return w
}

// probeEvery is how often a synced provider checks that the API server still
// answers (informers retry refused connections without telling anyone).
const probeEvery = 10 * time.Second

// probe lists one object of each watched resource and returns the first
// error, naming the resource and namespace.
func (p *Provider) probe(ctx context.Context, client dynamic.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, ns := range p.namespaces {
		for _, gvr := range watched {
			if _, err := client.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
				if ctx.Err() != nil && errors.Is(err, context.Canceled) {
					return nil
				}
				where := gvr.Resource
				if gvr.Group != "" {
					where += "." + gvr.Group
				}
				if ns != "" {
					where += " in namespace " + ns
				}
				if apierrors.IsNotFound(err) && gvr.Group == middlewaresGVR.Group {
					return fmt.Errorf("listing %s: %w (are the CRDs in deploy/crds applied?)", where, err)
				}
				return fmt.Errorf("listing %s: %w", where, err)
			}
		}
	}
	return nil
}

func allSynced(sets []*informers) bool {
	for _, in := range sets {
		for _, inf := range in.all() {
			if !inf.HasSynced() {
				return false
			}
		}
	}
	return true
}

// newInformer lists and watches one resource (in one namespace, or all;
// with a label selector, those it selects) as unstructured objects through
// the dynamic client, which keeps client-go's typed clients and informers
// (every API group) out of the binary.
func newInformer(client dynamic.Interface, gvr schema.GroupVersionResource, ns, selector string, indexers cache.Indexers) cache.SharedIndexInformer {
	res := client.Resource(gvr).Namespace(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return res.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return res.Watch(ctx, opts)
		},
	}
	idx := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	for k, v := range indexers {
		idx[k] = v
	}
	return cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, idx)
}

func indexByService(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	name := u.GetLabels()[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{u.GetNamespace() + "/" + name}, nil
}

// build reads the caches and runs the pure build. Resources that do not
// decode (possible only without the CRD schema) are skipped with a problem
// naming them. Decoded forms are remembered per object version, so a wake-up
// decodes only what changed.
func (p *Provider) build(sets []*informers) (*config.Dynamic, []string) {
	var (
		mws      []MiddlewareTCP
		routes   []IngressRouteTCP
		problems []string
	)
	p.decoded.begin()
	for _, in := range sets {
		for _, obj := range in.middlewares.GetStore().List() {
			u := obj.(*unstructured.Unstructured)
			v, err := p.decoded.get("MiddlewareTCP", u, func() (any, error) {
				var spec config.TCPMiddleware
				err := decodeSpec(u.Object["spec"], &spec)
				return spec, err
			})
			if err != nil {
				problems = append(problems, fmt.Sprintf("MiddlewareTCP %q: %v", u.GetNamespace()+"/"+u.GetName(), err))
				continue
			}
			mws = append(mws, MiddlewareTCP{Namespace: u.GetNamespace(), Name: u.GetName(), Spec: v.(config.TCPMiddleware)})
		}
		for _, obj := range in.routes.GetStore().List() {
			u := obj.(*unstructured.Unstructured)
			if !p.servesClass(u.GetAnnotations()[ingressClassAnnotation]) {
				continue // another ingress controller's
			}
			v, err := p.decoded.get("IngressRouteTCP", u, func() (any, error) {
				var spec IngressRouteTCPSpec
				err := decodeSpec(u.Object["spec"], &spec)
				return spec, err
			})
			if err != nil {
				problems = append(problems, fmt.Sprintf("IngressRouteTCP %q: %v", u.GetNamespace()+"/"+u.GetName(), err))
				continue
			}
			routes = append(routes, IngressRouteTCP{Namespace: u.GetNamespace(), Name: u.GetName(), Spec: v.(IngressRouteTCPSpec)})
		}
	}
	var tin tlsInputs
	for _, in := range sets {
		for _, obj := range list(in.transports) {
			u := obj.(*unstructured.Unstructured)
			v, err := p.decoded.get("ServersTransportTCP", u, func() (any, error) {
				var spec ServersTransportTCPSpec
				err := decodeSpec(u.Object["spec"], &spec)
				return spec, err
			})
			if err != nil {
				problems = append(problems, fmt.Sprintf("ServersTransportTCP %q: %v", u.GetNamespace()+"/"+u.GetName(), err))
				continue
			}
			tin.transports = append(tin.transports, ServersTransportTCP{Namespace: u.GetNamespace(), Name: u.GetName(), Spec: v.(ServersTransportTCPSpec)})
		}
		for _, obj := range list(in.tlsOptions) {
			u := obj.(*unstructured.Unstructured)
			v, err := p.decoded.get("TLSOption", u, func() (any, error) {
				var spec TLSOptionSpec
				err := decodeSpec(u.Object["spec"], &spec)
				return spec, err
			})
			if err != nil {
				problems = append(problems, fmt.Sprintf("TLSOption %q: %v", u.GetNamespace()+"/"+u.GetName(), err))
				continue
			}
			tin.options = append(tin.options, TLSOption{Namespace: u.GetNamespace(), Name: u.GetName(), Spec: v.(TLSOptionSpec)})
		}
		for _, obj := range list(in.tlsStores) {
			u := obj.(*unstructured.Unstructured)
			v, err := p.decoded.get("TLSStore", u, func() (any, error) {
				var spec TLSStoreSpec
				err := decodeSpec(u.Object["spec"], &spec)
				return spec, err
			})
			if err != nil {
				problems = append(problems, fmt.Sprintf("TLSStore %q: %v", u.GetNamespace()+"/"+u.GetName(), err))
				continue
			}
			tin.stores = append(tin.stores, TLSStore{Namespace: u.GetNamespace(), Name: u.GetName(), Spec: v.(TLSStoreSpec)})
		}
	}
	k := &cacheCluster{sets: sets, decoded: &p.decoded}
	conf, more := buildAll(mws, routes, tin, k, p.opt)
	p.decoded.end()
	problems = append(append(problems, k.problems...), more...)
	// Stores list in map order; a stable order lets the watcher log a
	// problem once, when the list changes, not on every build.
	sort.Strings(problems)
	return conf, problems
}

// decodeCache remembers the typed form of cached objects, keyed by kind,
// namespace and name, valid while the object's UID and resourceVersion are
// unchanged. Entries not read by a build are dropped at its end. Decoded
// values are shared between builds, so build must not modify its inputs
// (it does not).
type decodeCache struct {
	entries map[string]*decodedEntry
	gen     uint64
}

type decodedEntry struct {
	uid, version string
	val          any
	err          error
	gen          uint64
}

func (c *decodeCache) begin() {
	if c.entries == nil {
		c.entries = map[string]*decodedEntry{}
	}
	c.gen++
}

func (c *decodeCache) get(kind string, u *unstructured.Unstructured, decode func() (any, error)) (any, error) {
	key := kind + "/" + u.GetNamespace() + "/" + u.GetName()
	uid, version := string(u.GetUID()), u.GetResourceVersion()
	e := c.entries[key]
	if e == nil || e.uid != uid || e.version != version {
		val, err := decode()
		e = &decodedEntry{uid: uid, version: version, val: val, err: err}
		c.entries[key] = e
	}
	e.gen = c.gen
	return e.val, e.err
}

func (c *decodeCache) end() {
	for k, e := range c.entries {
		if e.gen != c.gen {
			delete(c.entries, k)
		}
	}
}

// cacheCluster reads Services and EndpointSlices from the informer caches.
type cacheCluster struct {
	sets     []*informers
	decoded  *decodeCache
	problems []string
}

func (c *cacheCluster) set(ns string) *informers {
	for _, in := range c.sets {
		if in.namespace == metav1.NamespaceAll || in.namespace == ns {
			return in
		}
	}
	return nil
}

func (c *cacheCluster) Service(ns, name string) (*corev1.Service, bool) {
	return cached[corev1.Service](c, ns, name, "Service", func(in *informers) cache.SharedIndexInformer { return in.services })
}

// Secret returns the Secret ns/name from the cache.
func (c *cacheCluster) Secret(ns, name string) (*corev1.Secret, bool) {
	return cached[corev1.Secret](c, ns, name, "Secret", func(in *informers) cache.SharedIndexInformer { return in.secrets })
}

// ConfigMap returns the ConfigMap ns/name from the cache.
func (c *cacheCluster) ConfigMap(ns, name string) (*corev1.ConfigMap, bool) {
	return cached[corev1.ConfigMap](c, ns, name, "ConfigMap", func(in *informers) cache.SharedIndexInformer { return in.configMaps })
}

// cached is the object ns/name of the kind of's informer of ns caches,
// decoded (once per version); a decoding error is a problem naming it.
func cached[T any](c *cacheCluster, ns, name, kind string, of func(*informers) cache.SharedIndexInformer) (*T, bool) {
	in := c.set(ns)
	if in == nil || of(in) == nil {
		return nil, false
	}
	obj, ok, err := of(in).GetStore().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	u := obj.(*unstructured.Unstructured)
	v, err := c.decoded.get(kind, u, func() (any, error) {
		var out T
		err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out)
		return &out, err
	})
	if err != nil {
		c.problems = append(c.problems, fmt.Sprintf("%s %q: %v", kind, ns+"/"+name, err))
		return nil, false
	}
	return v.(*T), true
}

func (c *cacheCluster) EndpointSlices(ns, service string) []*discoveryv1.EndpointSlice {
	in := c.set(ns)
	if in == nil {
		return nil
	}
	objs, err := in.endpoints.GetIndexer().ByIndex(serviceIndex, ns+"/"+service)
	if err != nil {
		return nil
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, obj := range objs {
		u := obj.(*unstructured.Unstructured)
		v, err := c.decoded.get("EndpointSlice", u, func() (any, error) {
			var s discoveryv1.EndpointSlice
			err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s)
			return &s, err
		})
		if err != nil {
			c.problems = append(c.problems, fmt.Sprintf("EndpointSlice %q: %v", u.GetNamespace()+"/"+u.GetName(), err))
			continue
		}
		out = append(out, v.(*discoveryv1.EndpointSlice))
	}
	return out
}

// warningLogger logs the API server's deprecation and other warnings instead
// of client-go's default print to stderr.
type warningLogger struct{ log zerolog.Logger }

func (w warningLogger) HandleWarningHeader(code int, agent, text string) {
	if code != 299 || text == "" {
		return
	}
	w.log.Warn().Str("agent", agent).Msg("Kubernetes API warning: " + text)
}
