package file

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	pfile "github.com/traefik/paerser/file"
	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
)

// fastCases are YAML inputs at the edges of the fast path: each must
// decode as paerser decodes it, or be left to paerser.
var fastCases = []string{
	"tcp:\n  routers:\n    r:\n      rule: \"HostSNI(`*`)\"\n      service: s\n",
	"TCP:\n  Routers:\n    R:\n      RULE: HostSNI(`*`)\n      entrypoints: [a, b]\n",
	"tcp:\n  routers:\n    r:\n      entryPoints:\n      - a\n      -   b  \n",
	"tcp:\n  routers:\n    r:\n      entryPoints:\n        - ' a '\n        - \"b\"\n",
	"tcp:\n  routers:\n    r:\n      priority: 10\n      rule: 10\n",
	"tcp:\n  routers:\n    r:\n      priority: 010\n",
	"tcp:\n  routers:\n    r:\n      priority: +10\n",
	"tcp:\n  routers:\n    r:\n      priority: 1_0\n",
	"tcp:\n  routers:\n    r:\n      priority: \"12\"\n",
	"tcp:\n  routers:\n    r:\n      priority: 0x10\n",
	"tcp:\n  routers:\n    r:\n      priority: 1.5\n",
	"tcp:\n  routers:\n    r:\n      priority: 99999999999999999999\n",
	"tcp:\n  routers:\n    r:\n      rule: 2001-01-01\n",
	"tcp:\n  routers:\n    r:\n      rule: true\n",
	"tcp:\n  routers:\n    r:\n      rule: True\n      tls:\n        passthrough: TRUE\n",
	"tcp:\n  routers:\n    r:\n      rule: yes\n      tls:\n        passthrough: yes\n",
	"tcp:\n  routers:\n    r:\n      rule: ~\n",
	"tcp:\n  routers:\n    r:\n      rule: null\n",
	"tcp:\n  routers:\n    r:\n      rule:\n",
	"tcp:\n  routers:\n    r:\n",
	"tcp:\n  routers:\n    r: {}\n",
	"tcp:\n  routers: {}\n",
	"tcp:\n  routers:\n    r:\n      rule: .5\n",
	"tcp:\n  routers:\n    r:\n      rule: .x\n",
	"tcp:\n  routers:\n    r:\n      rule: -x\n",
	"tcp:\n  routers:\n    r:\n      rule: a # comment\n      service: 's # not'\n",
	"tcp:\n  routers:\n    r:\n      rule: a#b\n",
	"tcp:\n  routers:\n    r:\n      rule: 'it''s'\n",
	"tcp:\n  routers:\n    r:\n      rule: \"a\\tb\"\n",
	"tcp:\n  routers:\n    r:\n      rule: a\n        b\n",
	"tcp:\n  routers:\n    r:\n      rule: a: b\n",
	"tcp:\n  routers:\n    r:\n      rule: \"a\" x\n",
	"tcp:\n  routers:\n    r:\n      rule: \"a\"# x\n",
	"tcp:\n  routers:\n    r:\n      rule: a\n    r:\n      rule: b\n",
	"tcp:\n  routers:\n    r:\n      rule: a\n      RULE: b\n",
	"tcp:\n  routers:\n    r:\n      rule: a\n      unknown: b\n",
	"tcp:\n  routers:\n    r:\n      rule: &x a\n      service: *x\n",
	"tcp:\n  routers:\n    r:\n      rule: !!str a\n",
	"tcp:\n  routers:\n    r:\n      rule: |\n        a\n",
	"tcp:\n  routers:\n    r: {rule: a}\n",
	"tcp:\n  routers:\n    r:\n      entryPoints: []\n",
	"tcp:\n  routers:\n    r:\n      entryPoints: [a,, b]\n",
	"tcp:\n  routers:\n    r:\n      entryPoints: [a, b,]\n",
	"tcp:\n  routers:\n    r:\n      entryPoints: [\"a\", 'b']\n",
	"tcp:\n  routers:\n    r:\n      entryPoints: a\n",
	"tcp:\n  routers:\n    r:\n      entryPoints: a,b\n",
	"tcp:\n  routers:\n    r:\n      entryPoints:\n      - [a]\n",
	"tcp:\n  routers:\n    r:\n      entryPoints: [a║b]\n",
	"tcp:\n  routers:\n    \"r x\":\n      rule: a\n    'r''y':\n      rule: b\n",
	"tcp:\n  routers:\n    1:\n      rule: a\n",
	"tcp:\n  routers:\n    true:\n      rule: a\n",
	"tcp:\n  routers:\n    <<:\n      rule: a\n",
	"tcp:\n  routers:\n   r:\n      rule: a\n    x: 1\n",
	"tcp:\n\trouters: {}\n",
	"---\ntcp:\n  routers:\n    r:\n      rule: a\n",
	"---\ntcp:\n  routers:\n    r:\n      rule: a\n---\ntcp: {}\n",
	"tcp:\n  routers:\n    r:\n      rule: a\n...\n",
	"# only a comment\n",
	"  tcp:\n    routers:\n      r:\n        rule: a\n",
	"tcp:\r\n  routers:\r\n    r:\r\n      rule: a\r\n",
	"tcp:\n  routers:\n    r:\n      rule: é\n",
	"tcp:\n  routers:\n    r:\n      rule: a\nhttp:\n  routers:\n    x:\n      rule: y\n    x:\n      rule: z\n",
	"tcp:\n  routers:\n    r:\n      rule: a\nhttp:\n  routers:\n    x:\n      rule: y\n      anything: [1, 2]\n      list:\n      - a: 1\n        b: 2\nudp: 1\n",
	"tcp:\n  routers:\n    r:\n      rule: a\ntcp:\n  services: {}\n",
	"tcp:\n  routers:\n    r:\n      rule: a\nTcp:\n  services:\n    s:\n      loadBalancer:\n        servers:\n        - address: x\n",
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        servers:\n        - address: 127.0.0.1:80\n          tls: true\n        -   address: \"b:1\"\n            maxConn: 3\n",
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: a\n          - b\n",
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        servers:\n        - address: a\n        address: b\n",
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        proxyProtocol:\n          version: 1\n        terminationDelay: 100\n        servers:\n        - address: a\n",
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        proxyProtocol: true\n",
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        healthCheck:\n          interval: 10s\n          timeout: 3\n          port: 80\n",
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        healthCheck:\n          interval: ten\n",
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        queue:\n          maxSize: 10\n          timeout: 1m\n",
	"tcp:\n  services:\n    w:\n      weighted:\n        services:\n        - name: a\n          weight: 3\n        - name: b\n",
	"tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: 10\n        dryRun: false\n        ipv6Subnet: 64\n",
	"tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: ten\n",
	"tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: -1\n",
	"tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: -0\n",
	"tcp:\n  middlewares:\n    m:\n      ipAllowList:\n        sourceRange:\n        - 10.0.0.0/8\n        - \"::1/128\"\n        - ::1\n",
	"tcp:\n  middlewares:\n    m:\n      ipAllowList:\n        sourceRange: [10.0.0.0/8, 192.168.0.0/16]\n",
	"tcp:\n  middlewares:\n    m:\n      rateLimit:\n        average: 10\n        period: 1s\n        burst: 20\n",
	"tcp:\n  serversTransports:\n    t:\n      dialTimeout: 5s\n      tls:\n        serverName: x\n        insecureSkipVerify: true\n",
	"tls:\n  options:\n    default:\n      minVersion: VersionTLS12\n      cipherSuites:\n      - TLS_AES_128_GCM_SHA256\n  stores:\n    default:\n      defaultCertificate:\n        certFile: a\n        keyFile: b\n  certificates:\n  - certFile: a\n    keyFile: b\n    stores: [default]\n",
	"tcp:\n  tls: {}\n",
	"tcp:\n  TLS:\n    options: {}\n",
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        servers:\n        - address: a\n          port: 80\n",
}

// commonCases are written as users write them: the fast path reads them.
var commonCases = []string{
	fastCases[0], fastCases[1], fastCases[2], fastCases[3],
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        servers:\n        - address: 127.0.0.1:80\n          tls: true\n        -   address: \"b:1\"\n            maxConn: 3\n",
	"tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: 10\n        dryRun: false\n        ipv6Subnet: 64\n",
	"tcp:\n  middlewares:\n    m:\n      ipAllowList:\n        sourceRange: [10.0.0.0/8, 192.168.0.0/16]\n",
	"tcp:\n  services:\n    s:\n      loadBalancer:\n        healthCheck:\n          interval: 10s\n          timeout: 3\n          port: 80\n",
}

func yamlNode(content string) (*yaml.Node, error) {
	var n yaml.Node
	return &n, yaml.Unmarshal([]byte(content), &n)
}

// paerserDecode is the slow path alone.
func paerserDecode(content string) (d *config.Dynamic, err error) {
	defer func() {
		if r := recover(); r != nil {
			d, err = nil, os.ErrInvalid
		}
	}()
	d = &config.Dynamic{}
	if err := pfile.DecodeContent(content, ".yml", d); err != nil {
		return nil, err
	}
	return d, nil
}

// checkSame fails when the fast path reads content and paerser does not
// read it the same; it reports whether the fast path read it.
func checkSame(t *testing.T, name, content string) bool {
	t.Helper()
	if _, ok := TopKeysYAML(content); ok {
		if _, err := yamlNode(content); err != nil {
			t.Fatalf("%s: TopKeysYAML read what yaml.v3 refuses (%v):\n%s", name, err, content)
		}
		if fast, slow := IgnoredSections(content, ".yml"), ignoredSections(content, ".yml"); !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s: ignored sections %+v, through yaml.v3 %+v:\n%s", name, fast, slow, content)
		}
	}
	fast, ok := decodeYAMLFast(content)
	if !ok {
		return false
	}
	if _, top := TopKeysYAML(content); !top {
		t.Fatalf("%s: the fast path decoded what TopKeysYAML does not read:\n%s", name, content)
	}
	slowD, err := paerserDecode(content)
	if err != nil {
		t.Fatalf("%s: the fast path decoded what paerser refuses (%v):\n%s", name, err, content)
	}
	if !reflect.DeepEqual(fast, slowD) {
		t.Fatalf("%s: the fast path and paerser differ on\n%s\nfast:    %s\npaerser: %s", name, content, shown(fast), shown(slowD))
	}
	return true
}

func shown(d *config.Dynamic) string {
	b, _ := json.Marshal(d)
	return string(b)
}

// yamlBlocks returns the yaml code blocks of a Markdown page.
var yamlBlock = regexp.MustCompile("(?s)```ya?ml\n(.*?)```")

// corpus is every YAML input the repository holds that a dynamic file
// could be: the fixtures, the docs' examples, the generated fleets and
// fastCases.
func corpus(t testing.TB) map[string]string {
	out := map[string]string{}
	for i, c := range fastCases {
		out["case "+string(rune('A'+i%26))+string(rune('0'+i/26))] = c
	}
	root := itest.ModuleRoot()
	err := filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == ".git" || e.Name() == "node_modules") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		switch ext := filepath.Ext(path); {
		case ext == ".yml" || ext == ".yaml":
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		case ext == ".md":
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, m := range yamlBlock.FindAllStringSubmatch(string(b), -1) {
				out[rel+"#"+string(rune('0'+i%10))+string(rune('a'+i/10))] = m[1]
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3} {
		out["fleet"+string(rune('0'+n))] = string(itest.Fleet{N: n, EntryPoint: "tcp", Backend: "127.0.0.1:9"}.Bytes())
		out["shared fleet"+string(rune('0'+n))] = string(itest.Fleet{N: n, EntryPoint: "tcp", Backend: "127.0.0.1:9", Shared: true}.Bytes())
	}
	return out
}

// The fast YAML path decodes every input it takes as paerser does: the
// repository's fixtures and docs examples, the generated fleets and the
// edge cases; and it takes the common ones (so this test is not vacuous).
func TestFastYAMLMatchesPaerser(t *testing.T) {
	fast := 0
	for name, content := range corpus(t) {
		if checkSame(t, name, content) {
			fast++
		} else {
			t.Logf("left to paerser: %s", name)
		}
	}
	if fast < 40 {
		t.Fatalf("the fast path took %d inputs only", fast)
	}
	for _, common := range commonCases {
		if _, ok := decodeYAMLFast(common); !ok {
			t.Errorf("the fast path left a common input to paerser:\n%s", common)
		}
	}
}

// FuzzFastYAML: whatever the fast path decodes, paerser decodes the same.
func FuzzFastYAML(f *testing.F) {
	for _, c := range corpus(f) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, content string) {
		checkSame(t, "fuzz", content)
	})
}

// A file over limits.maxFileSize is not read: Load is an error naming the
// limit and the file, so the watcher keeps its last good configuration.
func TestMaxFileSize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.yml")
	content := "tcp:\n  routers:\n    r:\n      rule: \"HostSNI(`*`)\"\n      service: s\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	limit := func(n int) provider.Options { return provider.Options{Limits: &config.Limits{MaxFileSize: int64(n)}} }
	p := mustNew(t, &config.FileProvider{Filename: path}, limit(len(content)))
	if m := p.Load(); m.Err != nil || m.Configuration.TCP.Routers["r"] == nil {
		t.Fatalf("a file at the limit: %+v", m)
	}
	p = mustNew(t, &config.FileProvider{Filename: path}, limit(len(content)-1))
	m := p.Load()
	want := fmt.Sprintf("the file is %d bytes, over limits.maxFileSize (%d bytes)", len(content), len(content)-1)
	if m.Err == nil || !strings.Contains(m.Err.Error(), want) || !strings.Contains(m.Err.Error(), path) {
		t.Fatalf("error %v, want one naming %s and %q", m.Err, path, want)
	}
}

// A scalar sequence goes back to seqPool with its items' array cleared: the
// items are substrings of the file's text, and a pooled array still holding
// them kept a 27 MB file alive after its configuration was built.
func TestPooledSequenceHoldsNoText(t *testing.T) {
	var tags []string
	s := &scalarSeq{v: reflect.ValueOf(&tags).Elem()}
	text := "a, b, c"
	s.items = append(s.items, text[0:1], text[3:4], text[6:7])
	s.done()
	if len(tags) != 3 || tags[2] != "c" {
		t.Fatalf("the sequence set %q", tags)
	}
	for i, it := range s.items[:cap(s.items)] {
		if it != "" {
			t.Fatalf("pooled item %d still holds %q", i, it)
		}
	}
}
