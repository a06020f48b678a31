#!/usr/bin/env bash
# pebble.sh: install (once) Let's Encrypt's Pebble, a small ACME server for
# tests, and its companion pebble-challtestsrv (a DNS server that answers every
# name with a fixed address), for the ACME integration tests, and print the
# folder that holds them. Both come from the Go module proxy: no release
# binary can be downloaded here, but `go install` of Pebble's module at a
# tagged version works as is (no replace directives).
#
# The folder also gets copies of three files of Pebble's module, which the
# tests hand to pebble: test/certs/localhost/{cert.pem,key.pem}, the HTTPS
# certificate and key of the ACME directory (names localhost, pebble and
# 127.0.0.1), and test/certs/pebble.minica.pem, the CA that signed them, which
# a client must trust to talk to the directory. That certificate of v2.10.3
# expires on 2027-10-03: a later Pebble release ships a renewed one.
#
# Cached under ${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/pebble-<version>/ and
# reused when both binaries, the three files and the marker written last are
# there. Cold on 2 cores: about a minute with an empty build cache (110 MB of
# it); warm: instant.
# Pebble is MPL-2.0 and only ever run by tests.
#
#   export TOLLGATE_PEBBLE=$(scripts/pebble.sh)
#   scripts/pebble.sh --check    # exit 0 when the cached install would be reused, 1 when it would be made; makes nothing
#   PEBBLE_VERSION=2.10.3 scripts/pebble.sh
set -euo pipefail

version=${PEBBLE_VERSION:-2.10.3}
module=github.com/letsencrypt/pebble/v2
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/pebble-$version

# ready: everything is there and the install that made it finished. A test of
# files, no pipeline: nothing can fail it but a missing file.
ready() {
    [[ -x $cache/pebble && -x $cache/pebble-challtestsrv && -f $cache/pebble.minica.pem &&
        -f $cache/cert.pem && -f $cache/key.pem && -f $cache/.complete ]]
}

if [[ ${1:-} == --check ]]; then
    ready
    exit
fi
if ready; then
    echo "$cache"
    exit 0
fi

mkdir -p "$cache"
# One install at a time: a second caller waits for the first and reuses it.
exec 9>"$cache/.lock"
if command -v flock >/dev/null; then
    flock 9
    if ready; then
        echo "$cache"
        exit 0
    fi
fi
echo "installing pebble v$version into $cache (first run only, about a minute)" >&2
export GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# Less compiler garbage collection, as scripts/consul.sh measures it.
export GOGC=400
# Outside any module: the versions are Pebble's own go.mod's, not this
# repository's.
cd "$cache"
# Into a fresh folder first, so that a binary in the cache is always whole.
tmp=$(mktemp -d "$cache/.install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The version pebble -version reports (pebble-challtestsrv has no such
# variable; -X then sets nothing).
GOBIN=$tmp go install -trimpath -ldflags="-X main.version=v$version" \
    "$module/cmd/pebble@v$version" "$module/cmd/pebble-challtestsrv@v$version" >&2
dir=$(go mod download -json "$module@v$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[[ -d $dir ]] || { echo "pebble.sh: go mod download did not name the module's folder" >&2; exit 1; }
cp "$dir/test/certs/pebble.minica.pem" "$dir/test/certs/localhost/cert.pem" "$dir/test/certs/localhost/key.pem" "$tmp/"
chmod u+w "$tmp"/*.pem
mv -f "$tmp"/pebble "$tmp"/pebble-challtestsrv "$tmp"/*.pem "$cache/"
touch "$cache/.complete"
"$cache/pebble" -version >&2 || true
echo "$cache"
