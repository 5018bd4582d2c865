#!/usr/bin/env bash
# Builds what a user installs without Rust, into dist/ (emptied first):
#
#   leasehold-VERSION-x86_64-linux-gnu.tar.gz   the binaries (leasehold, leasehold-cloud), man pages,
#                          completions (bash, zsh, fish), README, CHANGELOG, licences
#   leasehold_VERSION-1_amd64.deb                the same binaries, man pages, completions
#   leasehold_cli-VERSION-py3-none-manylinux_2_17_x86_64...whl
#                          the binaries as a wheel of their own: pipx / uv tool install
#   leasehold-VERSION-cp39-abi3-manylinux_2_17_x86_64...whl
#                          the Python package (`import leasehold`), CPython 3.9+
#   SHA256SUMS
#
# Linux x86_64 only, linked against glibc 2.17 (CentOS 7, Debian 8, Ubuntu
# 14.04 and anything newer): zig is the linker (maturin's --zig, with the
# `ziglang` wheel), and every binary is checked with `objdump -T` to need
# no newer glibc symbol. The binary is built once (the CLI wheel's build)
# and the same file goes into the tarball and the .deb. Last, `cargo
# package` of the public crates with its verify build (each crate built
# from its .crate file, as crates.io would have it).
#
# Needs only a Rust toolchain, a C compiler's binutils (objdump), python3
# with venv and pip, and the registries; it installs its own tools once:
# maturin and ziglang (pip, into .cache/dist-venv, ~30 s) and cargo-deb
# (`cargo install` into .cache/tools, ~2-3 min on two cores).
# Two release builds with fat LTO (the CLI, the Python module): ~25-35 min
# on two busy cores from an empty target directory; see the README.
#
#   scripts/dist.sh                 # then scripts/dist-check.sh
#   DIST_NO_PACKAGE_VERIFY=1 scripts/dist.sh   # skip the cargo package verify build
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

maturin_version=1.16.0
ziglang_version=0.17.0
cargo_deb_version=3.8.0
target=x86_64-unknown-linux-gnu
glibc_floor=2.17
# manylinux2014 is the wheel tag for glibc 2.17 (PEP 599).
compat=manylinux2014

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
target_dir="${CARGO_TARGET_DIR:-target}"
release="$target_dir/$target/release"
out=dist
venv=.cache/dist-venv
tools=.cache/tools

times=()
t=$SECONDS
took() { times+=("$(printf '%5d s  %s' $((SECONDS - t)) "$1")"); t=$SECONDS; }
trap 'echo "== dist.sh: times"; printf "%s\n" "${times[@]}"; echo "$(printf "%5d s" $SECONDS)  in all"' EXIT

for tool in objdump python3 sha256sum tar gzip; do
    command -v "$tool" >/dev/null || { echo "dist.sh: needs $tool" >&2; exit 1; }
done

# --- tools, once
if ! "$venv/bin/maturin" --version 2>/dev/null | grep -q "$maturin_version" ||
    ! "$venv/bin/python" -c "import ziglang" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "maturin==$maturin_version" "ziglang==$ziglang_version"
fi
if ! "$tools/bin/cargo-deb" --version 2>/dev/null | grep -q "$cargo_deb_version"; then
    # In cargo's own temporary directory, not CARGO_TARGET_DIR: no wait for
    # (or leftovers in) the project's build directory.
    env -u CARGO_TARGET_DIR cargo install --quiet --locked --root "$tools" \
        cargo-deb --version "$cargo_deb_version"
fi
export PATH="$PWD/$venv/bin:$PWD/$tools/bin:$PATH"
took "tools (maturin, ziglang, cargo-deb)"

rm -rf "$out"
mkdir -p "$out"

# The highest glibc symbol version FILE needs; fails above the floor.
check_glibc() { # FILE NAME
    local need
    need=$(objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
    if [[ -z "$need" || "$(printf '%s\n' "$need" "$glibc_floor" | sort -V | tail -1)" != "$glibc_floor" ]]; then
        echo "dist.sh: $2 needs glibc ${need:-?}, above the floor $glibc_floor" >&2
        exit 1
    fi
    echo "dist.sh: $2 needs glibc $need at most (floor $glibc_floor)"
}

# --- the binary, as the CLI wheel (bindings = "bin", crates/leasehold-cli/pyproject.toml)
maturin build --release --locked --zig --target "$target" --compatibility "$compat" \
    -m crates/leasehold-cli/Cargo.toml -o "$out"
bin="$release/leasehold"
# leasehold runs leasehold-cloud (every store) for the cloud stores' URLs:
# every artifact installs the two side by side.
cloud_bin="$release/leasehold-cloud"
cli_wheel=$(ls "$out"/leasehold_cli-"$version"-*.whl)
# The wheel's binaries are the ones in the target directory, which the
# tarball and the .deb take.
python3 - "$cli_wheel" "$bin" "$cloud_bin" <<'EOF'
import hashlib, os, sys, zipfile
wheel, *binaries = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for binary in binaries:
        name = os.path.basename(binary)
        inside = [n for n in z.namelist() if n.endswith(".data/scripts/" + name)]
        assert len(inside) == 1, f"{wheel}: no {name} script in {z.namelist()}"
        packed = hashlib.sha256(z.read(inside[0])).hexdigest()
        built = hashlib.sha256(open(binary, "rb").read()).hexdigest()
        assert packed == built, f"{wheel}'s {name} is not {binary}"
EOF
check_glibc "$bin" leasehold
check_glibc "$cloud_bin" leasehold-cloud
took "CLI wheel (release build of leasehold with zig, glibc $glibc_floor)"

# --- man pages and completions, from the binary itself
extra="$release/dist-extra"
rm -rf "$extra"
mkdir -p "$extra/completions"
LEASEHOLD_BIN="$bin" scripts/man.sh "$extra/man" >/dev/null
# The .deb's copies gzipped, as Debian has man pages (no name or time in
# the gzip header: the same bytes each build).
mkdir -p "$extra/man-gz"
for page in "$extra"/man/*.1; do
    gzip -9n <"$page" >"$extra/man-gz/$(basename "$page").gz"
done
"$bin" completions bash >"$extra/completions/leasehold.bash"
"$bin" completions zsh >"$extra/completions/_leasehold"
"$bin" completions fish >"$extra/completions/leasehold.fish"

# --- the tarball
name="leasehold-$version-x86_64-linux-gnu"
stage="$target_dir/dist-stage"
rm -rf "$stage"
mkdir -p "$stage/$name"
cp "$bin" "$cloud_bin" "$stage/$name/"
cp -r "$extra/man" "$extra/completions" "$stage/$name/"
cp README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE "$stage/$name/"
tar -C "$stage" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"

# --- the .deb ([package.metadata.deb] in crates/leasehold-cli/Cargo.toml)
cargo deb -p leasehold-cli --no-build --no-strip --target "$target" -o "$out/" >/dev/null
took "man pages, completions, tarball, .deb"

# --- the Python package (crates/leasehold-python/pyproject.toml)
maturin build --release --locked --zig --target "$target" --compatibility "$compat" \
    -m crates/leasehold-python/Cargo.toml -o "$out"
py_wheel=$(ls "$out"/leasehold-"$version"-*.whl)
so_dir=$(mktemp -d)
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$py_wheel" "$so_dir"
for so in "$so_dir"/leasehold/*.so; do check_glibc "$so" "the Python module $(basename "$so")"; done
rm -rf "$so_dir"
took "Python wheel (release build of the module with zig, abi3)"

(cd "$out" && sha256sum -- *.tar.gz *.deb *.whl >SHA256SUMS)

if [[ -z "${DIST_NO_PACKAGE_VERIFY:-}" ]]; then
    public=$(scripts/package-check.sh | sed -n 's/^package-check: cargo package --no-verify for: //p')
    args=()
    for p in $public; do args+=(-p "$p"); done
    # The verify build reads no [profile] of the workspace (a published
    # manifest has none): give it the workspace's dev profile, so that it
    # reuses the dependencies a `cargo build` or `cargo test` left in target/.
    cargo package "${args[@]}" --locked \
        --config 'profile.dev.debug="line-tables-only"' \
        --config 'profile.dev.package."*".debug=false' \
        --config 'profile.dev.package.postgres-protocol.opt-level=3' \
        --config 'profile.dev.package.sha2.opt-level=3' \
        --config 'profile.dev.package.hmac.opt-level=3'
    took "cargo package with the verify build ($(echo "$public" | wc -w) crates)"
fi

echo "dist.sh: in $out/:"
ls -l "$out"
