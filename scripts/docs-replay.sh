#!/usr/bin/env bash
# docs-replay.sh: do what a newcomer does with the README's quickstart and
# examples/README.md's demo, and compare what every command prints with what
# the docs quote. Exit status 1 when a line differs. The quickstart is quoted
# twice, by README.md and docs/getting-started/quickstart.md: the two must
# quote the same steps (checked before the replay).
#
#   scripts/docs-replay.sh              # the quickstart: needs Go and curl (CI runs this)
#   scripts/docs-replay.sh demo         # the compose demo: Docker, Compose, bash, curl, jq
#   scripts/docs-replay.sh all
#
# What is replayed: an indented block right after an HTML comment
# `<!-- docs-replay: NAME ... -->`. In it `$ ` starts a command (from two
# spaces and a `#` on, a comment) and the lines under it are what it prints.
# The commands of a section run one after the other in one bash session, as
# typed into one terminal: functions, variables, jobs (%1) and open
# descriptors carry over. A command ending in `&` prints later: its lines are
# awaited (10 s), in any order. In a quoted line, `…` stands for any text.
# The marker is `<!-- docs-replay: NAME -->` or `<!-- docs-replay: NAME; a
# remark -->`. Blocks named "quickstart server" and "demo up" hold the command that starts
# the section (the quickstart's tollgate, stopped by its process group at the
# end; `examples/demo.sh up`, undone with `examples/demo.sh down`).
#
# Between commands the script waits for what a person's typing gives time
# for: after a command that closes held connections (`kill`, `release`),
# until tollgate's API counts none in flight (it prints how long that took).
#
# Compared after normalizing what differs between machines, not runs:
#   - addresses Docker assigns (172.16.0.0/12, 192.168.0.0/16) -> <docker-ip>
#   - Compose v1's container names (tollgate_broken_1) -> v2's (tollgate-broken-1)
#   - with TOLLGATE_DEMO_*_PORT set, the demo's default ports in commands are
#     replaced by those
# Accepted in place of a quoted line, with a note:
#   - for `curl: (56) Recv failure: Connection reset by peer`: curl's `(7)
#     Failed to connect ... Couldn't connect to server`, the same reset
#     arriving before curl saw its connect complete (both are how a refusal
#     looks: docs/reference/middlewares/index.md, "How a refusal looks").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

sections=${1:-quickstart}
[[ $sections == all ]] && sections="quickstart demo"

work=$(mktemp -d "${TMPDIR:-/tmp}/docs-replay.XXXXXX")
failures=0
cleanups=()
cleanup() {
    local i
    for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# curl prints a progress meter when its output is not a terminal, as here,
# and none in a terminal: this makes it print what a terminal shows.
mkdir -p "$work/curl"
printf 'silent\nshow-error\n' >"$work/curl/.curlrc"
export CURL_HOME=$work/curl

# block FILE NAME [N]: the lines of the N-th (default 1st) block named NAME,
# without their 4-space indent.
block() {
    awk -v name="$2" -v want="${3:-1}" '
        index($0, "<!-- docs-replay: " name ";") == 1 || $0 == "<!-- docs-replay: " name " -->" { n++; if (n == want) { on = 1; started = 0 }; next }
        on && /^    / { started = 1; print substr($0, 5); next }
        on && started && /^$/ { print ""; next }
        on && started { exit }
        on && !/^$/ { exit }
    ' "$1" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
}

# blocks FILE NAME: how many blocks are named NAME.
blocks() {
    awk -v name="$2" 'index($0, "<!-- docs-replay: " name ";") == 1 || $0 == "<!-- docs-replay: " name " -->" { n++ } END { print n + 0 }' "$1"
}

normalize() {
    sed -E \
        -e 's/\b172\.(1[6-9]|2[0-9]|3[01])\.[0-9]+\.[0-9]+\b/<docker-ip>/g' \
        -e 's/\b192\.168\.[0-9]+\.[0-9]+\b/<docker-ip>/g' \
        -e 's/\btollgate_([a-z0-9]+)_([0-9]+)\b/tollgate-\1-\2/g'
}

# matches ACTUAL EXPECTED: one line, `…` in EXPECTED standing for any text.
matches() {
    local pat
    pat=$(printf '%s' "$2" | sed -e 's/[][\\*?]/\\&/g' -e 's/…/*/g')
    # shellcheck disable=SC2053 # the right side is a pattern on purpose
    [[ $1 == $pat ]]
}


# compare NAME STEP EXPECTED-FILE ACTUAL-FILE [sorted]
compare() {
    local name=$1 step=$2 exp=$3 act=$4 sorted=${5:-}
    normalize <"$exp" >"$exp.n"
    normalize <"$act" >"$act.n"
    if [[ -n $sorted ]]; then
        sort -o "$exp.n" "$exp.n"
        sort -o "$act.n" "$act.n"
    fi
    local -a e a
    mapfile -t e <"$exp.n"
    mapfile -t a <"$act.n"
    local ok=1 i n=${#e[@]}
    ((${#a[@]} > n)) && n=${#a[@]}
    for ((i = 0; i < n; i++)); do
        local want=${e[i]-<nothing>} got=${a[i]-<nothing>}
        if matches "$got" "$want"; then
            continue
        fi
        ok=0
        echo "   line $((i + 1)): want: $want"
        echo "   line $((i + 1)):  got: $got"
    done
    if ((ok)); then
        return 0
    fi
    echo "!! $name, step $step: output differs from the docs"
    failures=$((failures + 1))
    return 1
}

# wait_for DEADLINE-SECONDS COMMAND...: poll until COMMAND succeeds.
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.05
    done
}

# The bash session the steps run in, fed one command at a time.
start_session() {
    mkfifo "$work/session.in"
    bash --norc --noprofile <"$work/session.in" >"$work/session.log" 2>&1 &
    session_pid=$!
    exec 7>"$work/session.in"
    cleanups+=("exec 7>&-; wait $session_pid 2>/dev/null")
}

# run_steps NAME FILE SETTLED-COMMAND: replay every block NAME of FILE.
run_steps() {
    local name=$1 file=$2 settled=$3 nblocks b step=0
    nblocks=$(blocks "$file" "$name")
    ((nblocks > 0)) || { echo "!! $file has no docs-replay block named $name"; failures=$((failures + 1)); return; }
    for ((b = 1; b <= nblocks; b++)); do
        local cmd="" exp=""
        local -a cmds=() exps=()
        while IFS= read -r line; do
            if [[ $line == '$ '* ]]; then
                [[ -n $cmd ]] && { cmds+=("$cmd"); exps+=("$exp"); }
                cmd=${line#'$ '}
                cmd=$(printf '%s' "$cmd" | sed -E 's/ {2,}# .*$//')
                exp=""
            else
                exp+="$line"$'\n'
            fi
        done < <(block "$file" "$name" "$b")
        [[ -n $cmd ]] && { cmds+=("$cmd"); exps+=("$exp"); }
        local i
        for ((i = 0; i < ${#cmds[@]}; i++)); do
            step=$((step + 1))
            local c=${cmds[i]} out=$work/$name.$step.out rc=$work/$name.$step.rc
            c=$(substitute_ports "$c")
            printf '%s' "${exps[i]}" >"$work/$name.$step.want"
            echo "\$ $c"
            printf '%s\n' "eval $(printf '%q' "$c") </dev/null >$(printf '%q' "$out") 2>&1; echo \$? >$(printf '%q' "$rc")" >&7
            if ! wait_for 120 test -s "$rc"; then
                echo "!! $name, step $step: still running after 120 s"
                failures=$((failures + 1))
                return
            fi
            local sorted=""
            if [[ $c =~ \&[[:space:]]*$ ]]; then # output comes later, in any order
                local want_lines
                want_lines=$(grep -c '' "$work/$name.$step.want" || true)
                wait_for 10 awk -v n="$want_lines" 'END { exit NR < n }' "$out" || true
                sorted=1
            fi
            sed 's/^/   /' "$out"
            compare "$name" "$step" "$work/$name.$step.want" "$out" $sorted || true
            if [[ $c =~ (^|[;&[:space:]])(kill|release)([[:space:]]|$) ]]; then
                local start_ns
                start_ns=$(date +%s%N)
                # shellcheck disable=SC2086 # settled is a command and its argument
                if wait_for 10 $settled; then
                    echo "   (tollgate counted no connection in flight $((($(date +%s%N) - start_ns) / 1000000)) ms later)"
                else
                    echo "!! $name, step $step: connections still counted in flight 10 s later"
                    failures=$((failures + 1))
                fi
            fi
        done
    done
}

substitute_ports() {
    local c=$1 v
    for v in LIMITED:15432 GUARDED:16379 REGISTERED:13306 API:18080 CONSUL:18500; do
        local var=TOLLGATE_DEMO_${v%%:*}_PORT
        [[ -n ${!var:-} ]] && c=${c//${v##*:}/${!var}}
    done
    printf '%s' "$c"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# none_in_flight URL: no inFlightConn middleware of the rawdata at URL
# counts a connection. The body is read whole before it is matched.
none_in_flight() {
    local body
    body=$(curl -q -s --max-time 2 "$1") || return 1
    [[ -n $body && ! $body =~ \"inFlight\":\ *[1-9] ]]
}

quickstart_page=docs/getting-started/quickstart.md

quickstart() {
    echo "== quickstart (README.md, $quickstart_page)"
    local p
    for p in 7000 7001 8080; do
        port_free "$p" || { echo "!! 127.0.0.1:$p is in use: the quickstart needs it (ss -ltnp | grep :$p)"; failures=$((failures + 1)); return; }
    done
    # The docs page quotes the same steps as the README: one replay holds both.
    local name
    for name in "quickstart server" quickstart; do
        if [[ $(blocks README.md "$name") != $(blocks "$quickstart_page" "$name") ]] ||
            ! diff <(block README.md "$name") <(block "$quickstart_page" "$name") >"$work/quickstart.diff"; then
            echo "!! $quickstart_page and README.md quote different '$name' blocks:"
            sed 's/^/   /' "$work/quickstart.diff"
            failures=$((failures + 1))
        fi
    done
    local server
    server=$(block README.md "quickstart server")
    [[ -n $server ]] || { echo "!! README.md has no quickstart server block"; failures=$((failures + 1)); return; }
    echo "\$ $server    (in the background; its log: $work/quickstart-server.log)"
    # Its own process group, so that stopping it stops what `go run` started.
    setsid bash -c "exec $server" >"$work/quickstart-server.log" 2>&1 &
    local pgid=$!
    cleanups+=("kill -TERM -- -$pgid 2>/dev/null; wait $pgid 2>/dev/null")
    local t0=$SECONDS
    # A first `go run` downloads the modules: minutes on a fresh machine.
    if ! wait_for 600 router_enabled 127.0.0.1:8080 demo@file; then
        echo "!! tollgate did not serve demo@file within 600 s; its log:"
        sed 's/^/   /' "$work/quickstart-server.log"
        failures=$((failures + 1))
        return
    fi
    echo "   (serving after $((SECONDS - t0)) s)"
    start_session
    run_steps quickstart README.md "none_in_flight http://127.0.0.1:8080/api/rawdata"
}

router_enabled() {
    local body
    body=$(curl -q -s --max-time 2 "http://$1/api/tcp/routers/$2") || return 1
    [[ $body == *'"status": "enabled"'* ]]
}

demo() {
    echo "== demo (examples/README.md)"
    if [[ -n $(docker ps -q --filter label=com.docker.compose.project=tollgate) ]]; then
        echo "!! the demo is already up (compose project tollgate): examples/demo.sh down first, so that its counters start from zero"
        failures=$((failures + 1))
        return
    fi
    local up down
    up=$(block examples/README.md "demo up" | sed -n '1s/  *#.*//p')
    down=$(block examples/README.md "demo up" | sed -n '2s/  *#.*//p')
    [[ $up == *" up" && $down == *" down" ]] || { echo "!! examples/README.md: no 'demo up' block with the up and down commands"; failures=$((failures + 1)); return; }
    cleanups+=("echo '\$ $down'; $down >'$work/demo-down.log' 2>&1 || { echo '!! $down failed:'; cat '$work/demo-down.log'; }")
    echo "\$ $up    (its output: $work/demo-up.log)"
    local t0=$SECONDS
    if ! $up >"$work/demo-up.log" 2>&1; then
        echo "!! $up failed:"
        tail -30 "$work/demo-up.log" | sed 's/^/   /'
        failures=$((failures + 1))
        return
    fi
    echo "   (up in $((SECONDS - t0)) s)"
    start_session
    run_steps demo examples/README.md "none_in_flight http://127.0.0.1:${TOLLGATE_DEMO_API_PORT:-18080}/api/rawdata"
}

for s in $sections; do
    case $s in
    quickstart) quickstart ;;
    demo) demo ;;
    *)
        echo "docs-replay.sh: unknown section $s (quickstart, demo, all)" >&2
        exit 2
        ;;
    esac
    # Each section stops what it started before the next one starts.
    for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
    cleanups=()
    [[ -e $work/session.in ]] && rm -f "$work/session.in"
done

if ((failures)); then
    echo "== $failures difference(s) from the docs"
    exit 1
fi
echo "== every command printed what the docs quote"
