#!/usr/bin/env bash
# Benchmarks: leasehold side by side with the raw SDKs, flock and peer
# libraries (docs/benchmarks.md describes every figure). Builds the
# benchmark and the CLI in release mode, installs and starts Azurite,
# DynamoDB Local, moto (S3), PostgreSQL, MySQL (MariaDB), Redis, etcd and ZooKeeper on 127.0.0.1 (stopping again those it started), installs
# the Python peer libraries into .cache/bench-venv, runs everything and
# writes docs/benchmarks.md, docs/benchmarks.png (and results.json beside
# them when --out is given). A page's hand-written sections (after its
# "<!-- Hand-written sections ... -->" mark, up to "## Reproduce") are kept.
# Figure 5 (the CLI against flock) is measured first, before any server
# starts: its target is for a quiet machine.
#
#   scripts/bench.sh               # the full run (several minutes) -> docs/
#   scripts/bench.sh --out DIR     # the full run, written to DIR
#   scripts/bench.sh --tiny        # seconds: tiny loads, no peers, debug build, to a temp dir
#                                  # (BENCH_BUILD=tests: the binaries of the tests' build)
#                                  # (uses the emulators and servers only if already running)
#   scripts/bench.sh --only 1,5 --out DIR   # some figures only, for a quick look
#   scripts/bench.sh --stores s3 --out DIR  # some stores only (memory, sqlite, azblob,
#                                  # dynamodb, postgres, mysql, redis, etcd, s3, zookeeper): starts only theirs
#
# It is not a timed test: a --tiny run only checks that everything runs and
# the report is written.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

tiny=0
out=""
only=()
stores=""
while (($#)); do
    case "$1" in
        --tiny) tiny=1 ;;
        --out) out="$2"; shift ;;
        --only) only=(--only "$2"); shift ;;
        --stores) stores="$2"; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
if ((tiny)); then
    # Numbers from a tiny run mean nothing, so spare CI a release build.
    if [[ "${BENCH_BUILD:-}" == tests ]]; then
        # scripts/test.sh: the workspace's test build has just built both
        # binaries; asking for them the same way finds them built, where a
        # build of the two packages alone rebuilds the store crates with
        # other features (about a minute).
        cargo test --quiet --workspace --no-run >&2
    else
        cargo build -p leasehold-bench -p leasehold-cli >&2
    fi
    BIN="$TARGET/debug/leasehold-bench"
else
    cargo build --release -p leasehold-bench -p leasehold-cli >&2
    BIN="$TARGET/release/leasehold-bench"
fi

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# The emulators' ports, as scripts/azurite.sh and scripts/dynamodb-local.sh
# read them (their defaults 10000 and 8000); the bench reaches them there.
AZURITE_BENCH_PORT="${LEASEHOLD_AZURITE_PORT:-${AZURITE_PORT:-10000}}"
DYNAMODB_BENCH_PORT="${DYNAMODB_LOCAL_PORT:-8000}"
# Whether the run includes store $1 (every store without --stores).
wants() { [[ -z "$stores" || ",$stores," == *",$1,"* ]]; }
# Whether the run includes figure $1 (every figure without --only).
wants_figure() { ((${#only[@]} == 0)) || [[ ",${only[1]}," == *",$1,"* ]]; }
# Whether the run includes a figure that needs the servers (every one but 5).
wants_servers() { ((${#only[@]} == 0)) || [[ -n "$(tr ',' '\n' <<<"${only[1]}" | grep -vx 5)" ]]; }

started=()
started_quiet_dir=""
cleanup() {
    for e in "${started[@]}"; do
        "scripts/$e.sh" stop || true
    done
    if [[ -n "$started_quiet_dir" ]]; then
        rm -rf "$started_quiet_dir"
    fi
}
trap cleanup EXIT

args=("${only[@]}")
if [[ -n "$stores" ]]; then
    args+=(--stores "$stores")
fi
if ((tiny)); then
    if [[ -z "$out" ]]; then
        out="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-bench.XXXXXX")"
    fi
    args+=(--tiny)
else
    out="${out:-$ROOT/docs}"
    # Figure 5 (the CLI against flock) first, on its own, before the
    # servers below start: its target is for a quiet machine, and eight idle
    # servers (three of them JVMs) are not one. The full run takes it from
    # there.
    if wants_figure 5; then
        quiet="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-bench-cli.XXXXXX")"
        started_quiet_dir="$quiet"
        "$BIN" run --only 5 --stores sqlite --out "$quiet" --peers "$ROOT/scripts/peers" >&2
        args+=(--cli-from "$quiet/results.json")
    fi
    for triple in "azblob:azurite:$AZURITE_BENCH_PORT" "dynamodb:dynamodb-local:$DYNAMODB_BENCH_PORT"; do
        store="${triple%%:*}"
        rest="${triple#*:}"
        e="${rest%%:*}"
        port="${rest##*:}"
        if wants_servers && wants "$store" && ! answers "$port"; then
            "scripts/$e.sh" start
            started+=("$e")
        fi
    done
    # moto (S3): installed into .cache/moto on first use (about 90 s).
    for pair in s3:moto postgres:postgres mysql:mysql redis:redis etcd:etcd zookeeper:zookeeper; do
        store="${pair%%:*}"
        e="${pair##*:}"
        if wants_servers && wants "$store" && ! "scripts/$e.sh" status >/dev/null 2>&1; then
            "scripts/$e.sh" start
            started+=("$e")
        fi
    done
    # The Python peers run in figure 6, on the stores that have one.
    if wants_figure 6 && { wants azblob || wants dynamodb || wants postgres || wants mysql || wants redis || wants zookeeper; }; then
        VENV="$ROOT/.cache/bench-venv"
        if ! "$VENV/bin/python" -c 'import azure.storage.blob, python_dynamodb_lock, boto3, psycopg, redis, pymysql, kazoo' 2>/dev/null; then
            echo "bench.sh: installing the Python peers into $VENV" >&2
            python3 -m venv "$VENV"
            "$VENV/bin/pip" install --quiet --disable-pip-version-check \
                'azure-storage-blob==12.31.1' 'python-dynamodb-lock==0.9.1' 'boto3>=1.34,<2' \
                'psycopg[binary]==3.3.9' 'redis==6.4.0' 'PyMySQL==1.2.4' 'kazoo==2.10.0' >&2
        fi
        args+=(--venv "$VENV")
    fi
fi

# Redis's figures run on the test server when it is up.
if [[ -z "${LEASEHOLD_BENCH_REDIS_URL:-}" ]] && scripts/redis.sh status >/dev/null 2>&1; then
    export LEASEHOLD_BENCH_REDIS_URL="$(scripts/redis.sh url)"
fi
# etcd's figures (and its peer, etcd-client's lock) run on the test server
# when it is up.
if [[ -z "${LEASEHOLD_BENCH_ETCD_URL:-}" ]] && scripts/etcd.sh status >/dev/null 2>&1; then
    export LEASEHOLD_BENCH_ETCD_URL="$(scripts/etcd.sh url)"
fi
# S3's figures run on moto when it is up (the bench also tries moto's
# default port by itself).
if [[ -z "${LEASEHOLD_BENCH_S3_ENDPOINT:-}" ]] && scripts/moto.sh status >/dev/null 2>&1; then
    export LEASEHOLD_BENCH_S3_ENDPOINT="$(scripts/moto.sh url)"
fi
# PostgreSQL's figures run on the test server when it is up.
if [[ -z "${LEASEHOLD_BENCH_POSTGRES_URL:-}" ]] && scripts/postgres.sh status >/dev/null 2>&1; then
    export LEASEHOLD_BENCH_POSTGRES_URL="$(scripts/postgres.sh url)"
fi
# MySQL's figures run on the test server when it is up.
if [[ -z "${LEASEHOLD_BENCH_MYSQL_URL:-}" ]] && scripts/mysql.sh status >/dev/null 2>&1; then
    export LEASEHOLD_BENCH_MYSQL_URL="$(scripts/mysql.sh url)"
fi
# ZooKeeper's figures run on the test server when it is up.
if [[ -z "${LEASEHOLD_BENCH_ZOOKEEPER_URL:-}" ]] && scripts/zookeeper.sh status >/dev/null 2>&1; then
    export LEASEHOLD_BENCH_ZOOKEEPER_URL="$(scripts/zookeeper.sh url)"
fi
if [[ -z "${AZURE_STORAGE_CONNECTION_STRING:-}" ]]; then
    export AZURE_STORAGE_CONNECTION_STRING="$(scripts/azurite.sh connection-string)"
fi
export LEASEHOLD_BENCH_DYNAMODB_ENDPOINT="${LEASEHOLD_BENCH_DYNAMODB_ENDPOINT:-http://127.0.0.1:$DYNAMODB_BENCH_PORT}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
mkdir -p "$out"
"$BIN" run --out "$out" --peers "$ROOT/scripts/peers" "${args[@]}"
if ((tiny)); then
    test -s "$out/benchmarks.md" && test -s "$out/benchmarks.png"
    echo "bench.sh: tiny run written to $out" >&2
fi
