#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs and starts the storage
# emulators on 127.0.0.1 (Azurite for Azure Blob Storage, DynamoDB Local, a
# throw-away PostgreSQL server, PgBouncer in transaction mode in front of it,
# a throw-away Redis server, a throw-away etcd), checks formatting and lints,
# runs every test with the emulators required (a missing emulator fails the
# run instead of skipping), proves that README command 1 and the library's
# tests build where any use of protoc fails (scripts/bare-build.sh), and
# stops the emulators again.
#
#   scripts/test.sh            # everything
#   scripts/test.sh -p leasehold   # extra arguments go to `cargo test`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

emulators=(azurite dynamodb-local postgres pgbouncer redis etcd)
started=()
stop_all() {
    for e in "${started[@]}"; do
        "scripts/$e.sh" stop || true
    done
}
trap stop_all EXIT

for e in "${emulators[@]}"; do
    "scripts/$e.sh" start
    started+=("$e")
done

export LEASEHOLD_REQUIRE_EMULATORS=1
export LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING="${LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING:-UseDevelopmentStorage=true}"
export LEASEHOLD_TEST_DYNAMODB_ENDPOINT="${LEASEHOLD_TEST_DYNAMODB_ENDPOINT:-http://127.0.0.1:8000}"
export LEASEHOLD_TEST_POSTGRES_URL="${LEASEHOLD_TEST_POSTGRES_URL:-$(scripts/postgres.sh url)}"
export LEASEHOLD_TEST_REDIS_URL="${LEASEHOLD_TEST_REDIS_URL:-$(scripts/redis.sh url)}"
export LEASEHOLD_TEST_ETCD_URL="${LEASEHOLD_TEST_ETCD_URL:-$(scripts/etcd.sh url)}"

cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# Tests mostly wait on leases and emulators, not on the CPU: run more of
# them at once than there are cores.
cargo test --workspace "$@" -- --test-threads=8
# The PostgreSQL store again, through PgBouncer in transaction mode: one
# statement per operation, no session state (wake-ups off: LISTEN needs a
# session).
LEASEHOLD_TEST_POSTGRES_URL="$(scripts/pgbouncer.sh url)?wake_ups=off" \
    cargo test -p leasehold-postgres --test conformance --test store_loss -- --test-threads=8
# Ten processes creating one new table at once, through the pooler too.
LEASEHOLD_TEST_POSTGRES_URL="$(scripts/pgbouncer.sh url)?wake_ups=off" \
    cargo test -p leasehold-cli --test concurrent_open -- postgres

# README command 1 and plain `cargo test -p leasehold`, built from scratch
# in an environment where protoc cannot be run: a build-time dependency on
# a system tool cannot come back unseen.
scripts/bare-build.sh

# A tiny benchmark run: only checks that the harness runs and writes its
# report (numbers from it mean nothing).
scripts/bench.sh --tiny
# The bounded fault-injection run on every store; fails on any violation.
scripts/torture.sh --short
