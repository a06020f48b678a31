package proxy

import (
	"math"
	"strings"
	"sync/atomic"

	"github.com/tollgate-proxy/tollgate/proxy/rule"
	"github.com/tollgate-proxy/tollgate/proxy/sniff"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Table is one compiled configuration generation for one entry point: its
// routes in match order. It is immutable once built and shared by every
// connection routed with it.
//
// When no route is a TLS route, every connection is matched against routes in
// order. When some route is (tls.passthrough), the entry point peeks each
// connection first (peek): a plain-TCP client is matched against the non-TLS
// routes in order (plain), and a TLS client against the TLS routes (tls), as
// Traefik does. Either way the first route in order that matches wins.
type Table struct {
	routes []*route
	peek   bool      // some route is a TLS route: read the ClientHello first
	plain  []*route  // non-TLS routes in order, for plain clients when peek
	tls    tlsRoutes // TLS routes, for TLS clients when peek
	// starttls: some route terminates TLS or passes it through, so a
	// PostgreSQL client's SSLRequest is answered before its ClientHello is
	// read (postgres.go).
	starttls bool
	// acme are the certificate resolvers whose TLS-ALPN-01 validations
	// this entry point answers (acme.go), when peek.
	acme []CertResolver
	// http01 are the certificate resolvers whose HTTP-01 validations this
	// entry point answers, on the plain-text connections no route takes
	// (plainhttp.go).
	http01 []CertResolver
}

// tlsRoutes finds the first matching TLS route without calling every rule:
// routes whose rule is only HostSNI names (SNIs) sit in maps, by exact name
// and by wildcard suffix; the rest keep their order. Every entry carries its
// position in the full order, so a map hit is returned only when no earlier
// route in rest matches: the same result as a linear scan.
type tlsRoutes struct {
	exact map[string]orderedRoute // lower-cased name -> first route naming it
	wild  map[string]orderedRoute // ".example.com" -> first route with *.example.com
	rest  []orderedRoute          // other TLS routes, in order
}

type orderedRoute struct {
	r   *route
	pos int // position among the entry point's TLS routes
}

// emptyTable routes nothing; an entry point's table is never nil.
var emptyTable = &Table{}

// route is one router on one entry point.
type route struct {
	name     string // qualified router name
	rule     *rule.Rule
	priority int
	handler  tcp.Handler
	open     *atomic.Int64 // open connections on this router, shared across entry points
	// terminates: the router terminates TLS (its handler leaves the loop).
	terminates bool
	// closing: a terminating router disabled by its TLS settings; it closes
	// what it matches, so that its clients never reach a later route.
	closing bool
}

// Finish counts the end of a connection routed here.
func (r *route) Finish(*tcp.Conn) { r.open.Add(-1) }

// newTable builds an entry point's table from its routes in match order;
// isTLS tells TLS (passthrough) routes from plain ones.
func newTable(rs []*route, isTLS func(*route) bool) *Table {
	t := &Table{routes: rs}
	for _, r := range rs {
		if isTLS(r) {
			t.peek = true
			break
		}
	}
	if !t.peek {
		return t
	}
	t.tls = tlsRoutes{exact: map[string]orderedRoute{}, wild: map[string]orderedRoute{}}
	pos := 0
	for _, r := range rs {
		if !isTLS(r) {
			t.plain = append(t.plain, r)
			continue
		}
		or := orderedRoute{r: r, pos: pos}
		pos++
		exact, wild, ok := r.rule.SNIs()
		if !ok {
			t.tls.rest = append(t.tls.rest, or)
			continue
		}
		for _, name := range exact {
			if _, dup := t.tls.exact[name]; !dup {
				t.tls.exact[name] = or
			}
		}
		for _, suffix := range wild {
			if _, dup := t.tls.wild[suffix]; !dup {
				t.tls.wild[suffix] = or
			}
		}
	}
	return t
}

// match returns the first route whose rule matches c, or nil. On a peeking
// table, c.Peeked holds the client's first bytes (see preroute.step).
func (t *Table) match(c *tcp.Conn) *route {
	switch {
	case !t.peek:
		return firstMatch(t.routes, c)
	case !sniff.IsTLS(c.Peeked):
		return firstMatch(t.plain, c)
	}
	return t.tls.match(c)
}

func firstMatch(rs []*route, c *tcp.Conn) *route {
	for _, r := range rs {
		if r.rule.Match(c) {
			return r
		}
	}
	return nil
}

// match looks c.SNI (lower-cased by readHello) up by exact name, then by
// wildcard suffix (exactly one label in front), and scans the other routes
// only up to the best map hit.
func (ts *tlsRoutes) match(c *tcp.Conn) *route {
	best := orderedRoute{pos: math.MaxInt}
	if sni := c.SNI; sni != "" {
		if or, ok := ts.exact[sni]; ok {
			best = or
		}
		if i := strings.IndexByte(sni, '.'); i > 0 {
			if or, ok := ts.wild[sni[i:]]; ok && or.pos < best.pos {
				best = or
			}
		}
	}
	for _, or := range ts.rest {
		if or.pos > best.pos {
			break
		}
		if or.r.rule.Match(c) {
			return or.r
		}
	}
	return best.r
}
