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

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
PORT="${LEASEHOLD_ETCD_PORT:-23799}"
PEER_PORT=$((PORT + 1))
HOST=127.0.0.1
STATE="$CACHE/etcd-$PORT"
READY_TIMEOUT="${LEASEHOLD_ETCD_READY_TIMEOUT:-30}"

die() { echo "etcd: $*" >&2; exit 1; }

apt_install() {
    local sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    $sudo apt-get update -qq >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends --no-upgrade \
        "$@" >&2 || die "apt-get install $* failed"
}

install() {
    command -v etcd >/dev/null && command -v etcdctl >/dev/null && return 0
    echo "etcd: installing etcd-server and etcd-client from the package manager" >&2
    apt_install etcd-server etcd-client
}

running_pid() {
    [[ -f "$STATE.pid" ]] || return 1
    local pid
    pid="$(cat "$STATE.pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    grep -q etcd "/proc/$pid/cmdline" 2>/dev/null || return 1
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
    echo "$pid"
}

healthy() { ETCDCTL_API=3 etcdctl --endpoints="http://$HOST:$PORT" --dial-timeout=1s endpoint health >/dev/null 2>&1; }

data_dir() {
    if [[ -n "${LEASEHOLD_ETCD_DIR:-}" ]]; then
        echo "$LEASEHOLD_ETCD_DIR"
    elif [[ -f "$STATE.dir" ]]; then
        cat "$STATE.dir"
    else
        local d
        d="$(mktemp -d /tmp/leasehold-etcd.XXXXXX)"
        echo "$d" >"$STATE.dir"
        echo "$d"
    fi
}

start() {
    mkdir -p "$CACHE"
    if pid="$(running_pid)"; then
        echo "etcd: already running (pid $pid) on $HOST:$PORT" >&2
        return 0
    fi
    install
    local base
    base="$(data_dir)"
    mkdir -p "$base"
    local state=new
    [[ -d "$base/data/member" ]] && state=existing
    # exec so that $! is etcd itself.
    (exec etcd --name leasehold-test --data-dir "$base/data" \
        --listen-client-urls "http://$HOST:$PORT" --advertise-client-urls "http://$HOST:$PORT" \
        --listen-peer-urls "http://$HOST:$PEER_PORT" --initial-advertise-peer-urls "http://$HOST:$PEER_PORT" \
        --initial-cluster "leasehold-test=http://$HOST:$PEER_PORT" --initial-cluster-state "$state" \
        --logger zap --log-level warn ${LEASEHOLD_ETCD_ARGS:-} </dev/null >>"$base/server.log" 2>&1) &
    local pid=$!
    echo "$pid" >"$STATE.pid"
    local deadline=$((SECONDS + READY_TIMEOUT))
    until healthy; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$STATE.pid"
            tail -n 20 "$base/server.log" >&2 || true
            die "etcd exited during start-up (see $base/server.log)"
        fi
        ((SECONDS < deadline)) || { kill "$pid" || true; die "not healthy within ${READY_TIMEOUT}s"; }
        sleep 0.05
    done
    echo "etcd: running (pid $pid) on $HOST:$PORT, data in $base" >&2
}

shutdown() {
    local pid
    if pid="$(running_pid)"; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        echo "etcd: stopped (pid $pid)" >&2
    else
        echo "etcd: not running" >&2
    fi
    rm -f "$STATE.pid"
}

stop() {
    shutdown
    if [[ -z "${LEASEHOLD_ETCD_DIR:-}" && -f "$STATE.dir" ]]; then
        local d
        d="$(cat "$STATE.dir")"
        [[ "$d" == /tmp/leasehold-etcd.* ]] && rm -rf "$d"
        rm -f "$STATE.dir"
    fi
}

wipe() {
    shutdown
    local base
    base="$(data_dir)"
    rm -rf "$base/data"
    start
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    restart) shutdown; start ;;
    restart-stopped) shutdown ;;
    wipe) wipe ;;
    url) echo "etcd://$HOST:$PORT" ;;
    status)
        if pid="$(running_pid)"; then echo "running (pid $pid) on $HOST:$PORT"; else echo "not running"; exit 1; fi
        ;;
    *) echo "usage: $0 start|stop|restart|wipe|status|url" >&2; exit 2 ;;
esac
