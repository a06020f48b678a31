#!/usr/bin/env bash
# run.sh: run every scenario against every peer with the same parameters in
# one run (peers interleaved in each repetition), then write the table.
#
#   bench/run.sh                                  # direct haproxy nginx tollgate, REPS=3
#   QUICK=1 bench/run.sh                          # smoke run: short loads, REPS=1
#   SCENARIOS="conn-rate rr" REPS=5 bench/run.sh
#   AB=1 TOLLGATE_BASE_BIN=/tmp/tollgate-main bench/run.sh   # A/B: tollgate-base vs tollgate
#   AB=1 TOLLGATE_BASE_REF=main bench/run.sh      # same, base built from a git ref
#
# Settings (environment): PEERS, SCENARIOS, REPS, QUICK, LIMIT, RATE, BURST, AB, RATIOS,
# TOLLGATE_BIN, TOLLGATE_BASE_BIN, TOLLGATE_BASE_REF, ECHO_PORT, PORT_BASE,
# PG_PORT, REDIS_PORT, LAPI_PORT, OUT, COOLDOWN, CONNTRACK (auto|notrack|drain|off),
# PUBLISH, HOST_LABEL.
# bench/README.md describes them, the scenarios, and how to add either.
#
# The run keeps itself: bench/results/<date>-<time>-<host>.md (committed),
# a line in bench/results/README.md, and after a full run (every default peer
# and scenario) bench/README.md's latest table; the raw outputs stay in OUT.
#
# It installs nothing. What it needs and does not find, it names (with the
# Debian package) and skips, or stops when nothing can run without it.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BIN=${BIN:-$HERE/.bin}
OUT=${OUT:-$HERE/.out/$(date -u +%Y%m%dT%H%M%SZ)}
QUICK=${QUICK:-0}
AB=${AB:-0}
# A full run (the default peers and scenarios, not QUICK, not A/B) replaces
# bench/README.md's latest table when it publishes.
FULL=0
[[ -z ${PEERS:-} && -z ${SCENARIOS:-} && $QUICK != 1 && $AB != 1 ]] && FULL=1
if [[ $QUICK == 1 ]]; then PUBLISH=${PUBLISH:-0}; else PUBLISH=${PUBLISH:-1}; fi
HOST_LABEL=${HOST_LABEL:-}     # the results file's host part (default: from the CPU model)
if [[ $AB == 1 ]]; then
    PEERS=${PEERS:-tollgate-base tollgate}
else
    PEERS=${PEERS:-direct haproxy nginx tollgate haproxy-rate tollgate-rate haproxy-tls nginx-tls tollgate-tls tollgate-allow tollgate-chain}
fi
SCENARIOS=${SCENARIOS:-conn-rate rr pgbench redis limit-exact flood reconnect throughput idle-memory ip-spray syscalls tls-handshake tls-idle-memory}
if [[ $QUICK == 1 ]]; then REPS=${REPS:-1}; else REPS=${REPS:-3}; fi
LIMIT=${LIMIT:-10}             # per-IP concurrent connection limit, the same for every peer
RATE=${RATE:-20}               # the *-rate peers: per-IP connections per second in the long run
BURST=${BURST:-10}             # the *-rate peers: per-IP burst (tollgate's rateLimit; HAProxy has none)
RATIOS=${RATIOS:-tollgate/haproxy tollgate/nginx tollgate/nginx-halfclose tollgate-close/nginx tollgate/tollgate-base tollgate-rate/haproxy-rate tollgate-redis/tollgate tollgate-tls/haproxy-tls tollgate-tls/nginx-tls tollgate-tls/tollgate-base-tls tollgate-chain/tollgate-allow}
ECHO_PORT=${ECHO_PORT:-29000}  # the echo backend
PG_PORT=${PG_PORT:-29001}      # PostgreSQL for pgbench
REDIS_PORT=${REDIS_PORT:-29002}
LAPI_PORT=${LAPI_PORT:-29003}  # the chain peer's CrowdSec LAPI
PORT_BASE=${PORT_BASE:-29100}  # the i-th peer of PEERS listens on PORT_BASE+i
COOLDOWN=${COOLDOWN:-2}        # seconds between two measurements
CONNTRACK=${CONNTRACK:-auto}   # auto: NOTRACK rules if possible, else drain; or notrack|drain|off
DRAIN_BELOW=${DRAIN_BELOW:-20000}  # drain mode: wait until nf_conntrack_count is below this
DRAIN_MAX_WAIT=${DRAIN_MAX_WAIT:-180}  # TIME_WAIT entries live 120 s

# --- scenarios ---------------------------------------------------------------
# One line each: name, backend (echo|pg|redis), flags (pid: needs a proxy
# process, so direct is skipped; once: first repetition only; rate: runs on
# the rate-limiting peers, *-rate, too, which run no other scenario; tls:
# runs on the TLS-terminating peers, *-tls, only, which run no other; chain:
# runs on the middleware-chain peers, *-allow and *-chain, too, which run no
# other), loadgen
# arguments for a full run, and for QUICK=1. The arguments are the same for
# every peer. The name is the loadgen subcommand.
declare -A BACKEND_OF FLAGS_OF ARGS_OF
scenario() {
    BACKEND_OF[$1]=$2 FLAGS_OF[$1]=$3
    if [[ $QUICK == 1 ]]; then ARGS_OF[$1]=$5; else ARGS_OF[$1]=$4; fi
}
#        name        backend flags     full run                                            QUICK=1
scenario conn-rate   echo    chain     "-workers 16 -ips 64 -duration 10s"                 "-workers 16 -ips 64 -duration 3s"
scenario rr          echo    -         "-conns 32 -per-ip 4 -size 100 -duration 10s"       "-conns 32 -per-ip 4 -size 100 -duration 3s"
scenario pgbench     pg      -         "-clients 8 -threads 2 -duration 10s"               "-clients 8 -threads 2 -duration 3s"
scenario redis       redis   -         "-clients 8 -requests 200000 -size 100"             "-clients 8 -requests 30000 -size 100"
scenario limit-exact echo    -         "-extra 5 -cycles 5"                                "-extra 5 -cycles 3"
scenario flood       echo    -         "-workers 8 -ips 64 -duration 8s -attack-ips 2 -attack-workers 16" "-workers 8 -ips 64 -duration 3s -attack-ips 2 -attack-workers 16"
scenario reconnect   echo    rate      "-duration 10s -attack-ips 2 -victim-ips 32 -victim-every 200ms" "-duration 4s -attack-ips 2 -victim-ips 32 -victim-every 200ms"
scenario throughput  echo    -         "-streams 8 -bytes 268435456"                       "-streams 8 -bytes 33554432"
scenario idle-memory echo    pid,once  "-conns 4000 -ips 500 -settle 2s"                   "-conns 4000 -ips 500 -settle 1s"
scenario ip-spray    echo    pid,once  "-ips-per-round 50000 -rounds 3 -pause 12s"         "-ips-per-round 5000 -rounds 2 -pause 12s -settle 1s"
scenario syscalls    echo    pid,once  "-conns 2000 -rejects 2000 -round-trips 4000"       "-conns 500 -rejects 500 -round-trips 1000"
scenario tls-handshake echo  pid,tls   "-workers 16 -ips 64 -duration 10s"                 "-workers 16 -ips 64 -duration 3s"
scenario tls-idle-memory echo pid,once,tls "-conns 2000 -ips 500 -settle 2s"             "-conns 1000 -ips 250 -settle 1s"

mkdir -p "$OUT" "$BIN"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/run.log" >&2; }
die() { log "ERROR: $*"; exit 1; }

# --- processes: only those this script starts, by PID ----------------------
descendants() { # PID -> PID and all its descendants
    local out=$1 p
    for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do out="$out $(descendants "$p")"; done
    echo "$out"
}
# stop_pid PID [SIGNAL]: signal the process, wait up to 5 s, then SIGKILL it
# and whatever is left of the tree it had when asked to stop.
stop_pid() {
    local pid=${1:-} sig=${2:-TERM} tree p
    [[ -n $pid ]] || return 0
    tree=$(descendants "$pid")
    kill -"$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    for p in $tree; do kill -KILL "$p" 2>/dev/null || true; done
    wait "$pid" 2>/dev/null || true
}

LOADGEN_PID= ECHO_PID= PEER_PID= PG_PID= REDIS_PID= LAPI_PID= PG_DIR= REDIS_DIR=
ADDED_RULES=()
cleanup() {
    local r
    stop_pid "$LOADGEN_PID"; LOADGEN_PID=
    stop_pid "$PEER_PID"; PEER_PID=
    stop_pid "$ECHO_PID"; ECHO_PID=
    stop_pid "$REDIS_PID"; REDIS_PID=
    stop_pid "$LAPI_PID"; LAPI_PID=
    stop_pid "$PG_PID" INT; PG_PID=   # SIGINT: PostgreSQL's fast shutdown
    [[ -n $PG_DIR ]] && rm -rf "$PG_DIR"
    [[ -n $REDIS_DIR ]] && rm -rf "$REDIS_DIR"
    for r in "${ADDED_RULES[@]}"; do
        # shellcheck disable=SC2086  # a rule is a word list
        iptables -t raw -D $r 2>/dev/null && log "conntrack: removed rule '-t raw $r'"
    done
    ADDED_RULES=()
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# --- prerequisites -------------------------------------------------------------
command -v go >/dev/null || die "go not found: it builds the load generator (apt-get install golang-go, or a Go toolchain on PATH)"
for t in ps timeout sha256sum; do command -v $t >/dev/null || die "$t not found (apt-get install procps coreutils)"; done
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

ulimit -n "$(ulimit -Hn)"
log "results -> $OUT"
(cd "$HERE" && go build -o "$BIN/" ./cmd/loadgen ./cmd/echo ./cmd/report ./cmd/chaindata) || die "building bench/cmd failed"
LOADGEN=$BIN/loadgen

declare -A BUILT_FROM
# tollgate binaries: TOLLGATE_BIN, else a build of this checkout;
# TOLLGATE_BASE_BIN, else (with TOLLGATE_BASE_REF) a build of that ref.
if [[ " $PEERS " =~ " "tollgate(-rate|-redis|-tls|-close|-allow|-chain)?" " ]] && [[ -z ${TOLLGATE_BIN:-} ]]; then
    log "TOLLGATE_BIN not set: building this checkout ($REPO) into $BIN/tollgate"
    (cd "$REPO" && CGO_ENABLED=0 go build -o "$BIN/tollgate" .) || die "building tollgate from $REPO failed"
    TOLLGATE_BIN=$BIN/tollgate
    dirty=$(git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null || true)
    BUILT_FROM[tollgate]="built from $REPO at $(git -C "$REPO" rev-parse --short=12 HEAD 2>/dev/null || echo '?')${dirty:+ with uncommitted changes}"
fi
if [[ " $PEERS " == *" tollgate-base "* || " $PEERS " == *" tollgate-base-tls "* ]] && [[ -z ${TOLLGATE_BASE_BIN:-} && -n ${TOLLGATE_BASE_REF:-} ]]; then
    src=$(mktemp -d)
    log "building tollgate-base from git ref $TOLLGATE_BASE_REF (git archive into $src)"
    (cd "$REPO" && git archive "$TOLLGATE_BASE_REF" | tar -x -C "$src") || die "git archive $TOLLGATE_BASE_REF failed"
    (cd "$src" && CGO_ENABLED=0 go build -o "$BIN/tollgate-base" .) || die "building $TOLLGATE_BASE_REF failed"
    rm -rf "$src"
    TOLLGATE_BASE_BIN=$BIN/tollgate-base
    BUILT_FROM[tollgate-base]="built from git ref $TOLLGATE_BASE_REF ($(git -C "$REPO" rev-parse --short=12 "$TOLLGATE_BASE_REF"))"
fi
export TOLLGATE_BIN=${TOLLGATE_BIN:-} TOLLGATE_BASE_BIN=${TOLLGATE_BASE_BIN:-}

# Peers: direct is built in; any other is peers/<name>/ whose check.sh
# prints its version or what is missing.
declare -A VERSION_OF
ok_peers=()
for p in $PEERS; do
    if [[ $p == direct ]]; then ok_peers+=(direct); VERSION_OF[direct]="client to backend, no proxy"; continue; fi
    [[ -x $HERE/peers/$p/start.sh && -x $HERE/peers/$p/check.sh ]] || { log "SKIP peer $p: no peers/$p/start.sh and check.sh"; continue; }
    if v=$("$HERE/peers/$p/check.sh" 2>&1); then
        ok_peers+=("$p"); VERSION_OF[$p]=$v
    else
        log "SKIP peer $p: $v"
    fi
done
((${#ok_peers[@]} > 0)) || die "no peer can run"
PEERS=${ok_peers[*]}

# Scenarios whose tools or backends are missing are skipped, each with the
# package that would bring it.
PG_BIN_DIR=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
need_missing() { # scenario -> reason it cannot run, or nothing
    case $1 in
        pgbench)
            [[ -n $PG_BIN_DIR && -x $PG_BIN_DIR/initdb && -x $PG_BIN_DIR/postgres && -x $PG_BIN_DIR/pgbench ]] ||
                { echo "PostgreSQL not found under /usr/lib/postgresql/*/bin: apt-get install postgresql"; return; }
            if [[ $(id -u) == 0 ]]; then
                id postgres >/dev/null 2>&1 || { echo "no 'postgres' user to run PostgreSQL as (it refuses root): apt-get install postgresql"; return; }
                command -v setpriv >/dev/null || echo "setpriv not found: apt-get install util-linux"
            fi ;;
        redis)
            command -v redis-server >/dev/null || { echo "redis-server not found: apt-get install redis-server"; return; }
            command -v redis-benchmark >/dev/null || echo "redis-benchmark not found: apt-get install redis-tools" ;;
        syscalls)
            command -v strace >/dev/null || echo "strace not found: apt-get install strace" ;;
        tls-handshake | tls-idle-memory)
            command -v openssl >/dev/null || echo "openssl not found (it makes the run's certificate): apt-get install openssl" ;;
    esac
}
ok_sc=()
for s in $SCENARIOS; do
    [[ -n ${ARGS_OF[$s]+x} ]] || die "unknown scenario '$s' (known: ${!ARGS_OF[*]})"
    if why=$(need_missing "$s") && [[ -n $why ]]; then log "SKIP scenario $s: $why"; continue; fi
    ok_sc+=("$s")
done
((${#ok_sc[@]} > 0)) || die "no scenario can run"
SCENARIOS=${ok_sc[*]}

i=0
for p in $PEERS; do
    [[ $p == direct ]] || ! port_busy $((PORT_BASE + i)) || die "port $((PORT_BASE + i)) (peer $p) is in use: set PORT_BASE"
    i=$((i + 1))
done
for port in $ECHO_PORT $PG_PORT $REDIS_PORT $LAPI_PORT; do
    ! port_busy "$port" || die "port $port is in use: set ECHO_PORT, PG_PORT, REDIS_PORT, LAPI_PORT"
done

# --- connection tracking ---------------------------------------------------------
# Where netfilter's conntrack is loaded (the Docker engine loads it), loopback
# connections are tracked too: one conn-rate scenario leaves ~100k entries
# for 120 s (TIME_WAIT), the table fills, the kernel drops SYNs, and whatever
# runs next measures 1 s retransmits. Untrack loopback for the run and remove
# the rules at exit; failing that, wait for the table to drain between
# measurements. loadgen records conntrack drops, and the report flags them.
CT_MODE=off
if [[ $CONNTRACK != off && -r /proc/sys/net/netfilter/nf_conntrack_count ]]; then
    if [[ $CONNTRACK != drain && $(id -u) == 0 ]] && command -v iptables >/dev/null; then
        CT_MODE=notrack
        for r in "PREROUTING -i lo -j NOTRACK" "OUTPUT -o lo -j NOTRACK"; do
            # shellcheck disable=SC2086
            if iptables -t raw -C $r 2>/dev/null; then
                log "conntrack: rule '-t raw $r' already present (left as found)"
            elif iptables -t raw -I $r 2>/dev/null; then
                ADDED_RULES+=("$r"); log "conntrack: added rule '-t raw -I $r' for this run"
            else
                CT_MODE=drain
            fi
        done
    else
        CT_MODE=drain
    fi
    [[ $CONNTRACK == notrack && $CT_MODE != notrack ]] && die "CONNTRACK=notrack but the iptables raw rules could not be added (root and iptables needed)"
    [[ $CT_MODE == drain ]] && log "conntrack: loopback stays tracked ($([[ $CONNTRACK == drain ]] && echo CONNTRACK=drain || echo 'iptables raw rules not usable: not root, no iptables, or refused'));" \
        "waiting for nf_conntrack_count < $DRAIN_BELOW (at most ${DRAIN_MAX_WAIT}s) before each measurement"
fi
conntrack_settle() {
    [[ $CT_MODE == drain ]] || return 0
    local n waited=0
    n=$(cat /proc/sys/net/netfilter/nf_conntrack_count)
    while ((n >= DRAIN_BELOW && waited < DRAIN_MAX_WAIT)); do
        ((waited % 15 == 0)) && log "conntrack: $n entries, waiting for < $DRAIN_BELOW"
        sleep 1; waited=$((waited + 1))
        n=$(cat /proc/sys/net/netfilter/nf_conntrack_count)
    done
    ((n < DRAIN_BELOW)) || log "conntrack: still $n entries after ${DRAIN_MAX_WAIT}s; measuring anyway (see the report's warnings)"
}

# --- backends -------------------------------------------------------------------------
"$BIN/echo" -addr "127.0.0.1:$ECHO_PORT" >"$OUT/echo.log" 2>&1 &
ECHO_PID=$!
"$LOADGEN" wait -target "127.0.0.1:$ECHO_PORT" -timeout 10s || die "echo backend did not start: $(tail -2 "$OUT/echo.log")"

as_pg() { if [[ $(id -u) == 0 ]]; then setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; else "$@"; fi; }
start_postgres() {
    PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-bench-pg.XXXXXX")
    [[ $(id -u) == 0 ]] && chown postgres: "$PG_DIR"
    as_pg "$PG_BIN_DIR/initdb" -D "$PG_DIR/data" -U postgres --auth=trust -E UTF8 >"$OUT/postgres-init.log" 2>&1 ||
        { log "initdb failed: $(tail -2 "$OUT/postgres-init.log")"; return 1; }
    as_pg "$PG_BIN_DIR/postgres" -D "$PG_DIR/data" -p "$PG_PORT" -k "$PG_DIR" -c listen_addresses=127.0.0.1 \
        -c max_connections=100 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
        >"$OUT/postgres.log" 2>&1 &
    PG_PID=$!
    "$LOADGEN" wait -target "127.0.0.1:$PG_PORT" -mode hold -timeout 30s || { log "postgres did not start: $(tail -2 "$OUT/postgres.log")"; return 1; }
    for _ in $(seq 50); do "$PG_BIN_DIR/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && break; sleep 0.2; done
    "$PG_BIN_DIR/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres bench &&
        "$PG_BIN_DIR/pgbench" -i -q -s 10 -h 127.0.0.1 -p "$PG_PORT" -U postgres bench >>"$OUT/postgres-init.log" 2>&1 ||
        { log "pgbench -i failed: $(tail -2 "$OUT/postgres-init.log")"; return 1; }
}
start_redis() {
    REDIS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-bench-redis.XXXXXX")
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        --dir "$REDIS_DIR" --logfile "" >"$OUT/redis.log" 2>&1 &
    REDIS_PID=$!
    "$LOADGEN" wait -target "127.0.0.1:$REDIS_PORT" -mode hold -timeout 15s || { log "redis-server did not start: $(tail -2 "$OUT/redis.log")"; return 1; }
}
if [[ " $SCENARIOS " == *" pgbench "* ]] && ! start_postgres; then
    log "SKIP scenario pgbench: PostgreSQL could not be started (see $OUT/postgres*.log)"
    stop_pid "$PG_PID" INT; PG_PID=
    SCENARIOS=$(echo " $SCENARIOS " | sed 's/ pgbench / /')
fi
if [[ " $SCENARIOS " == *" redis "* ]] && ! start_redis; then
    log "SKIP scenario redis: redis-server could not be started (see $OUT/redis.log)"
    stop_pid "$REDIS_PID"; REDIS_PID=
    SCENARIOS=$(echo " $SCENARIOS " | sed 's/ redis / /')
fi
# The chain peer's data and its CrowdSec Local API: `crowdsec -no-cs -no-capi`
# (the LAPI alone, no Central API) with a configuration and SQLite database of
# its own under $OUT/chain, on LAPI_PORT; a bouncer key for the peer; the ban
# decisions chaindata wrote, imported with cscli. One LAPI serves the run.
LAPI_DIR=$OUT/chain LAPI_URL= LAPI_KEY= MMDB=$OUT/chain/country.mmdb LAPI_BANS=
start_lapi() {
    local cfg=$LAPI_DIR/config.yaml
    mkdir -p "$LAPI_DIR/data"
    "$BIN/chaindata" -mmdb "$MMDB" -decisions "$LAPI_DIR/decisions.csv" || { log "chaindata failed"; return 1; }
    cat >"$cfg" <<CONF
common:
  daemonize: false
  log_media: stdout
  log_level: warning
  working_dir: $LAPI_DIR
config_paths:
  config_dir: $LAPI_DIR/
  data_dir: $LAPI_DIR/data/
  simulation_path: $LAPI_DIR/simulation.yaml
  hub_dir: $LAPI_DIR/hub/
  index_path: $LAPI_DIR/hub/.index.json
  notification_dir: $LAPI_DIR/notifications/
  plugin_dir: $LAPI_DIR/plugins/
cscli:
  output: human
db_config:
  log_level: warning
  type: sqlite
  db_path: $LAPI_DIR/data/crowdsec.db
  use_wal: true
api:
  client:
    credentials_path: $LAPI_DIR/local_api_credentials.yaml
  server:
    log_level: warning
    listen_uri: 127.0.0.1:$LAPI_PORT
    profiles_path: $LAPI_DIR/profiles.yaml
    trusted_ips: [127.0.0.1, "::1"]
prometheus:
  enabled: false
CONF
    echo "simulation: off" >"$LAPI_DIR/simulation.yaml"
    printf 'name: default_ip_remediation\nfilters:\n - Alert.Remediation == true\ndecisions:\n - type: ban\n   duration: 4h\non_success: break\n' >"$LAPI_DIR/profiles.yaml"
    LAPI_URL=http://127.0.0.1:$LAPI_PORT
    # The machine and the bouncer are written to the database; the
    # decisions are imported through the running LAPI.
    {
        cscli -c "$cfg" machines add bench --password bench-password -f "$LAPI_DIR/local_api_credentials.yaml" --url "$LAPI_URL" &&
            LAPI_KEY=$(cscli -c "$cfg" -oraw bouncers add tollgate-bench)
    } >>"$OUT/lapi.log" 2>&1 || { log "cscli failed: $(tail -2 "$OUT/lapi.log")"; return 1; }
    LAPI_KEY=$(echo "$LAPI_KEY" | tail -1 | tr -d '[:space:]')
    crowdsec -c "$cfg" -no-cs -no-capi >>"$OUT/lapi.log" 2>&1 &
    LAPI_PID=$!
    "$LOADGEN" wait -target "127.0.0.1:$LAPI_PORT" -mode hold -timeout 60s || { log "the LAPI did not start: $(tail -2 "$OUT/lapi.log")"; return 1; }
    cscli -c "$cfg" decisions import -i "$LAPI_DIR/decisions.csv" >>"$OUT/lapi.log" 2>&1 ||
        { log "cscli decisions import failed: $(tail -2 "$OUT/lapi.log")"; return 1; }
    LAPI_BANS="$(($(wc -l <"$LAPI_DIR/decisions.csv") - 1)) ban decisions"
}
if [[ " $PEERS " == *" tollgate-chain "* ]] && ! start_lapi; then
    log "SKIP peer tollgate-chain: its CrowdSec LAPI could not be started (see $OUT/lapi.log)"
    stop_pid "$LAPI_PID"; LAPI_PID=
    PEERS=$(echo " $PEERS " | sed 's/ tollgate-chain / /')
fi

# The TLS peers' certificate: one ECDSA P-256 key pair for the run, the
# same file for every peer (HAProxy takes certificate and key in one file).
TLS_DIR=$OUT/tls
tls_scenarios=0
for s in $SCENARIOS; do [[ ${FLAGS_OF[$s]} == *tls* ]] && tls_scenarios=1; done
if ((tls_scenarios)); then
    mkdir -p "$TLS_DIR"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj /CN=bench.example -addext subjectAltName=DNS:bench.example \
        -keyout "$TLS_DIR/key.pem" -out "$TLS_DIR/cert.pem" >"$OUT/openssl.log" 2>&1 ||
        die "openssl could not make the TLS certificate: $(tail -2 "$OUT/openssl.log")"
    cat "$TLS_DIR/cert.pem" "$TLS_DIR/key.pem" >"$TLS_DIR/certkey.pem"
fi
backend_addr() {
    case ${BACKEND_OF[$1]} in
        echo) echo "127.0.0.1:$ECHO_PORT" ;;
        pg) echo "127.0.0.1:$PG_PORT" ;;
        redis) echo "127.0.0.1:$REDIS_PORT" ;;
    esac
}

# --- environment ------------------------------------------------------------------
bin_info() { # path peer -> sha256 prefix and where it came from
    local rev from=${BUILT_FROM[$2]:-}
    if [[ -z $from ]]; then
        rev=$(go version -m "$1" 2>/dev/null | awk '$2 == "vcs.revision" {print substr($3, 1, 12)}')
        from="commit ${rev:-not stamped in the binary}"
    fi
    echo "sha256 $(sha256sum "$1" | cut -c1-12), $from"
}
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: kernel $(uname -r), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
    echo "GOMAXPROCS: ${GOMAXPROCS:-unset (Go uses the CPU count: $(nproc))}"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "ulimit -n: $(ulimit -n); $(go version)"
    echo "conntrack: $CT_MODE (entries now: $(cat /proc/sys/net/netfilter/nf_conntrack_count 2>/dev/null || echo 'module not loaded'))"
    for s in net.ipv4.ip_local_port_range net.ipv4.tcp_tw_reuse net.core.somaxconn; do
        echo "$s = $(sysctl -n $s 2>/dev/null | tr '\t' ' ')"
    done
    for p in $PEERS; do echo "peer $p: ${VERSION_OF[$p]}"; done
    [[ " $PEERS " =~ " "tollgate(-rate|-redis|-tls|-close|-allow|-chain)?" " ]] && echo "tollgate binary: $TOLLGATE_BIN, $(bin_info "$TOLLGATE_BIN" tollgate)"
    [[ " $PEERS " == *" tollgate-base "* || " $PEERS " == *" tollgate-base-tls "* ]] && echo "tollgate-base binary: $TOLLGATE_BASE_BIN, $(bin_info "$TOLLGATE_BASE_BIN" tollgate-base)"
    [[ " $SCENARIOS " == *" pgbench "* ]] && echo "pgbench: $("$PG_BIN_DIR/pgbench" --version), server $("$PG_BIN_DIR/postgres" --version)"
    [[ " $SCENARIOS " == *" redis "* ]] && echo "redis: $(redis-server --version | cut -d' ' -f1-3)"
    [[ " $PEERS " == *" tollgate-chain "* ]] && echo "chain: $LAPI_BANS in a CrowdSec LAPI ($(crowdsec -version 2>&1 | grep -m1 -o 'v[0-9][^ ]*')), $(du -h "$MMDB" | cut -f1) country database"
    echo "LIMIT=$LIMIT RATE=$RATE BURST=$BURST REPS=$REPS QUICK=$QUICK peers: $PEERS"
    echo "scenarios: $SCENARIOS"
} >"$OUT/env.txt"
sed 's/^/  /' "$OUT/env.txt" >&2

# --- peers --------------------------------------------------------------------------
# render TEMPLATE OUTPUT: substitute ${LISTEN} ${BACKEND} ${LIMIT} ${RATE}
# ${BURST} ${WORKDIR} ${CERT} ${KEY} ${CERTKEY} ${LAPI_URL} ${LAPI_KEY}
# ${LAPI_BANS} ${MMDB} only, so every other $ in a proxy's configuration
# passes through.
render() {
    local s
    s=$(<"$1")
    s=${s//'${LISTEN}'/"$LISTEN"}
    s=${s//'${BACKEND}'/"$BACKEND"}
    s=${s//'${LIMIT}'/"$LIMIT"}
    s=${s//'${RATE}'/"$RATE"}
    s=${s//'${BURST}'/"$BURST"}
    s=${s//'${WORKDIR}'/"$WORKDIR"}
    s=${s//'${CERT}'/"$TLS_DIR/cert.pem"}
    s=${s//'${KEY}'/"$TLS_DIR/key.pem"}
    s=${s//'${CERTKEY}'/"$TLS_DIR/certkey.pem"}
    s=${s//'${LAPI_URL}'/"$LAPI_URL"}
    s=${s//'${LAPI_KEY}'/"$LAPI_KEY"}
    s=${s//'${LAPI_BANS}'/"$LAPI_BANS"}
    s=${s//'${MMDB}'/"$MMDB"}
    printf '%s\n' "$s" >"$2"
}
# start_peer NAME PORT BACKEND WAITMODE WORKDIR: render, start, wait until a
# probe through the proxy works. Sets PEER_PID.
start_peer() {
    local name=$1 dir=$HERE/peers/$1 t
    export LISTEN=127.0.0.1:$2 BACKEND=$3 LIMIT RATE BURST WORKDIR=$5
    mkdir -p "$WORKDIR"
    for t in "$dir"/*.tmpl; do
        [[ -e $t ]] && render "$t" "$WORKDIR/$(basename "${t%.tmpl}")"
    done
    "$dir/start.sh" >"$WORKDIR/stdout.log" 2>&1 &
    PEER_PID=$!
    if ! "$LOADGEN" wait -target "$LISTEN" -mode "$4" -timeout 30s 2>>"$OUT/run.log"; then
        log "peer $name did not come up on $LISTEN; last lines of $WORKDIR/stdout.log:"
        tail -5 "$WORKDIR/stdout.log" | sed 's/^/    /' >&2 || true
        stop_pid "$PEER_PID"; PEER_PID=
        return 1
    fi
}

# --- run ----------------------------------------------------------------------------
read -r -a peer_list <<<"$PEERS"
declare -A PORT_OF
for i in "${!peer_list[@]}"; do PORT_OF[${peer_list[$i]}]=$((PORT_BASE + i)); done
failures=0
for rep in $(seq "$REPS"); do
    # Rotate the peer order each repetition so that no peer always runs
    # first (or right after the heaviest one).
    k=$(((rep - 1) % ${#peer_list[@]}))
    order=("${peer_list[@]:k}" "${peer_list[@]:0:k}")
    log "repetition $rep/$REPS, peer order: ${order[*]}"
    for sc in $SCENARIOS; do
        [[ ${FLAGS_OF[$sc]} == *once* ]] && ((rep > 1)) && continue
        backend=$(backend_addr "$sc")
        mode=echo
        [[ ${BACKEND_OF[$sc]} == echo ]] || mode=hold
        [[ ${FLAGS_OF[$sc]} == *tls* ]] && mode=tls
        for peer in "${order[@]}"; do
            # The *-tls peers terminate TLS: they run the tls scenarios only,
            # and the tls scenarios run on them only.
            tls_peer=0 tls_sc=0
            [[ $peer == *-tls ]] && tls_peer=1
            [[ ${FLAGS_OF[$sc]} == *tls* ]] && tls_sc=1
            ((tls_peer == tls_sc)) || continue
            # The *-allow and *-chain peers compare middleware chains: they
            # run the chain scenarios only.
            if [[ $peer == *-allow || $peer == *-chain ]]; then
                [[ ${FLAGS_OF[$sc]} == *chain* ]] || continue
            fi
            # The *-rate peers limit the connection rate: only the rate
            # scenarios mean anything through them.
            rate=0 burst=0
            if [[ $peer == *-rate ]]; then
                [[ ${FLAGS_OF[$sc]} == *rate* ]] || continue
                rate=$RATE burst=$BURST
            fi
            if [[ $peer == direct ]]; then
                [[ ${FLAGS_OF[$sc]} == *pid* ]] && continue
                target=$backend pid=0 limit=0
            fi
            conntrack_settle
            if [[ $peer != direct ]]; then
                start_peer "$peer" "${PORT_OF[$peer]}" "$backend" "$mode" "$OUT/$peer/$sc-r$rep" ||
                    { log "FAILED: $peer $sc r$rep (peer did not start)"; failures=$((failures + 1)); continue; }
                target=127.0.0.1:${PORT_OF[$peer]} pid=$PEER_PID limit=$LIMIT
            fi
            # In the background and waited for, so that a signal to run.sh
            # is handled at once (cleanup stops it) rather than after it.
            # shellcheck disable=SC2086  # the arguments are a word list
            timeout 900 "$LOADGEN" "$sc" -peer "$peer" -rep "$rep" -target "$target" -pid "$pid" -limit "$limit" -rate "$rate" -burst "$burst" \
                ${ARGS_OF[$sc]} >>"$OUT/results.jsonl" 2> >(tee -a "$OUT/run.log" >&2) &
            LOADGEN_PID=$!
            if ! wait "$LOADGEN_PID"; then
                log "FAILED: $peer $sc r$rep"; failures=$((failures + 1))
            fi
            LOADGEN_PID=
            if [[ $peer != direct ]]; then
                kill -0 "$PEER_PID" 2>/dev/null || log "note: peer $peer exited during $sc (see $OUT/$peer/$sc-r$rep/stdout.log)"
                stop_pid "$PEER_PID"; PEER_PID=
            fi
            sleep "$COOLDOWN"
        done
    done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/env.txt"

[[ -s $OUT/results.jsonl ]] || die "no results (see $OUT/run.log)"
"$BIN/report" -in "$OUT/results.jsonl" -peers "$PEERS" -ratios "$RATIOS" -env "$OUT/env.txt" \
    -md "$OUT/table.md" -json "$OUT/summary.json" \
    -title "## tollgate comparison, LIMIT=$LIMIT, REPS=$REPS$([[ $QUICK == 1 ]] && echo ', QUICK (smoke run)'), $(date -u +%Y-%m-%d)"
log "table: $OUT/table.md ($failures failed measurements)"
cat "$OUT/table.md"

# Keep the run: its results file, its line in the index, and (a full run) the
# latest table of bench/README.md. PUBLISH=0 leaves the checkout untouched.
if [[ $PUBLISH == 1 ]]; then
    latest=()
    if [[ $FULL == 1 && $failures == 0 ]]; then latest=(-latest -readme "$HERE/README.md"); fi
    published=$("$BIN/report" publish -table "$OUT/table.md" -env "$OUT/env.txt" -results "$HERE/results" \
        -host "$HOST_LABEL" "${latest[@]}") || die "publishing the run into $HERE/results failed"
    log "kept: $published$([[ ${#latest[@]} -gt 0 ]] && echo ' (and bench/README.md'"'"'s latest table)')"
fi
