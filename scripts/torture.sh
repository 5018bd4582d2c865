#!/usr/bin/env bash
# Fault-injection runs on every store: many processes contend for the same
# keys through the library and through `leasehold run`, while holders are
# killed, paused, partitioned, their leases broken and the stores lose their
# data; an independent witness records every write and a checker (itself
# tested against seeded violations, crates/leasehold-torture/src/seeded.rs)
# reports every violation.
#
#   scripts/torture.sh            # the long run (release build); writes the
#                                 # page $TORTURE_PAGE (docs/reliability.md):
#                                 # its reports only, below the page's
#                                 # hand-written summary (see the end)
#   scripts/torture.sh --short    # the bounded CI run (about a minute a
#                                 # store, debug build); fails on a
#                                 # violation, and also fails unless runs
#                                 # with bugs injected on purpose are caught
#   TORTURE_STORES="sqlite dynamodb" scripts/torture.sh --short
#   TORTURE_BUILD=tests scripts/torture.sh --short   # use the binaries the
#                                 # workspace's test build made (test.sh)
#   TORTURE_SEEDED=0 scripts/torture.sh --short   # without the runs with
#                                 # bugs injected on purpose
#   TORTURE_STORES=postgres-unlogged scripts/torture.sh --short   # not in the
#                                 # default list: PostgreSQL with an UNLOGGED
#                                 # table, crashed (scripts/postgres.sh crash)
#                                 # as its restart fault
#
# Long-run knobs: TORTURE_DURATION (per store, e.g. 20m), TORTURE_REPORTS (a
# directory to keep each store's report and witness log in, for
# `leasehold-torture check --witness DIR`), TORTURE_PAGE (the page to write),
# TORTURE_VARIANTS (which runs of each store: "main loss mixed" by default,
# see below), TORTURE_HOLDERS (the holder flags, e.g. "--workers 16 --keys 8"),
# TORTURE_BIN (a directory with the `leasehold` and `leasehold-torture`
# binaries to use, built with the test feature below; no build then).
# Servers: the run starts its own on ports of its own where it can
# (TORTURE_REDIS_PORT, TORTURE_ETCD_PORT, TORTURE_DYNAMODB_PORT; PostgreSQL
# on LEASEHOLD_PG_PORT; Azurite on AZURITE_PORT, default the shared 10000).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=long
[[ "${1:-}" == "--short" ]] && mode=short
stores=(${TORTURE_STORES:-sqlite azblob dynamodb postgres mysql redis redis-sentinel redis-cluster etcd s3 zookeeper})
# The long run uses a release build unless TORTURE_PROFILE=debug.
profile=debug
[[ $mode == long ]] && profile="${TORTURE_PROFILE:-release}"
# The confirmation window W (60 s in a release of leasehold) quarantines
# every new store epoch: a new store, and every loss or restart fault.
# Both binaries are built with the store opener's test feature
# (leasehold-stores/test-window), under which
# LEASEHOLD_TEST_CONFIRMATION_WINDOW sets W (see each store below): every
# process of a run has the same W, which is all the protocol asks of it,
# so faults come and go in seconds instead of minutes.
features=(--features leasehold-stores/test-window)
build_start=$SECONDS
if [[ -n "${TORTURE_BIN:-}" ]]; then
    # Binaries built already (a copy of another run's, so that a second
    # run side by side tests the same build while the tree changes).
    bin="$TORTURE_BIN"
elif [[ $profile == release ]]; then
    cargo build --release -p leasehold-cli -p leasehold-torture --bins "${features[@]}"
elif [[ "${TORTURE_BUILD:-}" == tests ]]; then
    # scripts/test.sh: the workspace's test build has just built both
    # binaries (with the test feature, through the tests' dev-dependencies);
    # asking for them the same way finds them built, where a build of the
    # two packages alone would rebuild every store crate with other
    # features (about 50 s on these machines).
    cargo test --quiet --workspace --no-run "${features[@]}"
else
    cargo build -p leasehold-cli -p leasehold-torture --bins "${features[@]}"
fi
bin="${TORTURE_BIN:-${CARGO_TARGET_DIR:-target}/$profile}"
echo "torture: the build took $((SECONDS - build_start)) s" >&2

work="$(mktemp -d)"
reports_dir="${TORTURE_REPORTS:-$work}"
mkdir -p "$reports_dir"
started=()
stop_all() {
    for e in "${started[@]}"; do "scripts/$e" stop || true; done
    rm -rf "$work"
}
trap stop_all EXIT

# Starts a server (scripts/$1 start) and stops it at the end.
start_server() {
    "scripts/$1" start
    [[ " ${started[*]} " == *" $1 "* ]] || started+=("$1")
}

# The same, unless it runs already: then it is left running.
start_unless_running() {
    if ! "scripts/$1" status >/dev/null 2>&1; then
        start_server "$1"
    fi
}

# A Redis server of the run's own (port $TORTURE_REDIS_PORT, default 63797).
start_redis() {
    export LEASEHOLD_REDIS_PORT="${TORTURE_REDIS_PORT:-63797}"
    start_server redis.sh
}

# Runs a torture run ($3...) with a bug injected on purpose, which must
# fail: else fails the whole run, showing the run's report ($2). $1 names
# the bug in the messages ("the injected bug").
must_catch() {
    local what="$1" report="$2"
    shift 2
    if "$@" >"$report"; then
        echo "torture: $what was NOT caught:" >&2
        cat "$report" >&2
        failed=1
    else
        echo "torture: $what was caught" >&2
    fi
}

# Fails the whole run unless the report $2 of a run with bug $1 injected
# counts a violation of kind $3 (default: an overlap): a bugged run can
# also fail for holding nothing.
caught_with_overlap() {
    local kind="${3:-overlap}"
    if ! grep -qE "$kind: [1-9]" "$2"; then
        echo "torture: $1 failed the run without a violation of kind $kind:" >&2
        cat "$2" >&2
        failed=1
    fi
}

# duration, ttl, fault interval per store and mode
settings() {
    local d="${TORTURE_DURATION:-}"
    case "$mode:$1" in
        # (Shortened by 5-10 s each when every run got readers, issue 33,
        # and by 5 s more each but Azure's when CI on a clean clone took
        # 1788 s, to keep the test command under 30 minutes. Azure's stays:
        # faults start after a TTL and stop two TTLs before the end, so with
        # 15 s leases a run of 45 s or less injects none.)
        short:sqlite) echo "20s 1s 1s" ;;
        short:dynamodb) echo "30s 2s 2s" ;;
        # Azure's main run is longer still: its multi-key workers (waits of
        # 4-45 s, the keys taken one by one, polling) held every key in
        # about a third of their attempts, 5-8 of them in 50 s, and one CI
        # run of 50 s got none (a failed run): 90 s gives them twice the tries.
        short:azblob) echo "90s 15s 8s" ;;
        short:postgres | short:postgres-unlogged) echo "20s 2s 2s" ;;
        short:mysql) echo "20s 2s 2s" ;;
        short:redis) echo "20s 2s 2s" ;;
        # A failover fault takes about 25 s (Sentinel) or 3 s (a cluster
        # shard): a run long enough for a couple.
        short:redis-sentinel) echo "40s 2s 4s" ;;
        short:redis-cluster) echo "30s 2s 4s" ;;
        short:etcd) echo "20s 2s 2s" ;;
        short:s3) echo "20s 4s 2s" ;;
        short:zookeeper) echo "20s 2s 2s" ;;
        long:sqlite) echo "${d:-15m} 1s 1s" ;;
        long:dynamodb) echo "${d:-20m} 2s 2s" ;;
        long:azblob) echo "${d:-25m} 15s 5s" ;;
        long:postgres | long:postgres-unlogged) echo "${d:-20m} 2s 2s" ;;
        long:mysql) echo "${d:-20m} 2s 2s" ;;
        long:redis) echo "${d:-20m} 2s 2s" ;;
        long:redis-sentinel | long:redis-cluster) echo "${d:-20m} 2s 4s" ;;
        long:etcd) echo "${d:-20m} 2s 2s" ;;
        long:s3) echo "${d:-20m} 4s 2s" ;;
        long:zookeeper) echo "${d:-20m} 2s 2s" ;;
    esac
}

# duration (CI run) and fault interval of the mixed variant per store
mixed_settings() {
    case $1 in
        sqlite) echo "20s 6s" ;;
        # Azure's faults start a TTL (15 s) into a run and stop two TTLs
        # before its end: at 40 s it injected no loss, at 50 s the first
        # long grant (at ~15 s, the new store's quarantine over) brings one
        # (3 runs of 3, 51-67 s each).
        azblob) echo "50s 20s" ;;
        *) echo "20s 10s" ;;
    esac
}

# Holders: the CI run keeps the defaults; the long run contends on more keys
# so that it reaches 10,000 acquisitions a store in reasonable time. Both
# have reader-writer locks (issue 33): on the keys of the first library
# worker(s) and of the first `leasehold run` loop, those take read holds
# (`run --shared`), and every other holder of those keys the write hold (a
# plain `leasehold run` is the writer); the other keys have plain locks.
# Both have multi-key workers (issue 54), which take every key at once,
# each given the keys in an order of its own (on keys that have readers,
# even-numbered ones read and odd ones write: two writers there kept the
# readers of Redis's CI run out of the key for its whole 20 s once, under
# the test command's load; and the keys that have readers sort after the
# others, so that a multi-key writer holds their writer side only once it
# has every other key: taken first, it kept Redis's readers out of a 20 s
# run again); with them the coordinator snapshots the keys'
# holders for the deadlock and orphan-hold checks. TORTURE_MULTI sets how
# many the CI run has (2).
holders=(--readers 1 --shared-runs 1 --multi "${TORTURE_MULTI:-2}")
[[ $mode == long ]] && holders=(--workers 12 --cli-workers 4 --forking 2 --misbehaving 4 --keys 6 --readers 4 --shared-runs 1 --multi 3)
[[ -n "${TORTURE_HOLDERS:-}" ]] && holders=(${TORTURE_HOLDERS})

# `leasehold run` holders whose command forks background workers, and the
# pause fault on `leasehold run` processes (issue 10: the watchdog must stop
# the command's whole tree). RUN_HOLDER_FAULTS=0 leaves them out.
if [[ "${RUN_HOLDER_FAULTS:-1}" == 0 ]]; then
    holders+=(--forking 0 --pause-run false)
fi

# The store-loss fault (the SQLite file, the Azure container, the DynamoDB
# table, the PostgreSQL table deleted; DynamoDB Local also restarted empty)
# forgets every lease and fencing counter; store epochs and the quarantine
# must keep every promise through it. The long run tortures each store
# three times: first with every other fault, then a store-loss run of its
# own (TORTURE_LOSS_DURATION, default 3m), then the mixed variant below.
# Any failing fails the run. The CI run has store loss only in the mixed
# variant, briefly (a new store's quarantine makes it slow), and on Redis,
# whose main run has loss and restart.
#
# The mixed variant (issue 28, item 8) is store loss with mixed max TTLs:
# every second holder opens the store with a max TTL four confirmation
# windows long (--long-max-ttl) and takes leases of two to four windows,
# the others the URL's short one; the store is first created with the long
# max TTL, and every loss-partition fault cuts the current holders off from
# the store (a partition through their proxies; SIGSTOP on SQLite) at the
# moment it deletes the store's data and re-creates it, alternately with
# the short and the long max TTL. A holder of a long lease of the lost data
# that trusted it past one window would work beside the re-created store's
# first holder, and the checker flags every overlap across store epochs.
# Both modes run it (the long run for TORTURE_MIXED_DURATION, default 5m,
# with a loss every TORTURE_MIXED_EVERY, default 20s: each one stops
# every grant for a window, so the CI run's pace would leave few
# acquisitions).
variants=(main mixed)
[[ $mode == long ]] && variants=(main loss mixed)
[[ -n "${TORTURE_VARIANTS:-}" ]] && variants=(${TORTURE_VARIANTS})

reports=()
failed=0
# The reports of the runs that failed, shown again at the end: CI keeps
# only the tail of the output, where a failure early in the run would
# otherwise not show.
failed_runs=()
for store in "${stores[@]}"; do
  for variant in "${variants[@]}"; do
    # Sentinel and Cluster: the main run, with failovers; their loss,
    # restart and mixed runs are the single server's (the redis runs).
    [[ $store == redis-sentinel || $store == redis-cluster ]] && [[ $variant != main ]] && continue
    read -r duration ttl every <<<"$(settings "$store")"
    [[ $variant == loss ]] && duration="${TORTURE_LOSS_DURATION:-3m}"
    if [[ $variant == mixed ]]; then
        # Short: the store's W (below), a fault every three windows or so.
        read -r duration every <<<"$(mixed_settings "$store")"
        if [[ $mode == long ]]; then
            duration="${TORTURE_MIXED_DURATION:-5m}"
            every="${TORTURE_MIXED_EVERY:-20s}"
        fi
    fi
    extra=()
    # The faults of the main run and of the loss run, unless the store's
    # arm below says otherwise: a store reached over the network (through
    # each holder's proxy) takes every fault.
    faults=kill,pause,break,partition,delay,reset
    loss=loss
    case $store in
        sqlite)
            url="sqlite:$work/torture-$variant.db"
            # The mixed variant needs the store's max TTL in the URL (W).
            [[ $variant == mixed ]] && url+="?max_ttl=2s"
            faults=kill,pause,break
            ;;
        azblob)
            # Azurite listens on a fixed port other checkouts share: it is
            # never restarted here; its store loss deletes the container.
            start_server azurite.sh
            if [[ -n "${AZURITE_PORT:-}" ]]; then
                AZURE_STORAGE_CONNECTION_STRING="$(scripts/azurite.sh connection-string)"
                export AZURE_STORAGE_CONNECTION_STRING
            fi
            export AZURE_STORAGE_CONNECTION_STRING="${AZURE_STORAGE_CONNECTION_STRING:-UseDevelopmentStorage=true}"
            # A new container grants nothing for its store max TTL (the
            # epoch quarantine): Azure's shortest lease, 15 s, not 60.
            url="azblob://torture-$RANDOM?max_ttl=15s"
            ;;
        dynamodb)
            # The long run restarts DynamoDB Local empty: an instance of its
            # own, on a port no one else uses.
            port="${TORTURE_DYNAMODB_PORT:-8000}"
            [[ $mode == long ]] && port="${TORTURE_DYNAMODB_PORT:-8124}"
            export DYNAMODB_LOCAL_PORT=$port
            start_server dynamodb-local.sh
            # A new table grants nothing for its max TTL (the store-epoch
            # quarantine): keep it short so that the run exercises the store.
            url="dynamodb://torture$RANDOM?region=us-east-1&endpoint=http://127.0.0.1:$port&max_ttl=5s"
            export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
            loss=loss,restart
            extra=(--restart-cmd "DYNAMODB_LOCAL_PORT=$port scripts/dynamodb-local.sh stop && DYNAMODB_LOCAL_PORT=$port scripts/dynamodb-local.sh start")
            ;;
        postgres)
            # A throw-away server on a port of its own (scripts/postgres.sh;
            # left running if it already was); a table per run, whose
            # quarantine when new is kept short. Store loss drops the table.
            start_unless_running postgres.sh
            url="$(scripts/postgres.sh url)?table=torture_$RANDOM&max_ttl=5s"
            ;;
        zookeeper)
            # The test server (scripts/zookeeper.sh; left running if it
            # already was); a chroot per run, whose quarantine when new is
            # kept short. Store loss deletes the chroot.
            start_unless_running zookeeper.sh
            url="$(scripts/zookeeper.sh url)/torture-$RANDOM?max_ttl=5s"
            ;;
        mysql)
            # The test server (scripts/mysql.sh; left running if it already
            # was); a table per run, whose quarantine when new is kept
            # short. Store loss drops the table.
            start_unless_running mysql.sh
            url="$(scripts/mysql.sh url)?table=torture_$RANDOM&max_ttl=5s"
            ;;
        postgres-unlogged)
            # An UNLOGGED table (unlogged=on) on a server of the run's own
            # (port $TORTURE_PG_PORT, default 54339), which the restart
            # fault crashes (an immediate shutdown, then a start: crash
            # recovery empties the table, a store loss leasehold must
            # survive); store loss drops the table.
            export LEASEHOLD_PG_PORT="${TORTURE_PG_PORT:-54339}"
            start_server postgres.sh
            url="$(scripts/postgres.sh url)?table=torture_$RANDOM&max_ttl=5s&unlogged=on"
            loss=loss,restart
            faults=kill,pause,break,partition,delay,reset,restart
            extra=(--restart-cmd "LEASEHOLD_PG_PORT=$LEASEHOLD_PG_PORT scripts/postgres.sh crash")
            ;;
        redis)
            # A server of its own (port $TORTURE_REDIS_PORT, default 63797):
            # store loss is FLUSHALL, and the restart fault restarts it
            # without its data. Both start a new store epoch, which
            # leasehold must survive (every restart or failover does on
            # Redis), so the main run has them too.
            start_redis
            url="$(scripts/redis.sh url)?prefix=torture$RANDOM:&max_ttl=5s"
            faults=kill,pause,break,partition,delay,reset,loss,restart
            loss=loss,restart
            extra=(--restart-cmd "LEASEHOLD_REDIS_PORT=$LEASEHOLD_REDIS_PORT scripts/redis.sh restart")
            ;;
        redis-sentinel)
            # A primary, a replica and three sentinels of the run's own
            # (scripts/redis-sentinel.sh on other ports). The failover fault
            # crashes the primary (SIGKILL: writes not yet replicated are
            # lost), the sentinels promote the replica, and the old one
            # comes back as its replica. The holders reach the data nodes
            # where the sentinels send them, not through a fault proxy: no
            # network faults. Store loss and restarts are the redis runs'.
            export LEASEHOLD_REDIS_SENTINEL_PORT="${TORTURE_SENTINEL_PORT:-26410}"
            export LEASEHOLD_REDIS_SENTINEL_DATA_PORT="${TORTURE_SENTINEL_DATA_PORT:-63816}"
            start_server redis-sentinel.sh
            url="$(scripts/redis-sentinel.sh url)?prefix=torture$RANDOM:&max_ttl=5s"
            faults=kill,pause,break,failover
            extra=(--failover-cmd "LEASEHOLD_REDIS_SENTINEL_PORT=$LEASEHOLD_REDIS_SENTINEL_PORT LEASEHOLD_REDIS_SENTINEL_DATA_PORT=$LEASEHOLD_REDIS_SENTINEL_DATA_PORT scripts/redis-sentinel.sh crash-failover")
            ;;
        redis-cluster)
            # A cluster of the run's own (scripts/redis-cluster.sh on other
            # ports); the failover fault fails over the shard that serves
            # the store's slot (CLUSTER FAILOVER on its replica).
            export LEASEHOLD_REDIS_CLUSTER_PORT="${TORTURE_CLUSTER_PORT:-63860}"
            export LEASEHOLD_REDIS_CLUSTER_BUS_PORT="${TORTURE_CLUSTER_BUS_PORT:-63870}"
            start_server redis-cluster.sh
            prefix="torture$RANDOM:"
            url="$(scripts/redis-cluster.sh url)?prefix=$prefix&max_ttl=5s"
            faults=kill,pause,break,failover
            extra=(--failover-cmd "LEASEHOLD_REDIS_CLUSTER_PORT=$LEASEHOLD_REDIS_CLUSTER_PORT LEASEHOLD_REDIS_CLUSTER_BUS_PORT=$LEASEHOLD_REDIS_CLUSTER_BUS_PORT scripts/redis-cluster.sh failover '{$prefix}#epoch'")
            ;;
        etcd)
            # An etcd of its own (port 23809, data in a temporary
            # directory), a prefix per run whose quarantine when new is
            # kept short. Store loss deletes the prefix; the restart fault
            # restarts etcd with its data directory wiped (a new cluster).
            export LEASEHOLD_ETCD_PORT="${TORTURE_ETCD_PORT:-23809}"
            start_unless_running etcd.sh
            url="$(scripts/etcd.sh url)?prefix=torture-$RANDOM/&max_ttl=5s"
            loss=loss,restart
            extra=(--restart-cmd "LEASEHOLD_ETCD_PORT=$LEASEHOLD_ETCD_PORT scripts/etcd.sh wipe")
            ;;
        s3)
            # moto (scripts/moto.sh; the shared one if it runs, else one
            # started here), a store per run (a prefix in one bucket) whose
            # quarantine when new is kept short. Store loss deletes the
            # store's objects, the epoch marker first.
            start_unless_running moto.sh
            url="s3://torture/run-$RANDOM?region=us-east-1&endpoint=$(scripts/moto.sh url)&max_ttl=5s"
            export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
            ;;
        *) echo "unknown store $store" >&2; exit 2 ;;
    esac
    [[ $variant == loss ]] && faults="$loss"
    # W: the store's max TTL in the URL (SQLite's default file has none;
    # its TTL is 1 s).
    window=5
    case $store in sqlite) window=2 ;; azblob) window=15 ;; esac
    export LEASEHOLD_TEST_CONFIRMATION_WINDOW=$window
    if [[ $variant == mixed ]]; then
        faults=loss-partition
        extra+=(--long-max-ttl "$((window * 4))s" --cut-for "$((window * 2))s")
    fi
    echo "== torture: $store ($variant) for $duration (TTL $ttl, a fault every ~$every: $faults)" >&2
    name=$store
    [[ $variant != main ]] && name=$store-$variant
    report="$reports_dir/$name.md"
    run_start=$SECONDS
    if ! "$bin/leasehold-torture" run --store "$url" --duration "$duration" --ttl "$ttl" \
        --fault-every "$every" --faults "$faults" --report "$report" \
        --witness "$reports_dir/$name-witness" "${holders[@]}" "${extra[@]}" \
        2> >(tee "$report.err" >&2); then
        failed=1
        failed_runs+=("$report")
    fi
    echo "torture: $name took $((SECONDS - run_start)) s (asked for $duration)" >&2
    reports+=("$report")
  done
done

# TORTURE_SEEDED=0 leaves out the seeded runs below (scripts/test.sh runs
# the stores in lanes side by side, the seeded runs in one of them).
if [[ $mode == short && "${TORTURE_SEEDED:-1}" == 1 ]]; then
    # The checker must catch a backend that grants held keys now and then.
    echo "== torture: a bug injected on purpose (grant-held) must fail the run" >&2
    must_catch "the injected bug" "$work/bug.md" \
        "$bin/leasehold-torture" run --store "sqlite:$work/bug.db" --duration 8s --ttl 1s \
        --cli-workers 0 --keys 1 --faults "" --inject-bug grant-held \
        --witness "$work/bug-witness"
    # The checker must catch tokens that start again after a loss of the
    # store's data (a store without epochs): the witness fences, and the
    # checker orders tokens, across store epochs.
    echo "== torture: a bug injected on purpose (epochless-tokens) must fail the run" >&2
    must_catch "the injected bug" "$work/epochless.md" \
        env LEASEHOLD_TEST_CONFIRMATION_WINDOW=2 "$bin/leasehold-torture" run \
        --store "sqlite:$work/epochless.db?max_ttl=2s" --duration 12s --ttl 1s \
        --cli-workers 0 --keys 1 --faults loss --fault-every 3s --inject-bug epochless-tokens \
        --witness "$work/epochless-witness"
    # The checker must catch readers let in beside a writer (reads of the
    # writer's key that miss its holder). One reader and three writers: the
    # writers, whose gate still sees the reader, keep the writer's key
    # held most of the time, and the reader comes in beside them (46 to 49
    # overlaps in each of 3 runs). With three readers and one writer, the
    # writer got in only when all three readers were out at once: 2 write
    # holds in 8 s, and none on a loaded machine (not caught).
    echo "== torture: a bug injected on purpose (readers-ignore-writer) must fail the run" >&2
    must_catch "the injected bug" "$work/readers.md" \
        "$bin/leasehold-torture" run --store "sqlite:$work/readers.db" --duration 8s --ttl 1s \
        --cli-workers 0 --keys 1 --readers 1 --faults "" --inject-bug readers-ignore-writer \
        --witness "$work/readers-witness"
    # Caught for its own sake: readers overlapping a writer, not a run that
    # failed for holding nothing (as it did once the gate came to read its
    # own lease too, until the bug hid only other processes' holders).
    caught_with_overlap readers-ignore-writer "$work/readers.md"
    # Multi-key holders (issue 54), with their acquisition made by hand
    # with a bug, as a user who rolls their own might. Keys taken in the
    # caller's order: six workers, each given three keys in an order of
    # its own and nothing else on the keys, deadlock (until a wait runs
    # out): 2 to 7 deadlocks in each of 4 runs of 10 s (the library's
    # MultiLock in the same run: none).
    echo "== torture: a bug injected on purpose (multi-caller-order) must fail the run" >&2
    must_catch "the injected bug" "$work/caller-order.md" \
        "$bin/leasehold-torture" run --store "sqlite:$work/caller-order.db" --duration 10s \
        --ttl 1s --workers 0 --cli-workers 0 --multi 6 --keys 3 --faults "" \
        --inject-bug multi-caller-order --witness "$work/caller-order-witness"
    caught_with_overlap multi-caller-order "$work/caller-order.md" deadlock
    # The first key kept after a later key was found busy: a single-key
    # worker on each key holds later keys now and then (in byte order,
    # with nothing else on the keys, no later key is ever held by anyone
    # without the first), and the kept lease (renewed for ever) outlives
    # its worker's next attempt. The buggy acquisition only tries the later
    # keys, as a user who gives up when the second key is busy would: with
    # a wait for them instead, the bug acted only when a wait ran out, and
    # under the test command's load that once never happened in 15 s.
    # Tried this way: caught in 5 runs of 5, 2 of them with both cores
    # kept busy.
    echo "== torture: a bug injected on purpose (multi-keeps-first) must fail the run" >&2
    must_catch "the injected bug" "$work/keeps-first.md" \
        "$bin/leasehold-torture" run --store "sqlite:$work/keeps-first.db" --duration 15s \
        --ttl 1s --workers 3 --cli-workers 0 --multi 3 --keys 3 --faults "" \
        --inject-bug multi-keeps-first --witness "$work/keeps-first-witness"
    caught_with_overlap multi-keeps-first "$work/keeps-first.md" "orphan hold"
    # The mixed variant must catch holders that trust a lease for their
    # whole TTL and quarantine a new store for their own max TTL (the
    # behaviour before issue 28's fix, injected as old-window: each
    # holder's window is its own URL's max TTL, 5 s or 20 s). On Redis: a
    # holder cut off by a partition writes on while it trusts its lease (a
    # SQLite holder, only paused, learns of the loss at its first renewal
    # once woken, so it rarely shows). One loss, the first, which comes
    # with the first long grant (--fault-every beyond the run: a second
    # loss re-creates the store with the long max TTL, whose quarantine
    # the bug makes 20 s); 30 s, as with the fix undone a long holder's
    # first grant waits out its own 20 s max TTL; library workers only,
    # as the bug is in their backend (a `leasehold run` holder keeps the
    # fix). Caught in 6 runs of 6 with 26 to 55 overlaps each, two of
    # them beside two busy loops on the two cores (the same run without
    # the bug: 0 violations; while the bug left a test build's fallback
    # window, fixed at open since issue 51, it went uncaught with 3
    # grants in the whole run), so the test command runs it;
    # TORTURE_CHECK_UNDONE_FIX=0 leaves it out.
    if [[ "${TORTURE_CHECK_UNDONE_FIX:-1}" == 1 ]]; then
        echo "== torture: store loss with mixed max TTLs, the fix undone (old-window), must fail the run" >&2
        start_redis
        must_catch "the undone fix" "$work/old-window.md" \
            env LEASEHOLD_TEST_CONFIRMATION_WINDOW=5 "$bin/leasehold-torture" run \
            --store "$(scripts/redis.sh url)?prefix=old-window$RANDOM:&max_ttl=5s" \
            --duration 30s --ttl 2s --cli-workers 0 --misbehaving 0 \
            --faults loss-partition --fault-every 40s \
            --long-max-ttl 20s --cut-for 10s --inject-bug old-window \
            --witness "$work/old-window-witness"
        # Caught for its own sake: holders of the lost store's long leases
        # working beside the new store's, not a run that failed for
        # holding nothing.
        caught_with_overlap old-window "$work/old-window.md"
    fi
fi

if [[ $mode == long ]]; then
    out="${TORTURE_PAGE:-docs/reliability.md}"
    mkdir -p "$(dirname "$out")"
    # The page's hand-written part (its summary, and which run backs each
    # figure) ends at the line $generated: a page that has it keeps
    # everything down to it, and only what follows (a "Reports" section:
    # the runs' reports) is written again. Update the summary's figures
    # from the new reports by hand. A page without the line (a new
    # TORTURE_PAGE) is written whole: a title, then the reports.
    generated="<!-- Below: the runs' reports, written by scripts/torture.sh; a long run replaces them and keeps everything above this line. -->"
    kept="$work/page-kept.md"
    : >"$kept"
    if [[ -f "$out" ]] && grep -qxF -- "$generated" "$out"; then
        awk -v mark="$generated" '{ print } $0 == mark { exit }' "$out" >"$kept"
    fi
    {
        if [[ -s "$kept" ]]; then
            cat "$kept"
            echo
            echo "## Reports"
        else
            echo "# Reliability: fault-injection results"
        fi
        echo
        echo "Produced by \`scripts/torture.sh\` on $(date -u +%Y-%m-%d) ($(nproc) cores, $(uname -sr), $profile build)."
        echo "What each line means is in \`crates/leasehold-torture/src/check.rs\`;"
        echo "every kind of violation is shown being caught in \`src/seeded.rs\`."
        echo
        for r in "${reports[@]}"; do cat "$r"; echo; done
    } >"$out.new"
    mv "$out.new" "$out"
    echo "wrote $out" >&2
fi
for r in "${failed_runs[@]}"; do
    echo "== torture: FAILED: $(basename "$r" .md) (its report again)" >&2
    cat "$r" >&2 2>/dev/null || echo "(no report)" >&2
    echo "-- its last messages:" >&2
    tail -n 10 "$r.err" >&2
done
exit $failed
