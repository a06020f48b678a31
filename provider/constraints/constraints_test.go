package constraints

import (
	"strings"
	"testing"
)

func TestMatchLabels(t *testing.T) {
	labels := map[string]string{
		"foo":          "bar",
		"traefik.tags": "public,fast",
		"env":          "prod",
		"empty":        "",
	}
	tests := []struct {
		expr string
		want bool
	}{
		{"", true},
		{"  \t", true},
		{"Label(`foo`, `bar`)", true},
		{"Label(`foo`, `baz`)", false},
		{"Label(`Foo`, `bar`)", false}, // keys are case-sensitive
		{"Label(`foo`, `BAR`)", false}, // values too
		{"Label(`missing`, ``)", true}, // a missing label reads as "" (as in Traefik)
		{"Label(`empty`, ``)", true},
		{"Label(`missing`, `x`)", false},
		{"!Label(`foo`, `bar`)", false},
		{"Label(`foo`, `bar`) && Label(`env`, `prod`)", true},
		{"Label(`foo`, `bar`) && Label(`env`, `dev`)", false},
		{"Label(`foo`, `nope`) || Label(`env`, `prod`)", true},
		{"Label(`foo`, `nope`) || Label(`env`, `dev`) && Label(`foo`, `bar`)", false},
		{"(Label(`foo`, `nope`) || Label(`env`, `prod`)) && !Label(`foo`, `baz`)", true},
		{"LabelRegex(`foo`, `a`)", true}, // unanchored
		{"LabelRegex(`foo`, `^a`)", false},
		{"LabelRegex(`traefik.tags`, `(^|,)public(,|$)`)", true},
		{"LabelRegex(`missing`, `^$`)", true},
		{"LabelRegex(`missing`, `.+`)", false},
		{`Label("foo", "bar",)`, true},
		{"!!Label(`foo`, `bar`)", true},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			e, err := ParseLabels(tt.expr)
			if err != nil {
				t.Fatalf("ParseLabels(%q): %v", tt.expr, err)
			}
			if got := e.MatchLabels(labels); got != tt.want {
				t.Errorf("MatchLabels = %v, want %v", got, tt.want)
			}
			e2, err := ParseLabels(e.String())
			if err != nil {
				t.Fatalf("ParseLabels(String() = %q): %v", e.String(), err)
			}
			if e2.String() != e.String() || e2.MatchLabels(labels) != tt.want {
				t.Errorf("String() %q does not round-trip to an equivalent expression", e.String())
			}
		})
	}
}

func TestMatchTags(t *testing.T) {
	tags := []string{"public", "traefik.enable=true", "dc-eu1"}
	tests := []struct {
		expr string
		want bool
	}{
		{"", true},
		{"Tag(`public`)", true},
		{"Tag(`Public`)", false},
		{"Tag(`pub`)", false},
		{"!Tag(`private`)", true},
		{"Tag(`public`) && Tag(`dc-eu1`)", true},
		{"Tag(`public`) && Tag(`dc-us1`)", false},
		{"Tag(`private`) || Tag(`dc-eu1`)", true},
		{"TagRegex(`^dc-eu`)", true},
		{"TagRegex(`eu`)", true}, // unanchored
		{"TagRegex(`^eu`)", false},
		{"TagRegex(`^traefik\\.enable=`) && !TagRegex(`^dc-us`)", true},
		{"(Tag(`x`) || Tag(`y`)) && Tag(`public`)", false},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			e, err := ParseTags(tt.expr)
			if err != nil {
				t.Fatalf("ParseTags(%q): %v", tt.expr, err)
			}
			if got := e.MatchTags(tags); got != tt.want {
				t.Errorf("MatchTags = %v, want %v", got, tt.want)
			}
			e2, err := ParseTags(e.String())
			if err != nil {
				t.Fatalf("ParseTags(String() = %q): %v", e.String(), err)
			}
			if e2.String() != e.String() || e2.MatchTags(tags) != tt.want {
				t.Errorf("String() %q does not round-trip to an equivalent expression", e.String())
			}
		})
	}
}

func TestNoTags(t *testing.T) {
	for expr, want := range map[string]bool{
		"TagRegex(`.*`)": false, // no tag to match, as in Traefik
		"!Tag(`a`)":      true,
	} {
		e, err := ParseTags(expr)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.MatchTags(nil); got != want {
			t.Errorf("%s: MatchTags(nil) = %v, want %v", expr, got, want)
		}
	}
}

func TestNilAndZeroMatchEverything(t *testing.T) {
	var e *Expr
	if !e.MatchLabels(nil) || !e.MatchTags(nil) || e.String() != "" {
		t.Error("a nil *Expr must match everything")
	}
	var z Expr
	if !z.MatchLabels(map[string]string{"a": "b"}) || !z.MatchTags([]string{"a"}) {
		t.Error("the zero Expr must match everything")
	}
	for _, s := range []string{"", " \n"} {
		if e, err := ParseLabels(s); e != nil || err != nil {
			t.Errorf("ParseLabels(%q) = %v, %v, want nil, nil", s, e, err)
		}
		if e, err := ParseTags(s); e != nil || err != nil {
			t.Errorf("ParseTags(%q) = %v, %v, want nil, nil", s, e, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		parse func(string) (*Expr, error)
		expr  string
		want  []string
	}{
		{"tag in labels", ParseLabels, "Tag(`a`)", []string{"constraints \"Tag(`a`)\": unknown matcher \"Tag\" at 0: Docker label constraints take Label or LabelRegex"}},
		{"label in tags", ParseTags, "Tag(`a`) && Label(`a`, `b`)", []string{`unknown matcher "Label" at 12: Consul tag constraints take Tag or TagRegex`}},
		{"lower-case name", ParseLabels, "label(`a`, `b`)", []string{`unknown matcher "label" at 0`}},
		{"label one arg", ParseLabels, "Label(`a`)", []string{"Label at 0: takes 2 argument(s), got 1: write Label(`key`, `value`)"}},
		{"tag two args", ParseTags, "Tag(`a`, `b`)", []string{"Tag at 0: takes 1 argument(s), got 2"}},
		{"bad label regexp", ParseLabels, "LabelRegex(`a`, `[`)", []string{`LabelRegex at 0: compiling "["`}},
		{"bad tag regexp", ParseTags, "!TagRegex(`(`)", []string{`TagRegex at 1: compiling "("`}},
		{"dangling", ParseTags, "Tag(`a`) ||", []string{"unexpected end of input at 9"}},
		{"unbalanced", ParseTags, "(Tag(`a`)", []string{`missing ")"`}},
		{"single quotes", ParseLabels, "Label('a', 'b')", []string{"single quote"}},
		{"garbage", ParseTags, "Tag(`a`) and Tag(`b`)", []string{`unexpected "and" at 9`}},
		{"too deep", ParseTags, strings.Repeat("(", 100) + "Tag(`a`)" + strings.Repeat(")", 100), []string{"nested deeper than"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := tt.parse(tt.expr)
			if err == nil {
				t.Fatalf("parse(%q) = %v, want an error", tt.expr, e)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("parse(%q) error\n  %s\nwant it to contain\n  %s", tt.expr, err, w)
				}
			}
		})
	}
}
