#!/usr/bin/env bash
# Fault-injection runs on every store: many processes contend for the same
# keys through the library and through `leasehold run`, while holders are
# killed, paused, partitioned, their leases broken and the emulators
# restarted; an independent witness checks mutual exclusion and fencing.
#
#   scripts/torture.sh            # the long run (5 minutes a store, release
#                                 # build); writes docs/reliability.md
#   scripts/torture.sh --short    # the bounded CI run (about a minute a
#                                 # store, debug build); fails on a violation
#   TORTURE_STORES="sqlite dynamodb" scripts/torture.sh --short
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=long
[[ "${1:-}" == "--short" ]] && mode=short
stores=(${TORTURE_STORES:-sqlite azblob dynamodb})

if [[ $mode == long ]]; then
    profile=release
    cargo build --release --bins
else
    profile=debug
    cargo build --bins
fi
bin="${CARGO_TARGET_DIR:-target}/$profile"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
started=()
stop_all() {
    for e in "${started[@]}"; do "scripts/$e.sh" stop || true; done
    rm -rf "$work"
}
trap stop_all EXIT

# duration, ttl, fault interval per store and mode
settings() {
    case "$mode:$1" in
        short:sqlite) echo "40s 1s 1s" ;;
        short:dynamodb) echo "60s 2s 2s" ;;
        short:azblob) echo "90s 15s 8s" ;;
        long:sqlite) echo "5m 1s 1s" ;;
        long:dynamodb) echo "5m 2s 2s" ;;
        long:azblob) echo "5m 15s 8s" ;;
    esac
}

# A store restarted with its state lost forgets every lease and fencing
# counter: see docs/reliability.md for what that does. Only the long run
# injects it; the CI run sticks to faults leasehold must always survive.
state_loss=restart
[[ $mode == short ]] && state_loss=""

reports=()
failed=0
for store in "${stores[@]}"; do
    read -r duration ttl every <<<"$(settings "$store")"
    extra=()
    case $store in
        sqlite)
            url="sqlite:$work/torture.db"
            faults=kill,pause,break
            ;;
        azblob)
            scripts/azurite.sh start; started+=(azurite)
            export AZURE_STORAGE_CONNECTION_STRING="${AZURE_STORAGE_CONNECTION_STRING:-UseDevelopmentStorage=true}"
            url="azblob://torture-$RANDOM"
            faults=kill,pause,break,partition,delay,reset${state_loss:+,$state_loss}
            extra=(--restart-cmd "scripts/azurite.sh stop && scripts/azurite.sh start")
            ;;
        dynamodb)
            scripts/dynamodb-local.sh start; started+=(dynamodb-local)
            # A new table grants nothing for its max TTL (the store-epoch quarantine):
            # keep it short so that the run exercises the store.
            url="dynamodb://torture$RANDOM?region=us-east-1&endpoint=http://127.0.0.1:8000&max_ttl=5s"
            export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
            faults=kill,pause,break,partition,delay,reset${state_loss:+,$state_loss}
            extra=(--restart-cmd "scripts/dynamodb-local.sh stop && scripts/dynamodb-local.sh start")
            ;;
        *) echo "unknown store $store" >&2; exit 2 ;;
    esac
    echo "== torture: $store for $duration (TTL $ttl, a fault every ~$every: $faults)" >&2
    report="$work/$store.md"
    if ! "$bin/leasehold-torture" run --store "$url" --duration "$duration" --ttl "$ttl" \
        --fault-every "$every" --faults "$faults" --report "$report" "${extra[@]}"; then
        failed=1
    fi
    reports+=("$report")
done

if [[ $mode == long ]]; then
    out=docs/reliability.md
    mkdir -p docs
    {
        echo "# Reliability: fault-injection results"
        echo
        echo "Produced by \`scripts/torture.sh\` on $(date -u +%Y-%m-%d) ($(nproc) cores, $(uname -sr));"
        echo "every store for its duration below, with every fault kind it supports."
        echo "What each line means is in \`crates/leasehold-torture/src/check.rs\`."
        echo
        cat <<'TEXT'
How to read it:

- Holders are real processes: library workers that take the lock in a loop, and
  `leasehold run` loops whose command writes to the witness. The witness is a set
  of flock'd files that accepts a write only if its fencing token is not older than
  the newest it has seen for the key, and logs every write with the boot clock.
- **Violations** must be 0: two holders' accepted writes interleaved (fenced
  overlap), any writes interleaved except right after a `break` (unfenced
  overlap), tokens not increasing in the order sections began, a holder writing
  after its guard said lost, a command outliving its killed `leasehold run`.
- A `break` frees the key at once while the holder learns of it only at its next
  renewal; the overlap that follows is expected and must be (and is) fenced: the
  old holder's writes are rejected.
- **Stop-before-takeover margin**: for every handover from a holder that did not
  end normally (killed, paused past its TTL, partitioned), the time between its
  last write and the next holder's first. It must be positive; it is about the
  safety margin plus the backend's takeover delay.
- **Recovery**: from a fault to the next holder's first write on that key. After a
  kill it is bounded by the TTL plus a poll interval (DynamoDB's clock-free
  takeover: about two TTLs); after a partition or pause the old holder's lease
  must run out first. Faults injected while another fault still held the key
  (or near the end of the run) can have long or missing recoveries.
- **restart** stops the emulator and starts it empty: every lease and fencing
  counter is forgotten, and tokens start again at 1 (the witness starts a new
  epoch, as a resource would have to). leasehold cannot fence across that: a
  holder that has not yet noticed could overlap a new holder if the store came
  back within the holder's TTL. Here DynamoDB Local takes longer than the TTL to
  restart, and Azure holders notice at their next renewal; the runs below show
  what happened. The CI run (`scripts/torture.sh --short`) leaves this fault out.
TEXT
        echo
        for r in "${reports[@]}"; do cat "$r"; echo; done
    } >"$out"
    echo "wrote $out" >&2
fi
exit $failed
