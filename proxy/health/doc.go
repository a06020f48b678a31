// Package health runs the load balancers' TCP health checks (a
// loadBalancer's healthCheck: docs/reference/services.md): a Spec validated
// from the configuration (NewSpec, with its defaults) and probed (dial,
// send, expect, within the timeout), and the Registry of checkers, one
// goroutine per health-checked server, keyed by qualified service name and
// server address so that a server's UP/DOWN outlives reloads, handed over
// at an upgrade (All, Seed). A compiled server holds the registry's
// *atomic.Bool: the load balancer's pick reads it with no call into this
// package. It imports only config.
package health
