package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// referenceFile is Traefik's static configuration reference, as test data.
const referenceFile = "testdata/traefik-static-options-v3.7.txt"

// referenceOption is one line of referenceFile.
type referenceOption struct {
	line    int
	path    string // Traefik's spelling, <name> for a name the configuration chooses
	kind    string // section, bool, int, float, duration, string, list, structlist
	example string // a value tollgate accepts (structlist: "[0].field=value")
	with    []string
}

// readReference reads referenceFile: the Traefik version it is from, and
// its options.
func readReference(t testing.TB) (version string, opts []referenceOption) {
	t.Helper()
	f, err := os.Open(filepath.Join(itest.ModuleRoot(), referenceFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if version == "" {
			if len(cols) != 2 || cols[0] != "traefik" {
				t.Fatalf("%s:%d: want the Traefik version first (traefik<TAB>v3...), got %q", referenceFile, n, line)
			}
			version = cols[1]
			continue
		}
		if len(cols) < 3 || len(cols) > 4 {
			t.Fatalf("%s:%d: want option, kind, example [, with], got %q", referenceFile, n, line)
		}
		o := referenceOption{line: n, path: cols[0], kind: cols[1], example: cols[2]}
		if len(cols) == 4 {
			o.with = strings.Fields(cols[3])
		}
		opts = append(opts, o)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return version, opts
}

// assignment is one option set to one value, for one source.
type assignment struct {
	path  []string // segments, names chosen, list indexes kept (domains[0])
	kind  string
	value string
}

// concrete gives an option's <name>s a name: the entry point web and the
// resolver le of the base configuration, else name0.
func concrete(path string) string {
	segs := strings.Split(path, ".")
	for i, s := range segs {
		if s != "<name>" {
			continue
		}
		switch {
		case i > 0 && strings.EqualFold(segs[i-1], "entryPoints"):
			segs[i] = "web"
		case i > 0 && strings.EqualFold(segs[i-1], "certificatesResolvers"):
			segs[i] = "le"
		default:
			segs[i] = "name0"
		}
	}
	return strings.Join(segs, ".")
}

// assignments are what setting o takes: the base entry point, o, and the
// options its example needs.
func (o referenceOption) assignments(tmp string) []assignment {
	expand := func(s string) string { return strings.ReplaceAll(s, "${tmp}", tmp) }
	out := []assignment{{path: []string{"entryPoints", "web", "address"}, kind: "string", value: "127.0.0.1:0"}}
	p := concrete(o.path)
	if o.kind == "structlist" { // [0].main=example.com
		sub, v, _ := strings.Cut(o.example, "=")
		segs := strings.Split(p+sub, ".")
		out = append(out, assignment{path: segs, kind: "string", value: expand(v)})
	} else {
		out = append(out, assignment{path: strings.Split(p, "."), kind: o.kind, value: expand(o.example)})
	}
	for _, w := range o.with {
		k, v, _ := strings.Cut(w, "=")
		out = append(out, assignment{path: strings.Split(concrete(k), "."), kind: "string", value: expand(v)})
	}
	return out
}

func flagsOf(as []assignment) []string {
	var out []string
	for _, a := range as {
		out = append(out, "--"+strings.Join(a.path, ".")+"="+a.value)
	}
	return out
}

// envOf spells each assignment as a TRAEFIK_ variable (Traefik's
// env-ref: dots and list indexes as underscores).
func envOf(as []assignment) []string {
	var out []string
	for _, a := range as {
		name := strings.Join(a.path, "_")
		name = strings.NewReplacer("[", "_", "]", "").Replace(name)
		out = append(out, "TRAEFIK_"+strings.ToUpper(name)+"="+a.value)
	}
	return out
}

// tree nests the assignments as a file holds them: a block set by its key
// alone is an empty table, a list a list, a list of blocks a list of
// tables.
func tree(as []assignment) map[string]any {
	root := map[string]any{}
	for _, a := range as {
		m := root
		for i, seg := range a.path {
			name, idx, isList := seg, 0, false
			if j := strings.IndexByte(seg, '['); j > 0 {
				name, isList = seg[:j], true
				idx, _ = strconv.Atoi(strings.Trim(seg[j:], "[]"))
			}
			last := i == len(a.path)-1
			if isList {
				list, _ := m[name].([]map[string]any)
				for len(list) <= idx {
					list = append(list, map[string]any{})
				}
				m[name] = list
				m = list[idx]
				continue
			}
			if last {
				if _, ok := m[name].(map[string]any); !ok || a.kind != "section" {
					m[name] = fileValue(a.kind, a.value)
				}
				break
			}
			next, ok := m[name].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[name] = next
			}
			m = next
		}
	}
	return root
}

func fileValue(kind, v string) any {
	switch kind {
	case "section":
		return map[string]any{}
	case "bool":
		b, _ := strconv.ParseBool(v)
		return b
	case "int":
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	case "float":
		f, _ := strconv.ParseFloat(v, 64)
		return f
	case "list":
		var out []any
		for _, e := range strings.Split(v, ",") {
			if f, err := strconv.ParseFloat(e, 64); err == nil {
				out = append(out, f)
			} else {
				out = append(out, e)
			}
		}
		return out
	}
	return v
}

// outcome is how one start of `tollgate check --static` went.
type outcome struct {
	form string
	code int
	out  string
}

// classOf is the class outcome shows for the option (concrete, dotted):
// refused (an error naming it and saying it is not supported), ignored or
// not yet (a warning naming it and saying so), applied (neither); what is
// wrong otherwise.
func (o outcome) classOf(option string, named []string) (config.OptionClass, string) {
	low := strings.ToLower(o.out)
	if strings.Contains(low, "unknown option") || strings.Contains(low, "unknown flag") {
		return 0, "unknown option"
	}
	names := func(line string) bool {
		for _, n := range named {
			if strings.Contains(strings.ToLower(line), strings.ToLower(n)) {
				return true
			}
		}
		return false
	}
	if o.code != 0 {
		if strings.Contains(o.out, "not supported") && names(o.out) {
			return config.Refused, ""
		}
		return 0, "an error that does not say the option is not supported"
	}
	for _, line := range strings.Split(o.out, "\n") {
		if !strings.HasPrefix(line, "warning: ") || !names(line) {
			continue
		}
		switch {
		case strings.HasSuffix(line, "(not yet supported: ignored)"):
			return config.NotYet, ""
		case strings.HasSuffix(line, "(ignored)"):
			return config.Ignored, ""
		}
	}
	if !strings.Contains(o.out, "ok: the static configuration starts tollgate") {
		return 0, "no ok line"
	}
	return config.Applied, ""
}

// Every option of Traefik's static configuration reference (test data,
// with the Traefik version it is from) starts `tollgate check --static`,
// as a flag, as a TRAEFIK_ variable, and in a YAML and a TOML file, and
// lands in the class config.TraefikOptions gives it, which the docs table
// shows: applied (no warning about it), ignored or not yet (one warning
// naming it), refused (an error naming it, "not supported"). None is an
// unknown option.
func TestTraefikStaticOptions(t *testing.T) {
	version, opts := readReference(t)
	if !strings.HasPrefix(version, "v3.") || len(opts) < 500 {
		t.Fatalf("%s: Traefik %s, %d options: want v3's reference, over 500 options", referenceFile, version, len(opts))
	}
	bin := itest.Binary(t)
	tmp := t.TempDir()
	if err := os.WriteFile(filepath.Join(tmp, "dynamic.yml"), []byte("tcp: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	chain, _ := itest.SelfSignedPEM(t, "ca.test", false, time.Now().Add(time.Hour))
	if err := os.WriteFile(filepath.Join(tmp, "ca.pem"), chain, 0o644); err != nil {
		t.Fatal(err)
	}
	// Only TRAEFIK_ variables of the test's own: the sources do not mix.
	var baseEnv []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TRAEFIK_") && !strings.HasPrefix(kv, "TOLLGATE_") {
			baseEnv = append(baseEnv, kv)
		}
	}
	checkOne := func(o referenceOption, n int) []outcome {
		as := o.assignments(tmp)
		var outs []outcome
		runIt := func(form string, env []string, args ...string) {
			cmd := exec.Command(bin, append([]string{"check", "--static"}, args...)...)
			cmd.Env = append(append([]string(nil), baseEnv...), env...)
			cmd.Dir = tmp
			out, err := cmd.CombinedOutput()
			outs = append(outs, outcome{form: form, code: itest.ExitCode(err), out: string(out)})
		}
		runIt("flags", nil, flagsOf(as)...)
		runIt("env", envOf(as))
		var y, tm bytes.Buffer
		if err := yaml.NewEncoder(&y).Encode(tree(as)); err != nil {
			t.Errorf("%s: YAML: %v", o.path, err)
		}
		if err := toml.NewEncoder(&tm).Encode(tree(as)); err != nil {
			t.Errorf("%s: TOML: %v", o.path, err)
		}
		for _, f := range []struct{ ext, content string }{{"yml", y.String()}, {"toml", tm.String()}} {
			file := filepath.Join(tmp, fmt.Sprintf("static-%d.%s", n, f.ext))
			if err := os.WriteFile(file, []byte(f.content), 0o644); err != nil {
				t.Error(err)
				continue
			}
			runIt(f.ext+" file", nil, "--configFile="+file)
			outs[len(outs)-1].out += "\n--- " + file + ":\n" + f.content
		}
		return outs
	}

	start := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				o := opts[i]
				want := config.MatchOption(o.path).Class
				c := concrete(o.path)
				// The error or warning names the option: as written (the
				// flag, the dotted key), as the variable, or, in a file, the
				// key where the decoder stopped (a refused block's).
				named := []string{c, envOf([]assignment{{path: strings.Split(c, ".")}})[0]}
				named[1] = strings.TrimSuffix(named[1], "=")
				segs := strings.Split(c, ".")
				for k := 2; k < len(segs); k++ {
					named = append(named, strings.Join(segs[:k], ".")+":")
				}
				for _, out := range checkOne(o, i) {
					got, bad := out.classOf(c, named)
					if bad != "" || got != want {
						t.Errorf("%s:%d: %s (%s): want %s, got %s%s (exit %d):\n%s", referenceFile, o.line, o.path, out.form, want, got, map[bool]string{true: ", " + bad}[bad != ""], out.code, out.out)
					}
				}
			}
		}()
	}
	for i := range opts {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d options of Traefik %s's reference, 4 sources each, in %s", len(opts), version, time.Since(start).Round(time.Millisecond))
}
