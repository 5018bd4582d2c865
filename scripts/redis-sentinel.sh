#!/usr/bin/env bash
# Installs (once) and starts or stops a throw-away Redis Sentinel set-up for
# the test suite, on 127.0.0.1 only, with its data in a temporary
# directory: a primary and a replica (`replicaof`), and three sentinels
# (`redis-server CONF --sentinel`) monitoring them as the master named
# `leasehold`, quorum 2, down-after-milliseconds 1000, failover-timeout 3000.
#
#   scripts/redis-sentinel.sh start     # install if needed, start, wait until
#                                       # the replica is in sync and every
#                                       # sentinel knows the primary, the
#                                       # replica and the two other sentinels
#   scripts/redis-sentinel.sh stop      # shut all five down (no save), remove the data
#   scripts/redis-sentinel.sh status    # say whether it is running
#   scripts/redis-sentinel.sh url       # print the URL the tests use
#   scripts/redis-sentinel.sh primary   # print the current primary's host:port
#   scripts/redis-sentinel.sh crash-failover  # SIGKILL the primary; wait until the
#                                       # sentinels promote the replica, start the
#                                       # old one again (empty) and wait until it
#                                       # replicates from the new one
#   scripts/redis-sentinel.sh failover  # SENTINEL FAILOVER, and wait until every
#                                       # sentinel names the other node, that node
#                                       # says it is master, and the old primary
#                                       # replicates from it (prints the times;
#                                       # about 1.5 s, then about 20 s)
#
# LEASEHOLD_REDIS_SENTINEL_FAILOVER_WAIT=promoted: failover returns once the
# other node is the primary for every sentinel, while the old primary
# still takes writes (until the sentinels demote it, about 20 s later).
#
# Ports: $LEASEHOLD_REDIS_SENTINEL_DATA_PORT (the first data node, default
# 63810; the other is the next port) and $LEASEHOLD_REDIS_SENTINEL_PORT (the
# first sentinel, default 26380; the others the next two). The data nodes
# require the password $LEASEHOLD_REDIS_SENTINEL_PASSWORD (default below;
# only for this throw-away set-up; `masterauth` for the replica, `sentinel
# auth-pass` for the sentinels). The sentinels themselves take no password.
# Nothing is saved (no RDB, no AOF). Each sentinel rewrites its own config
# file, DATA/PORT/sentinel.conf (the data directory is mode 0700).
set -euo pipefail

# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"
server redis-sentinel redis-server "${LEASEHOLD_REDIS_SENTINEL_PORT:-26380}" \
    "${LEASEHOLD_REDIS_SENTINEL_READY_TIMEOUT:-30}"
keeps_data "" /tmp/leasehold-redis-sentinel.XXXXXX
PASSWORD="${LEASEHOLD_REDIS_SENTINEL_PASSWORD:-leasehold-test-pw-5c1d}"
MASTER=leasehold
DATA_PORT="${LEASEHOLD_REDIS_SENTINEL_DATA_PORT:-63810}"
DATA_PORTS=("$DATA_PORT" $((DATA_PORT + 1)))
SENTINEL_PORTS=("$PORT" $((PORT + 1)) $((PORT + 2)))
MEMBERS=("${DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}")
# shellcheck source=lib/redis_group.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/redis_group.sh"

# redis-cli against the sentinel on port $1 (no password: not even the
# caller's REDISCLI_AUTH, which a sentinel without one refuses).
scli() {
    local port="$1"
    shift
    env -u REDISCLI_AUTH timeout 5 redis-cli -h "$HOST" -p "$port" "$@"
}

# The value of KEY ($3) for the entry named NAME ($2) in a sentinel's
# answer of key/value lists ($1: "replicas", "sentinels" or "master"; a
# master's entry is named leasehold).
#   sentinel_field replicas 127.0.0.1:63811 flags 26380   (SENTINEL_PORT: $4)
sentinel_field() {
    local what="$1" name="$2" key="$3" sport="$4" command=(sentinel "$1" "$MASTER")
    [[ "$what" == master ]] && name="$MASTER"
    scli "$sport" "${command[@]}" 2>/dev/null | tr -d '\r' | awk -v n="$name" -v k="$key" '
        NR % 2 == 1 { key = $0; next }
        key == "name" { current = $0 }
        key == k && current == n { print; exit }'
}

# The port of the primary the sentinel on port $1 names.
named_primary() {
    scli "$1" sentinel get-master-addr-by-name "$MASTER" 2>/dev/null | tr -d '\r' | sed -n 2p
}

# The current primary's port, as the first sentinel that answers names it.
primary_port() {
    local sport p
    for sport in "${SENTINEL_PORTS[@]}"; do
        p="$(named_primary "$sport")"
        [[ -n "$p" ]] && { echo "$p"; return 0; }
    done
    return 1
}

# The data node that is not on port $1.
other_node() { if [[ "$1" == "${DATA_PORTS[0]}" ]]; then echo "${DATA_PORTS[1]}"; else echo "${DATA_PORTS[0]}"; fi; }

# Whether the node on port $1 replicates from the one on port $2, its
# link up.
replicates_from() {
    [[ "$(info_field "$1" replication role)" == slave ]] &&
        [[ "$(info_field "$1" replication master_port)" == "$2" ]] &&
        [[ "$(info_field "$1" replication master_link_status)" == up ]]
}

# Whether every sentinel names the node on port $1 as the primary, sees the
# other node as a healthy replica, and knows the two other sentinels.
sentinels_agree() {
    local primary="$1" replica sport
    replica="$(other_node "$primary")"
    for sport in "${SENTINEL_PORTS[@]}"; do
        [[ "$(named_primary "$sport")" == "$primary" ]] || return 1
        [[ "$(sentinel_field master - flags "$sport")" == master ]] || return 1
        [[ "$(sentinel_field replicas "$HOST:$replica" flags "$sport")" == slave ]] || return 1
        [[ "$(sentinel_field replicas "$HOST:$replica" master-port "$sport")" == "$primary" ]] || return 1
        [[ "$(sentinel_field master - num-other-sentinels "$sport")" == 2 ]] || return 1
    done
}

ready() { replicates_from "${DATA_PORTS[1]}" "${DATA_PORTS[0]}" && sentinels_agree "${DATA_PORTS[0]}"; }
replica_synced() { replicates_from "${DATA_PORTS[1]}" "${DATA_PORTS[0]}"; }

start() {
    mkdir -p "$CACHE"
    group_running && return 0
    install
    ports_free "${MEMBERS[@]}"
    local t0 base primary="${DATA_PORTS[0]}" config sport
    t0="$(date +%s.%N)"
    base="$(fresh_data_dir)"
    config="requirepass $PASSWORD"$'\n'"masterauth $PASSWORD"
    launch_member "$primary" "$base/$primary" "$config"
    launch_member "${DATA_PORTS[1]}" "$base/${DATA_PORTS[1]}" "$config"$'\n'"replicaof $HOST $primary"
    # The sentinels start once the replica is in sync: a sentinel sees the
    # replicas in the primary's INFO, which it asks for every 10 s only.
    await_group replica_synced "the replica in sync"
    for sport in "${SENTINEL_PORTS[@]}"; do
        mkdir -p "$base/$sport"
        # Sentinel rewrites this file (its id, the sentinels and replicas
        # it found, the current primary after a failover).
        (
            umask 077
            cat >"$base/$sport/sentinel.conf" <<EOF
bind $HOST
port $sport
daemonize no
dir $base/$sport
logfile $base/$sport/redis.log
sentinel monitor $MASTER $HOST $primary 2
sentinel auth-pass $MASTER $PASSWORD
sentinel down-after-milliseconds $MASTER 1000
sentinel failover-timeout $MASTER 3000
sentinel parallel-syncs $MASTER 1
EOF
        )
        (exec redis-server "$base/$sport/sentinel.conf" --sentinel </dev/null >/dev/null 2>&1) &
        echo $! >"$STATE.$sport.pid"
    done
    await_group ready "ready (the sentinels agreeing on the primary, its replica and each other)"
    echo "$NAME: running in $(since "$t0") s: primary $HOST:$primary, replica $HOST:${DATA_PORTS[1]}," \
        "sentinels on ${SENTINEL_PORTS[*]}, data in $base" >&2
}

url() {
    local s=() sport
    for sport in "${SENTINEL_PORTS[@]}"; do s+=("$HOST:$sport"); done
    echo "redis+sentinel://:$PASSWORD@$(IFS=,; echo "${s[*]}")/$MASTER/0"
}

primary() {
    local p
    p="$(primary_port)" || die "no sentinel answers (not running?)"
    echo "$HOST:$p"
}

# Whether the node on port $1 says it is master and every sentinel names it.
is_primary_for_all() {
    [[ "$(rcli "$1" role 2>/dev/null | head -n 1 | tr -d '\r')" == master ]] || return 1
    local sport
    for sport in "${SENTINEL_PORTS[@]}"; do
        [[ "$(named_primary "$sport")" == "$1" ]] || return 1
    done
}

failover() {
    (($(members_running) == ${#MEMBERS[@]})) || die "not running (start it first)"
    local old new t0 answer deadline=$((SECONDS + 30))
    old="$(primary_port)" || die "no sentinel answers"
    new="$(other_node "$old")"
    sentinels_agree "$old" || die "the sentinels do not agree yet on $HOST:$old and its replica"
    t0="$(date +%s.%N)"
    # NOGOODSLAVE: the sentinel has not seen the replica healthy recently
    # enough yet; INPROG: a failover is still under way.
    until answer="$(scli "${SENTINEL_PORTS[0]}" sentinel failover "$MASTER" | tr -d '\r')" && [[ "$answer" == OK ]]; do
        ((SECONDS < deadline)) || die "SENTINEL FAILOVER answered: $answer"
        sleep 0.2
    done
    promoted() { is_primary_for_all "$new"; }
    await promoted 60 "failover from $HOST:$old: $HOST:$new not the primary for every sentinel within 60 s"
    echo "$NAME: failover: $HOST:$new is the primary for every sentinel after $(since "$t0") s" >&2
    [[ "${LEASEHOLD_REDIS_SENTINEL_FAILOVER_WAIT:-}" == promoted ]] && return 0
    # The sentinels turn the old primary into a replica (REPLICAOF) only
    # about 20 s later: they ask a replica for INFO every 10 s, and wait 8 s
    # after one reports itself a master. Until then it still takes writes,
    # which its full resync then discards. Another failover needs it in
    # sync: a sentinel picks a "replica" that still says master.
    settled() { replicates_from "$old" "$new" && sentinels_agree "$new"; }
    await settled 60 "failover: $HOST:$old not a replica of $HOST:$new within 60 s"
    echo "$NAME: failover: $HOST:$old replicates from it after $(since "$t0") s" >&2
}

# The primary crashes (SIGKILL: writes it had not replicated yet are lost);
# the sentinels promote the replica (about 2.5 s: down-after-milliseconds
# 1000); the old primary starts again, empty, and the sentinels make it a
# replica of the new one; returns once it replicates and every sentinel
# agrees (for the next crash).
crash_failover() {
    (($(members_running) == ${#MEMBERS[@]})) || die "not running (start it first)"
    local old new t0 pid base
    old="$(primary_port)" || die "no sentinel answers"
    new="$(other_node "$old")"
    agreed() { sentinels_agree "$old"; }
    await agreed 60 "the sentinels do not agree on $HOST:$old and its replica within 60 s"
    base="$(server_data_dir)"
    t0="$(date +%s.%N)"
    pid="$(member_pid "$old")" || die "no primary process on port $old"
    kill -KILL "$pid"
    promoted() { is_primary_for_all "$new"; }
    await promoted 60 "crash of $HOST:$old: $HOST:$new not the primary for every sentinel within 60 s"
    echo "$NAME: crash-failover: $HOST:$new is the primary for every sentinel after $(since "$t0") s" >&2
    # It comes back as it was configured (a primary, or a replica of the
    # node that is now the primary); the sentinels, which know it is not
    # the primary any more, make it a replica of the new one.
    local config="requirepass $PASSWORD"$'\n'"masterauth $PASSWORD"
    launch_member "$old" "$base/$old" "$config"
    settled() { replicates_from "$old" "$new" && sentinels_agree "$new"; }
    await settled 90 "crash-failover: $HOST:$old not a replica of $HOST:$new within 90 s"
    echo "$NAME: crash-failover: $HOST:$old replicates from it after $(since "$t0") s" >&2
}

# (The command's name, as server_command calls it.)
crash-failover() { crash_failover; }

server_command "start|stop|status|url|failover|crash-failover|primary" "$@"
