package docs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	pfile "github.com/traefik/paerser/file"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-proxy/tollgate/check"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/cmdline"
	"github.com/tollgate-proxy/tollgate/provider/kubernetescrd"
)

// A check marker, the HTML comment right above a fenced block of the docs
// (docs/development.md, "Examples in the docs"):
//
//	<!-- check: KIND -->                    the block is valid as KIND
//	<!-- check: KIND; error: TEXT -->       it is refused with a problem containing TEXT
//	<!-- check: KIND; warning: TEXT -->     it applies, with a warning containing TEXT
//	<!-- check: KIND; id: NAME -->          other blocks may be checked with it
//	<!-- check: KIND; with: NAME -->        checked together with the block NAME
//	<!-- check: skip: REASON -->            not checked, for the reason given
//
// KIND is file (a dynamic YAML or TOML file), static (a static
// configuration file), labels (Docker labels: a compose `labels:` list or
// key=value lines), compose (a compose or stack file), tags (Consul
// Catalog tags: the quoted strings of the block), consul (a Consul service
// definition, as `consul services register` reads it), kv (KV pairs: `key value`
// lines, or consul kv put / etcdctl put / redis-cli set / zkCli.sh create
// commands), crd (Kubernetes manifests), or flags (a shell command line
// starting tollgate, or `go run .`: its flags).
type checkMarker struct {
	kind    string
	want    string // "error" or "warning", when the block shows one
	text    string // what the problem must contain
	id      string
	with    []string
	skipWhy string
}

var checkKinds = []string{"file", "static", "labels", "compose", "tags", "consul", "kv", "crd", "flags"}

func parseCheck(markers []string) (checkMarker, bool, error) {
	for _, m := range markers {
		rest, ok := strings.CutPrefix(m, "check:")
		if !ok {
			continue
		}
		rest = strings.TrimSpace(rest)
		if why, ok := strings.CutPrefix(rest, "skip:"); ok {
			if strings.TrimSpace(why) == "" {
				return checkMarker{}, true, fmt.Errorf("check: skip needs a reason: <!-- check: skip: why -->")
			}
			return checkMarker{kind: "skip", skipWhy: strings.TrimSpace(why)}, true, nil
		}
		parts := strings.Split(rest, ";")
		cm := checkMarker{kind: strings.TrimSpace(parts[0])}
		if !slices.Contains(checkKinds, cm.kind) {
			return cm, true, fmt.Errorf("check: unknown kind %q (one of %v, or skip: REASON)", cm.kind, checkKinds)
		}
		for _, opt := range parts[1:] {
			key, val, ok := strings.Cut(opt, ":")
			key, val = strings.TrimSpace(key), strings.TrimSpace(val)
			switch {
			case !ok || val == "":
				return cm, true, fmt.Errorf("check: %q: after the kind, give `; error: TEXT`, `; warning: TEXT`, `; id: NAME` or `; with: NAME`", opt)
			case key == "error" || key == "warning":
				cm.want, cm.text = key, val
			case key == "id":
				cm.id = val
			case key == "with":
				cm.with = append(cm.with, strings.Fields(val)...)
			default:
				return cm, true, fmt.Errorf("check: unknown option %q", key)
			}
		}
		return cm, true, nil
	}
	return checkMarker{}, false, nil
}

// configKey is what makes a block of any language a configuration a user
// copies: a Traefik label, tag or KV key, or a Traefik CRD.
var configKey = regexp.MustCompile(`traefik[./](tcp|tls|enable|docker|swarm)\b|kind:\s*(MiddlewareTCP|IngressRouteTCP|ServersTransportTCP|TLSOption|TLSStore)\b`)

// checkable reports whether a block must carry a check marker: YAML, TOML
// and JSON always, any other block when it holds Traefik keys.
func checkable(b codeBlock) bool {
	switch b.lang {
	case "yaml", "yml", "toml", "json":
		return true
	}
	return configKey.MatchString(b.text)
}

// Every configuration snippet of the docs is what tollgate check says it
// is: valid, or refused with the error the docs show. A snippet of a
// checkable kind without a marker fails.
func TestExamples(t *testing.T) {
	checked := 0
	pages := docPages(t)
	byID := map[string]codeBlock{}
	for _, p := range pages {
		for _, b := range p.blocks() {
			if cm, _, err := parseCheck(b.markers); err == nil && cm.id != "" {
				b.markers = []string{"check: " + cm.kind} // checked alone as its kind
				byID[cm.id] = b
			}
		}
	}
	for _, p := range pages {
		for _, b := range p.blocks() {
			cm, marked, err := parseCheck(b.markers)
			where := fmt.Sprintf("%s:%d", p.path, b.line)
			switch {
			case err != nil:
				t.Errorf("%s: %v", where, err)
				continue
			case !marked && checkable(b):
				t.Errorf("%s: a %s block with no check marker: add <!-- check: KIND --> (or <!-- check: skip: REASON -->) above it", where, langName(b.lang))
				continue
			case !marked || cm.kind == "skip":
				continue
			}
			checked++
			t.Run(strings.ReplaceAll(where, "/", "_"), func(t *testing.T) {
				var with []string
				for _, id := range cm.with {
					wb, ok := byID[id]
					if !ok {
						t.Fatalf("%s: with: %s: no block has <!-- check: KIND; id: %s -->", where, id, id)
					}
					wcm, _, _ := parseCheck(wb.markers)
					with = append(with, inputFile(t, t.TempDir(), wcm.kind, wb))
				}
				problems, err := runCheck(t, cm.kind, b, with...)
				if err != nil {
					problems = append(problems, check.Problem{Severity: check.SeverityError, Message: err.Error()})
				}
				judge(t, where, cm, problems)
			})
		}
	}
	// An indented code block cannot carry a marker: Traefik keys in one, in
	// the README or a docs page, must move to a fenced, marked block.
	for _, p := range pages {
		if p.path != "README.md" && !strings.HasPrefix(p.path, "docs/") {
			continue
		}
		fenced := p.inFence()
		for i, l := range p.lines {
			if !fenced[i] && strings.HasPrefix(l, "    ") && !strings.HasPrefix(strings.TrimSpace(l), "<!--") && configKey.MatchString(l) {
				t.Errorf("%s:%d: Traefik keys in an indented code block: put them in a fenced block with a check marker", p.path, i+1)
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d snippets checked: the markers are not being found", checked)
	}
}

func langName(l string) string {
	if l == "" {
		return "plain"
	}
	return l
}

// judge holds a block's problems to its marker.
func judge(t *testing.T, where string, cm checkMarker, problems []check.Problem) {
	t.Helper()
	var errs, warns []string
	for _, p := range problems {
		if p.Severity == check.SeverityError {
			errs = append(errs, p.String())
		} else {
			warns = append(warns, p.String())
		}
	}
	contains := func(list []string) bool {
		return slices.ContainsFunc(list, func(s string) bool { return strings.Contains(s, cm.text) })
	}
	switch cm.want {
	case "":
		if len(errs)+len(warns) > 0 {
			t.Errorf("%s: tollgate check finds problems in this %s snippet (mark it `error: ...` or `warning: ...` if it is meant to show them):\n  %s", where, cm.kind, strings.Join(append(errs, warns...), "\n  "))
		}
	case "error":
		if !contains(errs) {
			t.Errorf("%s: the snippet should be refused with an error containing %q; tollgate check says:\n  %s", where, cm.text, strings.Join(append(errs, warns...), "\n  "))
		}
	case "warning":
		if len(errs) > 0 || !contains(warns) {
			t.Errorf("%s: the snippet should apply with a warning containing %q; tollgate check says:\n  %s", where, cm.text, strings.Join(append(errs, warns...), "\n  "))
		}
	}
}

// inputFile writes a block of a kind tollgate check reads as its input
// file, and returns the file's path.
func inputFile(t *testing.T, dir, kind string, b codeBlock) string {
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	switch kind {
	case "file":
		if b.lang == "toml" {
			return write("dynamic.toml", b.text)
		}
		return write("dynamic.yml", b.text)
	case "compose":
		return write("docker-compose.yml", b.text)
	case "labels":
		return write("container.labels", strings.Join(labelsOf(b.text), "\n")+"\n")
	case "consul":
		return write("service.json", b.text)
	case "kv":
		return write("store.kv", strings.Join(kvOf(b.text), "\n")+"\n")
	}
	t.Fatalf("a %s block cannot be checked with another", kind)
	return ""
}

// runCheck checks the block as the given kind, with the input files of
// other blocks, and returns the problems.
func runCheck(t *testing.T, kind string, b codeBlock, with ...string) ([]check.Problem, error) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	files := func(paths ...string) []check.Problem {
		return check.Files(append(with, paths...), check.DefaultOptions()).Problems
	}
	switch kind {
	case "file":
		ext := ".yml"
		if b.lang == "toml" {
			ext = ".toml"
		}
		return files(write("dynamic"+ext, b.text)), nil
	case "compose":
		return files(write("docker-compose.yml", b.text)), nil
	case "labels":
		ls := labelsOf(b.text)
		if len(ls) == 0 {
			return nil, fmt.Errorf("no key=value label in the block")
		}
		return files(write("container.labels", strings.Join(ls, "\n")+"\n")), nil
	case "tags":
		tags := tagsOf(b.text)
		if len(tags) == 0 {
			return nil, fmt.Errorf("no quoted tag in the block")
		}
		def, _ := json.Marshal(map[string]any{"service": map[string]any{"name": "docs", "address": "127.0.0.1", "port": 5432, "tags": tags}})
		return files(write("consul.json", string(def))), nil
	case "consul":
		return files(write("service.json", b.text)), nil
	case "kv":
		pairs := kvOf(b.text)
		if len(pairs) == 0 {
			return nil, fmt.Errorf("no `key value` pair or KV store command in the block")
		}
		return files(write("store.kv", strings.Join(pairs, "\n")+"\n")), nil
	case "crd":
		dyn, err := crdAsFile(b.text)
		if err != nil {
			return nil, err
		}
		if dyn == "" {
			return nil, nil
		}
		return files(write("crd.yml", dyn)), nil
	case "static":
		ext := ".yml"
		if b.lang == "toml" {
			ext = ".toml"
		}
		t.Chdir(dir) // the files and folders it names, relative, are made here
		return nil, checkStatic(write("tollgate"+ext, b.text))
	case "flags":
		return nil, checkFlags(b.text)
	}
	return nil, fmt.Errorf("unknown kind %q", kind)
}

// labelsOf reads labels from a compose `labels:` list or key=value lines.
func labelsOf(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if i := strings.Index(l, " #"); i >= 0 && !strings.Contains(l[:i], "`") {
			l = strings.TrimSpace(l[:i])
		}
		l = strings.TrimSpace(strings.TrimPrefix(l, "- "))
		l = strings.Trim(l, `"'`)
		if l == "" || strings.HasPrefix(l, "#") || !strings.Contains(l, "=") {
			continue
		}
		out = append(out, l)
	}
	return out
}

var quoted = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// tagsOf reads Consul tags: the quoted strings of the block that are not
// JSON keys.
func tagsOf(text string) []string {
	var out []string
	for _, m := range quoted.FindAllStringSubmatchIndex(text, -1) {
		if rest := strings.TrimSpace(text[m[1]:]); strings.HasPrefix(rest, ":") {
			continue // a key ("Tags":)
		}
		out = append(out, text[m[2]:m[3]])
	}
	return out
}

var kvCommand = regexp.MustCompile(`^(?:consul kv put|etcdctl put|redis-cli set|zkCli\.sh create)\s+(\S+)\s+(.+)$`)

// kvOf reads KV pairs: `key value` lines, or the commands that write them.
func kvOf(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if m := kvCommand.FindStringSubmatch(l); m != nil {
			out = append(out, strings.TrimPrefix(m[1], "/")+" "+strings.Trim(m[2], `'"`))
			continue
		}
		f := strings.Fields(l)
		if len(f) >= 2 && strings.HasPrefix(f[0], "traefik/") {
			out = append(out, l)
		}
	}
	return out
}

// crdAsFile decodes each manifest of a Kubernetes snippet strictly into the
// Kubernetes CRD provider's types (an unknown or misspelled field is an
// error), and returns what check can compile: the MiddlewareTCPs as file
// middlewares and each IngressRouteTCP route's rule as a file router.
func crdAsFile(text string) (string, error) {
	dyn := &config.TCPConfiguration{Middlewares: map[string]*config.TCPMiddleware{}, Routers: map[string]*config.TCPRouter{}, Services: map[string]*config.TCPService{}}
	strict := func(raw json.RawMessage, into any) error {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		return d.Decode(into)
	}
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var m struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec json.RawMessage `json:"spec"`
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return "", fmt.Errorf("manifest %d: %v", i+1, err)
		}
		if err := json.Unmarshal(j, &m); err != nil {
			return "", fmt.Errorf("manifest %d: %v", i+1, err)
		}
		if !strings.HasPrefix(m.APIVersion, "traefik.io/") {
			continue // a Service, Secret, Deployment...: Kubernetes' own
		}
		if m.APIVersion != "traefik.io/v1alpha1" {
			return "", fmt.Errorf("%s %s: apiVersion %s, want traefik.io/v1alpha1", m.Kind, m.Metadata.Name, m.APIVersion)
		}
		var err2 error
		switch m.Kind {
		case "MiddlewareTCP":
			var spec config.TCPMiddleware
			if err2 = strict(m.Spec, &spec); err2 == nil {
				dyn.Middlewares[m.Metadata.Name] = &spec
			}
		case "IngressRouteTCP":
			var spec kubernetescrd.IngressRouteTCPSpec
			if err2 = strict(m.Spec, &spec); err2 == nil {
				dyn.Services["k8s"] = &config.TCPService{LoadBalancer: &config.TCPServersLoadBalancer{Servers: []config.TCPServer{{Address: "127.0.0.1:1"}}}}
				for j, r := range spec.Routes {
					rt := &config.TCPRouter{Rule: r.Match, Service: "k8s", Priority: r.Priority, RuleSyntax: r.Syntax}
					if spec.TLS != nil {
						rt.TLS = &config.RouterTCPTLSConfig{Passthrough: spec.TLS.Passthrough}
					}
					dyn.Routers[fmt.Sprintf("%s-%d", m.Metadata.Name, j)] = rt
				}
			}
		case "ServersTransportTCP":
			err2 = strict(m.Spec, new(kubernetescrd.ServersTransportTCPSpec))
		case "TLSOption":
			err2 = strict(m.Spec, new(kubernetescrd.TLSOptionSpec))
		case "TLSStore":
			err2 = strict(m.Spec, new(kubernetescrd.TLSStoreSpec))
		default:
			return "", fmt.Errorf("kind %s: not one the Kubernetes CRD provider reads", m.Kind)
		}
		if err2 != nil {
			return "", fmt.Errorf("%s %s: spec: %v", m.Kind, m.Metadata.Name, err2)
		}
	}
	if len(dyn.Middlewares)+len(dyn.Routers) == 0 {
		return "", nil
	}
	out, err := yaml.Marshal(map[string]any{"tcp": dyn})
	return string(out), err
}

// checkStatic decodes a static configuration file as --configFile is read
// and validates it; a fragment without entry points gets one, and the file
// provider's file or folder, when relative, is made (empty) in the working
// directory.
func checkStatic(path string) error {
	cmd := config.NewCommand()
	if err := pfile.Decode(path, cmd); err != nil {
		return err
	}
	if len(cmd.EntryPoints) == 0 {
		cmd.EntryPoints = map[string]*config.EntryPoint{"docs": {Address: "127.0.0.1:1"}}
	}
	if p := cmd.Providers; p != nil && p.File != nil {
		if f := p.File.Filename; f != "" && !filepath.IsAbs(f) {
			_ = os.MkdirAll(filepath.Dir(f), 0o755)
			_ = os.WriteFile(f, nil, 0o644)
		}
		if d := p.File.Directory; d != "" && !filepath.IsAbs(d) {
			_ = os.MkdirAll(d, 0o755)
		}
	}
	return cmd.Validate()
}

// checkFlags decodes the flags of the tollgate command lines of a shell
// block, one flag at a time as tollgate does, then all together, and
// validates the result.
func checkFlags(text string) error {
	text = strings.ReplaceAll(text, "\\\n", " ")
	found := false
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		i := slices.IndexFunc(f, func(s string) bool { return s == "tollgate" || strings.HasSuffix(s, "/tollgate") })
		if j := slices.Index(f, "run"); i < 0 && j > 0 && f[j-1] == "go" && j+1 < len(f) && f[j+1] == "." {
			i = j + 1 // go run . [demo] --flags
		}
		if i < 0 {
			continue
		}
		if i+1 < len(f) && f[i+1] == "demo" {
			i++
		}
		var args []string
		for _, a := range f[i+1:] {
			if !strings.HasPrefix(a, "--") {
				break
			}
			args = append(args, strings.Trim(a, `'"`))
		}
		if len(args) == 0 {
			continue
		}
		found = true
		if err := cmdline.ValidateFlags(args); err != nil {
			return err
		}
	}
	if !found {
		return fmt.Errorf("no `tollgate --flag...` command line in the block")
	}
	return nil
}
