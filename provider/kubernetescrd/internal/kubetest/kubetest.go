// Package kubetest starts a real etcd and kube-apiserver on loopback for the
// Kubernetes CRD provider's integration tests, applies the repository's CRDs,
// and gives the tests a dynamic client.
//
// The binaries come from the folder named by KUBEBUILDER_ASSETS (the layout
// controller-runtime's envtest uses; `scripts/k8s.sh` builds it and prints
// its path), else from scripts/k8s.sh's cache when it holds a complete build.
package kubetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// Server is a running etcd + kube-apiserver pair. Stop ends both and removes
// their data.
type Server struct {
	// URL is the API server's https URL on 127.0.0.1.
	URL string
	// Token is a bearer token of a system:masters user.
	Token string
	// CAFile holds the certificates that verify the server's.
	CAFile string
	// Kubeconfig is a kubeconfig file for URL, Token and CAFile.
	Kubeconfig string
	// Client is a dynamic client for the server.
	Client dynamic.Interface
	// Rest is the client configuration behind Client.
	Rest *rest.Config

	dir   string
	procs []*proc
}

// proc is one started binary: its output (kept for failure messages) and a
// channel closed when it has exited.
type proc struct {
	cmd  *exec.Cmd
	out  itest.Buffer
	done chan struct{}
}

// Assets returns the folder holding etcd and kube-apiserver, or an error that
// says how to get them (itest.KubeAssets).
func Assets() (string, error) { return itest.KubeAssets() }

// Start runs etcd and kube-apiserver from assets on free loopback ports,
// waits until the API server is ready, and applies every CRD manifest in
// crdDir. On error everything started is stopped.
func Start(ctx context.Context, assets, crdDir string) (s *Server, err error) {
	dir, err := os.MkdirTemp("", "tollgate-kube-")
	if err != nil {
		return nil, err
	}
	s = &Server{dir: dir}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, s.Logs())
			s.Stop()
			s = nil
		}
	}()

	ports, err := freePorts(3)
	if err != nil {
		return s, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	if err := s.run(filepath.Join(assets, "etcd"),
		"--name=default",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	); err != nil {
		return s, err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return s, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return s, err
	}
	saKey := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return s, err
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	s.Token = hex.EncodeToString(tok)
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(s.Token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return s, err
	}
	certDir := filepath.Join(dir, "certs")
	port := ports[2]
	s.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	if err := s.run(filepath.Join(assets, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--cert-dir="+certDir,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer="+s.URL,
		"--service-account-key-file="+saKey,
		"--service-account-signing-key-file="+saKey,
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--disable-admission-plugins=ServiceAccount",
		"--v=0",
	); err != nil {
		return s, err
	}

	// The server writes its self-signed certificate (and the CA that signed
	// it) into certDir before it serves.
	s.CAFile = filepath.Join(certDir, "apiserver.crt")
	if err := s.waitReady(ctx); err != nil {
		return s, err
	}
	s.Rest = &rest.Config{Host: s.URL, BearerToken: s.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}, QPS: 200, Burst: 400}
	s.Client, err = dynamic.NewForConfig(s.Rest)
	if err != nil {
		return s, err
	}
	s.Kubeconfig = filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
`, s.URL, s.CAFile, s.Token)
	if err := os.WriteFile(s.Kubeconfig, []byte(kc), 0o600); err != nil {
		return s, err
	}
	if crdDir != "" {
		if err := s.ApplyCRDs(ctx, crdDir); err != nil {
			return s, err
		}
	}
	return s, nil
}

func (s *Server) run(bin string, args ...string) error {
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = &p.out
	// Die with the test process, even when it is killed.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	s.procs = append(s.procs, p)
	return nil
}

// Logs returns the tail of each process's output, for failure messages.
func (s *Server) Logs() string {
	var b strings.Builder
	for _, p := range s.procs {
		out := p.out.String()
		if len(out) > 4000 {
			out = "..." + out[len(out)-4000:]
		}
		fmt.Fprintf(&b, "--- %s output:\n%s\n", filepath.Base(p.cmd.Path), out)
	}
	return b.String()
}

func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var last string
	for {
		for _, p := range s.procs {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited: %v", p.cmd.Path, p.cmd.ProcessState)
			default:
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if _, err := os.Stat(s.CAFile); err == nil {
					return nil
				}
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver at %s not ready: %s", s.URL, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ApplyCRDs creates every CRD in dir's *.yaml files and waits until each is
// established and its resources can be listed (the server answers 429 for a
// moment after a CRD is created).
func (s *Server) ApplyCRDs(ctx context.Context, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRD manifests in %s (%v)", dir, err)
	}
	var lists []schema.GroupVersionResource
	for _, f := range files {
		objs, err := ReadManifests(f)
		if err != nil {
			return err
		}
		for _, u := range objs {
			if _, err := s.Client.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating CRD from %s: %w", f, err)
			}
			group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
			plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
			versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
			for _, v := range versions {
				name, _, _ := unstructured.NestedString(v.(map[string]any), "name")
				lists = append(lists, schema.GroupVersionResource{Group: group, Version: name, Resource: plural})
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, gvr := range lists {
		for {
			_, err := s.Client.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("listing %s after creating its CRD: %w", gvr, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// ReadManifests decodes the YAML documents of file.
func ReadManifests(file string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(b), "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Stop kills kube-apiserver and etcd (in that order), waits for them, and
// removes their data.
func (s *Server) Stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	_ = os.RemoveAll(s.dir)
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
