#!/usr/bin/env bash
# Installs (once) and starts or stops a throw-away three-server ZooKeeper
# ensemble for the tests, on 127.0.0.1 only, with its data in a temporary
# directory (tickTime 200 ms).
#
#   scripts/zookeeper-ensemble.sh start          # install if needed, start all three, wait for a leader
#   scripts/zookeeper-ensemble.sh stop           # stop all three, remove the data
#   scripts/zookeeper-ensemble.sh status         # say whether it is running
#   scripts/zookeeper-ensemble.sh url            # print the store URL the tests use (all three)
#   scripts/zookeeper-ensemble.sh leader         # print the leader's client port
#   scripts/zookeeper-ensemble.sh crash-leader   # SIGKILL the leader, wait until another
#                                                # leads, start it again (prints the times)
#
# Ports: $LEASEHOLD_ZOOKEEPER_ENSEMBLE_PORT (the first client port,
# default 21831; the others the next two), and for the servers' own
# traffic that port + 10, + 11, + 12 (quorum) and + 20, + 21, + 22
# (leader election). Data: $LEASEHOLD_ZOOKEEPER_ENSEMBLE_DIR if set (kept
# by stop), else a fresh mktemp directory, removed by stop.
set -euo pipefail

# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"
server zookeeper-ensemble QuorumPeerMain "${LEASEHOLD_ZOOKEEPER_ENSEMBLE_PORT:-21831}" "${LEASEHOLD_ZOOKEEPER_READY_TIMEOUT:-60}"
keeps_data "${LEASEHOLD_ZOOKEEPER_ENSEMBLE_DIR:-}" /tmp/leasehold-zookeeper-ensemble.XXXXXX
JAR=/usr/share/java/zookeeper.jar
IDS=(1 2 3)

install() {
    [[ -f "$JAR" ]] && command -v java >/dev/null && return 0
    apt_install zookeeper
}

client_port() { echo $((PORT + $1 - 1)); }

# The pid of member $1 (1-3), if it runs.
member_pid() {
    # shellcheck disable=SC2034 # (running_pid reads it)
    local PIDFILE="$STATE.$1.pid"
    running_pid
}

# What member $1 answers to `srvr`: its mode (leader, follower), or nothing.
mode() {
    local reply
    reply="$(timeout 1 bash -c "exec 3<>/dev/tcp/$HOST/$(client_port "$1"); printf srvr >&3; cat <&3" 2>/dev/null)" || true
    sed -n 's/^Mode: //p' <<<"$reply"
}

# The id of the member that leads, if one does.
leader_id() {
    local id
    for id in "${IDS[@]}"; do
        [[ "$(mode "$id")" == leader ]] && { echo "$id"; return 0; }
    done
    return 1
}

# Whether every member serves, one of them as leader.
all_serving() {
    local id
    for id in "${IDS[@]}"; do
        [[ -n "$(mode "$id")" ]] || return 1
    done
    leader_id >/dev/null
}

launch_member() {
    local id="$1" base="$2" dir="$2/$1"
    mkdir -p "$dir/data"
    echo "$id" >"$dir/data/myid"
    {
        echo "tickTime=200"
        echo "initLimit=20"
        echo "syncLimit=10"
        echo "dataDir=$dir/data"
        echo "clientPortAddress=$HOST"
        echo "clientPort=$(client_port "$id")"
        echo "admin.enableServer=false"
        echo "4lw.commands.whitelist=ruok,srvr,stat"
        echo "minSessionTimeout=400"
        echo "maxSessionTimeout=60000"
        local i
        for i in "${IDS[@]}"; do
            echo "server.$i=$HOST:$((PORT + 9 + i)):$((PORT + 19 + i))"
        done
    } >"$dir/zoo.cfg"
    (exec java -Xmx192m -Dzookeeper.log.dir="$dir" -cp "/etc/zookeeper/conf:$JAR" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" </dev/null >>"$dir/server.log" 2>&1) &
    echo $! >"$STATE.$id.pid"
}

# Waits until CHECK ($1) succeeds, every 0.1 s; dies after READY_TIMEOUT.
await() {
    local check="$1" what="$2" deadline=$((SECONDS + READY_TIMEOUT))
    until "$check"; do
        if ((SECONDS >= deadline)); then
            stop_members
            die "not $what within ${READY_TIMEOUT}s"
        fi
        sleep 0.1
    done
}

start() {
    mkdir -p "$CACHE"
    local id running=0 t0
    for id in "${IDS[@]}"; do member_pid "$id" >/dev/null && running=$((running + 1)); done
    if ((running == 3)); then
        echo "$NAME: already running on $HOST:$PORT-$((PORT + 2))" >&2
        return 0
    fi
    ((running == 0)) || stop_members
    install
    t0="$(date +%s%N)"
    local base
    base="$(server_data_dir)"
    for id in "${IDS[@]}"; do launch_member "$id" "$base"; done
    await all_serving "serving with a leader"
    echo "$NAME: running on $HOST:$PORT-$((PORT + 2)), leader $(client_port "$(leader_id)"), data in $base; ready in $((($(date +%s%N) - t0) / 1000000)) ms" >&2
}

stop_members() {
    local id pid
    for id in "${IDS[@]}"; do
        # shellcheck disable=SC2034 # (server_shutdown reads it)
        if pid="$(member_pid "$id")"; then
            PIDFILE="$STATE.$id.pid" server_shutdown TERM
        fi
        rm -f "$STATE.$id.pid"
    done
}

stop() { stop_members; server_remove_data_dir; }

status() {
    local id n=0
    for id in "${IDS[@]}"; do member_pid "$id" >/dev/null && n=$((n + 1)); done
    if ((n == 3)); then echo "running on $HOST:$PORT-$((PORT + 2))"; else echo "not running ($n of 3)"; exit 1; fi
}

url() { echo "zk://$HOST:$PORT,$HOST:$((PORT + 1)),$HOST:$((PORT + 2))"; }

leader() {
    local id
    id="$(leader_id)" || die "no leader"
    client_port "$id"
}

# Whether a member other than $OLD_LEADER leads.
new_leader() {
    local l
    l="$(leader_id)" && [[ "$l" != "$OLD_LEADER" ]]
}

crash-leader() {
    local t0 old
    old="$(leader_id)" || die "no leader"
    OLD_LEADER="$old"
    t0="$(date +%s%N)"
    PIDFILE="$STATE.$old.pid" server_shutdown KILL
    await new_leader "led by another server"
    echo "$NAME: $(client_port "$(leader_id)") leads $((($(date +%s%N) - t0) / 1000000)) ms after the leader was killed" >&2
    launch_member "$old" "$(server_data_dir)"
    await all_serving "serving again with all three"
    echo "$NAME: all three serve again $((($(date +%s%N) - t0) / 1000000)) ms after the crash" >&2
}

server_command "start|stop|status|url|leader|crash-leader" "$@"
