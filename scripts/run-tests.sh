#!/usr/bin/env bash
# Builds the workspace's tests once and runs the test binaries several at a
# time (plain `cargo test` runs them one after another: 12 of the test
# command's 37 minutes, spent mostly waiting on leases and servers, not on
# the CPU). Each binary runs as `cargo test` would run it (in its package's
# directory, with the arguments after `--`); its output is printed whole
# when it ends, and the run fails if any binary fails. The doc tests run as
# one more job.
#
#   scripts/run-tests.sh [CARGO TEST ARGS] [-- TEST BINARY ARGS]
#   RUN_TESTS_JOBS=1 scripts/run-tests.sh   # one at a time
#   RUN_TESTS_ONLY='leasehold-postgres/(conformance|store_loss)' scripts/run-tests.sh
#       # only the test binaries whose PACKAGE-DIRECTORY/TARGET name matches
#       # (an extended regex; no doc tests then)
#   RUN_TESTS_SKIP='leasehold/' scripts/run-tests.sh
#       # all but the test binaries whose name matches (doc tests still run)
#
# Written here rather than installing cargo-nextest, which does the same and
# more: nextest would be compiled from source on every fresh machine (the
# machines reach the crates registry only), a few minutes on two cores, for
# what is thirty lines of shell.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs="${RUN_TESTS_JOBS:-3}"
only="${RUN_TESTS_ONLY:-}"
skip="${RUN_TESTS_SKIP:-}"
cargo_args=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
    cargo_args+=("$1")
    shift
done
[[ "${1:-}" == "--" ]] && shift
test_args=("$@")
[[ ${#cargo_args[@]} -eq 0 ]] && cargo_args=(--workspace)

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

# One line per test binary: its label (package directory/target name),
# package directory, executable.
# (Cargo's JSON has one artifact message a line; its keys come in a fixed
# order: manifest_path, then target's name, then executable.)
cargo test --no-run --message-format=json "${cargo_args[@]}" >"$logs/artifacts.json"
mapfile -t binaries < <(
    # Test builds only: the binaries the tests run (`leasehold` itself)
    # are artifacts with an executable too.
    grep '"executable":"/' "$logs/artifacts.json" | grep -E '"profile":{[^}]*"test":true' |
        sed -E 's|.*"manifest_path":"([^"]*)/Cargo.toml".*"target":\{[^}]*"name":"([^"]*)".*"executable":"([^"]*)".*|\2 \1 \3|' |
        while read -r name dir exe; do echo "$(basename "$dir")/$name $dir $exe"; done
)
if [[ -n "$only" ]]; then
    mapfile -t binaries < <(printf '%s\n' "${binaries[@]}" | grep -E "^($only) " || true)
fi
if [[ -n "$skip" ]]; then
    mapfile -t binaries < <(printf '%s\n' "${binaries[@]}" | grep -vE "^($skip)" || true)
fi
[[ ${#binaries[@]} -gt 0 ]] || { echo "run-tests: no test binary to run" >&2; exit 1; }
# The binaries known to take longest start first, so that the run does not
# end with one of them alone (a stable partition: the rest keep their order).
first='/(hostile|waits|conformance[a-z_]*|restart|azure|once_per|process_tree|azure_store_loss|failback|clocks|backend)$'
mapfile -t binaries < <(
    printf '%s\n' "${binaries[@]}" | awk -v re="$first" '{ split($0, f, " "); if (f[1] ~ re) print; else rest[n++] = $0 } END { for (i = 0; i < n; i++) print rest[i] }'
)

run_one() { # dir exe log
    local start=$SECONDS status=0
    (cd "$1" && "$2" "${test_args[@]}") >"$3" 2>&1 || status=$?
    echo "$status $((SECONDS - start))" >"$3.status"
}
run_doc() { # log
    local start=$SECONDS status=0
    cargo test --doc "${cargo_args[@]}" -- "${test_args[@]}" >"$1" 2>&1 || status=$?
    # A package with no library has no doc tests.
    if [[ $status != 0 ]] && grep -q "no library targets found" "$1"; then
        status=0
        echo "test result: ok. (no library, no doc tests)" >>"$1"
    fi
    echo "$status $((SECONDS - start))" >"$1.status"
}

failed=()
report() { # label log
    local status secs
    read -r status secs <"$2.status"
    if [[ $status == 0 ]]; then
        echo "run-tests: ok     $1 (${secs} s): $(grep -h '^test result' "$2" | tail -1)"
    else
        echo "run-tests: FAILED $1 (${secs} s, exit $status):"
        sed 's/^/    /' "$2"
        failed+=("$1")
    fi
}

start=$SECONDS
declare -A running=()
i=0
for line in "${binaries[@]}" doc; do
    while [[ ${#running[@]} -ge $jobs ]]; do
        wait -n || true
        for pid in "${!running[@]}"; do
            kill -0 "$pid" 2>/dev/null && continue
            report "${running[$pid]}" "$logs/$pid"
            unset "running[$pid]"
        done
    done
    i=$((i + 1))
    if [[ $line == doc ]]; then
        [[ -n "$only" ]] && continue
        run_doc "$logs/job$i" &
        running[$!]="doc tests"
    else
        read -r label dir exe <<<"$line"
        run_one "$dir" "$exe" "$logs/job$i" &
        running[$!]="$label"
    fi
    ln -s "$logs/job$i" "$logs/$!"
    ln -s "$logs/job$i.status" "$logs/$!.status"
done
for pid in "${!running[@]}"; do
    wait "$pid" || true
    report "${running[$pid]}" "$logs/$pid"
done

docs=" and the doc tests"
[[ -n "$only" ]] && docs=""
echo "run-tests: ${#binaries[@]} test binaries$docs in $((SECONDS - start)) s, $jobs at a time"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "run-tests: ${#failed[@]} failed: ${failed[*]}" >&2
    exit 1
fi
