package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"github.com/rs/zerolog"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
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

// The template example of docs/reference/providers/file.md renders and
// decodes: a router and a service per name, the address from the environment
// or its default.
func TestReadmeTemplateExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference", "providers", "file.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- example: template -->\n```yaml\n")
	block, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("docs/reference/providers/file.md has no template YAML block")
	}
	for _, tc := range []struct{ env, want string }{{"", "10.0.0.5:5432"}, {"db.internal", "db.internal:5432"}} {
		t.Setenv("DB_HOST", tc.env)
		d, _, err := Decode(block, ".yml", "file.md")
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
		// Over the output bound in 840 steps of 20,000 bytes: 84,000 of 200
		// took over the 10 s time bound under the race detector.
		{"{{ range $i := until 1000 }}{{ repeat 20000 \"x\" }}{{ end }}\n", 0, "the template renders over 16777216 bytes"},
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
// maxRendered or an error, never a panic, and soon: loops, recursion and
// whatever its functions build are within the render's budget (budget.go).
// Inputs with getHostByName (a DNS lookup) are skipped.
func FuzzRender(f *testing.F) {
	f.Add("tcp:\n  a: {{ env \"HOME\" | default \"x\" }}\n")
	f.Add("{{ until 5 }}{{ seq 1 2 9 }}{{ untilStep 0 10 3 }}{{ repeat 3 \"ab\" }}")
	f.Add("{{ define \"a\" }}{{ template \"a\" }}{{ end }}{{ template \"a\" }}")
	f.Add("{{ normalize \"a b\" }}{{ split \"a,b\" \",\" }}{{ indent 4 \"x\\ny\" }}")
	f.Add(`{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}`)
	f.Add(`{{ $s := "0123456789" }}{{ range until 28 }}{{ $s = print $s $s }}{{ end }}`)
	f.Add(`{{ $m := dict }}{{ $_ := set $m "a" $m }}{{ $m }}`)
	f.Fuzz(func(t *testing.T, content string) {
		if strings.Contains(content, "getHostByName") {
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

// What the budget's errors say.
const (
	overSteps  = "rendering stopped: more than 1000000 steps"
	overValues = "rendering stopped: more than 67108864 bytes of values made or read by its functions"
	overDepth  = "rendering stopped: more than 1000 levels of nesting in one value (or a value that holds itself)"
	overOutput = "the template renders over 16777216 bytes"
	// A slow machine (the race detector makes a step ten times slower)
	// can meet the deadline before the steps.
	overTime = "rendering stopped: more than 10 seconds of rendering"
)

// hostile are templates that, unbounded, take the process's memory or a
// core for good, and the bound that stops each.
var hostile = []struct{ name, content, want string }{
	// Strings doubled by functions: text/template's own, sprig's.
	{"print", `{{ $s := "0123456789" }}{{ range until 28 }}{{ $s = print $s $s }}{{ end }}{{ len $s }}`, overValues},
	{"printf", `{{ $s := "0123456789" }}{{ range until 28 }}{{ $s = printf "%s%s" $s $s }}{{ end }}`, overValues},
	{"println", `{{ $s := "0123456789" }}{{ range until 28 }}{{ $s = println $s $s }}{{ end }}`, overValues},
	{"html", `{{ $s := "<>" }}{{ range until 28 }}{{ $s = html $s $s }}{{ end }}`, overValues},
	{"js", `{{ $s := "<>" }}{{ range until 28 }}{{ $s = js $s $s }}{{ end }}`, overValues},
	{"urlquery", `{{ $s := "a b" }}{{ range until 28 }}{{ $s = urlquery $s $s }}{{ end }}`, overValues},
	{"cat", `{{ $s := "0123456789" }}{{ range until 40 }}{{ $s = cat $s $s }}{{ end }}`, overValues},
	{"replace", `{{ $s := "a" }}{{ range until 40 }}{{ $s = replace "a" "aa" $s }}{{ end }}`, overValues},
	{"replace empty", `{{ $s := repeat 100000 "a" }}{{ replace "" $s $s }}`, overValues},
	{"nospace over a big string", `{{ $s := repeat 1000000 "a b" }}{{ range until 100000 }}{{ $x := nospace $s }}{{ end }}`, overValues},
	{"toString", `{{ $s := "ab" }}{{ range until 40 }}{{ $s = toString (list $s $s) }}{{ end }}`, overValues},
	{"indent", `{{ indent 1024 (repeat 1000000 "\n") }}`, overValues},
	{"join", `{{ join (repeat 1000000 "x") (until 100000) }}`, overValues},
	{"printf width", `{{ printf (repeat 100000 "%[1]999999d") 1 }}`, overValues},
	{"regexReplaceAll", `{{ $s := "ab" }}{{ range until 40 }}{{ $s = regexReplaceAll "a" $s "${0}a" }}{{ end }}`, overSteps},
	{"regexSplit", `{{ $x := regexSplit "" (repeat 10000000 ",") -1 }}`, overSteps},
	{"contains over a big string", `{{ $s := repeat 8000000 "x" }}{{ range until 100000 }}{{ if contains "y" $s }}{{ end }}{{ end }}`, overValues},
	{"a method over a big string", `{{ $l := repeat 1000000 "2006" }}{{ range until 100000 }}{{ $x := now.Format $l }}{{ end }}`, overValues},
	{"a big key looked up", `{{ $k := repeat 8000000 "k" }}{{ $d := dict "a" 1 "b" 2 "c" 3 "d" 4 "e" 5 "f" 6 "g" 7 "h" 8 "i" 9 "j" 10 }}{{ range until 100000 }}{{ if hasKey $d $k }}{{ end }}{{ $x := index $d $k }}{{ end }}`, overValues},
	{"ranges over a map of big keys", `{{ $d := dict (repeat 8000000 "k") 1 (print (repeat 8000000 "k") "l") 2 }}{{ range until 100000 }}{{ range $d }}{{ end }}{{ end }}`, overValues},
	{"eq over big strings", `{{ $s := repeat 8000000 "x" }}{{ $t := print $s }}{{ range until 100000 }}{{ if eq $s $t }}{{ end }}{{ end }}`, overValues},
	// Lists grown by sprig's list functions.
	{"list", `{{ $l := list 1 }}{{ range until 60 }}{{ $l = list $l $l }}{{ end }}{{ toJson $l }}`, overValues},
	{"list printed", `{{ $l := list 1 }}{{ range until 60 }}{{ $l = list $l $l }}{{ end }}{{ $l }}`, overOutput},
	{"append", `{{ $l := list }}{{ range until 100000 }}{{ $l = append $l $l }}{{ end }}`, overValues},
	{"concat", `{{ $l := list 1 }}{{ range until 60 }}{{ $l = concat $l $l }}{{ end }}`, overValues},
	{"deepCopy", `{{ $l := list 1 }}{{ range until 60 }}{{ $l = list $l $l }}{{ end }}{{ $c := deepCopy $l }}`, overValues},
	{"uniq", `{{ $l := uniq (until 100000) }}`, overSteps},
	{"toPrettyJson", `{{ $l := list }}{{ range until 999 }}{{ $l = list $l }}{{ end }}{{ toPrettyJson $l }}`, overValues},
	// Slow whatever their size: four keys (of 4096 bits, a second each for
	// RSA) are one too many.
	{"key generation", `{{ range until 4 }}{{ $k := genPrivateKey "ecdsa" }}{{ end }}`, overSteps},
	// Values that hold themselves.
	{"a map that holds itself, printed by a function", `{{ $m := dict }}{{ $_ := set $m "a" $m }}{{ print $m }}`, overDepth},
	{"a map that holds itself, printed", `{{ $m := dict }}{{ $_ := set $m "a" $m }}{{ $m }}`, overDepth},
	{"a map that holds itself, a key", `{{ $m := dict }}{{ $_ := set $m "a" $m }}{{ dict $m 1 }}`, overDepth},
	// Loops with no function in them, or one.
	{"nested range until", `{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}`, overSteps},
	{"range over a held list", `{{ $l := until 100000 }}{{ range $l }}{{ range $l }}{{ $x := index $l 5 }}{{ end }}{{ end }}`, overSteps},
	{"range over an int", `{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}`, overSteps},
	{"range over a big int, once", `{{ range 1000000000000 }}{{ break }}{{ end }}`, overSteps},
	{"conditions", `{{ range until 100000 }}{{ if true }}{{ end }}{{ if 1 }}{{ end }}{{ with 2 }}{{ end }}{{ if true }}{{ end }}{{ if true }}{{ end }}{{ if true }}{{ end }}{{ if true }}{{ end }}{{ if true }}{{ end }}{{ if true }}{{ end }}{{ if true }}{{ end }}{{ end }}`, overSteps},
	{"recursion", `{{ define "a" }}{{ with .X }}{{ template "a" . }}{{ template "a" . }}{{ end }}{{ end }}{{ $d := dict }}{{ range until 40 }}{{ $d = dict "X" $d }}{{ end }}{{ template "a" $d }}`, overSteps},
}

// Templates that would take the process's memory or a core for good are
// stopped by their render's budget, whatever functions they use: an error
// naming the file, its line and the bound, within a bounded amount of
// memory. That the test ends is the proof of the time.
func TestTemplateBudget(t *testing.T) {
	const name = "/x/y.yml"
	for _, tc := range hostile {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			out, err := Render(tc.content, name)
			runtime.ReadMemStats(&after)
			var de *DecodeError
			said := err != nil && (strings.Contains(err.Error(), tc.want) || tc.want == overSteps && strings.Contains(err.Error(), overTime))
			if !errors.As(err, &de) || de.File != name || de.Line != 1 && tc.want != overOutput || !said {
				t.Fatalf("rendered %d bytes, error %v; want a DecodeError on %s, line 1, saying %q", len(out), err, name, tc.want)
			}
			if !strings.HasPrefix(err.Error(), `file "/x/y.yml"`) {
				t.Errorf("error %q does not start with the file", err)
			}
			// Everything allocated, not only what was live at once.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 512<<20 && !raceEnabled {
				t.Errorf("allocated %d MiB", alloc>>20)
			}
		})
	}
}

// The budget's hooks and wrappers change nothing of what a template that
// keeps within it renders: text/template's own functions, missing values,
// template calls with and without data, ranges over lists, maps and
// integers, break, else, comparisons of constants and variables.
func TestBudgetRendersAsTextTemplate(t *testing.T) {
	for _, content := range []string{
		`{{ print 1 2.5 "a" nil true }}|{{ printf "%05.1f %q %v" 3.14159 "x" (list 1 "b") }}|{{ println "a" 1 }}`,
		`{{ html "<a&b>" }}|{{ js "'x'" }}|{{ urlquery "a b&c" }}|{{ len "abc" }}|{{ index (list 1 2 3) 1 }}|{{ slice (list 1 2 3) 1 }}`,
		`{{ .X }}|{{ $d := dict "a" 1 }}{{ index $d "b" }}|{{ $d.a }}|{{ $d.b }}|{{ if index $d "b" }}yes{{ else }}no{{ end }}`,
		`{{ define "t" }}[{{ . }}]{{ end }}{{ template "t" }}{{ template "t" 5 }}{{ template "t" (list 1 2) }}{{ block "b" "x" }}<{{ . }}>{{ end }}`,
		`{{ range $i, $v := list "a" "b" }}{{ $i }}={{ $v }};{{ end }}{{ range $k, $v := dict "z" 1 "a" 2 }}{{ $k }}={{ $v }};{{ end }}{{ range 3 }}{{ . }}{{ end }}{{ range $i := 3 }}{{ $i }}{{ end }}`,
		`{{ range until 10 }}{{ if eq . 3 }}{{ continue }}{{ end }}{{ if gt . 6 }}{{ break }}{{ end }}{{ . }}{{ end }}{{ range list }}x{{ else }}empty{{ end }}{{ range 0 }}x{{ else }}zero{{ end }}`,
		`{{ $a := "x" }}{{ $b := "x" }}{{ eq $a $b }} {{ eq $a "y" "x" }} {{ ne 1 2 }} {{ lt 1.5 2.5 }} {{ eq 1 (len "a") }} {{ le "a" "b" }} {{ ge (len "ab") 2 }} {{ and 1 0 }} {{ or 0 "" "z" }} {{ not true }}`,
		`{{ with $x := "v" }}{{ $x }}{{ end }}{{ with "" }}a{{ else with "b" }}{{ . }}{{ end }}{{ $x := 1 }}{{ $x = add $x 1 }}{{ $x }}`,
		`{{ add 1 2 }} {{ add1 1.5 }} {{ mul 2 3 4 }} {{ div 7 2 }} {{ round 2.567 2 }} {{ max 1 5 3 }} {{ int "42" }} {{ float64 "1.5" }}`,
		`{{ upper "abc" | repeat 2 }} {{ "a,b" | splitList "," | join "-" }} {{ list 3 1 2 | sortAlpha }} {{ dict "b" 2 "a" 1 | toJson }} {{ (semver "1.2.3").Major }}`,
		`{{ $l := list 1 2 }}{{ $l = append $l 3 }}{{ $l }} {{ first $l }} {{ last $l }} {{ rest $l }} {{ has 2 $l }} {{ uniq (list 1 1 2) }} {{ without $l 1 }}`,
		`{{ default "d" "" }} {{ empty "" }} {{ coalesce "" "c" }} {{ ternary "y" "n" true }} {{ typeOf 1 }} {{ kindOf (list) }} {{ quote "q" 1 }} {{ squote "s" }}`,
		`{{ indent 2 "a\nb" }}|{{ nindent 2 "a" }}|{{ replace "a" "b" "aXa" }}|{{ wrapWith 2 "|" "abcd" }}|{{ regexReplaceAll "a(x*)b" "-ab-axxb-" "${1}W" }}|{{ trunc 2 "abc" }}`,
		`{{ "x" | printf "%s-%s" "y" }} {{ 1 | eq 1 }} {{ (list 1 2) | len }} {{ $.X }} {{ $ }}`,
		`{{ $t := toDate "2006-01-02" "2024-03-05" }}{{ $t.Format "Jan 2" }} {{ ($t.AddDate 0 1 1).Format "2006-01-02" }} {{ (toDate "2006-01-02" "2024-01-01").Year }} {{ $l := "2006" }}{{ $t.Format $l }} {{ (semver "1.2.3").Compare (semver "1.3.0") }}`,
	} {
		tmpl := template.Must(template.New("main").Funcs(funcs).Parse(content))
		var want strings.Builder
		wantErr := tmpl.Execute(&want, nil)
		got, err := Render(content, "main")
		if wantErr != nil || err != nil || got != want.String() {
			t.Errorf("%s\n  rendered %q (error %v)\n  text/template %q (error %v)", content, got, err, want.String(), wantErr)
		}
	}
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
	p := mustNew(t, &config.FileProvider{Directory: dir, DebugLogGeneratedTemplate: true}, provider.Options{Log: zerolog.New(&logs).Level(zerolog.DebugLevel)})
	m := p.Load()
	if m.Err != nil || m.Configuration.TCP.Services["s2"] == nil || m.Configuration.TCP.Services["plain"] == nil {
		t.Fatalf("load: %v %+v", m.Err, m.Configuration)
	}
	if got := logs.String(); strings.Count(got, "Template content:") != 1 || !strings.Contains(got, `s2:`) || !strings.Contains(got, "a.yml") {
		t.Errorf("logs: %s; want a.yml's rendered text alone", got)
	}
}
