package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/Masterminds/sprig/v3"
	"github.com/rs/zerolog"
	"github.com/tollgate-proxy/tollgate/config"
)

// A dynamic file is a Go template with sprig's functions, as in Traefik:
// env with default, ranges over until, normalize and split; the rendered
// YAML is what is decoded.
func TestTemplateRendersAsTraefik(t *testing.T) {
	t.Setenv("TG_TEST_DB_HOST", "10.0.0.7")
	content := `tcp:
  routers:
{{- range $i, $name := split "Orders DB,users-db" "," }}
    {{ normalize $name }}:
      rule: "HostSNI(` + "`*`" + `)"
      entryPoints: ["db{{ $i }}"]
      service: {{ normalize $name }}
{{- end }}
  services:
{{- range $i, $name := split "Orders DB,users-db" "," }}
    {{ normalize $name }}:
      loadBalancer:
        servers:
{{- range $port := until 2 }}
          - address: "{{ env "TG_TEST_DB_HOST" }}:{{ add 5432 $port }}"
{{- end }}
{{- end }}
  middlewares:
    limit:
      inFlightConn:
        amount: {{ env "TG_TEST_UNSET" | default "10" }}
`
	path := filepath.Join(t.TempDir(), "dynamic.yml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := DecodeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := d.TCP.Routers["Orders-DB"]
	if r == nil || r.Service != "Orders-DB" || !slices.Equal(r.EntryPoints, []string{"db0"}) {
		t.Fatalf("router Orders-DB: %+v (routers %v)", r, d.TCP.Routers)
	}
	s := d.TCP.Services["users-db"]
	if s == nil || len(s.LoadBalancer.Servers) != 2 || s.LoadBalancer.Servers[1].Address != "10.0.0.7:5433" {
		t.Fatalf("service users-db: %+v", s)
	}
	if m := d.TCP.Middlewares["limit"]; m == nil || m.InFlightConn.Amount != 10 {
		t.Fatalf("middleware limit: %+v", m)
	}

	// A file without "{{" is not a template: returned as it is.
	plain := "tcp:\n  routers: {}\n# { not a template }\n"
	if out, err := Render(plain, "p.yml"); err != nil || out != plain {
		t.Errorf("Render(plain) = %q, %v", out, err)
	}
}

// The README's template example renders and decodes: a router and a
// service per name, the address from the environment or its default.
func TestReadmeTemplateExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- example: template -->\n```yaml\n")
	block, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no template YAML block")
	}
	for _, tc := range []struct{ env, want string }{{"", "10.0.0.5:5432"}, {"db.internal", "db.internal:5432"}} {
		t.Setenv("DB_HOST", tc.env)
		d, _, err := Decode(block, ".yml", "README.md")
		if err != nil {
			t.Fatal(err)
		}
		for i, db := range []string{"orders", "users"} {
			r, s := d.TCP.Routers[db], d.TCP.Services[db]
			if r == nil || r.Service != db || !slices.Equal(r.EntryPoints, []string{fmt.Sprintf("db%d", i)}) || s == nil || s.LoadBalancer.Servers[0].Address != tc.want {
				t.Errorf("DB_HOST=%q: router %s %+v, service %+v; want entry point db%d and %s", tc.env, db, r, s, i, tc.want)
			}
		}
	}
}

// A template that does not parse or execute is an error naming the file
// and the template's line; a rendered text that does not decode says its
// lines are the rendered text's.
func TestTemplateErrorsArePlaced(t *testing.T) {
	for _, tc := range []struct {
		content string
		line    int
		msg     string
	}{
		{"tcp:\n  routers:\n    a: {{ nope }}\n", 3, `template: function "nope" not defined`},
		{"tcp:\n\n  x: {{ if }}\n", 3, "template: missing value for if"},
		{"tcp:\n  a: {{ fail \"no backend\" }}\n", 2, `template: at <fail "no backend">: error calling fail: no backend`},
		{"tcp:\n  a: {{ until 1000000000 }}\n", 2, "a list of over 100000 integers"},
		{"tcp:\n  a: {{ repeat 100000000 \"0123456789\" }}\n", 2, "over 16777216 bytes"},
		{"tcp:\n  a: {{ indent 100000000 \"x\" }}\n", 2, "over 1024 spaces"},
		{"tcp:\n  a: {{ randAlpha 1000000000 }}\n", 2, "randAlpha 1000000000: over"},
		{"{{ range $i := until 100000 }}{{ repeat 200 \"x\" }}{{ end }}\n", 0, "the template renders over 16777216 bytes"},
	} {
		_, _, err := Decode(tc.content, ".yml", "t.yml")
		var de *DecodeError
		if !errors.As(err, &de) || de.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: %v (line %d), want line %d and %q", tc.content, err, lineOf(de), tc.line, tc.msg)
		}
	}
	_, _, err := Decode("tcp:\n{{ \"  \" }}routers:\n    a:\n      priority: high\n", ".yml", "t.yml")
	if err == nil || !strings.Contains(err.Error(), `file "t.yml", line 4 of its rendered template: tcp.routers.a.priority`) {
		t.Errorf("a rendered text that does not decode: %v", err)
	}
}

func lineOf(de *DecodeError) int {
	if de == nil {
		return -1
	}
	return de.Line
}

// The bounded until, untilStep and seq give sprig's results.
func TestBoundedListsAreSprigs(t *testing.T) {
	sp := sprig.TxtFuncMap()
	spUntil, spStep, spSeq := sp["until"].(func(int) []int), sp["untilStep"].(func(int, int, int) []int), sp["seq"].(func(...int) string)
	for a := -6; a <= 6; a++ {
		if got, _ := funcs["until"].(func(int) ([]int, error))(a); fmt.Sprint(got) != fmt.Sprint(spUntil(a)) {
			t.Errorf("until %d = %v, sprig %v", a, got, spUntil(a))
		}
		for b := -6; b <= 6; b++ {
			for step := -3; step <= 3; step++ {
				if got, _ := untilStep(a, b, step); fmt.Sprint(got) != fmt.Sprint(spStep(a, b, step)) {
					t.Errorf("untilStep %d %d %d = %v, sprig %v", a, b, step, got, spStep(a, b, step))
				}
				if got, _ := seq(a, step, b); got != spSeq(a, step, b) {
					t.Errorf("seq %d %d %d = %q, sprig %q", a, step, b, got, spSeq(a, step, b))
				}
			}
			if got, _ := seq(a, b); got != spSeq(a, b) {
				t.Errorf("seq %d %d = %q, sprig %q", a, b, got, spSeq(a, b))
			}
		}
		if got, _ := seq(a); got != spSeq(a) {
			t.Errorf("seq %d = %q, sprig %q", a, got, spSeq(a))
		}
	}
}

// FuzzRender: whatever a file holds, rendering it returns text within
// maxRendered or an error, never a panic. Inputs with range (whose loops
// are bounded in size, not in time: nested ranges over bounded lists can
// run for minutes, an operator's own doing) or getHostByName (a DNS lookup)
// are skipped, so that each input runs in bounded time.
func FuzzRender(f *testing.F) {
	f.Add("tcp:\n  a: {{ env \"HOME\" | default \"x\" }}\n")
	f.Add("{{ until 5 }}{{ seq 1 2 9 }}{{ untilStep 0 10 3 }}{{ repeat 3 \"ab\" }}")
	f.Add("{{ define \"a\" }}{{ template \"a\" }}{{ end }}{{ template \"a\" }}")
	f.Add("{{ normalize \"a b\" }}{{ split \"a,b\" \",\" }}{{ indent 4 \"x\\ny\" }}")
	f.Fuzz(func(t *testing.T, content string) {
		if strings.Contains(content, "range") || strings.Contains(content, "getHostByName") {
			return
		}
		out, err := Render(content, "f.yml")
		if err == nil && len(out) > maxRendered {
			t.Fatalf("rendered %d bytes", len(out))
		}
		var de *DecodeError
		if err != nil && !errors.As(err, &de) {
			t.Fatalf("error %T %v, want a *DecodeError", err, err)
		}
	})
}

// debugLogGeneratedTemplate logs what a template renders, at debug level;
// a file that is no template is not logged.
func TestDebugLogGeneratedTemplate(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"a.yml": "tcp:\n  services:\n    s{{ add 1 1 }}:\n      loadBalancer:\n        servers: [{address: \"127.0.0.1:1\"}]\n",
		"b.yml": "tcp:\n  services:\n    plain:\n      loadBalancer:\n        servers: [{address: \"127.0.0.1:2\"}]\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs strings.Builder
	p := New(&config.FileProvider{Directory: dir, DebugLogGeneratedTemplate: true}, zerolog.New(&logs).Level(zerolog.DebugLevel))
	m := p.Load()
	if m.Err != nil || m.Configuration.TCP.Services["s2"] == nil || m.Configuration.TCP.Services["plain"] == nil {
		t.Fatalf("load: %v %+v", m.Err, m.Configuration)
	}
	if got := logs.String(); strings.Count(got, "Template content:") != 1 || !strings.Contains(got, `s2:`) || !strings.Contains(got, "a.yml") {
		t.Errorf("logs: %s; want a.yml's rendered text alone", got)
	}
}
