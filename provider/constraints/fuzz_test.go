package constraints

import (
	"strings"
	"testing"
)

var (
	fuzzLabels = []map[string]string{
		nil,
		{"a": "b", "traefik.enable": "true", "env": ""},
		{"A": "B", "x": "a,b,c"},
	}
	fuzzTags = [][]string{
		nil,
		{"a", "traefik.enable=true"},
		{"B", "", "dc-eu1"},
	}
)

// checkRoundTrip asserts what every parse must satisfy: an error names the
// expression, and String() parses back to an expression that prints the same
// and matches the same inputs.
func checkRoundTrip(t *testing.T, parse func(string) (*Expr, error), s string) {
	e, err := parse(s)
	if err != nil {
		if e != nil {
			t.Fatalf("parse(%q) returned both an Expr and %v", s, err)
		}
		if !strings.HasPrefix(err.Error(), "constraints ") {
			t.Fatalf("parse(%q) error %q does not name the expression", s, err)
		}
		return
	}
	canon := e.String()
	e2, err := parse(canon)
	if err != nil {
		t.Fatalf("parse(%q) ok, but parse(String() = %q): %v", s, canon, err)
	}
	if got := e2.String(); got != canon {
		t.Fatalf("String() does not round-trip: %q -> %q -> %q", s, canon, got)
	}
	for _, l := range fuzzLabels {
		if e.MatchLabels(l) != e2.MatchLabels(l) {
			t.Fatalf("%q and %q disagree on labels %v", s, canon, l)
		}
	}
	for _, tg := range fuzzTags {
		if e.MatchTags(tg) != e2.MatchTags(tg) {
			t.Fatalf("%q and %q disagree on tags %q", s, canon, tg)
		}
	}
}

func FuzzParseLabels(f *testing.F) {
	for _, s := range []string{
		"Label(`a`, `b`)",
		"LabelRegex(`x`, `(^|,)b(,|$)`) && !Label(`traefik.enable`, `false`)",
		`(Label("a", "b",) || Label("A", "B")) && LabelRegex("env", "^$")`,
		"Label(`a`) ||",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkRoundTrip(t, ParseLabels, s) })
}

func FuzzParseTags(f *testing.F) {
	for _, s := range []string{
		"Tag(`a`)",
		"TagRegex(`^dc-`) && !Tag(`B`)",
		`(Tag("a",) || Tag("")) && !!TagRegex("enable=true$")`,
		"Tag(`a`, `b`)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkRoundTrip(t, ParseTags, s) })
}
