#!/usr/bin/env bash
# test-caches.sh: once scripts/consul.sh, scripts/k8s.sh and scripts/pebble.sh
# have built and cached their binaries, every later run must reuse them. A
# check that fails now and then (consul.sh's `consul version | grep -q` under
# pipefail died of SIGPIPE in about one check in five) rebuilds for minutes.
# This asks each script's own cache check N times (--check: it builds
# nothing) and then runs each script once, which must print its path in
# seconds without building.
#
#   scripts/test-caches.sh [N]     # default 50; CI runs it after the builds
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-50}
status=0

for s in consul k8s pebble; do
    script=scripts/$s.sh
    if ! "$script" --check; then
        echo "$s: nothing cached yet: run $script first" >&2
        status=1
        continue
    fi
    reused=0
    for ((i = 0; i < n; i++)); do
        if "$script" --check; then
            reused=$((reused + 1))
        fi
    done
    start=$(date +%s%N)
    err=$("$script" 2>&1 >/dev/null)
    ms=$((($(date +%s%N) - start) / 1000000))
    echo "$s: cached build reused $reused of $n times; a full run took $ms ms${err:+ and said: $err}"
    if ((reused != n)) || [[ -n $err ]] || ((ms > 5000)); then
        echo "$s: the cache is not reliably reused" >&2
        status=1
    fi
done
exit $status
