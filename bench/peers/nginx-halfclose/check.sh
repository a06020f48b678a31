#!/bin/sh
# Prints the version (exit 0), or what is missing and how to install it (exit 1).
bin=${NGINX_BIN:-nginx}
if ! command -v "$bin" >/dev/null 2>&1; then
    echo "$bin not found: apt-get install nginx libnginx-mod-stream"
    exit 1
fi
if [ ! -e /usr/lib/nginx/modules/ngx_stream_module.so ]; then
    echo "nginx has no stream module (/usr/lib/nginx/modules/ngx_stream_module.so): apt-get install libnginx-mod-stream"
    exit 1
fi
"$bin" -v 2>&1
