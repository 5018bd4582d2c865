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

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
DIR="$CACHE/moto"
VENV="$DIR/venv"
STAMP="$DIR/installed-$VERSION"
PYTHON="${MOTO_PYTHON:-python3}"
PORT="${MOTO_PORT:-45399}"
if [[ "$PORT" == 45399 ]]; then SUFFIX=""; else SUFFIX="-$PORT"; fi
PIDFILE="$CACHE/moto$SUFFIX.pid"
LOG="$CACHE/moto$SUFFIX.log"
HOST=127.0.0.1
READY_TIMEOUT="${MOTO_READY_TIMEOUT:-60}"

die() { echo "moto: $*" >&2; exit 1; }

running_pid() {
    [[ -f "$PIDFILE" ]] || return 1
    local pid
    pid="$(cat "$PIDFILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # Only ours if it is a moto_server (the pid may have been reused).
    grep -q moto_server "/proc/$pid/cmdline" 2>/dev/null || return 1
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
    echo "$pid"
}

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

start() {
    mkdir -p "$CACHE"
    if pid="$(running_pid)"; then
        if answers; then
            echo "moto: already running (pid $pid) on $HOST:$PORT" >&2
            return 0
        fi
    elif answers; then
        # A moto this script did not start (or whose pid file is gone): use
        # it, and leave it to whoever started it.
        echo "moto: a moto server already answers on $HOST:$PORT (not started here); using it" >&2
        return 0
    elif (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
        die "port $PORT on $HOST is taken by something that is not moto; stop it or set MOTO_PORT"
    fi
    command -v curl >/dev/null || die "curl is needed to probe moto"
    install
    # exec, so that $! is the server itself (moto_server does not fork).
    (exec "$VENV/bin/moto_server" -H "$HOST" -p "$PORT" </dev/null >"$LOG" 2>&1) &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    local deadline=$((SECONDS + READY_TIMEOUT))
    until answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PIDFILE"
            echo "--- $LOG" >&2
            tail -n 20 "$LOG" >&2 || true
            die "moto exited during start-up (see $LOG)"
        fi
        if ((SECONDS >= deadline)); then
            kill "$pid" 2>/dev/null || true
            rm -f "$PIDFILE"
            die "moto did not answer on $HOST:$PORT within ${READY_TIMEOUT}s (see $LOG)"
        fi
        sleep 0.1
    done
    echo "moto: running (pid $pid) on http://$HOST:$PORT" >&2
}

stop() {
    local pid
    if pid="$(running_pid)"; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
        echo "moto: stopped (pid $pid)" >&2
    else
        echo "moto: not running" >&2
    fi
    rm -f "$PIDFILE"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    url) echo "http://$HOST:$PORT" ;;
    status)
        if pid="$(running_pid)"; then echo "running (pid $pid) on http://$HOST:$PORT"; else echo "not running"; exit 1; fi
        ;;
    *) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
