#!/bin/sh
# The tollgate peer's start: run.sh has rendered this peer's dynamic.yml.tmpl
# (terminationDelay 0) into WORKDIR, which is what it reads.
exec "$(dirname "$0")/../tollgate/start.sh"
