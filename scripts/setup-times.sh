#!/usr/bin/env bash
# Measures the README's two set-up commands as a newcomer meets them: a
# clean clone of this repository (its HEAD) with an empty target/, then
#   1. README command 1 (`cargo run --bin leasehold -- run demo -- echo
#      "I hold demo"`, a debug build), and
#   2. the README's test command (`scripts/test.sh`),
# each timed, and writes the results as docs/setup-times.md, the section of
# docs/benchmarks.md that the benchmark harness copies into the page (and
# that this script also puts there at once).
#
#   scripts/setup-times.sh            # both (the test command takes ~20 min)
#   scripts/setup-times.sh --build    # README command 1 only
#
# The registry's sources are already downloaded on a machine that built the
# project before (~/.cargo/registry), so the clone's first build does not
# download them; the servers' packages likewise stay installed. Both are
# said on the page.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"

build_only=0
[[ "${1:-}" == "--build" ]] && build_only=1

work="$(mktemp -d /tmp/leasehold-setup.XXXXXX)"
trap 'rm -rf "$work"' EXIT
git clone -q "$ROOT" "$work/leasehold"
cd "$work/leasehold"
commit="$(git rev-parse --short HEAD)"

start=$SECONDS
out="$(XDG_STATE_HOME="$work/state" cargo run --bin leasehold -- \
    run demo -- echo "I hold demo")"
build_s=$((SECONDS - start))
[[ "$out" == "I hold demo" ]] || { echo "setup-times: README command 1 printed '$out'" >&2; exit 1; }
size_mb="$(awk -v b="$(stat -c %s target/debug/leasehold)" 'BEGIN { printf "%.1f", b / 1e6 }')"
echo "setup-times: README command 1: ${build_s} s, binary ${size_mb} MB" >&2

test_line="not measured in this run (\`scripts/setup-times.sh --build\`)"
if ((!build_only)); then
    rm -rf target
    start=$SECONDS
    scripts/test.sh >"$work/test.log" 2>&1 || {
        tail -50 "$work/test.log" >&2
        echo "setup-times: the test command failed" >&2
        exit 1
    }
    test_s=$((SECONDS - start))
    test_line="**$((test_s / 60)) min $((test_s % 60)) s** (passed)"
    echo "setup-times: the test command: ${test_s} s" >&2
fi

cores="$(nproc)"
cat >"$ROOT/docs/setup-times.md" <<EOF
## 7. Set-up time, from a clean clone

The README's two commands on a clean clone (commit $commit) with an empty
\`target/\`, on this $cores-core machine, written by \`scripts/setup-times.sh\`.
The crates' sources were already downloaded (\`~/.cargo/registry\`; a first
download adds about 10 s here) and the servers' packages already installed.
No \`protoc\` was used: the test command itself proves that a build where
any \`protoc\` fails works (\`scripts/bare-build.sh\`).

| command | time |
|---|---|
| README command 1: \`cargo run --bin leasehold -- run demo -- echo "I hold demo"\` (a debug build, every store; binary $size_mb MB) | **$((build_s / 60)) min $((build_s % 60)) s** |
| the test command: \`scripts/test.sh\` | $test_line |
EOF

# The page: the section replaced (or put before "## Reproduce").
python3 - "$ROOT/docs/benchmarks.md" "$ROOT/docs/setup-times.md" <<'PY'
import re, sys
page_path, section_path = sys.argv[1], sys.argv[2]
page = open(page_path).read()
section = open(section_path).read().rstrip("\n") + "\n\n"
pattern = re.compile(r"## 7\. Set-up time.*?(?=^## )", re.S | re.M)
if pattern.search(page):
    page = pattern.sub(lambda _: section, page, count=1)
else:
    page = page.replace("## Reproduce", section + "## Reproduce", 1)
open(page_path, "w").write(page)
PY
echo "setup-times: wrote docs/setup-times.md and its section of docs/benchmarks.md" >&2
