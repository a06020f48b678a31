#!/usr/bin/env bash
# consul.sh: build (once) and print the path of a Consul agent binary for the
# integration tests and the compose demo. Debian has no Consul package and no
# release download is reachable, but the Go module proxy serves Consul's source:
#
#   - `go install github.com/hashicorp/consul@v...` is refused: Consul's go.mod
#     replaces its own sub-modules (./api, ./sdk, ./proto-public) with folders
#     the module zip does not contain;
#   - what works: download the module, copy it somewhere writable, drop only
#     the replaces that point into ./... (the tagged versions its go.mod
#     requires then come from the proxy), build with CGO off (static: the
#     demo's FROM scratch image has no dynamic loader).
#
# v1.14.11 is licensed MPL-2.0 and is the newest such release that builds here:
# later patch releases (1.15.8+, 1.16.4+) are under the Business Source
# License, and v1.15.7 and v1.16.3 need modules the proxy or the checksum
# database does not serve in a usable version. Cold build on 2 cores: 7-8
# minutes (8 beside scripts/k8s.sh's build in .ci/run), a ~135 MB binary, about
# 2 GB of module cache and 1.5 GB of build cache. The binary is cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/consul-<version>/consul and reused
# when `consul version` reports the expected version (warm: well under a
# second). The agent exits with status 1 after a clean SIGTERM: not a failure.
#
#   scripts/consul.sh            # prints the binary path (builds on first use)
#   scripts/consul.sh --check    # exit 0 when the cached binary would be reused, 1 when it would be built; builds nothing
#   CONSUL_VERSION=1.14.11 scripts/consul.sh
set -euo pipefail

version=${CONSUL_VERSION:-1.14.11}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/consul-$version
bin=$cache/consul

# cached: the binary is there and reports the expected version. Its whole
# output is taken first and then compared: with a reader that stops at the
# first match (`consul version | grep -q`), consul can die of SIGPIPE while
# writing its next line, and under pipefail that status (141) made a good
# binary look bad and rebuilt it.
cached() {
    [[ -x $bin ]] || return 1
    local out
    out=$("$bin" version 2>/dev/null) || return 1
    [[ $out == "Consul v$version"* ]]
}

if [[ ${1:-} == --check ]]; then
    cached
    exit
fi
if cached; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache"
# One build at a time: a second caller waits for the first and reuses its binary.
exec 9>"$cache/.lock"
if command -v flock >/dev/null; then
    flock 9
    if cached; then
        echo "$bin"
        exit 0
    fi
fi
echo "building consul v$version into $cache (first run only: 7-8 minutes on 2 cores, about 3.5 GB of Go caches)" >&2
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
# The compiler collects its garbage a quarter as often (GOGC=400): a cold
# build of tollgate took 18% less CPU (203 -> 166 user seconds) for 1.7 GB
# instead of 1.2 GB at its peak. The binary is the same.
export GOGC=400
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
# A test and demo server: no optimisation or inlining (-N -l) and no symbol
# tables (-s -w), as scripts/k8s.sh builds etcd and kube-apiserver.
go build -trimpath -gcflags='all=-N -l' -ldflags='-s -w' -o "$bin.tmp.$$" . >&2
mv "$bin.tmp.$$" "$bin"
"$bin" version >&2
echo "$bin"
