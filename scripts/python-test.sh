#!/usr/bin/env bash
# The Python bindings' tests (crates/leasehold-python): makes a virtual
# environment under .cache/python-venv (once; maturin and pytest pinned, from
# PyPI), builds the `leasehold` package in the dev profile into it (sharing
# the workspace's target/, so the dependencies the Rust tests compiled are
# reused), and runs pytest on every store whose server scripts/test.sh
# started (the same LEASEHOLD_TEST_* variables as the Rust tests; with
# LEASEHOLD_REQUIRE_EMULATORS=1 a missing one fails, else it is skipped and
# the skip is printed).
#
#   scripts/python-test.sh                 # as scripts/test.sh runs it
#   scripts/python-test.sh -k sqlite -x    # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MATURIN=1.16.0
PYTEST=8.4.2
PYTEST_TIMEOUT=2.4.0
venv=.cache/python-venv
python="${PYTHON:-python3}"
start=$SECONDS

want="maturin==$MATURIN pytest==$PYTEST pytest-timeout==$PYTEST_TIMEOUT"
if [[ ! -x "$venv/bin/python" || "$(cat "$venv/.pins" 2>/dev/null)" != "$want" ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check $want
    echo "$want" >"$venv/.pins"
fi
echo "python-test: virtual environment ready after $((SECONDS - start)) s"

# The wheel, built in the dev profile, installed (not editable) into the
# environment.
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
(cd crates/leasehold-python &&
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/../../target}" \
        "../../$venv/bin/maturin" build --quiet --profile dev \
        --interpreter "../../$venv/bin/python" --out "$wheels")
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheels"/leasehold-*.whl
echo "python-test: package built and installed after $((SECONDS - start)) s"

# From the tests' directory, so that `import leasehold` is the installed
# package, not the sources.
cd crates/leasehold-python/tests
"../../../$venv/bin/python" -m pytest -p no:cacheprovider -rs --timeout=120 "$@"
