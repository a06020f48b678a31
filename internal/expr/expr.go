// Package expr is the small boolean-expression syntax shared by Traefik's TCP
// router rules (proxy/rule) and its provider constraints
// (provider/constraints): calls such as HostSNI(`a`) or Label(`k`, `v`)
// combined with &&, ||, ! and parentheses.
//
// Traefik parses both with vulcand/predicate, that is, as Go expressions. This
// package accepts the same subset: arguments are Go string literals (backticks
// or double quotes with Go escapes; single quotes are rejected), a trailing
// comma is allowed in an argument list, ! binds tighter than &&, which binds
// tighter than ||. It knows nothing of matcher names or argument counts: its
// callers check those against the Node tree and report errors at Node.Pos.
package expr

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tollgate-proxy/tollgate/internal/quote"
)

// MaxDepth bounds how deeply parentheses and ! may nest, so that a hostile
// expression cannot exhaust the stack of the parser or of an evaluator that
// recurses over the tree. Chains of && and || do not add depth: they become
// one Node with many Kids.
const MaxDepth = 64

// Kind says what a Node is. The zero value is Call.
type Kind uint8

// The node kinds.
const (
	Call Kind = iota // Name(Args...)
	And              // Kids[0] && Kids[1] && ...
	Or               // Kids[0] || Kids[1] || ...
	Not              // !Kids[0]
)

// Node is one node of a parsed expression. Parse returns a fresh tree that the
// caller owns and may modify (for instance to canonicalise Name before
// Format).
type Node struct {
	Kind Kind
	// Name is the function name of a Call, as written.
	Name string
	// Args are the unquoted arguments of a Call; nil when there are none.
	Args []string
	// Pos is the byte offset in the source of the Call's name, of the first
	// operator of an And or Or, or of the ! of a Not.
	Pos int
	// Kids are the operands of And and Or (two or more; nested operators of
	// the same kind are flattened into one node) and of Not (exactly one).
	Kids []*Node
}

// Parse parses src. Errors say what was found and where (a byte offset), but
// not src itself: callers prefix them with the name of the expression, e.g.
// `rule "HostSNI(`a`) &&": unexpected end of input at 13: ...`.
// An src that is empty or only whitespace is an error ("empty expression").
func Parse(src string) (*Node, error) {
	p := &parser{src: src}
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.kind == tokEOF {
		return nil, fmt.Errorf("empty expression")
	}
	n, err := p.parseOr(0)
	if err != nil {
		return nil, err
	}
	switch p.tok.kind {
	case tokEOF:
		return n, nil
	case tokRParen:
		return nil, fmt.Errorf("unexpected \")\" at %d: no matching \"(\"", p.tok.pos)
	default:
		return nil, fmt.Errorf("unexpected %s at %d: want \"&&\", \"||\" or end of input", p.tok.describe(), p.tok.pos)
	}
}

type tokKind uint8

const (
	tokEOF tokKind = iota
	tokIdent
	tokString
	tokLParen
	tokRParen
	tokComma
	tokAnd
	tokOr
	tokNot
)

type token struct {
	kind tokKind
	pos  int
	raw  string // source text of the token
	val  string // identifier, or unquoted string
}

func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of input"
	case tokIdent:
		return quote.Q(t.raw)
	case tokString:
		return "string " + quote.Text(t.raw)
	default:
		return fmt.Sprintf("%q", t.raw)
	}
}

type parser struct {
	src  string
	off  int   // next unread byte
	tok  token // current token
	prev token // token before tok, for end-of-input errors
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isIdentStart(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isIdentByte(c byte) bool { return isIdentStart(c) || ('0' <= c && c <= '9') }

// next advances to the next token.
func (p *parser) next() error {
	p.prev = p.tok
	for p.off < len(p.src) && isSpace(p.src[p.off]) {
		p.off++
	}
	start := p.off
	if start >= len(p.src) {
		p.tok = token{kind: tokEOF, pos: len(p.src)}
		return nil
	}
	simple := func(k tokKind, n int) error {
		p.off += n
		p.tok = token{kind: k, pos: start, raw: p.src[start:p.off]}
		return nil
	}
	c := p.src[start]
	switch {
	case c == '(':
		return simple(tokLParen, 1)
	case c == ')':
		return simple(tokRParen, 1)
	case c == ',':
		return simple(tokComma, 1)
	case c == '!':
		return simple(tokNot, 1)
	case c == '&' || c == '|':
		if start+1 < len(p.src) && p.src[start+1] == c {
			if c == '&' {
				return simple(tokAnd, 2)
			}
			return simple(tokOr, 2)
		}
		return fmt.Errorf("unexpected %q at %d: did you mean %q?", string(c), start, string([]byte{c, c}))
	case c == '`' || c == '"':
		end := p.scanString(start)
		if end < 0 {
			return fmt.Errorf("unterminated string starting at %d", start)
		}
		raw := p.src[start:end]
		val, err := strconv.Unquote(raw)
		if err != nil {
			return fmt.Errorf("invalid string %s at %d: %v", quote.Text(raw), start, err)
		}
		p.off = end
		p.tok = token{kind: tokString, pos: start, raw: raw, val: val}
		return nil
	case c == '\'':
		return fmt.Errorf("unexpected single quote at %d: quote arguments with backticks or double quotes", start)
	case isIdentStart(c):
		end := start + 1
		for end < len(p.src) && isIdentByte(p.src[end]) {
			end++
		}
		p.off = end
		raw := p.src[start:end]
		p.tok = token{kind: tokIdent, pos: start, raw: raw, val: raw}
		return nil
	default:
		r, _ := utf8.DecodeRuneInString(p.src[start:])
		return fmt.Errorf("unexpected character %q at %d", r, start)
	}
}

// scanString returns the offset just past the string literal that starts at
// start, or -1 if it is not terminated. Interpreted strings end at the first
// unescaped double quote and may not contain a newline, as in Go.
func (p *parser) scanString(start int) int {
	q := p.src[start]
	for i := start + 1; i < len(p.src); i++ {
		switch c := p.src[i]; {
		case c == q:
			return i + 1
		case q == '"' && c == '\n':
			return -1
		case q == '"' && c == '\\':
			i++ // skip the escaped byte; Unquote validates the escape
		}
	}
	return -1
}

// errUnexpected reports that the current token cannot appear here.
func (p *parser) errUnexpected(want string) error {
	if p.tok.kind == tokEOF {
		if p.prev.raw == "" {
			return fmt.Errorf("unexpected end of input at %d: want %s", p.tok.pos, want)
		}
		return fmt.Errorf("unexpected end of input at %d: want %s after %s", p.prev.pos, want, quote.Q(p.prev.raw))
	}
	return fmt.Errorf("unexpected %s at %d: want %s", p.tok.describe(), p.tok.pos, want)
}

func (p *parser) parseOr(depth int) (*Node, error) {
	return p.parseBinary(depth, tokOr, Or, p.parseAnd)
}

func (p *parser) parseAnd(depth int) (*Node, error) {
	return p.parseBinary(depth, tokAnd, And, p.parseUnary)
}

// parseBinary parses operand (op operand)* into one flattened node of kind.
func (p *parser) parseBinary(depth int, op tokKind, kind Kind, operand func(int) (*Node, error)) (*Node, error) {
	first, err := operand(depth)
	if err != nil {
		return nil, err
	}
	if p.tok.kind != op {
		return first, nil
	}
	n := &Node{Kind: kind, Pos: p.tok.pos}
	n.add(first)
	for p.tok.kind == op {
		if err := p.next(); err != nil {
			return nil, err
		}
		k, err := operand(depth)
		if err != nil {
			return nil, err
		}
		n.add(k)
	}
	return n, nil
}

// add appends k to n's operands, splicing in k's own operands when it is the
// same operator (a parenthesised chain): (a && b) && c is a && b && c.
func (n *Node) add(k *Node) {
	if k.Kind == n.Kind {
		n.Kids = append(n.Kids, k.Kids...)
		return
	}
	n.Kids = append(n.Kids, k)
}

func (p *parser) parseUnary(depth int) (*Node, error) {
	if p.tok.kind != tokNot {
		return p.parsePrimary(depth)
	}
	pos := p.tok.pos
	if depth >= MaxDepth {
		return nil, fmt.Errorf("expression nested deeper than %d at %d", MaxDepth, pos)
	}
	if err := p.next(); err != nil {
		return nil, err
	}
	k, err := p.parseUnary(depth + 1)
	if err != nil {
		return nil, err
	}
	return &Node{Kind: Not, Pos: pos, Kids: []*Node{k}}, nil
}

func (p *parser) parsePrimary(depth int) (*Node, error) {
	switch p.tok.kind {
	case tokLParen:
		open := p.tok.pos
		if depth >= MaxDepth {
			return nil, fmt.Errorf("expression nested deeper than %d at %d", MaxDepth, open)
		}
		if err := p.next(); err != nil {
			return nil, err
		}
		n, err := p.parseOr(depth + 1)
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tokRParen {
			if p.tok.kind == tokEOF {
				return nil, fmt.Errorf("unexpected end of input at %d: missing \")\" for the \"(\" at %d", p.tok.pos, open)
			}
			return nil, p.errUnexpected(fmt.Sprintf("\"&&\", \"||\" or the \")\" closing the \"(\" at %d", open))
		}
		return n, p.next()
	case tokIdent:
		return p.parseCall()
	default:
		return nil, p.errUnexpected("a matcher, \"!\" or \"(\"")
	}
}

func (p *parser) parseCall() (*Node, error) {
	n := &Node{Kind: Call, Name: p.tok.val, Pos: p.tok.pos}
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.kind != tokLParen {
		return nil, p.errUnexpected(fmt.Sprintf("\"(\" after %s", n.Name))
	}
	if err := p.next(); err != nil {
		return nil, err
	}
	for p.tok.kind != tokRParen {
		if p.tok.kind != tokString {
			return nil, p.errUnexpected("a quoted argument or \")\"")
		}
		n.Args = append(n.Args, p.tok.val)
		if err := p.next(); err != nil {
			return nil, err
		}
		switch p.tok.kind {
		case tokComma:
			if err := p.next(); err != nil {
				return nil, err
			}
		case tokRParen:
		default:
			return nil, p.errUnexpected("\",\" or \")\"")
		}
	}
	return n, p.next()
}

// Format renders n in canonical form: arguments in backticks (double quotes
// when the argument holds a backtick or a carriage return, which a raw string
// cannot carry), single spaces around && and ||, ", " between arguments, and
// parentheses only where precedence needs them. Parse(Format(n)) yields a tree
// that formats identically.
func Format(n *Node) string {
	var b strings.Builder
	format(&b, n)
	return b.String()
}

func format(b *strings.Builder, n *Node) {
	switch n.Kind {
	case Call:
		b.WriteString(n.Name)
		b.WriteByte('(')
		for i, a := range n.Args {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(Quote(a))
		}
		b.WriteByte(')')
	case And, Or:
		sep := " && "
		if n.Kind == Or {
			sep = " || "
		}
		for i, k := range n.Kids {
			if i > 0 {
				b.WriteString(sep)
			}
			// An Or operand of an And needs parentheses; an And operand of an
			// Or does not, and same-kind operands were flattened by Parse (a
			// hand-built tree may still nest them: parenthesise to be safe).
			paren := k.Kind == Or || k.Kind == n.Kind
			if paren {
				b.WriteByte('(')
			}
			format(b, k)
			if paren {
				b.WriteByte(')')
			}
		}
	case Not:
		b.WriteByte('!')
		k := n.Kids[0]
		paren := k.Kind == And || k.Kind == Or
		if paren {
			b.WriteByte('(')
		}
		format(b, k)
		if paren {
			b.WriteByte(')')
		}
	}
}

// Quote returns s as a string literal Parse reads back as s: in backticks when
// it can be, else double-quoted with Go escapes.
func Quote(s string) string {
	if strings.ContainsAny(s, "`\r") {
		return strconv.Quote(s)
	}
	return "`" + s + "`"
}
