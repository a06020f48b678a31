#!/bin/sh
# Peer contract (see bench/README.md): LISTEN, BACKEND, LIMIT, WORKDIR in the
# environment, rendered templates in WORKDIR; exec the proxy in the foreground.
exec "${HAPROXY_BIN:-haproxy}" -db -f "$WORKDIR/haproxy.cfg"
