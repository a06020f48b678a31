// Package accesslog is what a proxied connection's end reports: its access
// log line (Traefik's accessLog, with accessLog.fields' keep, drop and
// redact: Fields) and its router's connection metrics (bytes each way and
// a duration histogram, RouterCounters, by qualified router name in
// Routers, which outlive reloads). A Compile makes one Observer (New) from
// the Config the proxy is built with (proxy.StateOptions.Observers); each
// load balancer holds it, and the end of a connection calls its Report
// directly: a concrete call, no allocation, and none at all when nothing
// observes (Config.Any). It imports only proxy/tcp, for the connection's
// names and addresses.
package accesslog
