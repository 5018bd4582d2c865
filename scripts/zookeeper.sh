#!/usr/bin/env bash
# Installs (once) and starts or stops a throw-away standalone ZooKeeper 3.8
# for the test suite, on 127.0.0.1 only, with its data in a temporary
# directory, as the current user (root is fine: ZooKeeper needs no
# unprivileged user).
#
#   scripts/zookeeper.sh start    # install if needed, start, wait until it serves (srvr)
#   scripts/zookeeper.sh stop     # SIGTERM, then remove the data
#   scripts/zookeeper.sh restart  # stop and start again, keeping the data
#   scripts/zookeeper.sh restart-stopped  # stop, keeping the data (start resumes)
#   scripts/zookeeper.sh crash    # SIGKILL, keeping the data (start resumes)
#   scripts/zookeeper.sh wipe     # stop, delete the data, start empty (a new ensemble)
#   scripts/zookeeper.sh status   # say whether it is running
#   scripts/zookeeper.sh url      # print the store URL the tests use
#
# Port: $LEASEHOLD_ZOOKEEPER_PORT (default 21819). Data:
# $LEASEHOLD_ZOOKEEPER_DIR if set (kept by stop: the caller owns it), else
# a fresh mktemp directory, removed by stop. tickTime is 200 ms (session
# timeouts from 0.4 s to 60 s); leasehold's records use no sessions, but
# the short tick makes a restarted server serve again sooner.
# Started in about 1.2 s (Java 17, 2 cores): measured by `start`, which
# prints it.
set -euo pipefail

# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"
server zookeeper ZooKeeperServerMain "${LEASEHOLD_ZOOKEEPER_PORT:-21819}" "${LEASEHOLD_ZOOKEEPER_READY_TIMEOUT:-60}"
keeps_data "${LEASEHOLD_ZOOKEEPER_DIR:-}" /tmp/leasehold-zookeeper.XXXXXX
JAR=/usr/share/java/zookeeper.jar

install() {
    [[ -f "$JAR" ]] && command -v java >/dev/null && return 0
    apt_install zookeeper
}

# Whether it serves: the four-letter word `srvr` answers with its mode
# (`ruok` answers `imok` before the server takes sessions).
answers() {
    local reply
    reply="$(timeout 1 bash -c "exec 3<>/dev/tcp/$HOST/$PORT; printf srvr >&3; cat <&3" 2>/dev/null)" || true
    [[ "$reply" == *"Mode: standalone"* ]]
}

# Starts ZooKeeper on the data in $1 (see start_in_data_dir).
launch() {
    local base="$1"
    mkdir -p "$base/data"
    cat >"$base/zoo.cfg" <<CFG
tickTime=200
minSessionTimeout=400
maxSessionTimeout=60000
dataDir=$base/data
clientPortAddress=$HOST
clientPort=$PORT
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat
CFG
    # exec so that $! is the JVM itself.
    (exec java -Xmx256m -Dzookeeper.log.dir="$base" -cp "/etc/zookeeper/conf:$JAR" \
        org.apache.zookeeper.server.ZooKeeperServerMain "$base/zoo.cfg" </dev/null >>"$base/server.log" 2>&1) &
}

start() {
    local t0
    t0="$(date +%s%N)"
    start_in_data_dir answers server.log TERM "ZooKeeper"
    echo "zookeeper: ready in $(( ($(date +%s%N) - t0) / 1000000 )) ms" >&2
}

shutdown() { server_shutdown TERM; }

stop() { shutdown; server_remove_data_dir; }

# Stops it, keeping the data (start resumes).
restart-stopped() { shutdown; }

# A crash: SIGKILL, keeping the data (start resumes).
crash() { server_shutdown KILL; }

wipe() {
    shutdown
    local base
    base="$(server_data_dir)"
    rm -rf "$base/data"
    start
}

url() { echo "zk://$HOST:$PORT"; }

server_command "start|stop|restart|restart-stopped|crash|wipe|status|url" "$@"
