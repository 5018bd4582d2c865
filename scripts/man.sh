#!/usr/bin/env bash
# Writes the man pages, generated from the command line's definition:
# leasehold.1 and leasehold-COMMAND.1 for each command.
#
#   scripts/man.sh [DIR]     # default target/man; then e.g.
#                            # man -l target/man/leasehold.1
#   LEASEHOLD_BIN=path/to/leasehold scripts/man.sh DIR   # no build
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir="${1:-target/man}"
bin="${LEASEHOLD_BIN:-}"
if [[ -z "$bin" ]]; then
    cargo build --quiet --bin leasehold
    bin="${CARGO_TARGET_DIR:-target}/debug/leasehold"
fi
mkdir -p "$dir"
"$bin" __man >"$dir/leasehold.1"
# The commands, as --help lists them (help is clap's own).
commands=$("$bin" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && /^  [a-z]/ {print $1}' | grep -vx help)
for c in $commands; do
    "$bin" __man "$c" >"$dir/leasehold-$c.1"
done
echo "man.sh: wrote $(ls "$dir" | wc -l) pages to $dir"
