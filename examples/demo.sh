#!/usr/bin/env bash
# demo.sh: the compose demo (docker-compose.yml at the repository root) with
# whichever Compose this machine has: the v2 plugin (`docker compose`) or v1
# (`docker-compose`). The project is always named "tollgate", so the names the
# demo shows (containers, the automatic service guarded-tollgate@docker, the
# network tollgate_default) do not depend on the folder it was cloned into.
#
#   examples/demo.sh up        # build the binaries and images, start in the background,
#                              # return once tollgate serves all three routes
#   examples/demo.sh down      # stop and remove the containers, the network and the built images
#   examples/demo.sh logs      # follow tollgate's log (Ctrl-C stops following, not the demo)
#   examples/demo.sh compose ARGS...   # any other compose command: ps, exec consul consul reload, stop registered...
#
# `up` runs examples/build.sh first: the first time, that builds the Consul
# agent from source (scripts/consul.sh: 7-8 minutes on 2 cores, about 4 GB of
# Go caches); after that, `up` takes about a minute. The host ports move with
# TOLLGATE_DEMO_LIMITED_PORT, _GUARDED_PORT, _REGISTERED_PORT, _API_PORT and
# _CONSUL_PORT (see examples/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

project=tollgate
api=127.0.0.1:${TOLLGATE_DEMO_API_PORT:-18080}

compose() {
    if docker compose version >/dev/null 2>&1; then
        docker compose -p "$project" "$@"
    elif command -v docker-compose >/dev/null; then
        docker-compose -p "$project" "$@"
    else
        echo "demo.sh: neither the Compose v2 plugin (docker compose) nor Compose v1 (docker-compose) is installed" >&2
        exit 1
    fi
}

# served ROUTER: tollgate's API shows ROUTER enabled. The body is read whole
# before it is matched: no reader in a pipeline that could exit early.
served() {
    local body
    body=$(curl -q -s --max-time 2 "http://$api/api/tcp/routers/$1") || return 1
    [[ $body == *'"status": "enabled"'* ]]
}

# The host ports the demo publishes, with the variable that moves each.
ports=(
    "TOLLGATE_DEMO_LIMITED_PORT:${TOLLGATE_DEMO_LIMITED_PORT:-15432}"
    "TOLLGATE_DEMO_GUARDED_PORT:${TOLLGATE_DEMO_GUARDED_PORT:-16379}"
    "TOLLGATE_DEMO_REGISTERED_PORT:${TOLLGATE_DEMO_REGISTERED_PORT:-13306}"
    "TOLLGATE_DEMO_API_PORT:${TOLLGATE_DEMO_API_PORT:-18080}"
    "TOLLGATE_DEMO_CONSUL_PORT:${TOLLGATE_DEMO_CONSUL_PORT:-18500}"
)

up() {
    command -v curl >/dev/null || { echo "demo.sh: curl is needed (apt-get install curl)" >&2; exit 1; }
    if [[ -z $(compose ps -q 2>/dev/null) ]]; then # not up yet: its ports must be free
        local p
        for p in "${ports[@]}"; do
            if (exec 3<>"/dev/tcp/127.0.0.1/${p#*:}") 2>/dev/null; then
                echo "demo.sh: 127.0.0.1:${p#*:} is in use by something else: stop it, or move the demo's port with ${p%%:*}=<port> (examples/README.md)" >&2
                exit 1
            fi
        done
    fi
    examples/build.sh
    compose up -d --build
    echo "waiting for tollgate to serve limited@docker, guarded@docker and registered@consulcatalog ..."
    local deadline=$((SECONDS + 90)) r
    for r in limited@docker guarded@docker registered@consulcatalog; do
        until served "$r"; do
            if ((SECONDS > deadline)); then
                echo "demo.sh: $r is not served after 90 s; tollgate's last log lines:" >&2
                compose logs --tail=20 tollgate >&2 || true
                exit 1
            fi
            sleep 0.2
        done
    done
    cat <<EOF
demo up:
  127.0.0.1:${TOLLGATE_DEMO_LIMITED_PORT:-15432}  limited     at most 3 connections per client IP (Docker labels)
  127.0.0.1:${TOLLGATE_DEMO_GUARDED_PORT:-16379}  guarded     private source IPs only, at most 2 per IP (Docker labels)
  127.0.0.1:${TOLLGATE_DEMO_REGISTERED_PORT:-13306}  registered  at most 10 per client IP (Consul tags)
  http://$api  tollgate's admin API    http://127.0.0.1:${TOLLGATE_DEMO_CONSUL_PORT:-18500}/ui  Consul
examples/README.md has what to try; examples/demo.sh down takes it all away.
EOF
}

case ${1:-} in
up) up ;;
down) compose down --rmi local --volumes --remove-orphans ;;
logs) compose logs -f tollgate ;;
compose)
    shift
    compose "$@"
    ;;
*)
    sed -n '2,/^set /p' "$0" | sed '$d' >&2
    exit 2
    ;;
esac
