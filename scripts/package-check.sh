#!/usr/bin/env bash
# Checks that the crates meant for crates.io can be published: each public
# crate (every workspace member without `publish = false`) has the metadata
# crates.io shows, one `rust-version` that is the workspace's, no lower than
# any dependency's in Cargo.lock and the same as the README's "Rust
# toolchain (X or later", and `cargo package` (without the verify build)
# succeeds for all of them. The internal crates (benchmarks, torture
# harness, the Python bindings' crate, which goes to PyPI, the server
# stores' test set-up, which runs this repository's scripts) must say
# `publish = false`. About 5 s once the dependencies are downloaded (the
# test command has built everything before it runs this); scripts/dist.sh
# runs `cargo package` with the verify build.
#
#   scripts/package-check.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The crates that stay home. A new crate must be added here or published.
internal="leasehold-bench leasehold-torture leasehold-python leasehold-test-servers"

public=$(cargo metadata --format-version 1 --locked --no-deps --offline 2>/dev/null ||
    cargo metadata --format-version 1 --locked --no-deps)
public=$(INTERNAL="$internal" python3 -c '
import json, os, re, sys
m = json.load(sys.stdin)
internal = set(os.environ["INTERNAL"].split())
readme = open("README.md").read()
found = re.search(r"Rust toolchain \((\d+\.\d+(?:\.\d+)?) or later", readme)
problems = []
if not found:
    problems.append("README.md: no \"Rust toolchain (X or later\" to compare rust-version with")
versions = set()
public = []
for p in m["packages"]:
    name = p["name"]
    versions.add(p.get("rust_version"))
    if name in internal:
        if p["publish"] != []:
            problems.append(f"{name}: internal, needs publish = false")
        continue
    if p["publish"] == []:
        problems.append(f"{name}: publish = false but not listed as internal in scripts/package-check.sh")
        continue
    public.append(name)
    for field in ("description", "license", "repository", "readme", "rust_version"):
        if not p.get(field):
            problems.append(f"{name}: no {field}")
    for field in ("keywords", "categories"):
        if not p.get(field):
            problems.append(f"{name}: no {field}")
    for d in p["dependencies"]:
        if d.get("path") and d["kind"] != "dev" and not d["req"].strip("^= *"):
            dep = d["name"]
            problems.append(f"{name}: path dependency {dep} has no version")
if len(versions) != 1:
    problems.append(f"one rust-version for every crate, found {sorted(map(str, versions))}")
elif found and versions != {found.group(1)}:
    problems.append(f"rust-version {versions.pop()} but the README says {found.group(1)}")
if problems:
    sys.exit("package-check: " + "\n  ".join(["problems:"] + problems))
print(" ".join(public))
' <<<"$public")

# The dependencies' own rust-version: the workspace's must be at least the
# highest of them (the full graph, every feature and platform). Offline
# first; a fresh machine has not downloaded the other platforms' crates
# (anstyle-wincon, ...), which the full graph needs: then online.
full=$(cargo metadata --format-version 1 --locked --offline 2>/dev/null ||
    cargo metadata --format-version 1 --locked)
python3 -c '
import json, sys
m = json.load(sys.stdin)
members = set(m["workspace_members"])
def v(s): return tuple(int(x) for x in s.split("."))
ours = {p["rust_version"] for p in m["packages"] if p["id"] in members}
deps = [(v(p["rust_version"]), p["name"], p["rust_version"]) for p in m["packages"]
        if p["id"] not in members and p.get("rust_version")]
need = max(deps)
if v(ours.pop()) < need[0]:
    sys.exit(f"package-check: {need[1]} needs Rust {need[2]}, more than the workspace rust-version")
' <<<"$full" || { echo "package-check: rust-version below a dependency's (or metadata failed)" >&2; exit 1; }

args=()
for p in $public; do args+=(-p "$p"); done
echo "package-check: cargo package --no-verify for: $public"
# Offline first: every dependency is in the local cache once the workspace
# was built; online (the crates.io index) only if that fails.
if ! cargo package "${args[@]}" --no-verify --locked --allow-dirty --offline --quiet 2>/dev/null; then
    cargo package "${args[@]}" --no-verify --locked --allow-dirty --quiet
fi
echo "package-check: ok ($(echo "$public" | wc -w) crates, $((SECONDS)) s)"
