package expr

import (
	"strings"
	"testing"
)

func TestParseTree(t *testing.T) {
	n, err := Parse(" A(`x`) || !B(\"y\", `z`,) && (C() && D(`w`))")
	if err != nil {
		t.Fatal(err)
	}
	// || at 8, ! at 11; the && chain is flattened through the parentheses.
	if n.Kind != Or || n.Pos != 8 || len(n.Kids) != 2 {
		t.Fatalf("root = %+v, want Or at 8 with 2 kids", n)
	}
	a := n.Kids[0]
	if a.Kind != Call || a.Name != "A" || a.Pos != 1 || len(a.Args) != 1 || a.Args[0] != "x" {
		t.Errorf("first operand = %+v", a)
	}
	and := n.Kids[1]
	if and.Kind != And || len(and.Kids) != 3 {
		t.Fatalf("second operand = %+v, want a flattened And of 3", and)
	}
	if not := and.Kids[0]; not.Kind != Not || not.Pos != 11 || not.Kids[0].Name != "B" ||
		strings.Join(not.Kids[0].Args, "|") != "y|z" {
		t.Errorf("!B = %+v", not)
	}
	if c := and.Kids[1]; c.Name != "C" || c.Args != nil {
		t.Errorf("C() = %+v, want no args", c)
	}
	if got, want := Format(n), "A(`x`) || !B(`y`, `z`) && C() && D(`w`)"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
}

func TestFormatHandBuilt(t *testing.T) {
	call := func(name string) *Node { return &Node{Kind: Call, Name: name} }
	// Same-kind nesting that Parse would have flattened keeps its grouping.
	n := &Node{Kind: And, Kids: []*Node{call("A"), {Kind: And, Kids: []*Node{call("B"), call("C")}}}}
	if got, want := Format(n), "A() && (B() && C())"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
	n = &Node{Kind: Not, Kids: []*Node{{Kind: Or, Kids: []*Node{call("A"), call("B")}}}}
	if got, want := Format(n), "!(A() || B())"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
}

func TestQuote(t *testing.T) {
	for _, s := range []string{"", "a", "a`b", "a\rb", "\"", "\\", "é\x00\xff"} {
		q := Quote(s)
		n, err := Parse("F(" + q + ")")
		if err != nil {
			t.Errorf("Quote(%q) = %s does not parse: %v", s, q, err)
			continue
		}
		if n.Args[0] != s {
			t.Errorf("Quote(%q) = %s parses back as %q", s, q, n.Args[0])
		}
	}
}
