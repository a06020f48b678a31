// Package tlsconf is TLS termination's and servers transports'
// configuration, built once per Compile from the merged `tls` section
// (docs/reference/tls.md): the default store's certificates read and
// indexed by name (Store: exact names, then one-label wildcards, the
// default certificate, generated when none is configured, and the ones that
// did not load, which disable the routers that would need them), named
// option sets turned into a *tls.Config that picks the certificate by SNI
// (ServerConfig), and the client settings a transport dials servers with
// (ClientConfig). It knows nothing of connections: how many handshakes a
// client may start is asked of the caller (ServerConfig's admit), and a
// certificate obtained at run time of a Certifier (a certificate resolver).
// Every error names the option and the value.
package tlsconf
