#!/usr/bin/env bash
# Installs (once) and starts or stops a throw-away single-member etcd for
# the test suite, on 127.0.0.1 only, with its data in a temporary directory.
#
#   scripts/etcd.sh start    # install if needed, start, wait until healthy
#   scripts/etcd.sh stop     # SIGTERM, then remove the data
#   scripts/etcd.sh restart  # stop and start again, keeping the data
#   scripts/etcd.sh restart-stopped  # stop, keeping the data (start resumes)
#   scripts/etcd.sh wipe     # stop, delete the data, start empty (a new cluster)
#   scripts/etcd.sh status   # say whether it is running
#   scripts/etcd.sh url      # print the store URL the tests use
#
# Ports: $LEASEHOLD_ETCD_PORT (client, default 23799) and the next one
# (peer). Data: $LEASEHOLD_ETCD_DIR if set (kept by stop: the caller owns
# it), else a fresh mktemp directory, removed by stop. $LEASEHOLD_ETCD_ARGS:
# more etcd flags (split on spaces), for tests that need a setting.
set -euo pipefail

# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"
server etcd etcd "${LEASEHOLD_ETCD_PORT:-23799}" "${LEASEHOLD_ETCD_READY_TIMEOUT:-30}"
keeps_data "${LEASEHOLD_ETCD_DIR:-}" /tmp/leasehold-etcd.XXXXXX
PEER_PORT=$((PORT + 1))

install() {
    command -v etcd >/dev/null && command -v etcdctl >/dev/null && return 0
    apt_install etcd-server etcd-client
}

healthy() { ETCDCTL_API=3 etcdctl --endpoints="http://$HOST:$PORT" --dial-timeout=1s endpoint health >/dev/null 2>&1; }

# Starts etcd on the data in $1 (see start_in_data_dir).
launch() {
    local base="$1" state=new
    [[ -d "$base/data/member" ]] && state=existing
    # exec so that $! is etcd itself.
    (exec etcd --name leasehold-test --data-dir "$base/data" \
        --listen-client-urls "http://$HOST:$PORT" --advertise-client-urls "http://$HOST:$PORT" \
        --listen-peer-urls "http://$HOST:$PEER_PORT" --initial-advertise-peer-urls "http://$HOST:$PEER_PORT" \
        --initial-cluster "leasehold-test=http://$HOST:$PEER_PORT" --initial-cluster-state "$state" \
        --logger zap --log-level warn ${LEASEHOLD_ETCD_ARGS:-} </dev/null >>"$base/server.log" 2>&1) &
}

start() { start_in_data_dir healthy server.log TERM etcd; }

shutdown() { server_shutdown TERM; }

stop() { shutdown; server_remove_data_dir; }

# Stops it, keeping the data (start resumes).
restart-stopped() { shutdown; }

wipe() {
    shutdown
    local base
    base="$(server_data_dir)"
    rm -rf "$base/data"
    start
}

url() { echo "etcd://$HOST:$PORT"; }

server_command "start|stop|restart|restart-stopped|wipe|status|url" "$@"
