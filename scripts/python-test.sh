#!/usr/bin/env bash
# The Python bindings' tests (crates/leasehold-python): makes a virtual
# environment under .cache/python-venv (once; pytest pinned, from PyPI),
# builds the `leasehold` package in the dev profile into it (with the
# workspace's target/ and its test build's features, so that what the Rust
# tests compiled is reused; LEASEHOLD_PY_BUILD=maturin builds and installs
# the wheel with maturin instead, as `pip install` does but in the dev
# profile), and runs pytest on every store whose server scripts/test.sh
# started (the same LEASEHOLD_TEST_* variables as the Rust tests; with
# LEASEHOLD_REQUIRE_EMULATORS=1 a missing one fails, else it is skipped and
# the skip is printed).
#
#   scripts/python-test.sh                 # as scripts/test.sh runs it
#   scripts/python-test.sh -k sqlite -x    # extra arguments go to pytest
#   LEASEHOLD_PY_BUILD=maturin scripts/python-test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MATURIN=1.16.0
PYTEST=8.4.2
PYTEST_TIMEOUT=2.4.0
# For the test that `await lock.acquire_async()` type-checks (the stubs).
MYPY=2.4.1
venv=.cache/python-venv
python="${PYTHON:-python3}"
start=$SECONDS

want="pytest==$PYTEST pytest-timeout==$PYTEST_TIMEOUT mypy==$MYPY"
if [[ ! -x "$venv/bin/python" || "$(cat "$venv/.pins" 2>/dev/null)" != "$want" ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check $want
    echo "$want" >"$venv/.pins"
fi
echo "python-test: virtual environment ready after $((SECONDS - start)) s"

target="${CARGO_TARGET_DIR:-target}"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [[ "${LEASEHOLD_PY_BUILD:-cargo}" == maturin ]]; then
    # The wheel as maturin packs it (pyproject.toml), dev profile, installed
    # (not editable) into the environment.
    wheels="$(mktemp -d)"
    trap 'rm -rf "$wheels"' EXIT
    "$venv/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN"
    (cd crates/leasehold-python &&
        CARGO_TARGET_DIR="$(cd ../.. && realpath "$target")" \
            "../../$venv/bin/maturin" build --quiet --profile dev \
            --interpreter "../../$venv/bin/python" --out "$wheels")
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheels"/leasehold-*.whl
else
    # The extension module built as the test command's test build builds the
    # workspace (`cargo test --workspace` resolves features with every
    # member's dev-dependencies: built on its own, the module would get
    # other features of tokio and the stores, and all of them would be
    # compiled again), then the package laid out in the environment as the
    # wheel lays it out: the Python sources, stubs, py.typed and the module.
    cargo build --workspace --lib --tests --quiet
    "$venv/bin/pip" uninstall --quiet --disable-pip-version-check --yes leasehold 2>/dev/null || true
    rm -rf "$site/leasehold"
    cp -r crates/leasehold-python/python/leasehold "$site/leasehold"
    rm -f "$site/leasehold"/*.so
    cp "$target/debug/lib_leasehold.so" "$site/leasehold/_leasehold.abi3.so"
fi
echo "python-test: package built and installed after $((SECONDS - start)) s"

# From the tests' directory, so that `import leasehold` is the installed
# package, not the sources.
cd crates/leasehold-python/tests
"../../../$venv/bin/python" -m pytest -p no:cacheprovider -rs --timeout=120 "$@"
