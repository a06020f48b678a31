#!/usr/bin/env bash
# lint.sh: install (once) golangci-lint at the version below and run it on the
# repository with .golangci.yml (the linters and why: that file). It includes
# staticcheck's checks. Exit status: golangci-lint's (1 when it found
# something).
#
# Cached under ${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/golangci-lint-<version>/
# and reused when the binary and the marker written last are there. Cold on 2
# cores: a few minutes with an empty build cache; warm: instant.
#
#   scripts/lint.sh              # install if needed, then lint ./...
#   scripts/lint.sh --install    # install only (print the binary's path)
#   scripts/lint.sh ./proxy/...  # lint some packages
set -euo pipefail
cd "$(dirname "$0")/.."

version=${GOLANGCI_LINT_VERSION:-2.15.0}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/golangci-lint-$version
bin=$cache/golangci-lint

if [[ ! -x $bin || ! -f $cache/.complete ]]; then
    mkdir -p "$cache"
    exec 9>"$cache/.lock"
    command -v flock >/dev/null && flock 9
    if [[ ! -x $bin || ! -f $cache/.complete ]]; then
        echo "installing golangci-lint v$version into $cache (first run only)" >&2
        tmp=$(mktemp -d "$cache/.install.XXXXXX")
        trap 'rm -rf "$tmp"' EXIT
        # Outside this module: the versions are golangci-lint's own go.mod's.
        (cd "$tmp" && GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false GOGC=400 GOBIN=$tmp \
            go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$version" >&2)
        mv -f "$tmp/golangci-lint" "$bin"
        touch "$cache/.complete"
    fi
fi
if [[ ${1:-} == --install ]]; then
    echo "$bin"
    exit 0
fi
(($# > 0)) || set -- ./...
exec "$bin" run "$@"
