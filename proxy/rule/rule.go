// Package rule parses and evaluates Traefik v3 TCP router rules:
//
//	HostSNI(`*`)                     every connection, TLS or not
//	HostSNI(`db.example.com`)        the TLS SNI, case-insensitively
//	HostSNI(`*.example.com`)         exactly one label in front of example.com
//	HostSNIRegexp(`^.+\.example\.com$`)  the lower-cased SNI against a Go regexp
//	ClientIP(`10.0.0.0/8`)           the client address against an IP or CIDR
//	ALPN(`h2`)                       one of the ALPN protocols the client offers
//
// combined with &&, || and ! and parentheses. Each matcher takes exactly one
// argument, in backticks or double quotes. As in Traefik, a matcher name is
// accepted as written in the docs, all lower case, all upper case, or
// capitalised (HostSNI, hostsni, HOSTSNI, Hostsni).
//
// Everything that can be computed from the rule text is computed by Parse
// (prefixes, compiled regexps, lower-cased names), so that Match, which runs
// for every accepted connection, does not allocate.
package rule

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/expr"
	"github.com/tollgate-proxy/tollgate/internal/quote"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Rule is a parsed TCP router rule. It is immutable and safe for concurrent
// use. The zero value and a nil *Rule match nothing; get one from Parse.
type Rule struct {
	ast  *expr.Node
	root expr.Tree[leaf]

	needsTLS bool
	catchAll bool
	sniOK    bool
	exact    []string
	wild     []string
}

type op uint8

const (
	opNone     op = iota // zero leaf: matches nothing
	opAny                // HostSNI(`*`)
	opSNI                // HostSNI(`name`): s is the lower-cased name
	opSNIWild            // HostSNI(`*.suffix`): s is ".suffix", lower-cased
	opSNIRegex           // HostSNIRegexp: re
	opClientIP           // ClientIP: pfx
	opALPN               // ALPN: s
)

// leaf is a matcher call of a compiled rule.
type leaf struct {
	op  op
	s   string
	re  *regexp.Regexp
	pfx netip.Prefix
}

// The matchers, by canonical name.
const (
	mHostSNI       = "HostSNI"
	mHostSNIRegexp = "HostSNIRegexp"
	mClientIP      = "ClientIP"
	mALPN          = "ALPN"
)

var matchers = []string{mHostSNI, mHostSNIRegexp, mClientIP, mALPN}

// canonicalName maps the spellings Traefik accepts for a matcher (as
// documented, lower, upper, capitalised lower) to the documented one.
func canonicalName(name string) (string, bool) {
	for _, m := range matchers {
		lower := strings.ToLower(m)
		if name == m || name == lower || name == strings.ToUpper(m) ||
			name == strings.ToUpper(lower[:1])+lower[1:] {
			return m, true
		}
	}
	return "", false
}

// acmeTLSALPN is the protocol of the ACME TLS-ALPN-01 challenge, which Traefik
// refuses in an ALPN matcher.
const acmeTLSALPN = "acme-tls/1"

// Parse parses a rule. The error names the rule text and the byte offset of
// the problem, e.g.
//
//	rule "HostSNI(`a`) &&": unexpected end of input at 13: want a matcher, "!" or "(" after "&&"
//	rule "ClientIP(`10.0.0.0/33`)": ClientIP at 0: parsing CIDR "10.0.0.0/33": ...
func Parse(rule string) (*Rule, error) {
	ast, err := expr.Parse(rule)
	if err != nil {
		return nil, fmt.Errorf("rule %s: %w", quote.Q(rule), err)
	}
	r := &Rule{ast: ast}
	if r.root, err = expr.Compile(ast, r.compile); err != nil {
		return nil, fmt.Errorf("rule %s: %w", quote.Q(rule), err)
	}
	r.catchAll = r.root.Op == expr.OpLeaf && r.root.Leaf.op == opAny
	r.exact, r.wild, r.sniOK = sniSets(&r.root)
	return r, nil
}

// compile makes the leaf of the matcher call a, canonicalising its name in
// a so that String prints it as documented.
func (r *Rule) compile(a *expr.Node) (leaf, error) {
	var n leaf
	name, ok := canonicalName(a.Name)
	if !ok {
		return n, fmt.Errorf("unknown matcher %s at %d: want HostSNI, HostSNIRegexp, ClientIP or ALPN", quote.Q(a.Name), a.Pos)
	}
	a.Name = name
	if len(a.Args) != 1 {
		err := fmt.Errorf("%s at %d: takes exactly 1 argument, got %d", name, a.Pos, len(a.Args))
		if len(a.Args) > 1 {
			// Traefik v2 accepted several names per call; v3 does not.
			err = fmt.Errorf("%w (combine several with ||, e.g. %s(%s) || %s(%s))", err, name, quote.Text(expr.Quote(a.Args[0])), name, quote.Text(expr.Quote(a.Args[1])))
		}
		return n, err
	}
	arg := a.Args[0]
	if arg == "" {
		return n, fmt.Errorf("%s at %d: empty argument", name, a.Pos)
	}
	switch name {
	case mHostSNI:
		if arg == "*" {
			n.op = opAny
			return n, nil
		}
		r.needsTLS = true
		host, wild, err := parseHost(arg)
		if err != nil {
			return n, fmt.Errorf("%s at %d: %w", name, a.Pos, err)
		}
		n.op, n.s = opSNI, host
		if wild {
			n.op = opSNIWild
		}
	case mHostSNIRegexp:
		r.needsTLS = true
		if !isASCII(arg) {
			return n, fmt.Errorf("%s at %d: %s is not ASCII: write internationalised names in punycode (xn--...)", name, a.Pos, quote.Q(arg))
		}
		re, err := regexp.Compile(arg)
		if err != nil {
			var se *syntax.Error
			if errors.As(err, &se) { // its text quotes the expression, whole
				err = fmt.Errorf("%s: %s", se.Code, quote.Text("`"+se.Expr+"`"))
			}
			return n, fmt.Errorf("%s at %d: compiling %s: %w", name, a.Pos, quote.Q(arg), err)
		}
		n.op, n.re = opSNIRegex, re
	case mClientIP:
		pfx, err := config.ParsePrefix(arg)
		if err != nil {
			return n, fmt.Errorf("%s at %d: %w", name, a.Pos, err)
		}
		n.op, n.pfx = opClientIP, pfx
	case mALPN:
		r.needsTLS = true
		if arg == acmeTLSALPN {
			return n, fmt.Errorf("%s at %d: protocol %q is reserved for ACME challenges", name, a.Pos, arg)
		}
		n.op, n.s = opALPN, arg
	}
	return n, nil
}

// parseHost validates a HostSNI name the way Traefik does (word characters,
// dots, dashes and colons, so that IP literals pass) and returns it lower-cased
// without a trailing dot. For "*.example.com" it returns ".example.com" and
// wild = true.
func parseHost(arg string) (host string, wild bool, err error) {
	if !isASCII(arg) {
		return "", false, fmt.Errorf("%s is not ASCII: write internationalised names in punycode (xn--...)", quote.Q(arg))
	}
	host = strings.TrimSuffix(strings.ToLower(arg), ".")
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, wild = rest, true
	}
	if host == "" || host[0] == '.' || strings.IndexFunc(host, func(c rune) bool {
		return !(c == '.' || c == '-' || c == ':' || c == '_' || ('a' <= c && c <= 'z') || ('0' <= c && c <= '9'))
	}) >= 0 {
		return "", false, fmt.Errorf("%s is not a valid host name (want a name such as db.example.com, a wildcard such as *.example.com, or *)", quote.Q(arg))
	}
	if wild {
		host = "." + host
	}
	return host, wild, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// sniSets returns the names of a rule that is only HostSNI names joined by ||.
func sniSets(n *expr.Tree[leaf]) (exact, wild []string, ok bool) {
	leaves := []expr.Tree[leaf]{*n}
	if n.Op == expr.OpOr {
		leaves = n.Kids
	}
	for _, t := range leaves {
		if t.Op != expr.OpLeaf {
			return nil, nil, false
		}
		switch l := t.Leaf; l.op {
		case opSNI:
			if !slices.Contains(exact, l.s) {
				exact = append(exact, l.s)
			}
		case opSNIWild:
			if !slices.Contains(wild, l.s) {
				wild = append(wild, l.s)
			}
		default:
			return nil, nil, false
		}
	}
	return exact, wild, true
}

// Match reports whether c satisfies the rule. It reads c.Client.Addr() for
// ClientIP (an IPv4-mapped address is treated as IPv4), c.SNI for HostSNI and
// HostSNIRegexp (an empty SNI matches only HostSNI(`*`) and regexps that
// match ""), and c.ALPN for ALPN. A nil c or nil r matches nothing.
//
// Match does not allocate, except that HostSNIRegexp lower-cases an SNI that
// holds upper-case letters before matching (Traefik matches the canonical,
// lower-cased name).
func (r *Rule) Match(c *tcp.Conn) bool {
	if r == nil || c == nil {
		return false
	}
	if r.root.Op == expr.OpLeaf { // one matcher, the usual rule: no call through Eval
		return r.root.Leaf.match(c)
	}
	return r.root.Eval(func(l *leaf) bool { return l.match(c) })
}

func (n *leaf) match(c *tcp.Conn) bool {
	switch n.op {
	case opAny:
		return true
	case opSNI:
		return c.SNI != "" && strings.EqualFold(c.SNI, n.s)
	case opSNIWild:
		return matchWildcard(c.SNI, n.s)
	case opSNIRegex:
		sni := c.SNI
		if hasUpper(sni) {
			sni = strings.ToLower(sni)
		}
		return n.re.MatchString(sni)
	case opClientIP:
		return n.pfx.Contains(c.Client.Addr().Unmap())
	case opALPN:
		return slices.Contains(c.ALPN, n.s)
	}
	return false
}

// matchWildcard reports whether sni is one non-empty label followed by
// suffix (".example.com"), ignoring case.
func matchWildcard(sni, suffix string) bool {
	head := len(sni) - len(suffix)
	return head > 0 &&
		strings.EqualFold(sni[head:], suffix) &&
		strings.IndexByte(sni[:head], '.') < 0
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// NeedsTLS reports whether the rule looks at the TLS ClientHello: it uses
// HostSNI with a name other than `*`, HostSNIRegexp or ALPN anywhere (even
// negated). A router with such a rule needs tls.passthrough, so that the
// entry point peeks the ClientHello and replays it to the backend.
func (r *Rule) NeedsTLS() bool { return r != nil && r.needsTLS }

// CatchAll reports whether the rule is exactly HostSNI(`*`), possibly in
// parentheses: it matches every connection, so the entry point can route
// without reading a byte.
func (r *Rule) CatchAll() bool { return r != nil && r.catchAll }

// SNIs returns the names of a rule made only of HostSNI names joined by ||
// (a single HostSNI(`name`) included), so that the proxy can route by map
// lookup instead of calling Match. exact holds lower-cased names without a
// trailing dot; wildcardSuffixes holds "*.example.com" as ".example.com",
// which matches exactly one more label. ok is false, and the slices nil, for
// any other rule (HostSNI(`*`), other matchers, &&, !). The slices are fresh
// copies the caller may keep.
func (r *Rule) SNIs() (exact []string, wildcardSuffixes []string, ok bool) {
	if r == nil || !r.sniOK {
		return nil, nil, false
	}
	return slices.Clone(r.exact), slices.Clone(r.wild), true
}

// String returns the rule in canonical form: documented matcher names,
// arguments in backticks, minimal parentheses. Parse(r.String()) yields a rule
// that matches the same connections. The zero Rule prints as "".
func (r *Rule) String() string {
	if r == nil || r.ast == nil {
		return ""
	}
	return expr.Format(r.ast)
}
