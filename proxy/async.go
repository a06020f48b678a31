package proxy

import "github.com/tollgate-proxy/tollgate/proxy/tcp"

// async runs a service on a goroutine of its own. Routing and middlewares are
// cheap and never block, so for plain-TCP entry points they run on the
// accepting goroutine; only the service, which dials, gets a new goroutine.
// A rejected connection (limit, allow list, no route) then costs no goroutine.
type async struct{ h tcp.Handler }

var _ tcp.Handler = async{}

// ServeTCP starts the service for c and returns at once.
func (a async) ServeTCP(c *tcp.Conn) { go a.h.ServeTCP(c) }
