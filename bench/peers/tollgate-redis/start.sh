#!/bin/sh
# Peer contract (see bench/README.md): LISTEN, BACKEND, LIMIT, WORKDIR in the
# environment, rendered templates in WORKDIR; exec the proxy in the foreground.
# The store is a redis-server of its own on the listen port + 100, started
# here: after the exec it is tollgate's child, so run.sh stops it with the peer.
port=$((${LISTEN##*:} + 100))
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --dir "$WORKDIR" --logfile "$WORKDIR/redis.log" &
exec "${TOLLGATE_BIN:?TOLLGATE_BIN is not set}" \
    --entryPoints.bench.address="$LISTEN" \
    --entryPoints.bench.transport.lifeCycle.graceTimeOut=1s \
    --providers.file.filename="$WORKDIR/dynamic.yml" \
    --stores.shared.redis.endpoints="127.0.0.1:$port" \
    --log.level=ERROR
