#!/usr/bin/env bash
# Installs (once) and starts or stops PgBouncer in *transaction* pooling mode
# in front of the test PostgreSQL server (scripts/postgres.sh), so that the
# PostgreSQL store's tests can also run through a transaction-mode pooler.
#
#   scripts/pgbouncer.sh start   # install if needed, start on 127.0.0.1, wait until it answers
#   scripts/pgbouncer.sh stop
#   scripts/pgbouncer.sh url     # the URL the tests use through it
#
# Port $LEASEHOLD_PGBOUNCER_PORT (default 64329), in front of
# 127.0.0.1:$LEASEHOLD_PG_PORT (default 54329), with the same password.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
PORT="${LEASEHOLD_PGBOUNCER_PORT:-64329}"
PG_PORT="${LEASEHOLD_PG_PORT:-54329}"
PASSWORD="${LEASEHOLD_PG_PASSWORD:-leasehold-test-pw-7e3a}"
HOST=127.0.0.1
STATE="$CACHE/pgbouncer-$PORT"

die() { echo "pgbouncer: $*" >&2; exit 1; }

install() {
    command -v pgbouncer >/dev/null && return 0
    echo "pgbouncer: installing pgbouncer from the package manager" >&2
    local sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends --no-upgrade \
        pgbouncer >&2 || { $sudo apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $sudo \
        apt-get install -y -qq --no-install-recommends --no-upgrade pgbouncer >&2; } \
        || die "apt-get install pgbouncer failed"
}

running_pid() {
    [[ -f "$STATE.pid" ]] || return 1
    local pid
    pid="$(cat "$STATE.pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null \
        && grep -q pgbouncer "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}

answers() { (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; }

start() {
    mkdir -p "$CACHE"
    if pid="$(running_pid)"; then
        echo "pgbouncer: already running (pid $pid) on $HOST:$PORT" >&2
        return 0
    fi
    install
    local dir
    dir="$(mktemp -d /tmp/leasehold-pgbouncer.XXXXXX)"
    echo "$dir" >"$STATE.dir"
    cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=$PG_PORT
[pgbouncer]
listen_addr = $HOST
listen_port = $PORT
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/users.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
logfile = $dir/pgbouncer.log
INI
    printf '"postgres" "%s"\n' "$PASSWORD" >"$dir/users.txt"
    # PgBouncer refuses to run as root.
    if [[ "$(id -u)" == 0 ]]; then
        chown -R postgres:postgres "$dir"
        (exec setpriv --reuid=postgres --regid=postgres --init-groups -- pgbouncer "$dir/pgbouncer.ini" \
            </dev/null >>"$dir/out.log" 2>&1) &
    else
        (exec pgbouncer "$dir/pgbouncer.ini" </dev/null >>"$dir/out.log" 2>&1) &
    fi
    local pid=$!
    echo "$pid" >"$STATE.pid"
    for _ in $(seq 1 100); do
        answers && { echo "pgbouncer: running (pid $pid) on $HOST:$PORT, transaction pooling" >&2; return 0; }
        kill -0 "$pid" 2>/dev/null || { cat "$dir/out.log" >&2; die "pgbouncer exited during start-up"; }
        sleep 0.05
    done
    die "pgbouncer did not listen on $HOST:$PORT"
}

stop() {
    local pid
    if pid="$(running_pid)"; then
        kill -INT "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill -9 "$pid" 2>/dev/null || true
        echo "pgbouncer: stopped (pid $pid)" >&2
    else
        echo "pgbouncer: not running" >&2
    fi
    rm -f "$STATE.pid"
    if [[ -f "$STATE.dir" ]]; then
        local d
        d="$(cat "$STATE.dir")"
        [[ "$d" == /tmp/leasehold-pgbouncer.* ]] && rm -rf "$d"
        rm -f "$STATE.dir"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    url) echo "postgres://postgres:$PASSWORD@$HOST:$PORT/postgres" ;;
    *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
