package proxy

import "github.com/tollgate-proxy/tollgate/proxy/health"

// Health-check defaults for a loadBalancer's healthCheck section when it
// leaves interval or timeout unset (health.DefaultInterval, DefaultTimeout).
const (
	DefaultHealthCheckInterval = health.DefaultInterval
	DefaultHealthCheckTimeout  = health.DefaultTimeout
)

// ServerStatus returns the live UP/DOWN of each server of the named
// (qualified) load-balancer service with a health check, or nil for a
// service without one (its servers are always UP). Runtime.Services holds
// the status as of the last reload; this is the status now.
func (s *State) ServerStatus(service string) map[string]string {
	return s.health.Status(service)
}

// HealthStatus is one health-checked server's state, as handed over to a
// new process at an upgrade.
type HealthStatus = health.Status

// Health returns every health-checked server's UP/DOWN now, sorted.
func (s *State) Health() []HealthStatus { return s.health.All() }

// Close stops the work State owns in the background (health checkers) and
// waits for it. Compiling with a closed State starts no checker.
func (s *State) Close() {
	s.health.Close()
	s.mws.Close()
}
