// Package constraints implements Traefik's provider constraints: the
// expression given as --providers.docker.constraints or
// --providers.consulCatalog.constraints that decides which containers or
// services a provider considers at all.
//
// Docker constraints test container labels:
//
//	Label(`a.label.name`, `foo`)        the label exists with exactly this value
//	LabelRegex(`a.label.name`, `^fo+`)  the label's value matches the Go regexp
//
// Consul Catalog constraints test service tags:
//
//	Tag(`a.tag.name`)       one of the tags is exactly this
//	TagRegex(`^a\.tag`)     one of the tags matches the Go regexp
//
// combined with &&, || and ! and parentheses. As in Traefik, matcher names
// are case-sensitive, a regexp matches anywhere in the value unless anchored,
// and a missing label reads as the empty string (so Label(`x`, "") holds for a
// container without label x). Unlike Traefik, which fails a bad regexp
// silently at match time, a bad regexp is a parse error.
package constraints

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/tollgate-proxy/tollgate/internal/expr"
)

// Expr is a parsed constraints expression. It is immutable and safe for
// concurrent use. A nil *Expr, which ParseLabels and ParseTags return for an
// empty expression, and the zero Expr match everything: no constraint.
type Expr struct {
	ast  *expr.Node
	root expr.Tree[leaf]
}

type op uint8

const (
	opNone       op = iota // never in a parsed tree
	opLabel                // labels[key] == val
	opLabelRegex           // re matches labels[key]
	opTag                  // val is one of the tags
	opTagRegex             // re matches one of the tags
)

// leaf is a matcher call of a compiled expression.
type leaf struct {
	op  op
	key string
	val string
	re  *regexp.Regexp
}

type matcher struct {
	op    op
	nargs int
	usage string
}

var labelMatchers = map[string]matcher{
	"Label":      {opLabel, 2, "Label(`key`, `value`)"},
	"LabelRegex": {opLabelRegex, 2, "LabelRegex(`key`, `regexp`)"},
}

var tagMatchers = map[string]matcher{
	"Tag":      {opTag, 1, "Tag(`tag`)"},
	"TagRegex": {opTagRegex, 1, "TagRegex(`regexp`)"},
}

// ParseLabels parses a Docker constraints expression (Label and LabelRegex).
// An empty or all-blank expression returns nil, nil: no constraint. Errors
// name the expression and the byte offset of the problem.
func ParseLabels(expression string) (*Expr, error) {
	return parse(expression, labelMatchers, "Label or LabelRegex", "Docker label")
}

// LabelMatcher is ParseLabels as the label providers (Docker, Swarm) use
// it: a match function over labels, nil for no constraint.
func LabelMatcher(expression string) (func(map[string]string) bool, error) {
	e, err := ParseLabels(expression)
	if err != nil || e == nil {
		return nil, err
	}
	return e.MatchLabels, nil
}

// ParseTags parses a Consul Catalog constraints expression (Tag and
// TagRegex). An empty or all-blank expression returns nil, nil: no
// constraint. Errors name the expression and the byte offset of the problem.
func ParseTags(expression string) (*Expr, error) {
	return parse(expression, tagMatchers, "Tag or TagRegex", "Consul tag")
}

func parse(expression string, ms map[string]matcher, want, kind string) (*Expr, error) {
	if strings.TrimSpace(expression) == "" {
		return nil, nil
	}
	ast, err := expr.Parse(expression)
	if err != nil {
		return nil, fmt.Errorf("constraints %q: %w", expression, err)
	}
	root, err := expr.Compile(ast, func(a *expr.Node) (leaf, error) { return compile(a, ms, want, kind) })
	if err != nil {
		return nil, fmt.Errorf("constraints %q: %w", expression, err)
	}
	e := &Expr{ast: ast, root: root}
	return e, nil
}

// compile makes the leaf of the call a, one of ms's matchers (the others
// are an error saying what the kind of constraints takes: want).
func compile(a *expr.Node, ms map[string]matcher, want, kind string) (leaf, error) {
	var n leaf
	m, ok := ms[a.Name]
	if !ok {
		return n, fmt.Errorf("unknown matcher %q at %d: %s constraints take %s", a.Name, a.Pos, kind, want)
	}
	if len(a.Args) != m.nargs {
		return n, fmt.Errorf("%s at %d: takes %d argument(s), got %d: write %s", a.Name, a.Pos, m.nargs, len(a.Args), m.usage)
	}
	n.op = m.op
	switch m.op {
	case opLabel:
		n.key, n.val = a.Args[0], a.Args[1]
	case opTag:
		n.val = a.Args[0]
	case opLabelRegex, opTagRegex:
		n.key = a.Args[0]
		pattern := a.Args[len(a.Args)-1]
		re, err := regexp.Compile(pattern)
		if err != nil {
			return n, fmt.Errorf("%s at %d: compiling %q: %w", a.Name, a.Pos, pattern, err)
		}
		n.re = re
	}
	return n, nil
}

// MatchLabels reports whether a container with these labels satisfies the
// expression. Tag and TagRegex never occur in an expression from
// ParseLabels; in one from ParseTags they see no tags.
func (e *Expr) MatchLabels(labels map[string]string) bool {
	if e == nil || e.ast == nil {
		return true
	}
	return e.root.Eval(func(l *leaf) bool { return l.match(labels, nil) })
}

// MatchTags reports whether a service with these tags satisfies the
// expression. Label and LabelRegex never occur in an expression from
// ParseTags; in one from ParseLabels they see no labels.
func (e *Expr) MatchTags(tags []string) bool {
	if e == nil || e.ast == nil {
		return true
	}
	return e.root.Eval(func(l *leaf) bool { return l.match(nil, tags) })
}

func (n *leaf) match(labels map[string]string, tags []string) bool {
	switch n.op {
	case opLabel:
		return labels[n.key] == n.val
	case opLabelRegex:
		return n.re.MatchString(labels[n.key])
	case opTag:
		return slices.Contains(tags, n.val)
	case opTagRegex:
		return slices.ContainsFunc(tags, n.re.MatchString)
	}
	return false
}

// String returns the expression in canonical form (arguments in backticks,
// minimal parentheses); parsing it again gives an equivalent Expr. A nil
// *Expr prints as "".
func (e *Expr) String() string {
	if e == nil || e.ast == nil {
		return ""
	}
	return expr.Format(e.ast)
}
