// Package sniff reads what a client says before its connection is routed,
// from bytes already read: whether it speaks TLS and its ClientHello's server
// name and ALPN (hello.go: crypto/tls parses, sniff only frames and caps),
// where a PROXY protocol header ends and what it says (proxyproto.go:
// go-proxyproto parses, sniff decides early from a prefix), and how a
// PostgreSQL client starts (postgres.go: the SSLRequest and GSSENCRequest
// preambles, and the same question asked of a server). Every function is pure
// over its input or its one net.Conn, bounded in what it reads, and fuzzed
// (testdata/fuzz); the package imports nothing of tollgate. The proxy's
// pre-routing step (package proxy, preroute.step) calls it with what the
// event loop has read so far, and again with more until it decides.
package sniff
