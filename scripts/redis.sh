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

# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"
server redis redis-server "${LEASEHOLD_REDIS_PORT:-63799}" "${LEASEHOLD_REDIS_READY_TIMEOUT:-30}"
keeps_data "${LEASEHOLD_REDIS_DIR:-}" /tmp/leasehold-redis.XXXXXX
PASSWORD="${LEASEHOLD_REDIS_PASSWORD:-leasehold-test-pw-5c1d}"

install() {
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
    apt_install redis-server redis-tools
    command -v redis-server >/dev/null || die "redis-server installed, but not on PATH"
}

cli() { REDISCLI_AUTH="$PASSWORD" redis-cli -h "$HOST" -p "$PORT" "$@"; }

ready() { [[ "$(cli ping 2>/dev/null)" == PONG ]]; }

# Starts the server on the data in $1 (see start_in_data_dir).
launch() {
    local base="$1" persist=(--save '' --appendonly no)
    if [[ "${LEASEHOLD_REDIS_PERSIST:-0}" == 1 ]]; then
        persist=(--save '' --appendonly yes --appendfsync always)
    fi
    # exec, so that $! is the server itself. The password goes in through a
    # config file on stdin, not the command line (which ps shows).
    (exec redis-server - --bind "$HOST" --port "$PORT" --dir "$base" "${persist[@]}" \
        --daemonize no --logfile "$base/redis.log" --maxmemory-policy noeviction \
        <<<"requirepass $PASSWORD" >/dev/null 2>&1) &
}

start() { start_in_data_dir ready redis.log INT "the server"; }

# SIGTERM: Redis saves only what its persistence settings say (an
# append-only file is flushed), then exits.
shutdown() { server_shutdown TERM; }

stop() { shutdown; server_remove_data_dir; }

url() { echo "redis://:$PASSWORD@$HOST:$PORT/0"; }

server_command "start|stop|restart|status|url" "$@"
