// Package middleware is the one way a middleware kind joins tollgate: each
// kind's package (inflightconn, ratelimit, ipallowlist, geoip, crowdsec)
// registers itself in its init with Register, naming the key of
// config.TCPMiddleware its block is written under, how to pick that block
// and its constructor; middleware/standard imports them all. New is what
// the proxy's Compile calls for each middleware block (for tollgate check
// too, which compiles offline): it finds the one kind whose block is set
// and builds it from a Spec (its
// name, log, offline for check, and the Keepers), returning a Built: the
// tcp.Middleware, its Live view (what the API shows beside the
// configuration and an upgrade hands over; nil when none) and its warnings,
// each placed on its field. Keepers hold, once per proxy state, what each
// kind keeps across reloads (limiter registries, the geoIP databases, the
// CrowdSec bouncers, the allow lists' counts), swept after every
// configuration and reached by each kind's typed accessor; Counts reports
// every middleware's decisions for the metrics and the API's history, and
// AddrGate is the accept-time handler of kinds that decide on the client's
// address alone (geoIP, crowdSec). The core knows this package, never the
// list of kinds (ARCHITECTURE.md, "Where the next pieces go").
package middleware
