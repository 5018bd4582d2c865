#!/usr/bin/env bash
# Proves the README's set-up on a bare machine: builds and runs README
# command 1, and runs plain `cargo test -p leasehold`, in an environment
# where any use of protoc fails (a `protoc` first on PATH that exits 1, and
# PROTOC naming a file that does not exist). A dependency whose build
# script needs protoc (or finds one installed on this machine) fails this
# script.
#
#   scripts/bare-build.sh          # as scripts/test.sh runs it: first
#   LEASEHOLD_BARE_TARGET=target/bare scripts/bare-build.sh
#
# Target directory: by default the workspace's own, so that the rest of the
# test command reuses what this builds. The proof is whole only when every
# build script runs here first: on a clean clone (CI), where scripts/test.sh
# runs this before anything else is built; the script says which it was.
# $LEASEHOLD_BARE_TARGET names a directory of its own instead, emptied
# first and removed after: the whole proof on any checkout, at the price of
# a second build of everything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

target="${LEASEHOLD_BARE_TARGET:-${CARGO_TARGET_DIR:-target}}"
own_dir=0
[[ -n "${LEASEHOLD_BARE_TARGET:-}" ]] && own_dir=1
[[ $own_dir == 1 ]] && rm -rf "$target"
if [[ -d "$target/release/build" || -d "$target/debug/build" ]]; then
    echo "bare-build: $target already has builds: build scripts that ran before are not run again (the whole proof: a clean clone, or LEASEHOLD_BARE_TARGET=target/bare)"
else
    echo "bare-build: $target is empty: every build script runs in the bare environment"
fi
mkdir -p "$target/no-protoc"
cat >"$target/no-protoc/protoc" <<'SHIM'
#!/bin/sh
echo "protoc was run ($0 $*): the build must not need it" >&2
exit 1
SHIM
chmod +x "$target/no-protoc/protoc"

bare() {
    env PATH="$PWD/$target/no-protoc:$PATH" PROTOC=/nonexistent/protoc \
        CARGO_TARGET_DIR="$target" "$@"
}

# The shim is what the build would find: check it, not the build, is in the way.
if bare sh -c 'protoc --version' 2>/dev/null; then
    echo "bare-build: protoc still runs in the bare environment" >&2
    exit 1
fi

start=$SECONDS
# The command as the README has it; its default store under the target
# directory instead of the user's state directory.
out="$(bare env XDG_STATE_HOME="$PWD/$target/state" \
    cargo run --locked --bin leasehold -- run demo -- echo "I hold demo")"
echo "bare-build: README command 1 printed '$out' after $((SECONDS - start)) s"
[[ "$out" == "I hold demo" ]] || { echo "bare-build: expected 'I hold demo'" >&2; exit 1; }

help="$(bare "$target/debug/leasehold" --help)"
for scheme in sqlite: azblob:// dynamodb:// postgres:// redis:// etcd:// s3://; do
    grep -qF "$scheme" <<<"$help" || { echo "bare-build: --help lacks $scheme" >&2; exit 1; }
done

start=$SECONDS
# `cargo test -p leasehold`, its test binaries run three at a time as the
# main test step runs them (which then leaves them out: they ran here).
bare scripts/run-tests.sh --locked -p leasehold -- --test-threads=8
echo "bare-build: cargo test -p leasehold passed after $((SECONDS - start)) s"
rm -rf "$target/no-protoc" "$target/state"
[[ $own_dir == 1 ]] && rm -rf "$target"
exit 0
