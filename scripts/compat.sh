#!/usr/bin/env bash
# Protocol compatibility (docs/guarantees.md, "Upgrading"): this build's
# `leasehold` against the previous release's, on every store, side by side,
# as real processes:
#   * exclusion both ways: one holds KEY (`run`, its command waiting on a
#     fifo), the other's `run --wait 0` exits 75; then the other way round;
#   * fencing tokens grow across old and new grants (LEASEHOLD_FENCING_TOKEN);
#   * `run --once-per` records written by one are read by the other (it
#     skips, exit 0, without running its command), both ways;
#   * a semaphore (`--limit 2`) shared: one slot each, a third run (old and
#     new) exits 75;
#   * a simulated future protocol: the store's epoch marker is made to say
#     protocol 99 (scripts/lib/store_raw.py, beside leasehold), then this
#     build's `run`, `init` and `break` exit 1 naming both protocols, and a
#     dump of the whole store afterwards equals the one before: nothing
#     written.
# Stores are made alternately by the old build and the new one (`init
# --new`: no quarantine), so each reads markers the other wrote.
#
# The previous release: commit PREV (for 0.1.0, the protocol of main before
# protocol versions were recorded), its CLI built once into
# .cache/prev-<commit>/leasehold-prev (and, from a release that has it, its
# leasehold-cloud beside it) from `git archive` of that commit, with
# this checkout's target/ as CARGO_TARGET_DIR so that every dependency
# already built is reused (only the ten workspace crates are compiled,
# about 90 s on 2 cores); later runs reuse the binary. The clone must have
# the commit (a shallow clone may not: `git fetch --unshallow`).
#
#   scripts/compat.sh                 # every store whose server is set
#   scripts/compat.sh sqlite redis    # only these
#
# The servers come from the LEASEHOLD_TEST_* variables scripts/test.sh sets;
# with LEASEHOLD_REQUIRE_EMULATORS=1 a store whose variable is unset fails
# the run, otherwise it is skipped (said so).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"

PREV="${LEASEHOLD_COMPAT_PREV:-9ddf645cf96cca402a609bfc8cc55628fa748c9d}"
PREV_DIR="$ROOT/.cache/prev-${PREV:0:12}"
OLD="$PREV_DIR/leasehold-prev"
# LEASEHOLD_COMPAT_NEW: another "new" binary (the old one, to see this
# test fail where the refusal is missing).
NEW="${LEASEHOLD_COMPAT_NEW:-$ROOT/target/debug/leasehold}"
PY="python3"
[[ -x "$ROOT/.cache/moto/venv/bin/python" ]] && PY="$ROOT/.cache/moto/venv/bin/python"
RAW=("$PY" "$ROOT/scripts/lib/store_raw.py")
started=$SECONDS

# --- the two binaries --------------------------------------------------------
if [[ ! -x "$OLD" ]]; then
    if ! git cat-file -e "$PREV^{commit}" 2>/dev/null; then
        # A shallow clone: try to fetch the commit from where it came.
        git fetch --quiet --unshallow 2>/dev/null || git fetch --quiet origin "$PREV" 2>/dev/null || true
    fi
    if ! git cat-file -e "$PREV^{commit}" 2>/dev/null; then
        echo "compat.sh: commit $PREV (the previous release) is not in this clone; fetch it (git fetch --unshallow, or git fetch origin $PREV)" >&2
        exit 1
    fi
    echo "== compat: building the previous release's leasehold ($PREV) once into $PREV_DIR"
    build_start=$SECONDS
    src="$PREV_DIR/src"
    rm -rf "$src"
    mkdir -p "$src"
    git archive "$PREV" | tar -x -C "$src"
    # Its own binary names, so that they never replace this build's in
    # target/debug. A release with `leasehold-cloud` (which its `leasehold`
    # runs, from its own directory, for a cloud store's URL) gets it beside
    # leasehold-prev under its real name: without it the old build would
    # say it is not installed, and with this build's the old one would be
    # compared with the new.
    toml="$src/crates/leasehold-cli/Cargo.toml"
    sed -i -e 's/^name = "leasehold"$/name = "leasehold-prev"/' \
        -e 's/^default-run = "leasehold"$/default-run = "leasehold-prev"/' "$toml"
    bins=(--bin leasehold-prev)
    cloud=false
    if grep -q '^name = "leasehold-cloud"$' "$toml"; then
        sed -i 's/^name = "leasehold-cloud"$/name = "leasehold-cloud-prev"/' "$toml"
        bins+=(--bin leasehold-cloud-prev)
        cloud=true
    fi
    (cd "$src" && CARGO_TARGET_DIR="$ROOT/target" cargo build --locked -p leasehold-cli "${bins[@]}")
    if $cloud; then
        cp "$ROOT/target/debug/leasehold-cloud-prev" "$PREV_DIR/leasehold-cloud.tmp"
        mv "$PREV_DIR/leasehold-cloud.tmp" "$PREV_DIR/leasehold-cloud"
    fi
    # Last: the old binary in place is what says the build is done.
    cp "$ROOT/target/debug/leasehold-prev" "$OLD.tmp"
    mv "$OLD.tmp" "$OLD"
    rm -rf "$src"
    echo "== compat: built in $((SECONDS - build_start)) s"
fi
cargo build --workspace --all-targets --quiet
echo "== compat: old $("$OLD" --version) ($PREV), new $("$NEW" --version) ($(git rev-parse --short HEAD))"

# --- the stores --------------------------------------------------------------
unique="$(date +%s)-$$"
AWS_ENV=(AWS_ACCESS_KEY_ID=leaseholdtests AWS_SECRET_ACCESS_KEY=leasehold-test-secret)
# store_url STORE: sets URL, RAW_ARGS (for store_raw.py) and ENV (credentials).
store_url() {
    local u="compat-$unique" t="compat_${unique//-/_}"
    ENV=()
    case "$1" in
    sqlite)
        URL="sqlite:$WORK/leases.db"
        RAW_ARGS=("$WORK/leases.db") ;;
    postgres)
        URL="$LEASEHOLD_TEST_POSTGRES_URL?table=$t"
        RAW_ARGS=("$LEASEHOLD_TEST_POSTGRES_URL" "$t") ;;
    redis)
        URL="$LEASEHOLD_TEST_REDIS_URL?prefix=$u:"
        RAW_ARGS=("$LEASEHOLD_TEST_REDIS_URL" "$u:") ;;
    etcd)
        URL="$LEASEHOLD_TEST_ETCD_URL?prefix=$u/"
        RAW_ARGS=("http://${LEASEHOLD_TEST_ETCD_URL#*://}" "$u/") ;;
    dynamodb)
        URL="dynamodb://$u?region=us-east-1&endpoint=$LEASEHOLD_TEST_DYNAMODB_ENDPOINT"
        RAW_ARGS=("$LEASEHOLD_TEST_DYNAMODB_ENDPOINT" "$u")
        ENV=("${AWS_ENV[@]}") ;;
    s3)
        URL="s3://leasehold-compat/$u?region=us-east-1&endpoint=$LEASEHOLD_TEST_S3_ENDPOINT"
        RAW_ARGS=("$LEASEHOLD_TEST_S3_ENDPOINT" leasehold-compat "$u/")
        ENV=("${AWS_ENV[@]}") ;;
    azblob)
        URL="azblob://$u"
        RAW_ARGS=("$u")
        ENV=("AZURE_STORAGE_CONNECTION_STRING=$LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING") ;;
    esac
}
store_var() {
    case "$1" in
    sqlite) echo "" ;;
    postgres) echo LEASEHOLD_TEST_POSTGRES_URL ;;
    redis) echo LEASEHOLD_TEST_REDIS_URL ;;
    etcd) echo LEASEHOLD_TEST_ETCD_URL ;;
    dynamodb) echo LEASEHOLD_TEST_DYNAMODB_ENDPOINT ;;
    s3) echo LEASEHOLD_TEST_S3_ENDPOINT ;;
    azblob) echo LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING ;;
    *) echo "compat.sh: unknown store $1" >&2; exit 2 ;;
    esac
}

# --- one store's scenarios (run in a subshell of its own) --------------------
fail() { echo "FAIL [$STORE] $*" >&2; exit 1; }
# lh BIN SUBCOMMAND ARGS...: leasehold on the store; its exit code in RC,
# its stderr in $WORK/stderr (and the log).
lh() {
    local bin="$1" sub="$2"
    shift 2
    RC=0
    env "${ENV[@]}" "$bin" "$sub" --store "$URL" "$@" >>"$WORK/log" 2>"$WORK/stderr" || RC=$?
    cat "$WORK/stderr" >>"$WORK/log"
}
expect() { # CODE WHAT
    [[ "$RC" == "$1" ]] || { tail -5 "$WORK/log" >&2; fail "$2: exit $RC, expected $1"; }
}
# hold BIN NAME RUN-ARGS...: starts a holder whose command writes its token
# into the fifo NAME.ready and ends when a line comes on NAME.release;
# returns once the command runs, its token in TOKEN (at most 60 s, checking
# every second that the holder is still there). End it with `release NAME`.
hold() {
    local bin="$1" name="$2" fd waited=0
    shift 2
    mkfifo "$WORK/$name.ready" "$WORK/$name.release"
    env "${ENV[@]}" "$bin" run "$@" --store "$URL" -- sh -c \
        'echo "$LEASEHOLD_FENCING_TOKEN" > "$1"; read -r _ < "$2"' _ \
        "$WORK/$name.ready" "$WORK/$name.release" >>"$WORK/log" 2>&1 &
    echo $! >"$WORK/$name.pid"
    # Read-write: the open does not wait for the writer, the read does.
    exec {fd}<>"$WORK/$name.ready"
    TOKEN=""
    until read -t 1 -r TOKEN <&"$fd"; do
        kill -0 "$(cat "$WORK/$name.pid")" 2>/dev/null || {
            tail -5 "$WORK/log" >&2
            fail "holder $name ($(basename "$bin") run $*) ended before its command ran"
        }
        (( ++waited < 60 )) || fail "holder $name: its command did not run within 60 s"
    done
    exec {fd}<&-
    [[ "$TOKEN" =~ ^[0-9]+$ ]] || fail "holder $name: no token ($TOKEN)"
}
release() { # NAME: lets the holder's command end; the holder must exit 0
    timeout 60 sh -c 'echo > "$1"' _ "$WORK/$1.release" || fail "holder $1 did not read its release"
    local rc=0
    wait "$(cat "$WORK/$1.pid")" || rc=$?
    [[ "$rc" == 0 ]] || fail "holder $1 exited $rc"
}

scenarios() { # STORE CREATOR(old|new)
    STORE="$1"
    local creator="$2" other t_prev k="compat"
    [[ "$creator" == old ]] && creator="$OLD" other="$NEW" || creator="$NEW" other="$OLD"
    lh "$creator" init --new
    expect 0 "init --new by $creator"

    # Exclusion both ways, tokens growing across the versions.
    t_prev=0
    for pair in "$OLD $NEW" "$NEW $OLD" "$OLD $NEW"; do
        read -r a b <<<"$pair"
        hold "$a" "h$t_prev" "$k"
        (( TOKEN > t_prev )) || fail "token $TOKEN of $a not above $t_prev"
        lh "$b" run "$k" --wait 0 -- true
        expect 75 "$b ran while $a held $k"
        release "h$t_prev"
        t_prev=$TOKEN
    done

    # Once-per records, read by the other version, both ways.
    for pair in "$OLD $NEW" "$NEW $OLD"; do
        read -r a b <<<"$pair"
        local key="once-$(basename "$a")"
        lh "$a" run "$key" --once-per 1h -- true
        expect 0 "$a --once-per"
        lh "$b" run "$key" --once-per 1h -- touch "$WORK/ran-$key"
        expect 0 "$b --once-per after $a's success"
        [[ ! -e "$WORK/ran-$key" ]] || fail "$b ran $key again within the period $a recorded"
    done

    # A semaphore shared: one slot each, then no third, old or new.
    hold "$OLD" s-old sem --limit 2
    hold "$NEW" s-new sem --limit 2
    for bin in "$OLD" "$NEW"; do
        lh "$bin" run sem --limit 2 --wait 0 -- true
        expect 75 "$bin took a third permit of 2"
    done
    release s-old
    release s-new

    # A future protocol: refused, nothing written.
    "${RAW[@]}" future "$STORE" 99 "${RAW_ARGS[@]}" >/dev/null
    local before after
    before="$("${RAW[@]}" dump "$STORE" "${RAW_ARGS[@]}")"
    # The highest protocol the new build reads there: 1, or 2 on Redis
    # (epochs that carry leases through a failover).
    local speaks=1
    [[ "$STORE" == redis ]] && speaks=2
    for cmd in "run $k -- true" "run fresh-key --wait 5s -- true" "init" "break $k"; do
        # shellcheck disable=SC2086
        lh "$NEW" $cmd
        [[ "$RC" == 1 ]] || { cat "$WORK/stderr" >&2; fail "new '$cmd' on a protocol 99 store: exit $RC, expected 1"; }
        grep -q "protocol 99" "$WORK/stderr" && grep -q "speaks protocol $speaks and older" "$WORK/stderr" ||
            { cat "$WORK/stderr" >&2; fail "new '$cmd': the message does not name both protocols"; }
    done
    after="$("${RAW[@]}" dump "$STORE" "${RAW_ARGS[@]}")"
    [[ "$before" == "$after" ]] || {
        diff <(echo "$before") <(echo "$after") >&2 || true
        fail "the store changed after the refusals"
    }
    echo "ok   [$STORE] made by the $2 build: exclusion both ways, tokens growing (to $t_prev), once-per both ways, a shared semaphore, protocol 99 refused with nothing written"
}

stores=("$@")
[[ ${#stores[@]} -eq 0 ]] && stores=(sqlite postgres redis etcd dynamodb s3 azblob)
pids=()
names=()
creator=new
for store in "${stores[@]}"; do
    var="$(store_var "$store")"
    if [[ -n "$var" && -z "${!var:-}" ]]; then
        if [[ "${LEASEHOLD_REQUIRE_EMULATORS:-}" == 1 ]]; then
            echo "FAIL [$store] $var is not set (LEASEHOLD_REQUIRE_EMULATORS=1)" >&2
            exit 1
        fi
        echo "SKIPPED [$store]: $var is not set"
        continue
    fi
    WORK="$(mktemp -d)"
    store_url "$store"
    (scenarios "$store" "$creator") &
    pids+=($!)
    names+=("$store:$WORK")
    # Alternate who makes the stores.
    [[ "$creator" == new ]] && creator=old || creator=new
done
failed=0
for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
        failed=1
        echo "   (log: ${names[$i]#*:}/log)" >&2
    else
        rm -rf "${names[$i]#*:}"
    fi
done
echo "== compat: $((SECONDS - started)) s"
exit "$failed"
