#!/bin/sh
# build.sh: build the static binaries that Dockerfile and docker-compose.yml
# copy into FROM scratch images (no base image can be pulled here). Run from
# anywhere, then `docker-compose up --build` (or `docker compose up --build`).
set -eu
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
go build -trimpath -o tollgate .
go build -trimpath -o examples/echo/echo ./examples/echo
echo "built ./tollgate and ./examples/echo/echo"
