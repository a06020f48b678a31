#!/bin/sh
# Peer contract (see bench/README.md): LISTEN, BACKEND, LIMIT, WORKDIR in the
# environment, rendered templates in WORKDIR; exec the proxy in the foreground.
# TOLLGATE_BIN is the binary to measure (run.sh sets it).
exec "${TOLLGATE_BIN:?TOLLGATE_BIN is not set}" \
    --entryPoints.bench.address="$LISTEN" \
    --entryPoints.bench.transport.lifeCycle.graceTimeOut=1s \
    --providers.file.filename="$WORKDIR/dynamic.yml" \
    --log.level=ERROR
