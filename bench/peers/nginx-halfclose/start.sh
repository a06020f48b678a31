#!/bin/sh
# Peer contract (see bench/README.md): LISTEN, BACKEND, LIMIT, WORKDIR in the
# environment, rendered templates in WORKDIR; exec the proxy in the foreground.
# The master stays in the foreground; its workers are its children, and CPU
# and memory are summed over the tree.
exec "${NGINX_BIN:-nginx}" -p "$WORKDIR" -e "$WORKDIR/error.log" -c "$WORKDIR/nginx.conf"
