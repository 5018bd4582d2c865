# The start/stop/pid-file skeleton of the scripts that run a test server
# (scripts/postgres.sh, redis.sh, etcd.sh, dynamodb-local.sh, moto.sh),
# sourced by them after `set -euo pipefail`. Each script keeps its own
# install and start command, names the server with `server`, and then
# calls `keeps_data` (a server with a data directory of its own) or
# `logs_in_cache` (one without: its log in .cache).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="$ROOT/.cache"
# Where the servers listen (DynamoDB Local listens on every interface, and
# is reached here).
HOST=127.0.0.1

# Names the server: NAME (how messages and its files in .cache name it:
# "NAME: stopped (pid 123)"), PROCESS (what /proc/PID/cmdline holds while
# the pid is still the server's), PORT, and READY_TIMEOUT (the seconds
# start waits for it); ADDRESS, what `status` says it runs on, is HOST:PORT.
#   server NAME PROCESS PORT READY_TIMEOUT
server() {
    NAME="$1"
    PROCESS="$2"
    PORT="$3"
    READY_TIMEOUT="$4"
    ADDRESS="$HOST:$PORT"
}

# For a server with a data directory of its own (server_data_dir): DATA_DIR,
# the caller's directory ($1; "" for a fresh mktemp one, removed by stop),
# DATA_MKTEMP, the mktemp template of a fresh one ($2:
# /tmp/leasehold-pg.XXXXXX), and STATE, .cache/NAME-PORT: STATE.pid is
# the pid file, STATE.dir keeps a made directory.
#   keeps_data DATA_DIR DATA_MKTEMP
keeps_data() {
    DATA_DIR="$1"
    DATA_MKTEMP="$2"
    STATE="$CACHE/$NAME-$PORT"
    PIDFILE="$STATE.pid"
}

# For a server without a data directory, reached over HTTP: ADDRESS is its
# URL, and its pid file and log are .cache/NAME.pid and NAME.log on its
# default port ($1), NAME-PORT.pid and .log on another.
#   logs_in_cache DEFAULT_PORT
logs_in_cache() {
    local suffix=""
    [[ "$PORT" == "$1" ]] || suffix="-$PORT"
    PIDFILE="$CACHE/$NAME$suffix.pid"
    LOG="$CACHE/$NAME$suffix.log"
    ADDRESS="http://$HOST:$PORT"
}

die() { echo "$NAME: $*" >&2; exit 1; }

# The server's pid, if the pid file names a live server process.
running_pid() {
    [[ -f "$PIDFILE" ]] || return 1
    local pid
    pid="$(cat "$PIDFILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # Only ours if it is still the server (the pid may have been reused).
    grep -q "$PROCESS" "/proc/$pid/cmdline" 2>/dev/null || return 1
    # A zombie still answers kill -0.
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
    echo "$pid"
}

# Installs Debian packages (as root, or with sudo), and says so:
# "etcd: installing etcd-server and etcd-client from the package manager".
apt_install() {
    local packages="$*"
    (($# < 2)) || packages="${*:1:$#-1} and ${!#}"
    echo "$NAME: installing $packages from the package manager" >&2
    local sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    $sudo apt-get update -qq >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends --no-upgrade \
        "$@" >&2 || die "apt-get install $* failed"
}

# Whether ours runs already (and says so): then start has nothing to do.
already_running() {
    local pid
    pid="$(running_pid)" || return 1
    echo "$NAME: already running (pid $pid) on $HOST:$PORT" >&2
}

# For a server that `answers` its protocol: whether start has nothing to
# do, because ours runs and answers, or a server this script did not
# start (or whose pid file is gone) answers on the port: use it, and leave
# it to whoever started it. Dies if something else holds the port.
#   answering "a moto server" moto MOTO_PORT
answering() {
    local what="$1" kind="$2" port_var="$3" pid
    if pid="$(running_pid)"; then
        if answers; then
            echo "$NAME: already running (pid $pid) on $HOST:$PORT" >&2
            return 0
        fi
    elif answers; then
        echo "$NAME: $what already answers on $HOST:$PORT (not started here); using it" >&2
        return 0
    elif (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
        die "port $PORT on $HOST is taken by something that is not $kind; stop it or set $port_var"
    fi
    return 1
}

# The server's data directory: DATA_DIR, else the one made before, else a
# fresh one (remembered in STATE.dir, removed by server_remove_data_dir).
server_data_dir() {
    if [[ -n "$DATA_DIR" ]]; then
        echo "$DATA_DIR"
    elif [[ -f "$STATE.dir" ]]; then
        cat "$STATE.dir"
    else
        local d
        d="$(mktemp -d "$DATA_MKTEMP")"
        echo "$d" >"$STATE.dir"
        echo "$d"
    fi
}

# Removes a data directory server_data_dir made (not the caller's DATA_DIR).
server_remove_data_dir() {
    if [[ -z "$DATA_DIR" && -f "$STATE.dir" ]]; then
        local d
        d="$(cat "$STATE.dir")"
        [[ "$d" == "${DATA_MKTEMP%XXXXXX}"* ]] && rm -rf "$d"
        rm -f "$STATE.dir"
    fi
}

# Records the just started server's pid and waits until `$1` (a command)
# succeeds: dies, with the end of its log, if the server exits first, and
# stops it and dies if it takes longer than READY_TIMEOUT seconds.
#   await_ready CHECK PID LOG SIGNAL INTERVAL EXITED TIMED_OUT
# (SIGNAL stops it; INTERVAL is the seconds between checks; EXITED and
# TIMED_OUT are the messages.)
await_ready() {
    local check="$1" pid="$2" log="$3" signal="$4" interval="$5" exited="$6" timed_out="$7"
    echo "$pid" >"$PIDFILE"
    local deadline=$((SECONDS + READY_TIMEOUT))
    until "$check"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PIDFILE"
            echo "--- $log" >&2
            tail -n 20 "$log" >&2 || true
            die "$exited"
        fi
        if ((SECONDS >= deadline)); then
            kill "-$signal" "$pid" 2>/dev/null || true
            rm -f "$PIDFILE"
            die "$timed_out"
        fi
        sleep "$interval"
    done
}

# `start` for a server with a data directory of its own: unless ours runs
# already, installs it (the script's `install`), makes its directory and
# calls `launch DIR`, which starts the server in the background, exec'd so
# that $! is the server itself, logging to DIR/LOG; then waits until CHECK
# succeeds (await_ready, checking every 0.05 s; CHECK's name is the word of
# the time-out message: "not ready within 30s"), and says where it runs.
#   start_in_data_dir CHECK LOG SIGNAL WHAT
# (SIGNAL stops it if it is not ready in time; WHAT names it in the
# message if it exits first: "etcd", "the server".)
start_in_data_dir() {
    local check="$1" log="$2" signal="$3" what="$4"
    mkdir -p "$CACHE"
    already_running && return 0
    install
    local base
    base="$(server_data_dir)"
    mkdir -p "$base"
    launch "$base"
    local pid=$!
    await_ready "$check" "$pid" "$base/$log" "$signal" 0.05 \
        "$what exited during start-up (see $base/$log)" "not $check within ${READY_TIMEOUT}s"
    echo "$NAME: running (pid $pid) on $HOST:$PORT, data in $base" >&2
}

# `start` for a server that `answers` and keeps no data (logs_in_cache):
# unless one answers already (answering WHAT KIND PORT_VAR), calls
# `launch`, which installs the server and starts it in the background,
# exec'd so that $! is the server itself, logging to LOG; then waits until
# it answers (every INTERVAL seconds; TITLE names it in the messages) and
# says where it runs.
#   start_answering WHAT KIND PORT_VAR INTERVAL TITLE
start_answering() {
    local what="$1" kind="$2" port_var="$3" interval="$4" title="$5"
    mkdir -p "$CACHE"
    answering "$what" "$kind" "$port_var" && return 0
    launch
    local pid=$!
    await_ready answers "$pid" "$LOG" TERM "$interval" "$title exited during start-up (see $LOG)" \
        "$title did not answer on $HOST:$PORT within ${READY_TIMEOUT}s (see $LOG)"
    echo "$NAME: running (pid $pid) on $ADDRESS" >&2
}

# Stops the server with SIGNAL ($1), then SIGKILL if it has not exited
# within 5 s (`$2` tries, default 100, 0.05 s apart), and removes the pid file.
server_shutdown() {
    local signal="$1" tries="${2:-100}" pid
    if pid="$(running_pid)"; then
        kill "-$signal" "$pid" 2>/dev/null || true
        for _ in $(seq 1 "$tries"); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        echo "$NAME: stopped (pid $pid)" >&2
    else
        echo "$NAME: not running" >&2
    fi
    rm -f "$PIDFILE"
}

restart() { shutdown; start; }

status() {
    local pid
    if pid="$(running_pid)"; then echo "running (pid $pid) on $ADDRESS"; else echo "not running"; exit 1; fi
}

# Runs the command $2 if it is one of the script's ($1: "start|stop|url"),
# each a function of that name; else prints the usage.
server_command() {
    local commands="$1" command="${2:-}"
    if [[ -n "$command" && "|$commands|" == *"|$command|"* ]]; then
        "$command"
    else
        echo "usage: $0 $commands" >&2
        exit 2
    fi
}
