package proxy

import (
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	// The built-in middleware kinds, as the process has them.
	_ "github.com/tollgate-proxy/tollgate/middleware/standard"
)

// limiterOf is the inFlightConn limiter of the named middleware in s's
// state, or nil.
func limiterOf(s *Server, name string) *inflightconn.Limiter {
	return inflightconn.Limiters(s.State().Keepers()).Lookup(name)
}
