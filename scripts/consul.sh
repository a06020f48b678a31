#!/usr/bin/env bash
# consul.sh: build (once) and print the path of a Consul agent binary for the
# integration tests. Debian has no Consul package and no release download is
# reachable, so the agent is built from the Go module proxy: download the
# module, drop the replace directives that point
# into sub-module folders the zip lacks, build with CGO off. The binary is cached
# under ${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/consul-<version>/consul and reused
# when `consul version` reports the expected version.
#
#   scripts/consul.sh            # prints the binary path (builds on first use, 3-5 min)
#   CONSUL_VERSION=1.14.11 scripts/consul.sh
set -euo pipefail

version=${CONSUL_VERSION:-1.14.11}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/consul-$version
bin=$cache/consul

if [[ -x $bin ]] && "$bin" version 2>/dev/null | grep -q "^Consul v$version"; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache"
# One build at a time: a second caller waits for the first and reuses its binary.
exec 9>"$cache/.lock"
if command -v flock >/dev/null; then
    flock 9
    if [[ -x $bin ]] && "$bin" version 2>/dev/null | grep -q "^Consul v$version"; then
        echo "$bin"
        exit 0
    fi
fi
echo "building consul v$version into $cache (first run only, a few minutes)" >&2
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
modcache=$(go env GOMODCACHE)
(cd "$cache" && go mod download "github.com/hashicorp/consul@v$version" >&2)
src=$(mktemp -d "${TMPDIR:-/tmp}/consul-src.XXXXXX")
trap 'chmod -R u+w "$src" 2>/dev/null; rm -rf "$src"' EXIT
cp -r "$modcache/github.com/hashicorp/consul@v$version/." "$src/"
chmod -R u+w "$src"
cd "$src"
# Drop only the replaces that point into the module's own folders.
for m in $(go mod edit -json | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    if r["New"]["Path"].startswith("./"):
        print(r["Old"]["Path"])
' 2>/dev/null || awk '/^replace/ && /=> \.\// {print $2}' go.mod); do
    go mod edit -dropreplace="$m"
done
go build -trimpath -o "$bin.tmp.$$" . >&2
mv "$bin.tmp.$$" "$bin"
"$bin" version >&2
echo "$bin"
