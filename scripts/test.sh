#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs and starts the storage
# emulators on 127.0.0.1 (Azurite for Azure Blob Storage, DynamoDB Local, a
# throw-away PostgreSQL server, PgBouncer in transaction mode in front of it,
# a throw-away Redis server, a Redis Sentinel set-up and a Redis Cluster, a
# throw-away etcd, moto for S3), checks formatting and lints,
# proves that README command 1 and the library's tests build where any use
# of protoc fails (scripts/bare-build.sh, first, while the target directory
# of a clean clone is still empty), runs every test with the emulators
# required (a missing emulator fails the run instead of skipping; test
# binaries three at a time, scripts/run-tests.sh), the Python bindings'
# tests (scripts/python-test.sh), and stops the emulators
# again. Each step's time is printed at the end.
#
#   scripts/test.sh            # everything
#   scripts/test.sh -p leasehold   # extra arguments go to `cargo test`
#                                  # (of the main test step)
#   scripts/test.sh --quick    # the fast lane: format, clippy, every
#                              # crate's unit tests, the conformance suite
#                              # on memory and SQLite, the docs' drift
#                              # tests; no server (about 2 minutes on two
#                              # cores after a build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${1:-}" == --quick ]]; then
    start=$SECONDS
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings
    echo "test.sh --quick: fmt and clippy in $((SECONDS - start)) s"
    RUN_TESTS_ONLY='.*' scripts/run-tests.sh --workspace --lib --bins
    RUN_TESTS_ONLY='leasehold/(conformance_memory|conformance_sqlite|readme)|leasehold-cli/(docs|completions)' \
        scripts/run-tests.sh --workspace -- --test-threads=8
    echo "test.sh --quick: passed in $((SECONDS - start)) s (the whole suite, with every store's server: scripts/test.sh)"
    exit 0
fi

steps=()
step_start=$SECONDS
step() { # NAME: the step that ends now
    steps+=("$(printf '%5d s  %s' $((SECONDS - step_start)) "$1")")
    step_start=$SECONDS
}
print_steps() { # the exit status
    echo "== test.sh: the steps' times"
    printf '%s\n' "${steps[@]}"
    if [[ "$1" != 0 ]]; then
        printf '%5d s  FAILED (exit %s): the step after the ones above\n' \
            $((SECONDS - step_start)) "$1"
    fi
    echo "$(printf '%5d s' "$SECONDS")  in all"
    echo "== test.sh: disk space left for $target_dir and /tmp: $(free_gb "$target_dir") GB, $(free_gb /tmp) GB"
}
# Free space (GB, rounded down) on the file system that holds $1.
free_gb() {
    local kb
    kb="$(df -Pk "$1" 2>/dev/null | awk 'NR == 2 { print $4 }')"
    echo $((${kb:-0} / 1024 / 1024))
}
# A whole run from a clean clone writes about 9 GB (the builds, the
# servers' data, the torture runs' logs); a full disk fails it late and
# unclearly (a CI run ended in the torture step with "No space left on
# device", etcd exiting at start-up with an empty log). Said up front.
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
if (($(free_gb "$target_dir") < 12 || $(free_gb /tmp) < 12)); then
    echo "test.sh: warning: only $(free_gb "$target_dir") GB free for $target_dir and $(free_gb /tmp) GB for /tmp; a whole run writes about 9 GB" >&2
fi

emulators=(azurite dynamodb-local postgres pgbouncer mysql zookeeper redis etcd redis-sentinel redis-cluster)
# Started in the background, beside the others, and waited for before the
# step ends: about 3 s each, mostly waiting on the sentinels' and the
# cluster's own timers (the same readiness checks either way).
background=(redis-sentinel redis-cluster)
background_pids=()
started=()
moto_pid=""
stop_all() {
    # A moto start still under way (a failure before the tests) ends first,
    # so that the server it starts is stopped too; the same for the
    # background starts.
    [[ -n "$moto_pid" ]] && { wait "$moto_pid" 2>/dev/null || true; }
    for pid in "${background_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    for e in "${started[@]}"; do
        "scripts/$e.sh" stop || true
    done
}
trap 'rc=$?; stop_all; print_steps $rc' EXIT

# moto (the S3 emulator) installs from PyPI on a fresh machine, about a
# minute and a half of mostly waiting: in the background, beside the
# servers' start and the bare build, and waited for before the tests.
moto_log="$(mktemp)"
scripts/moto.sh start >"$moto_log" 2>&1 &
moto_pid=$!
started+=(moto)
background_dir="$(mktemp -d)"
for e in "${background[@]}"; do
    "scripts/$e.sh" start >"$background_dir/$e.log" 2>&1 &
    background_pids+=($!)
    started+=("$e")
done
for e in "${emulators[@]}"; do
    [[ " ${background[*]} " == *" $e "* ]] && continue
    "scripts/$e.sh" start
    started+=("$e")
done
for i in "${!background[@]}"; do
    e="${background[$i]}"
    if ! wait "${background_pids[$i]}"; then
        cat "$background_dir/$e.log" >&2
        echo "test.sh: $e did not start" >&2
        exit 1
    fi
    cat "$background_dir/$e.log" >&2
done
background_pids=()
rm -rf "$background_dir"
step "start the servers"

# README command 1 and plain `cargo test -p leasehold`, built in an
# environment where protoc cannot be run: a build-time dependency on a
# system tool cannot come back unseen. First, so that on a clean clone
# every build script runs in that environment.
scripts/bare-build.sh
step "bare build: README command 1 and cargo test -p leasehold"

if ! wait "$moto_pid"; then
    cat "$moto_log" >&2
    echo "test.sh: moto did not start" >&2
    exit 1
fi
cat "$moto_log" >&2
step "moto, after the bare build"

export LEASEHOLD_REQUIRE_EMULATORS=1
export LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING="${LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING:-UseDevelopmentStorage=true}"
export LEASEHOLD_TEST_DYNAMODB_ENDPOINT="${LEASEHOLD_TEST_DYNAMODB_ENDPOINT:-http://127.0.0.1:8000}"
export LEASEHOLD_TEST_POSTGRES_URL="${LEASEHOLD_TEST_POSTGRES_URL:-$(scripts/postgres.sh url)}"
export LEASEHOLD_TEST_MYSQL_URL="${LEASEHOLD_TEST_MYSQL_URL:-$(scripts/mysql.sh url)}"
export LEASEHOLD_TEST_ZOOKEEPER_URL="${LEASEHOLD_TEST_ZOOKEEPER_URL:-$(scripts/zookeeper.sh url)}"
export LEASEHOLD_TEST_REDIS_URL="${LEASEHOLD_TEST_REDIS_URL:-$(scripts/redis.sh url)}"
export LEASEHOLD_TEST_REDIS_SENTINEL_URL="${LEASEHOLD_TEST_REDIS_SENTINEL_URL:-$(scripts/redis-sentinel.sh url)}"
export LEASEHOLD_TEST_REDIS_CLUSTER_URL="${LEASEHOLD_TEST_REDIS_CLUSTER_URL:-$(scripts/redis-cluster.sh url)}"
export LEASEHOLD_TEST_ETCD_URL="${LEASEHOLD_TEST_ETCD_URL:-$(scripts/etcd.sh url)}"
export LEASEHOLD_TEST_S3_ENDPOINT="${LEASEHOLD_TEST_S3_ENDPOINT:-$(scripts/moto.sh url)}"

cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
step "fmt and clippy"
scripts/package-check.sh; step "cargo package of the public crates (no verify)"
# Tests mostly wait on leases and emulators, not on the CPU: run more of
# them at once than there are cores.
args=("$@")
skip=""
if [[ ${#args[@]} -eq 0 ]]; then
    args=(--workspace)
    # The core crate's tests ran in the bare build above.
    skip="leasehold/"
fi
RUN_TESTS_SKIP="$skip" scripts/run-tests.sh "${args[@]}" -- --test-threads=8
step "the tests"
# The Python bindings: built into .cache/python-venv (dev profile, reusing
# the tests' build), pytest on every store (scripts/python-test.sh).
scripts/python-test.sh
step "python"
# The PostgreSQL store again, through PgBouncer in transaction mode: one
# statement per operation, no session state (wake-ups off: LISTEN needs a
# session). The binaries built above, run again.
LEASEHOLD_TEST_POSTGRES_URL="$(scripts/pgbouncer.sh url)?wake_ups=off" \
    RUN_TESTS_ONLY='leasehold-postgres/(conformance|store_loss)' \
    scripts/run-tests.sh --workspace -- --test-threads=8
# Ten processes creating one new table at once, through the pooler too.
LEASEHOLD_TEST_POSTGRES_URL="$(scripts/pgbouncer.sh url)?wake_ups=off" \
    RUN_TESTS_ONLY='leasehold-cli/concurrent_open' \
    scripts/run-tests.sh --workspace -- postgres
step "PostgreSQL through PgBouncer"

# A tiny benchmark run: only checks that the harness runs and writes its
# report (numbers from it mean nothing).
scripts/bench.sh --tiny
step "bench --tiny"
# The previous release's leasehold against this build on every store, side
# by side (scripts/compat.sh: exclusion both ways, tokens, once-per, a
# shared semaphore, a future protocol refused). The old binary is built
# once into .cache/ (about 90 s, reusing target/'s dependencies), then
# reused; the run itself about 25 s.
scripts/compat.sh
step "compat: the previous release against this one"
# The bounded fault-injection run on every store; fails on any violation.
# The stores run in three lanes side by side, about 3 minutes each instead
# of 9 in a row: each store's runs are independent of the others' (keys,
# tables, prefixes and servers of their own), and each run's checker is as
# strict on a loaded machine, where pauses only come more often. The
# seeded runs (bugs injected on purpose, which must be caught) go with
# Redis, whose server of the run's own they use too. A lane's output is
# shown once all are done, a failed lane's last (CI keeps the tail).
# Then the Redis Sentinel and Cluster runs (failovers), side by side with
# each other only: run beside the three lanes, they loaded the machine
# while the seeded runs ran, and the old-window bug (few grants in its
# 30 s) went uncaught once in a clean-clone run.
torture_dir="$(mktemp -d)"
torture_failed=0
torture_batch() { # the lanes, each a list of stores
    local lanes=("$@") pids=() failed=() i seeded
    for i in "${!lanes[@]}"; do
        seeded=0
        [[ ${lanes[$i]} == redis\ * ]] && seeded=1
        TORTURE_BUILD=tests TORTURE_STORES="${lanes[$i]}" TORTURE_SEEDED=$seeded \
            scripts/torture.sh --short >"$torture_dir/$i.log" 2>&1 &
        pids+=($!)
    done
    for i in "${!lanes[@]}"; do
        if wait "${pids[$i]}"; then
            echo "== torture lane: ${lanes[$i]} (passed)"
            cat "$torture_dir/$i.log"
        else
            failed+=("$i")
        fi
    done
    for i in "${failed[@]}"; do
        echo "== torture lane: ${lanes[$i]} (FAILED)"
        cat "$torture_dir/$i.log"
    done
    ((${#failed[@]} == 0)) || torture_failed=1
}
torture_batch "azblob sqlite mysql" "redis postgres zookeeper" "dynamodb etcd s3"
((torture_failed == 0)) && torture_batch "redis-sentinel" "redis-cluster"
rm -rf "$torture_dir"
((torture_failed == 0)) || exit 1
step "torture --short (three lanes side by side, then Sentinel and Cluster)"
