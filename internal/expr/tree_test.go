package expr

import (
	"errors"
	"strings"
	"testing"
)

// A compiled tree evaluates &&, || and ! as Go does, with the caller's
// leaves, short-circuiting; a leaf's error stops the compile.
func TestTreeCompileAndEval(t *testing.T) {
	leaf := func(n *Node) (string, error) {
		if n.Name == "Bad" {
			return "", errors.New("bad leaf")
		}
		return n.Args[0], nil
	}
	for _, tc := range []struct {
		src  string
		true map[string]bool
		want bool
		asks string // the leaves asked, in order
	}{
		{"L(`a`)", map[string]bool{"a": true}, true, "a"},
		{"L(`a`) && L(`b`)", map[string]bool{"a": true}, false, "ab"},
		{"L(`a`) && L(`b`)", map[string]bool{}, false, "a"},
		{"L(`a`) || L(`b`)", map[string]bool{"a": true}, true, "a"},
		{"L(`a`) || L(`b`) || L(`c`)", map[string]bool{"c": true}, true, "abc"},
		{"!L(`a`)", map[string]bool{}, true, "a"},
		{"!(L(`a`) || L(`b`)) && L(`c`)", map[string]bool{"c": true}, true, "abc"},
	} {
		n, err := Parse(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := Compile(n, leaf)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		var asked strings.Builder
		got := tree.Eval(func(l *string) bool { asked.WriteString(*l); return tc.true[*l] })
		if got != tc.want || asked.String() != tc.asks {
			t.Errorf("%s with %v: %v asking %q, want %v asking %q", tc.src, tc.true, got, asked.String(), tc.want, tc.asks)
		}
	}
	n, _ := Parse("L(`a`) && !Bad()")
	if _, err := Compile(n, leaf); err == nil || err.Error() != "bad leaf" {
		t.Fatalf("a leaf's error: %v", err)
	}
}
