#!/bin/sh
# build.sh: build the static binaries that Dockerfile and docker-compose.yml
# copy into FROM scratch images (no base image can be pulled here), copy
# Debian's static busybox (the image's shell and wget), and copy
# the Consul agent that scripts/consul.sh builds and caches (a few minutes the
# first time, then instant) into the Consul image's build context. Run from
# anywhere, then `docker-compose up --build` (or `docker compose up --build`).
set -eu
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
go build -trimpath -o tollgate .
go build -trimpath -o examples/echo/echo ./examples/echo
# The image's /bin/sh and wget (Dockerfile): Debian's busybox-static.
if [ ! -x /bin/busybox ]; then
    echo "build.sh: no /bin/busybox for the image's shell: apt-get install busybox-static" >&2
    exit 1
fi
cp /bin/busybox busybox
consul=$(scripts/consul.sh)
# A hard link when the cache is on the same file system, else a copy (~160 MB).
rm -f examples/consul/consul
ln "$consul" examples/consul/consul 2>/dev/null || cp "$consul" examples/consul/consul
echo "built ./tollgate and ./examples/echo/echo, copied ./busybox; Consul agent in ./examples/consul/consul"
