#!/usr/bin/env bash
# k8s.sh: build (once) etcd and kube-apiserver for the Kubernetes CRD provider's
# integration tests and print the folder that holds them (the layout
# KUBEBUILDER_ASSETS expects: <dir>/etcd and <dir>/kube-apiserver).
#
# No release binaries can be downloaded, so both are built from the Go module
# proxy through the wrapper modules under scripts/k8s/:
#
#   scripts/k8s/etcd/       requires go.etcd.io/etcd/server/v3 (its main package)
#   scripts/k8s/apiserver/  requires k8s.io/kubernetes and replaces each staging
#                           module with its published k8s.io/<m> release
#
# They are separate modules (their go.sum pins everything) so that neither moves
# the other's dependencies, and neither touches the main go.mod. The binaries are
# cached under ${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/k8s-<key>/, where the key
# hashes both wrappers' go.mod and go.sum: changing a version rebuilds, anything
# else reuses. Cold on 2 CPUs: ~1,000 CPU-seconds (about 8 min idle, more when
# the machine is busy), ~2-3 GB of memory, about 1 GB of module cache and 3-4 GB
# of build cache; warm: instant. etcd v3.7.3 (36 MB) and kube-apiserver (170 MB)
# are Apache-2.0 and only ever run by tests. Facts the wrappers rest on:
#
#   - `go install` of either is refused (replace directives), so each is built
#     through a wrapper module of ours that requires it;
#   - k8s.io/kubernetes replaces its staging modules with ./staging/src/... at
#     v0.0.0: the apiserver wrapper replaces each with its published
#     k8s.io/<m> release (31 of the 33 are served; the two sample modules are
#     not needed), and go.sum pins everything;
#   - one wrapper for both would move some of kube-apiserver's dependencies to
#     newer versions: they stay two modules.
#
#   export KUBEBUILDER_ASSETS=$(scripts/k8s.sh)
#   scripts/k8s.sh --check     # exit 0 when the cached binaries would be reused, 1 when they would be built
#
# The tests also find the newest complete build in the cache without
# KUBEBUILDER_ASSETS.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
wrap=$here/k8s
# Test servers only: no optimisation or inlining (-N -l) and no symbol tables
# (-s -w) take about a fifth off the cold build's CPU time (kube-apiserver:
# ~1,100 -> ~860 CPU-seconds) and change nothing the tests measure.
gcflags='all=-N -l'
ldflags='-s -w'
apiserver_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$wrap/apiserver/go.mod")
[[ -n $apiserver_version ]] || apiserver_version=$(awk '/^require k8s.io\/kubernetes/ {print $3; exit}' "$wrap/apiserver/go.mod")
# The version the server reports; pod security admission parses major and
# minor at start and panics when they are empty.
major=${apiserver_version#v}; major=${major%%.*}
minor=${apiserver_version#v*.}; minor=${minor%%.*}
v=k8s.io/component-base/version
apiserver_ldflags="$ldflags -X $v.gitVersion=$apiserver_version -X $v.gitMajor=$major -X $v.gitMinor=$minor"
key=$( (cat "$wrap/etcd/go.mod" "$wrap/etcd/go.sum" "$wrap/apiserver/go.mod" "$wrap/apiserver/go.sum"; echo "$gcflags | $ldflags | $apiserver_ldflags") | sha256sum | cut -c1-12)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/k8s-$key

# ready: both binaries are cached and the build that made them finished. A
# test of files, no pipeline: nothing can fail it but a missing file.
ready() { [[ -x $cache/etcd && -x $cache/kube-apiserver && -f $cache/.complete ]]; }

if [[ ${1:-} == --check ]]; then
    ready
    exit
fi
if ready; then
    echo "$cache"
    exit 0
fi

mkdir -p "$cache"
# One build at a time: a second caller waits for the first and reuses its binaries.
exec 9>"$cache/.lock"
if command -v flock >/dev/null; then
    flock 9
    if ready; then
        echo "$cache"
        exit 0
    fi
fi

export GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly
# The compiler collects its garbage a quarter as often: less CPU, more memory
# (scripts/consul.sh measures it). The binaries are the same.
export GOGC=400
start=$(date +%s)
if [[ ! -x $cache/etcd ]]; then
    echo "building etcd into $cache (first run only, ~1-2 min)" >&2
    (cd "$wrap/etcd" && go build -trimpath -gcflags="$gcflags" -ldflags="$ldflags" -o "$cache/etcd.tmp.$$" go.etcd.io/etcd/server/v3 >&2)
    mv "$cache/etcd.tmp.$$" "$cache/etcd"
fi
if [[ ! -x $cache/kube-apiserver ]]; then
    echo "building kube-apiserver $apiserver_version into $cache (first run only, ~7-12 min on 2 CPUs, ~2-3 GB RAM)" >&2
    (cd "$wrap/apiserver" && go build -trimpath -gcflags="$gcflags" -ldflags="$apiserver_ldflags" \
        -o "$cache/kube-apiserver.tmp.$$" k8s.io/kubernetes/cmd/kube-apiserver >&2)
    mv "$cache/kube-apiserver.tmp.$$" "$cache/kube-apiserver"
fi
touch "$cache/.complete"
echo "built etcd and kube-apiserver in $(($(date +%s) - start)) s" >&2
# The versions, each command's output taken whole (no reader that stops early).
v=$("$cache/etcd" --version 2>/dev/null) && echo "${v%%$'\n'*}" >&2
"$cache/kube-apiserver" --version >&2 || true
echo "$cache"
