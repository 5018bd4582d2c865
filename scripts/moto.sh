#!/usr/bin/env bash
# Installs (once) and starts or stops moto's server, an in-memory S3 (and
# other AWS services) emulator, for the S3 store's tests.
#
#   scripts/moto.sh start   # install if needed, start, wait until it answers
#   scripts/moto.sh stop    # stop the instance started by `start`
#   scripts/moto.sh status  # say whether it is running
#   scripts/moto.sh url     # print the endpoint the tests use
#
# moto[server] is pinned and installed from PyPI into a virtual environment,
# .cache/moto/venv (which also holds boto3, a dependency of moto): about a
# minute the first time, its log in .cache/moto/install.log. Where python3
# has no ensurepip (Debian without python3-venv), the venv is made without
# pip, and the interpreter's own pip fetches a pinned, hash-checked pip wheel
# that installs itself into it. No root, no pip cache, nothing outside
# .cache/moto/. The server runs in memory on 127.0.0.1:$MOTO_PORT (default
# 45399), logging to .cache/moto.log, its pid in .cache/moto.pid
# (moto-PORT.log and .pid on another port). It takes any credentials and
# region; use path-style addressing. $MOTO_PYTHON chooses the interpreter
# (default python3, 3.10 or later).
set -euo pipefail

VERSION=5.2.5
# Only for interpreters without ensurepip.
PIP_VERSION=26.3
PIP_SHA256=f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13

# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"
server moto moto_serial_server "${MOTO_PORT:-45399}" "${MOTO_READY_TIMEOUT:-60}"
logs_in_cache 45399
DIR="$CACHE/moto"
VENV="$DIR/venv"
STAMP="$DIR/installed-$VERSION"
PYTHON="${MOTO_PYTHON:-python3}"

# Whether moto answers S3 on the port: an unsigned GET / lists the buckets.
answers() {
    local body
    body="$(curl -s --max-time 2 "http://$HOST:$PORT/" 2>/dev/null)" || return 1
    [[ "$body" == *ListAllMyBucketsResult* ]]
}

# A venv with pip, without root and without touching the home directory.
make_venv() {
    if "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null \
        && "$PYTHON" -m venv "$VENV" >>"$DIR/install.log" 2>&1; then
        echo "$VENV/bin/pip"
        return 0
    fi
    # No ensurepip: a venv without pip, then the interpreter's own pip
    # fetches pip's wheel (pinned, hash-checked) from the package index, and
    # that wheel, run from the file, installs itself into the venv.
    "$PYTHON" -m pip --version >/dev/null 2>&1 \
        || die "$PYTHON has neither ensurepip nor pip: install python3-venv (or python3-pip), or set MOTO_PYTHON"
    echo "moto: $PYTHON has no ensurepip; bootstrapping pip $PIP_VERSION into the venv" >&2
    rm -rf "$VENV"
    "$PYTHON" -m venv --without-pip "$VENV" >>"$DIR/install.log" 2>&1 \
        || die "$PYTHON -m venv --without-pip failed (see $DIR/install.log)"
    echo "pip==$PIP_VERSION --hash=sha256:$PIP_SHA256" >"$DIR/pip-requirement.txt"
    "$PYTHON" -m pip download --quiet --no-cache-dir --disable-pip-version-check --no-deps \
        --only-binary=:all: --require-hashes -r "$DIR/pip-requirement.txt" -d "$DIR" \
        >>"$DIR/install.log" 2>&1 || die "could not download pip $PIP_VERSION (see $DIR/install.log)"
    local whl="$DIR/pip-$PIP_VERSION-py3-none-any.whl"
    [[ -f "$whl" ]] || die "pip download did not leave $whl"
    "$VENV/bin/python" "$whl/pip" install --quiet --no-cache-dir --disable-pip-version-check \
        --no-warn-script-location --no-index "$whl" >>"$DIR/install.log" 2>&1 \
        || die "installing pip into $VENV failed (see $DIR/install.log)"
    echo "$VENV/bin/pip"
}

install() {
    [[ -f "$STAMP" && -x "$VENV/bin/moto_server" ]] && return 0
    command -v "$PYTHON" >/dev/null || die "$PYTHON is needed to install moto"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "moto $VERSION needs Python 3.10 or later ($PYTHON is $("$PYTHON" -V 2>&1))"
    echo "moto: installing moto[server]==$VERSION into $VENV (from PyPI, about a minute)" >&2
    # Start afresh: a half-made venv or another version's goes.
    rm -rf "$DIR"
    mkdir -p "$DIR"
    local pip
    pip="$(make_venv)"
    "$pip" install --quiet --no-cache-dir --disable-pip-version-check --no-input \
        "moto[server]==$VERSION" >>"$DIR/install.log" 2>&1 || {
        tail -n 20 "$DIR/install.log" >&2
        die "pip install moto[server]==$VERSION failed (see $DIR/install.log)"
    }
    [[ -x "$VENV/bin/moto_server" ]] || die "moto installed, but $VENV/bin/moto_server is missing"
    touch "$STAMP"
    echo "moto: installed moto $VERSION" >&2
}

# Installs and starts it (see start_answering).
launch() {
    command -v curl >/dev/null || die "curl is needed to probe moto"
    install
    # moto's server with one request at a time (see the script: moto's
    # conditional writes are not atomic under concurrent requests). exec,
    # so that $! is the server itself.
    (exec "$VENV/bin/python" "$ROOT/scripts/moto_serial_server.py" "$HOST" "$PORT" </dev/null >"$LOG" 2>&1) &
}

start() { start_answering "a moto server" moto MOTO_PORT 0.1 moto; }

stop() { server_shutdown TERM; }

url() { echo "http://$HOST:$PORT"; }

server_command "start|stop|status|url" "$@"
