package proxy

import (
	"sync/atomic"

	"github.com/tollgate-proxy/tollgate/proxy/rule"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Table is one compiled configuration generation for one entry point: its
// routes in match order. It is immutable once built and shared by every
// connection routed with it.
type Table struct {
	routes []*route
	peek   bool // some route needs the TLS ClientHello
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
}

// Finish counts the end of a connection routed here.
func (r *route) Finish(*tcp.Conn) { r.open.Add(-1) }

// match returns the first route whose rule matches c, or nil.
func (t *Table) match(c *tcp.Conn) *route {
	for _, r := range t.routes {
		if r.rule.Match(c) {
			return r
		}
	}
	return nil
}
