// Package standard registers tollgate's built-in middleware kinds: it is
// imported for that side effect alone (import _), by the process, tollgate
// check and the tests that compile middlewares. Each kind's package
// registers itself in its init (middleware.Register); a new kind is one
// more import here.
package standard

import (
	// The built-in kinds: crowdSec, geoIP, inFlightConn, ipAllowList
	// (and its deprecated name ipWhiteList), rateLimit.
	_ "github.com/tollgate-proxy/tollgate/middleware/crowdsec"
	_ "github.com/tollgate-proxy/tollgate/middleware/geoip"
	_ "github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	_ "github.com/tollgate-proxy/tollgate/middleware/ipallowlist"
	_ "github.com/tollgate-proxy/tollgate/middleware/ratelimit"
)
