#!/usr/bin/env bash
# Installs (once) and starts or stops a throw-away PostgreSQL server for the
# test suite, on 127.0.0.1 only, with its data in a temporary directory.
#
#   scripts/postgres.sh start    # install if needed, initdb, start, wait until ready
#   scripts/postgres.sh stop     # fast shutdown (SIGINT), then remove the data
#   scripts/postgres.sh restart  # fast shutdown and start again, keeping the data
#   scripts/postgres.sh crash    # immediate shutdown (SIGQUIT: no checkpoint, as
#                                # in a crash) and start again: crash recovery,
#                                # which empties UNLOGGED tables
#   scripts/postgres.sh status   # say whether it is running
#   scripts/postgres.sh url      # print the URL the tests use
#
# Port: $LEASEHOLD_PG_PORT (default 54329). Data: $LEASEHOLD_PG_DIR if set
# (kept by stop: the caller owns it), else a fresh mktemp directory, removed
# by stop. The superuser `postgres` has the password $LEASEHOLD_PG_PASSWORD
# (default below; only for this throw-away server) and TCP logins need it
# (scram-sha-256). PostgreSQL refuses to run as root: as root the server
# runs as the `postgres` user the Debian package creates. It runs with
# fsync=off (the tests and figures measure leasehold, not the disk), unless
# $LEASEHOLD_PG_FSYNC=on (for a figure with the disk's flushes in it).
set -euo pipefail

# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"
server postgres bin/postgres "${LEASEHOLD_PG_PORT:-54329}" "${LEASEHOLD_PG_READY_TIMEOUT:-30}"
keeps_data "${LEASEHOLD_PG_DIR:-}" /tmp/leasehold-pg.XXXXXX
PASSWORD="${LEASEHOLD_PG_PASSWORD:-leasehold-test-pw-7e3a}"

bindir() {
    local d
    d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)"
    [[ -n "$d" && -x "$d/postgres" ]] && echo "$d"
}

install() {
    bindir >/dev/null && return 0
    apt_install postgresql
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

ready() { "$(bindir)/pg_isready" -q -h "$HOST" -p "$PORT" 2>/dev/null; }

# Starts the server on the data in $1 (see start_in_data_dir); initdb first
# on a new directory.
launch() {
    local base="$1" bin
    bin="$(bindir)"
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
        -c "fsync=${LEASEHOLD_PG_FSYNC:-off}" -c max_connections=200)
    if [[ "$(id -u)" == 0 ]]; then
        (exec setpriv --reuid=postgres --regid=postgres --init-groups -- "${args[@]}" \
            </dev/null >>"$base/server.log" 2>&1) &
    else
        (exec "${args[@]}" </dev/null >>"$base/server.log" 2>&1) &
    fi
}

start() { start_in_data_dir ready server.log INT "the server"; }

# Fast shutdown: SIGINT (SIGTERM would wait for clients to disconnect).
shutdown() { server_shutdown INT; }

stop() { shutdown; server_remove_data_dir; }

# Immediate shutdown: the server exits without a checkpoint, so the next
# start recovers from the WAL as after a crash.
crash() { server_shutdown QUIT; start; }

url() { echo "postgres://postgres:$PASSWORD@$HOST:$PORT/postgres"; }

server_command "start|stop|restart|crash|status|url" "$@"
