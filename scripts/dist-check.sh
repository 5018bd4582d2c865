#!/usr/bin/env bash
# Installs each artifact of dist/ (scripts/dist.sh) into a clean place of
# its own and uses it, with a PATH in which no directory holds cargo or
# rustc, the state directory (the default SQLite store) in a temporary
# directory, and no LEASEHOLD_* variable:
#
#   SHA256SUMS       sha256sum -c
#   the tarball      unpacked; `leasehold run demo -- echo ok`, and an s3://
#                    URL answered by leasehold-cloud beside it; the man
#                    pages and completions are there
#   the .deb         `dpkg-deb -x` into a temporary root (no system change);
#                    its control fields; the same run; man pages and completions
#   the CLI wheel    `pipx install` and `uv tool install` (each with its
#                    home in the temporary directory), and pip into a fresh
#                    venv; the same run from each
#   the Python wheel pip into a fresh venv; `with store.lock(...)` in Python,
#                    on a SQLite file
#
# pipx and uv come from PyPI into .cache/dist-check-venv the first time
# (~10 s). About 30 s after that.
#
#   scripts/dist-check.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
dist="$root/dist"
tools_venv="$root/.cache/dist-check-venv"

[[ -f "$dist/SHA256SUMS" ]] || { echo "dist-check: no dist/SHA256SUMS: run scripts/dist.sh" >&2; exit 1; }
(cd "$dist" && sha256sum --quiet -c SHA256SUMS)
echo "dist-check: SHA256SUMS ok"

# The interpreter itself, not a shim that needs the PATH of a shell.
python=$(python3 -c 'import sys; print(sys.executable)')
if [[ ! -x "$tools_venv/bin/pipx" || ! -x "$tools_venv/bin/uv" ]]; then
    "$python" -m venv "$tools_venv"
    "$tools_venv/bin/pip" install --quiet --disable-pip-version-check pipx uv
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A PATH of the system's directories with no Rust in them.
clean_path=""
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    [[ -x "$d/cargo" || -x "$d/rustc" || -x "$d/rustup" ]] && continue
    [[ "$d" == *cargo* || "$d" == *rustup* ]] && continue
    [[ ":$clean_path:" == *":$d:"* ]] || clean_path="${clean_path:+$clean_path:}$d"
done
if env PATH="$clean_path" sh -c 'command -v cargo || command -v rustc' >/dev/null; then
    echo "dist-check: could not make a PATH without cargo" >&2
    exit 1
fi

# Runs a command in the clean environment: PATH without Rust (DIR first),
# HOME and the state directory in $tmp, no LEASEHOLD_* settings.
clean() { # DIR CMD...
    local dir="$1"
    shift
    env -i PATH="$dir:$clean_path" HOME="$tmp/home" XDG_STATE_HOME="$tmp/state" \
        LANG=C.UTF-8 "$@"
}
mkdir -p "$tmp/home"

# `leasehold run demo -- echo ok`, from DIR, must print ok.
run_demo() { # WHAT DIR
    local got
    got=$(clean "$2" sh -c 'command -v leasehold; leasehold --version; leasehold run demo -- echo ok')
    local where
    where=$(sed -n 1p <<<"$got")
    [[ "$where" == "$2/leasehold" ]] || { echo "dist-check: $1: leasehold found at $where, not $2" >&2; exit 1; }
    [[ "$(tail -1 <<<"$got")" == ok ]] || { echo "dist-check: $1: the run printed: $got" >&2; exit 1; }
    echo "dist-check: $1: $(sed -n 2p <<<"$got"): leasehold run demo -- echo ok: ok"
    # A cloud store's URL reaches leasehold-cloud, installed beside it: its
    # S3 opener, not `leasehold`'s "cannot run leasehold-cloud", refuses
    # the bucket's name (no request is sent).
    got=$(clean "$2" sh -c 'leasehold --store s3://b status k 2>&1; echo "exit $?"')
    [[ "$got" == *"not an S3 bucket name"*"exit 2" ]] || { echo "dist-check: $1: leasehold with an s3:// store: $got" >&2; exit 1; }
    echo "dist-check: $1: an s3:// store runs leasehold-cloud: ok"
}

must_exist() { # WHAT FILE...
    local what="$1"
    shift
    for f in "$@"; do
        [[ -s "$f" ]] || { echo "dist-check: $what: missing $f" >&2; exit 1; }
    done
}

# The newest glibc symbol version FILE needs (objdump -T), printed.
glibc_need() { # WHAT FILE
    local need
    need=$(objdump -T "$2" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
    [[ "$(printf '%s\n' "$need" 2.17 | sort -V | tail -1)" == 2.17 ]] ||
        { echo "dist-check: $1 needs glibc $need, above 2.17" >&2; exit 1; }
    echo "dist-check: $1: needs glibc $need at most"
}

# --- the tarball
tarball=$(ls "$dist"/leasehold-*-x86_64-linux-gnu.tar.gz)
mkdir "$tmp/tar"
tar -C "$tmp/tar" -xzf "$tarball"
top=$(ls -d "$tmp"/tar/leasehold-*)
must_exist tarball "$top/man/leasehold.1" "$top/man/leasehold-run.1" \
    "$top/completions/leasehold.bash" "$top/completions/_leasehold" \
    "$top/completions/leasehold.fish" "$top/README.md" "$top/LICENSE-MIT" "$top/LICENSE-APACHE"
glibc_need "tarball's leasehold" "$top/leasehold"
run_demo "tarball" "$top"

# --- the .deb
deb=$(ls "$dist"/leasehold_*_amd64.deb)
dpkg-deb -f "$deb" Package Version Architecture Depends | sed 's/^/dist-check: .deb: /'
dpkg-deb -x "$deb" "$tmp/deb-root"
r="$tmp/deb-root/usr"
must_exist .deb "$r/share/man/man1/leasehold.1.gz" "$r/share/man/man1/leasehold-run.1.gz" \
    "$r/share/bash-completion/completions/leasehold" "$r/share/zsh/vendor-completions/_leasehold" \
    "$r/share/fish/vendor_completions.d/leasehold.fish" "$r/share/doc/leasehold/copyright"
glibc_need ".deb's leasehold" "$r/bin/leasehold"
run_demo ".deb (dpkg-deb -x)" "$r/bin"

# --- the CLI wheel: pipx, uv tool, pip
cli_wheel=$(ls "$dist"/leasehold_cli-*.whl)
clean "$tools_venv/bin" env PIPX_HOME="$tmp/pipx" PIPX_BIN_DIR="$tmp/pipx-bin" \
    PIPX_MAN_DIR="$tmp/pipx-man" pipx install --python "$python" "$cli_wheel" >/dev/null
run_demo "CLI wheel (pipx install)" "$tmp/pipx-bin"
clean "$tools_venv/bin" env UV_TOOL_DIR="$tmp/uv-tools" UV_TOOL_BIN_DIR="$tmp/uv-bin" \
    UV_CACHE_DIR="$tmp/uv-cache" UV_PYTHON_DOWNLOADS=never \
    uv tool install --quiet --offline --python "$python" "$cli_wheel"
run_demo "CLI wheel (uv tool install)" "$tmp/uv-bin"
"$python" -m venv "$tmp/cli-venv"
clean "$tmp/cli-venv/bin" pip install --quiet --no-index --disable-pip-version-check "$cli_wheel"
run_demo "CLI wheel (pip, venv)" "$tmp/cli-venv/bin"

# --- the Python wheel
py_wheel=$(ls "$dist"/leasehold-*-abi3-*.whl)
"$python" -m venv "$tmp/py-venv"
clean "$tmp/py-venv/bin" pip install --quiet --no-index --disable-pip-version-check "$py_wheel"
for so in "$tmp"/py-venv/lib/python*/site-packages/leasehold/*.so; do
    glibc_need "Python module $(basename "$so")" "$so"
done
got=$(cd "$tmp" && clean "$tmp/py-venv/bin" python - "$tmp/py.db" <<'EOF'
import sys
import leasehold

store = leasehold.open("sqlite:" + sys.argv[1])
with store.lock("demo", ttl="30s", wait="5s") as held:
    held.check()
    print("held demo, fencing token", held.token)
with store.lock("demo", ttl="30s", wait="5s") as again:
    assert again.token > held.token, (again.token, held.token)
store.close()
print("ok", leasehold.__file__)
EOF
)
echo "$got" | sed 's/^/dist-check: Python wheel: /'
[[ "$(tail -1 <<<"$got")" == "ok $tmp/py-venv/"* ]] || { echo "dist-check: Python wheel failed" >&2; exit 1; }

echo "dist-check: every artifact installs and runs ($SECONDS s)"
