#!/usr/bin/env bash
# Installs (once) and starts or stops a throw-away Redis Cluster for the
# test suite, on 127.0.0.1 only, with its data in a temporary directory:
# six redis-server nodes (cluster-enabled, cluster-node-timeout 2000),
# made into three primaries with one replica each by
# `redis-cli --cluster create --cluster-replicas 1`.
#
#   scripts/redis-cluster.sh start     # install if needed, start, create the
#                                      # cluster, wait until every node says
#                                      # cluster_state:ok, all six agree on
#                                      # the slots and replicas, and every
#                                      # replica's link is up
#   scripts/redis-cluster.sh stop      # shut all six down (no save), remove the data
#   scripts/redis-cluster.sh status    # say whether it is running
#   scripts/redis-cluster.sh url       # print the URL the tests use
#   scripts/redis-cluster.sh nodes     # print CLUSTER NODES (of the first node that answers)
#   scripts/redis-cluster.sh failover SLOT_OR_KEY
#                                      # CLUSTER FAILOVER on a replica of the
#                                      # primary that serves the slot (a number
#                                      # 0-16383) or the key's slot, and wait
#                                      # until every node sees the replica serve
#                                      # it and the old primary replicates
#                                      # from it (prints the times)
#
# Ports: $LEASEHOLD_REDIS_CLUSTER_PORT (the first node, default 63820; the
# others the next five) and $LEASEHOLD_REDIS_CLUSTER_BUS_PORT (the first
# node's cluster bus port, default the first node's + 10, 63830-63835: the
# usual port + 10000 would be above 65535, which Redis refuses, and a bus
# port in Linux's ephemeral range, 32768-60999, was seen taken by some
# client's connection, the node exiting at start). The nodes
# require the password $LEASEHOLD_REDIS_CLUSTER_PASSWORD (default below;
# only for this throw-away cluster; `masterauth` too, for the replicas).
# Nothing is saved (no RDB, no AOF); each node's nodes.conf is in its
# directory in the data directory.
set -euo pipefail

# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"
server redis-cluster redis-server "${LEASEHOLD_REDIS_CLUSTER_PORT:-63820}" \
    "${LEASEHOLD_REDIS_CLUSTER_READY_TIMEOUT:-30}"
keeps_data "" /tmp/leasehold-redis-cluster.XXXXXX
PASSWORD="${LEASEHOLD_REDIS_CLUSTER_PASSWORD:-leasehold-test-pw-5c1d}"
BUS_PORT="${LEASEHOLD_REDIS_CLUSTER_BUS_PORT:-$((PORT + 10))}"
MEMBERS=()
for i in 0 1 2 3 4 5; do MEMBERS+=($((PORT + i))); done
# shellcheck source=lib/redis_group.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/redis_group.sh"

# The cluster as the node on port $1 sees it, one line a node, sorted:
#   ADDRESS FLAGS PRIMARY'S-ADDRESS-OR-- SLOTS...
# ("myself," left out of the flags, so that every node's view reads alike).
view() {
    rcli "$1" cluster nodes 2>/dev/null | tr -d '\r' | awk '
        NF >= 8 {
            n++; split($2, a, "@"); addr[n] = a[1]; byid[$1] = a[1]
            f = $3; sub(/myself,/, "", f); flags[n] = f; primary[n] = $4
            s = ""; for (i = 9; i <= NF; i++) s = s " " $i; slots[n] = s
        }
        END { for (i = 1; i <= n; i++) print addr[i], flags[i], (primary[i] == "-" ? "-" : byid[primary[i]]) slots[i] }' |
        sort
}

# The address of the primary serving slot $1 in a view (on stdin).
owner() {
    awk -v slot="$1" '$2 == "master" {
        for (i = 4; i <= NF; i++) {
            if ($i ~ /^\[/) continue
            n = split($i, r, "-"); lo = r[1]; hi = (n == 2 ? r[2] : r[1])
            if (slot + 0 >= lo + 0 && slot + 0 <= hi + 0) { print $1; exit }
        }
    }'
}

# Whether the view on stdin is a healthy cluster: three primaries with
# slots, three replicas of them, nothing failing or joining.
healthy_view() {
    awk '
        $2 == "master" && NF >= 4 { primaries++; next }
        $2 == "slave" && $3 != "-" { replicas++; next }
        { bad++ }
        END { exit !(primaries == 3 && replicas == 3 && !bad) }'
}

# Whether every node says cluster_state:ok, all six see the same healthy
# cluster, and every replica's link is up.
cluster_ready() {
    local port first="" v
    for port in "${MEMBERS[@]}"; do
        [[ "$(rcli "$port" cluster info 2>/dev/null | tr -d '\r' | awk -F: '$1 == "cluster_state" { print $2 }')" == ok ]] ||
            return 1
        v="$(view "$port")"
        healthy_view <<<"$v" || return 1
        [[ -z "$first" ]] && first="$v"
        [[ "$v" == "$first" ]] || return 1
        if [[ "$(info_field "$port" replication role)" == slave ]]; then
            [[ "$(info_field "$port" replication master_link_status)" == up ]] || return 1
        fi
    done
}

nodes_up() {
    local port
    for port in "${MEMBERS[@]}"; do
        [[ "$(rcli "$port" ping 2>/dev/null)" == PONG ]] || return 1
    done
}

start() {
    mkdir -p "$CACHE"
    group_running && return 0
    install
    local i bus=()
    for i in "${!MEMBERS[@]}"; do bus+=($((BUS_PORT + i))); done
    ports_free "${MEMBERS[@]}" "${bus[@]}"
    local t0 base config port addrs=()
    t0="$(date +%s.%N)"
    base="$(fresh_data_dir)"
    config="requirepass $PASSWORD"$'\n'"masterauth $PASSWORD"
    for i in "${!MEMBERS[@]}"; do
        port="${MEMBERS[$i]}"
        launch_member "$port" "$base/$port" "$config" --cluster-enabled yes \
            --cluster-port "${bus[$i]}" --cluster-config-file nodes.conf --cluster-node-timeout 2000
        addrs+=("$HOST:$port")
    done
    await_group nodes_up "answering"
    # The password from the environment, not -a (which ps shows).
    if ! REDISCLI_AUTH="$PASSWORD" timeout 60 redis-cli --no-auth-warning --cluster create "${addrs[@]}" \
        --cluster-replicas 1 --cluster-yes </dev/null >"$base/create.log" 2>&1; then
        cat "$base/create.log" >&2
        stop_members
        die "redis-cli --cluster create failed (above)"
    fi
    await_group cluster_ready "ready (cluster_state:ok and one view on every node, every replica's link up)"
    echo "$NAME: running in $(since "$t0") s on ports ${MEMBERS[*]} (cluster bus ${bus[*]}), data in $base" >&2
}

url() {
    local s=() port
    for port in "${MEMBERS[@]:0:3}"; do s+=("$HOST:$port"); done
    echo "redis+cluster://:$PASSWORD@$(IFS=,; echo "${s[*]}")"
}

# The port of the first node that answers.
any_node() {
    local port
    for port in "${MEMBERS[@]}"; do
        [[ "$(rcli "$port" ping 2>/dev/null)" == PONG ]] && { echo "$port"; return 0; }
    done
    die "no node answers (not running?)"
}

nodes() { rcli "$(any_node)" cluster nodes; }

failover() {
    local target="${1:-}"
    [[ -n "$target" ]] || die "usage: $0 failover SLOT_OR_KEY"
    (($(members_running) == ${#MEMBERS[@]})) || die "not running (start it first)"
    cluster_ready || die "the cluster is not settled (see: $0 nodes)"
    local node slot old new t0 answer
    node="$(any_node)"
    if [[ "$target" =~ ^[0-9]+$ ]] && ((target < 16384)); then
        slot="$target"
    else
        slot="$(rcli "$node" cluster keyslot "$target" | tr -d '\r')"
    fi
    old="$(view "$node" | owner "$slot")"
    [[ -n "$old" ]] || die "no primary serves slot $slot"
    new="$(view "$node" | awk -v p="$old" '$2 == "slave" && $3 == p { print $1; exit }')"
    [[ -n "$new" ]] || die "the primary $old of slot $slot has no replica"
    t0="$(date +%s.%N)"
    answer="$(rcli "${new##*:}" cluster failover | tr -d '\r')"
    [[ "$answer" == OK ]] || die "CLUSTER FAILOVER on $new answered: $answer"
    promoted() {
        [[ "$(rcli "${new##*:}" role 2>/dev/null | head -n 1 | tr -d '\r')" == master ]] || return 1
        local port
        for port in "${MEMBERS[@]}"; do
            [[ "$(view "$port" | owner "$slot")" == "$new" ]] || return 1
        done
    }
    await promoted 60 "failover of slot $slot: $new not its primary on every node within 60 s"
    echo "$NAME: failover of slot $slot: $new (was a replica of $old) serves it on every node after $(since "$t0") s" >&2
    await cluster_ready 60 "failover: the cluster not settled within 60 s (see: $0 nodes)"
    echo "$NAME: failover: settled (the old primary $old replicating, one view everywhere) after $(since "$t0") s" >&2
}

case "${1:-}" in
failover) failover "${2:-}" ;;
*) server_command "start|stop|status|url|nodes|failover SLOT_OR_KEY" "$@" ;;
esac
