#!/usr/bin/env bash
# Installs (once, cached) and starts or stops Azurite's blob service for the
# Azure backend's tests.
#
#   scripts/azurite.sh start   # idempotent: does nothing if it already answers
#   scripts/azurite.sh stop
#   scripts/azurite.sh connection-string   # the development account on its port
#
# Azurite 3.35.0 is pinned: later releases need Node 21+. It listens on
# 127.0.0.1:10000 (or $LEASEHOLD_AZURITE_PORT, or $AZURITE_PORT) with in-memory storage; its log is
# .cache/azurite.log and the PID of the node process itself is in
# .cache/azurite.pid (azurite-PORT.log and .pid on another port).
set -euo pipefail

VERSION=3.35.0
HOST=127.0.0.1
PORT="${LEASEHOLD_AZURITE_PORT:-${AZURITE_PORT:-10000}}"
if [[ "$PORT" == 10000 ]]; then SUFFIX=""; else SUFFIX="-$PORT"; fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
PREFIX="$CACHE/azurite"
LOG="$CACHE/azurite$SUFFIX.log"
PIDFILE="$CACHE/azurite$SUFFIX.pid"
READY_TIMEOUT_S=${AZURITE_READY_TIMEOUT_S:-30}

answers() {
    # Any HTTP answer will do (Azurite says 400 to a bare GET /).
    (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
}

running_pid() {
    [[ -f "$PIDFILE" ]] || return 1
    local pid
    pid=$(cat "$PIDFILE")
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

install() {
    local installed="$PREFIX/node_modules/azurite/package.json"
    if [[ -f "$installed" ]] && grep -q "\"version\": \"$VERSION\"" "$installed"; then
        return 0
    fi
    command -v npm >/dev/null || { echo "azurite.sh: npm is required" >&2; exit 1; }
    echo "azurite.sh: installing azurite@$VERSION into $PREFIX" >&2
    mkdir -p "$PREFIX"
    npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "azurite@$VERSION" >&2
}

start() {
    if running_pid >/dev/null && answers; then
        echo "azurite.sh: already running (pid $(cat "$PIDFILE"))" >&2
        return 0
    fi
    if answers; then
        # Another checkout's (or a benchmark's) Azurite: tests use their own
        # containers, so share it; `stop` leaves it alone (no pid file here).
        if curl -sI --max-time 2 "http://$HOST:$PORT/devstoreaccount1?comp=list" 2>/dev/null | grep -qi '^server: azurite'; then
            echo "azurite.sh: reusing the Azurite already listening on $HOST:$PORT" >&2
            return 0
        fi
        echo "azurite.sh: something else already listens on $HOST:$PORT; not starting" >&2
        exit 1
    fi
    install
    mkdir -p "$CACHE"
    : >"$LOG"
    # exec: the PID we record is node's own, not a wrapping shell's.
    (
        cd "$CACHE"
        exec node "$PREFIX/node_modules/azurite/dist/src/blob/main.js" \
            --blobHost "$HOST" --blobPort "$PORT" \
            --inMemoryPersistence --skipApiVersionCheck --disableTelemetry \
            >>"$LOG" 2>&1 </dev/null
    ) &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    local deadline=$((SECONDS + READY_TIMEOUT_S))
    until grep -q "successfully listens" "$LOG" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "azurite.sh: azurite exited during startup; log follows:" >&2
            cat "$LOG" >&2
            rm -f "$PIDFILE"
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            echo "azurite.sh: azurite not ready after ${READY_TIMEOUT_S}s; log follows:" >&2
            cat "$LOG" >&2
            kill "$pid" 2>/dev/null || true
            rm -f "$PIDFILE"
            exit 1
        fi
        sleep 0.2
    done
    echo "azurite.sh: azurite $VERSION listening on $HOST:$PORT (pid $pid)" >&2
}

stop() {
    local pid
    if pid=$(running_pid); then
        kill "$pid"
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
        echo "azurite.sh: stopped (pid $pid)" >&2
    fi
    rm -f "$PIDFILE"
}

# Azurite's well-known development account (public, documented by
# Microsoft; the Rust code's copy is leasehold_azure::DEV_KEY).
DEV_KEY="Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    connection-string)
        echo "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=$DEV_KEY;BlobEndpoint=http://$HOST:$PORT/devstoreaccount1;"
        ;;
    *) echo "usage: $0 start|stop|connection-string" >&2; exit 2 ;;
esac
