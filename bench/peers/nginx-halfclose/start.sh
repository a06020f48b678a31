#!/bin/sh
# The nginx peer's start: run.sh has rendered this peer's nginx.conf.tmpl
# (proxy_half_close on) into WORKDIR, which is what it starts.
exec "$(dirname "$0")/../nginx/start.sh"
