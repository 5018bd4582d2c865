# shellcheck shell=bash
# A group of redis-server processes started and stopped together
# (scripts/redis-sentinel.sh: two data nodes and three sentinels;
# scripts/redis-cluster.sh: six cluster nodes), sourced after lib/server.sh,
# `server` and `keeps_data`. Each member is named by its port: its pid file
# is STATE.PORT.pid, its files are in DATA/PORT/ (its log DATA/PORT/redis.log).
# The script sets MEMBERS (every member's port) and PASSWORD (the data
# nodes'), and has its `install` (below, the Debian packages).

install() {
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
    apt_install redis-server redis-tools
    command -v redis-server >/dev/null || die "redis-server installed, but not on PATH"
}

# redis-cli against the data node on port $1, with the password from the
# environment (never the command line); at most 5 s (a stopped process
# must not hang a check).
rcli() {
    local port="$1"
    shift
    REDISCLI_AUTH="$PASSWORD" timeout 5 redis-cli --no-auth-warning -h "$HOST" -p "$port" "$@"
}

# A field of `INFO SECTION` ($3) on the node on port $1:
#   info_field 63810 replication master_link_status
info_field() {
    rcli "$1" info "$2" 2>/dev/null | tr -d '\r' | awk -F: -v f="$3" '$1 == f { print $2 }'
}

# The pid of the member on port $1, if it runs.
member_pid() {
    # shellcheck disable=SC2034 # (running_pid reads it)
    local PIDFILE="$STATE.$1.pid"
    running_pid
}

# How many members run.
members_running() {
    local n=0 port
    for port in "${MEMBERS[@]}"; do
        member_pid "$port" >/dev/null && n=$((n + 1))
    done
    echo "$n"
}

# Dies if something already listens on one of the ports given.
ports_free() {
    local port
    for port in "$@"; do
        if (exec 3<>"/dev/tcp/$HOST/$port") 2>/dev/null; then
            die "port $port on $HOST is taken (not by a member of ours); stop it or set the port variables"
        fi
    done
}

# Starts a redis-server in the background, exec'd so that $! is the server
# itself, and records its pid: its port ($1), its directory ($2), the
# config it reads on stdin ($3: the password goes in this way, not on the
# command line, which ps shows), then more arguments. Nothing is saved
# (no RDB, no AOF) and a shutdown does not wait for replicas.
#   launch_member PORT DIR CONFIG [ARG...]
launch_member() {
    local port="$1" dir="$2" config="$3"
    shift 3
    mkdir -p "$dir"
    (exec redis-server - --bind "$HOST" --port "$port" --dir "$dir" --save '' --appendonly no \
        --daemonize no --logfile "$dir/redis.log" --maxmemory-policy noeviction \
        --shutdown-timeout 0 --repl-diskless-sync-delay 0 "$@" <<<"$config" >/dev/null 2>&1) &
    echo $! >"$STATE.$port.pid"
}

# Waits until CHECK ($1, a command) succeeds, checking every 0.1 s; WHAT
# ($2) names it in the time-out message. Stops the whole group and dies,
# with the end of the log of a member that exited, if one does, or after
# READY_TIMEOUT seconds.
await_group() {
    local check="$1" what="$2" deadline=$((SECONDS + READY_TIMEOUT)) port base
    base="$(server_data_dir)"
    until "$check"; do
        for port in "${MEMBERS[@]}"; do
            # (Only the members launched so far.)
            if [[ -f "$STATE.$port.pid" ]] && ! member_pid "$port" >/dev/null; then
                echo "--- $base/$port/redis.log" >&2
                tail -n 20 "$base/$port/redis.log" >&2 || true
                stop_members
                die "the member on port $port exited during start-up (see above)"
            fi
        done
        if ((SECONDS >= deadline)); then
            stop_members
            die "not $what within ${READY_TIMEOUT}s"
        fi
        sleep 0.1
    done
}

# Waits until CHECK ($1) succeeds, every 0.1 s, at most TIMEOUT ($2)
# seconds; dies with MESSAGE ($3) if it does not (the group keeps running).
await() {
    local check="$1" deadline=$((SECONDS + $2)) message="$3"
    until "$check"; do
        ((SECONDS < deadline)) || die "$message"
        sleep 0.1
    done
}

# Stops every member: SIGTERM to all at once (nothing is saved: no RDB, no
# AOF, and --shutdown-timeout 0 does not wait for replicas), then SIGKILL
# to any still there after 5 s; removes the pid files.
stop_members() {
    local port pid pids=()
    for port in "${MEMBERS[@]}"; do
        if pid="$(member_pid "$port")"; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            # A zombie (our own child, not yet reaped) has exited too.
            [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    for port in "${MEMBERS[@]}"; do rm -f "$STATE.$port.pid"; done
    if ((${#pids[@]} > 0)); then
        echo "$NAME: stopped (pids ${pids[*]})" >&2
    else
        echo "$NAME: not running" >&2
    fi
}

stop() { stop_members; server_remove_data_dir; }

# Whether the whole group runs already (then start has nothing to do); a
# group only partly running (a member died) is stopped, to start afresh.
group_running() {
    local n
    n="$(members_running)"
    if ((n == ${#MEMBERS[@]})); then
        echo "$NAME: already running on ports ${MEMBERS[*]}" >&2
        return 0
    fi
    if ((n > 0)); then
        echo "$NAME: only $n of ${#MEMBERS[@]} processes run; starting afresh" >&2
        stop
    fi
    return 1
}

# The group's fresh data directory (whatever a failed start left there is
# removed first).
fresh_data_dir() {
    local base
    base="$(server_data_dir)"
    mkdir -p "$base"
    find "$base" -mindepth 1 -delete
    echo "$base"
}

status() {
    local n port pids=()
    n="$(members_running)"
    for port in "${MEMBERS[@]}"; do
        pids+=("$port:$(member_pid "$port" || echo -)")
    done
    if ((n == ${#MEMBERS[@]})); then
        echo "running (port:pid ${pids[*]})"
    elif ((n > 0)); then
        echo "partly running: $n of ${#MEMBERS[@]} (port:pid ${pids[*]}); stop, then start"
        exit 1
    else
        echo "not running"
        exit 1
    fi
}

# Seconds since $1 (a `date +%s.%N`), to 0.01 s.
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
