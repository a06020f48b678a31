#!/bin/sh
# Prints the version (exit 0), or what is missing and how to install it (exit 1).
bin=${HAPROXY_BIN:-haproxy}
if ! command -v "$bin" >/dev/null 2>&1; then
    echo "$bin not found: apt-get install haproxy"
    exit 1
fi
"$bin" -v 2>&1 | sed -n 1p
