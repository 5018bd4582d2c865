#!/usr/bin/env bash
# Installs (once) and starts or stops a throw-away Redis server for the test
# suite, on 127.0.0.1 only, with its data in a temporary directory.
#
#   scripts/redis.sh start    # install if needed, start, wait until ready
#   scripts/redis.sh stop     # shut down (no save), then remove the data
#   scripts/redis.sh restart  # shut down and start again (see LEASEHOLD_REDIS_PERSIST)
#   scripts/redis.sh status   # say whether it is running
#   scripts/redis.sh url      # print the URL the tests use
#
# Port: $LEASEHOLD_REDIS_PORT (default 63799). Data: $LEASEHOLD_REDIS_DIR if
# set (kept by stop: the caller owns it), else a fresh mktemp directory,
# removed by stop. LEASEHOLD_REDIS_PERSIST=1 starts it with an append-only
# file (appendonly yes, appendfsync always), so a restart keeps the data;
# by default nothing is saved (--save '', appendonly no) and a restart
# empties it. The server requires the password $LEASEHOLD_REDIS_PASSWORD
# (default below; only for this throw-away server).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
PORT="${LEASEHOLD_REDIS_PORT:-63799}"
PASSWORD="${LEASEHOLD_REDIS_PASSWORD:-leasehold-test-pw-5c1d}"
HOST=127.0.0.1
STATE="$CACHE/redis-$PORT"
READY_TIMEOUT="${LEASEHOLD_REDIS_READY_TIMEOUT:-30}"

die() { echo "redis: $*" >&2; exit 1; }

install() {
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
    echo "redis: installing redis-server and redis-tools from the package manager" >&2
    local sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    $sudo apt-get update -qq >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends --no-upgrade \
        redis-server redis-tools >&2 || die "apt-get install redis-server redis-tools failed"
    command -v redis-server >/dev/null || die "redis-server installed, but not on PATH"
}

running_pid() {
    [[ -f "$STATE.pid" ]] || return 1
    local pid
    pid="$(cat "$STATE.pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null || return 1
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
    echo "$pid"
}

cli() { REDISCLI_AUTH="$PASSWORD" redis-cli -h "$HOST" -p "$PORT" "$@"; }

ready() { [[ "$(cli ping 2>/dev/null)" == PONG ]]; }

data_dir() {
    if [[ -n "${LEASEHOLD_REDIS_DIR:-}" ]]; then
        echo "$LEASEHOLD_REDIS_DIR"
    elif [[ -f "$STATE.dir" ]]; then
        cat "$STATE.dir"
    else
        local d
        d="$(mktemp -d /tmp/leasehold-redis.XXXXXX)"
        echo "$d" >"$STATE.dir"
        echo "$d"
    fi
}

start() {
    mkdir -p "$CACHE"
    if pid="$(running_pid)"; then
        echo "redis: already running (pid $pid) on $HOST:$PORT" >&2
        return 0
    fi
    install
    local base
    base="$(data_dir)"
    mkdir -p "$base"
    local persist=(--save '' --appendonly no)
    if [[ "${LEASEHOLD_REDIS_PERSIST:-0}" == 1 ]]; then
        persist=(--save '' --appendonly yes --appendfsync always)
    fi
    # exec, so that $! is the server itself. The password goes in through a
    # config file on stdin, not the command line (which ps shows).
    (exec redis-server - --bind "$HOST" --port "$PORT" --dir "$base" "${persist[@]}" \
        --daemonize no --logfile "$base/redis.log" --maxmemory-policy noeviction \
        <<<"requirepass $PASSWORD" >/dev/null 2>&1) &
    local pid=$!
    echo "$pid" >"$STATE.pid"
    local deadline=$((SECONDS + READY_TIMEOUT))
    until ready; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$STATE.pid"
            tail -n 20 "$base/redis.log" >&2 || true
            die "the server exited during start-up (see $base/redis.log)"
        fi
        ((SECONDS < deadline)) || { kill -INT "$pid" || true; die "not ready within ${READY_TIMEOUT}s"; }
        sleep 0.05
    done
    echo "redis: running (pid $pid) on $HOST:$PORT, data in $base" >&2
}

# SIGTERM: Redis saves only what its persistence settings say (an
# append-only file is flushed), then exits.
shutdown() {
    local pid
    if pid="$(running_pid)"; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        echo "redis: stopped (pid $pid)" >&2
    else
        echo "redis: not running" >&2
    fi
    rm -f "$STATE.pid"
}

stop() {
    shutdown
    if [[ -z "${LEASEHOLD_REDIS_DIR:-}" && -f "$STATE.dir" ]]; then
        local d
        d="$(cat "$STATE.dir")"
        [[ "$d" == /tmp/leasehold-redis.* ]] && rm -rf "$d"
        rm -f "$STATE.dir"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    restart) shutdown; start ;;
    url) echo "redis://:$PASSWORD@$HOST:$PORT/0" ;;
    status)
        if pid="$(running_pid)"; then echo "running (pid $pid) on $HOST:$PORT"; else echo "not running"; exit 1; fi
        ;;
    *) echo "usage: $0 start|stop|restart|status|url" >&2; exit 2 ;;
esac
