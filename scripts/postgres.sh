#!/usr/bin/env bash
# Installs (once) and starts or stops a throw-away PostgreSQL server for the
# test suite, on 127.0.0.1 only, with its data in a temporary directory.
#
#   scripts/postgres.sh start    # install if needed, initdb, start, wait until ready
#   scripts/postgres.sh stop     # fast shutdown (SIGINT), then remove the data
#   scripts/postgres.sh restart  # fast shutdown and start again, keeping the data
#   scripts/postgres.sh status   # say whether it is running
#   scripts/postgres.sh url      # print the URL the tests use
#
# Port: $LEASEHOLD_PG_PORT (default 54329). Data: $LEASEHOLD_PG_DIR if set
# (kept by stop: the caller owns it), else a fresh mktemp directory, removed
# by stop. The superuser `postgres` has the password $LEASEHOLD_PG_PASSWORD
# (default below; only for this throw-away server) and TCP logins need it
# (scram-sha-256). PostgreSQL refuses to run as root: as root the server
# runs as the `postgres` user the Debian package creates.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
PORT="${LEASEHOLD_PG_PORT:-54329}"
PASSWORD="${LEASEHOLD_PG_PASSWORD:-leasehold-test-pw-7e3a}"
HOST=127.0.0.1
STATE="$CACHE/postgres-$PORT"
READY_TIMEOUT="${LEASEHOLD_PG_READY_TIMEOUT:-30}"

die() { echo "postgres: $*" >&2; exit 1; }

bindir() {
    local d
    d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)"
    [[ -n "$d" && -x "$d/postgres" ]] && echo "$d"
}

install() {
    bindir >/dev/null && return 0
    echo "postgres: installing postgresql from the package manager" >&2
    local sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    $sudo apt-get update -qq >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends --no-upgrade \
        postgresql >&2 || die "apt-get install postgresql failed"
    bindir >/dev/null || die "postgresql installed, but no server binary under /usr/lib/postgresql"
}

# Runs a command as the server's user (postgres when we are root).
as_server() {
    if [[ "$(id -u)" == 0 ]]; then
        setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
    else
        "$@"
    fi
}

running_pid() {
    [[ -f "$STATE.pid" ]] || return 1
    local pid
    pid="$(cat "$STATE.pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    grep -q bin/postgres "/proc/$pid/cmdline" 2>/dev/null || return 1
    # A zombie still answers kill -0.
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
    echo "$pid"
}

ready() { "$(bindir)/pg_isready" -q -h "$HOST" -p "$PORT" 2>/dev/null; }

data_dir() {
    if [[ -n "${LEASEHOLD_PG_DIR:-}" ]]; then
        echo "$LEASEHOLD_PG_DIR"
    elif [[ -f "$STATE.dir" ]]; then
        cat "$STATE.dir"
    else
        local d
        d="$(mktemp -d /tmp/leasehold-pg.XXXXXX)"
        echo "$d" >"$STATE.dir"
        echo "$d"
    fi
}

start() {
    mkdir -p "$CACHE"
    if pid="$(running_pid)"; then
        echo "postgres: already running (pid $pid) on $HOST:$PORT" >&2
        return 0
    fi
    install
    local bin base
    bin="$(bindir)"
    base="$(data_dir)"
    mkdir -p "$base"
    [[ "$(id -u)" == 0 ]] && chown postgres:postgres "$base"
    if [[ ! -f "$base/data/PG_VERSION" ]]; then
        local pwfile="$base/pwfile"
        printf '%s\n' "$PASSWORD" >"$pwfile"
        [[ "$(id -u)" == 0 ]] && chown postgres:postgres "$pwfile"
        as_server "$bin/initdb" -D "$base/data" -U postgres --pwfile="$pwfile" \
            --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync \
            >"$base/initdb.log" 2>&1 || { cat "$base/initdb.log" >&2; die "initdb failed"; }
        rm -f "$pwfile"
    fi
    # exec (and setpriv, which execs too; not pg_ctl, which daemonizes) so
    # that $! is the postmaster itself.
    local args=("$bin/postgres" -D "$base/data" -h "$HOST" -p "$PORT" -k "$base"
        -c fsync=off -c max_connections=200)
    if [[ "$(id -u)" == 0 ]]; then
        (exec setpriv --reuid=postgres --regid=postgres --init-groups -- "${args[@]}" \
            </dev/null >>"$base/server.log" 2>&1) &
    else
        (exec "${args[@]}" </dev/null >>"$base/server.log" 2>&1) &
    fi
    local pid=$!
    echo "$pid" >"$STATE.pid"
    local deadline=$((SECONDS + READY_TIMEOUT))
    until ready; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$STATE.pid"
            tail -n 20 "$base/server.log" >&2 || true
            die "the server exited during start-up (see $base/server.log)"
        fi
        ((SECONDS < deadline)) || { kill -INT "$pid" || true; die "not ready within ${READY_TIMEOUT}s"; }
        sleep 0.05
    done
    echo "postgres: running (pid $pid) on $HOST:$PORT, data in $base" >&2
}

# Fast shutdown: SIGINT (SIGTERM would wait for clients to disconnect).
shutdown() {
    local pid
    if pid="$(running_pid)"; then
        kill -INT "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        echo "postgres: stopped (pid $pid)" >&2
    else
        echo "postgres: not running" >&2
    fi
    rm -f "$STATE.pid"
}

stop() {
    shutdown
    if [[ -z "${LEASEHOLD_PG_DIR:-}" && -f "$STATE.dir" ]]; then
        local d
        d="$(cat "$STATE.dir")"
        [[ "$d" == /tmp/leasehold-pg.* ]] && rm -rf "$d"
        rm -f "$STATE.dir"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    restart) shutdown; start ;;
    url) echo "postgres://postgres:$PASSWORD@$HOST:$PORT/postgres" ;;
    status)
        if pid="$(running_pid)"; then echo "running (pid $pid) on $HOST:$PORT"; else echo "not running"; exit 1; fi
        ;;
    *) echo "usage: $0 start|stop|restart|status|url" >&2; exit 2 ;;
esac
