#!/usr/bin/env bash
# Installs (once) and starts or stops a throw-away MariaDB server (the
# MySQL-compatible server Debian ships) for the test suite, on 127.0.0.1
# only, with its data in a temporary directory.
#
#   scripts/mysql.sh start    # install if needed, initialise, start, wait until ready
#   scripts/mysql.sh stop     # shutdown (SIGTERM), then remove the data
#   scripts/mysql.sh restart  # shutdown and start again, keeping the data
#   scripts/mysql.sh crash    # SIGKILL (as in a crash) and start again: crash recovery
#   scripts/mysql.sh status   # say whether it is running
#   scripts/mysql.sh url      # print the URL the tests use
#
# Port: $LEASEHOLD_MYSQL_PORT (default 33069). Data: $LEASEHOLD_MYSQL_DIR if
# set (kept by stop: the caller owns it), else a fresh mktemp directory,
# removed by stop. The user `leasehold` (password $LEASEHOLD_MYSQL_PASSWORD,
# default below; only for this throw-away server) may do anything, and the
# database `leasehold` exists. mariadbd refuses to run as root unless told:
# as root the server runs as the `mysql` user the Debian package creates.
# InnoDB writes its log at every commit but flushes it to disk once a
# second (innodb_flush_log_at_trx_commit=2: a killed server loses nothing,
# only a machine crash would; the tests measure leasehold, not the disk),
# unless $LEASEHOLD_MYSQL_FLUSH=1.
set -euo pipefail

# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"
server mysql mariadbd "${LEASEHOLD_MYSQL_PORT:-33069}" "${LEASEHOLD_MYSQL_READY_TIMEOUT:-30}"
keeps_data "${LEASEHOLD_MYSQL_DIR:-}" /tmp/leasehold-mysql.XXXXXX
PASSWORD="${LEASEHOLD_MYSQL_PASSWORD:-leasehold-test-pw-5d1b}"

install() {
    command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null \
        && command -v mariadb-admin >/dev/null && return 0
    apt_install mariadb-server mariadb-client
}

ready() {
    mariadb-admin --no-defaults -h "$HOST" -P "$PORT" -u leasehold -p"$PASSWORD" \
        --connect-timeout=1 ping >/dev/null 2>&1
}

# Starts the server on the data in $1 (see start_in_data_dir); initialises
# a new directory first.
launch() {
    local base="$1" user=()
    if [[ "$(id -u)" == 0 ]]; then
        chown mysql:mysql "$base"
        user=(--user=mysql)
    fi
    if [[ ! -d "$base/data/mysql" ]]; then
        mariadb-install-db --no-defaults "${user[@]}" --datadir="$base/data" \
            --auth-root-authentication-method=socket --skip-test-db \
            >"$base/install.log" 2>&1 || { cat "$base/install.log" >&2; die "mariadb-install-db failed"; }
    fi
    # Run at every start (idempotent): the tests' user and database.
    cat >"$base/init.sql" <<SQL
CREATE USER IF NOT EXISTS 'leasehold'@'%' IDENTIFIED BY '$PASSWORD';
GRANT ALL PRIVILEGES ON *.* TO 'leasehold'@'%' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS leasehold;
SQL
    [[ "$(id -u)" == 0 ]] && chown mysql:mysql "$base/init.sql"
    # exec so that $! is the server itself.
    (exec mariadbd --no-defaults "${user[@]}" --datadir="$base/data" \
        --bind-address="$HOST" --port="$PORT" --socket="$base/mysqld.sock" \
        --pid-file="$base/mysqld.pid" --skip-name-resolve --init-file="$base/init.sql" \
        --innodb-flush-log-at-trx-commit="${LEASEHOLD_MYSQL_FLUSH:-2}" \
        --innodb-buffer-pool-size=64M --max-connections=500 \
        --log-error="$base/server.log" </dev/null >>"$base/server.log" 2>&1) &
}

start() { start_in_data_dir ready server.log TERM "the server"; }

shutdown() { server_shutdown TERM 400; }

stop() { shutdown; server_remove_data_dir; }

# SIGKILL: no shutdown at all; the next start recovers from InnoDB's log.
crash() { server_shutdown KILL; start; }

url() { echo "mysql://leasehold:$PASSWORD@$HOST:$PORT/leasehold"; }

server_command "start|stop|restart|crash|status|url" "$@"
