"""Real Python processes on every store: mutual exclusion, a frozen holder,
Ctrl-C during a wait, fork."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time

import leasehold
from conftest import Env, finish, read_line

# Each child takes the lock `rounds` times; inside, it makes a marker file
# with O_EXCL (which fails if another child is inside too), logs its token,
# works a little and removes the marker.
CONTENDER = r"""
import os, sys, time, leasehold
key, marker, log, rounds, ttl = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
store = leasehold.open(os.environ["LEASEHOLD_URL"])
lock = store.lock(key, ttl=ttl)
for _ in range(rounds):
    with lock.acquire(wait=120) as held:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        with open(log, "a") as f:
            f.write(f"{held.token}\n")
        time.sleep(0.02)  # the work
        held.check()
        os.close(fd)
        os.unlink(marker)
print("done")
"""


def test_processes_exclude_each_other_and_tokens_grow(store_env: Env, tmp_path) -> None:
    key = store_env.key("mutex")
    marker, log = tmp_path / "inside", tmp_path / "tokens"
    rounds = 3
    children = [
        store_env.child(CONTENDER, key, str(marker), str(log), str(rounds), str(store_env.ttl)) for _ in range(3)
    ]
    for child in children:
        out = finish(child, timeout=100)
        assert child.returncode == 0, child.stderr_text  # type: ignore[attr-defined]
        assert out == ["done"]
    tokens = [int(t) for t in log.read_text().split()]
    assert len(tokens) == 3 * rounds
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), tokens


# Holds the lock and works in steps: each step takes the time, *then* asks
# whether the lease is still held, and prints "work T" only if it is (so the
# lease was valid at or after T); prints "lost T" and stops once it is not.
FROZEN_HOLDER = r"""
import os, sys, threading, time, leasehold
key, ttl = sys.argv[1], float(sys.argv[2])
store = leasehold.open(os.environ["LEASEHOLD_URL"])
held = store.lock(key, ttl=ttl).acquire(wait=60)
def say(*words):  # one write per line: the callback's thread prints too
    os.write(1, (" ".join(map(str, words)) + "\n").encode())
called = threading.Event()
def on_loss(reason):
    say("callback", time.monotonic())
    called.set()
held.on_loss(on_loss)
say("acquired", held.token)
while True:
    t = time.monotonic()
    if held.lost:
        say("lost", time.monotonic())
        break
    say("work", t)
    time.sleep(0.05)  # a step of the work
try:
    held.release()
except leasehold.LeaseLost:
    say("release raised LeaseLost")
called.wait(timeout=30)  # the callback runs on a thread of its own
"""

NEXT_HOLDER = r"""
import os, sys, time, leasehold
key, ttl = sys.argv[1], float(sys.argv[2])
store = leasehold.open(os.environ["LEASEHOLD_URL"])
held = store.lock(key, ttl=ttl).acquire(wait=120, on_wait=lambda: print("waiting", flush=True))
print("acquired", time.monotonic(), held.token, flush=True)
held.release()
"""


def test_a_frozen_holder_never_works_past_the_next_grant(store_env: Env) -> None:
    """The holder is stopped (SIGSTOP: its renewals too) while it holds;
    another process is granted the key once the lease runs out. Resumed, the
    holder sees the loss at its first look, and none of its steps believed
    the lease held at or after the next grant."""
    key = store_env.key("frozen")
    holder = store_env.child(FROZEN_HOLDER, key, str(store_env.ttl))
    try:
        first = read_line(holder, "acquired").split()
        assert first[0] == "acquired"
        seen = [read_line(holder, "work").split()]
        os.kill(holder.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        nxt = store_env.child(NEXT_HOLDER, key, str(store_env.ttl))
        assert read_line(nxt, "waiting") == "waiting"
        _, granted_at, token = read_line(nxt, "acquired").split()
        assert float(granted_at) - frozen_at < store_env.ttl * 3 + 30
        assert int(token) > int(first[1])
        finish(nxt)
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    lines = seen + [line.split() for line in finish(holder)]
    work = [float(t) for w, t, *_ in lines if w == "work"]
    assert work and max(work) < float(granted_at), (lines, granted_at)
    assert any(w == "lost" for w, *_ in lines), lines
    assert any(w == "callback" for w, *_ in lines), lines
    assert ["release", "raised", "LeaseLost"] in lines


def test_loss_is_signalled_while_renewals_hang_before_the_next_grant(sqlite_env: Env) -> None:
    """SQLite's write lock, taken by this test, hangs the holder's renewals
    (the holder process runs on); the lock is given back a TTL and a half
    later, after which another process is granted the key. The holder's loss
    callback ran before that grant."""
    key = sqlite_env.key("hang")
    holder = sqlite_env.child(FROZEN_HOLDER, key, str(sqlite_env.ttl))
    try:
        assert read_line(holder, "acquired").startswith("acquired")
        path = sqlite_env.url[len("sqlite:") :]
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")
        try:
            nxt = sqlite_env.child(NEXT_HOLDER, key, str(sqlite_env.ttl))
            time.sleep(sqlite_env.ttl * 1.5)  # the length of the fault
        finally:
            db.execute("COMMIT")
            db.close()
        _, granted_at, _ = read_line(nxt, "acquired").split()
        finish(nxt)
        lines = [line.split() for line in finish(holder)]
    finally:
        holder.kill()
    callback = [float(t) for w, t, *_ in lines if w == "callback"]
    assert callback and callback[0] < float(granted_at), (lines, granted_at)
    work = [float(t) for w, t, *_ in lines if w == "work"]
    assert max(work) < float(granted_at)


# Python raises KeyboardInterrupt on SIGINT only if SIGINT was not ignored
# when it started, and a test command run in the background (nohup, a CI
# runner, `cmd &` in a script) starts its children with SIGINT ignored: the
# waiter sets Python's own handler, as an interactive Python has it.
WAITER = r"""
import os, signal, sys, leasehold
signal.signal(signal.SIGINT, signal.default_int_handler)
key, ttl = sys.argv[1], float(sys.argv[2])
store = leasehold.open(os.environ["LEASEHOLD_URL"])
store.lock(key, ttl=ttl).acquire(wait=120, on_wait=lambda: print("waiting", flush=True))
print("acquired", flush=True)
"""


def test_ctrl_c_during_a_wait_raises_keyboard_interrupt_and_holds_nothing(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("sigint")
    held = store.lock(key, ttl=store_env.ttl).acquire(wait=30)
    waiter = store_env.child(WAITER, key, str(store_env.ttl))
    try:
        assert read_line(waiter, "waiting") == "waiting"
        waiter.send_signal(signal.SIGINT)
        out = finish(waiter, timeout=30)
    finally:
        waiter.kill()
    assert waiter.returncode == -signal.SIGINT, (waiter.returncode, waiter.stderr_text)  # type: ignore[attr-defined]
    assert "KeyboardInterrupt" in waiter.stderr_text  # type: ignore[attr-defined]
    assert out == []
    held.release()
    # The wait given up left nothing behind: the key is free.
    assert store.status(key).holder is None
    again = store.lock(key, ttl=store_env.ttl).try_acquire()
    assert again is not None
    again.release()


# Waits `wait` seconds for a key held elsewhere; prints the CPU time the
# waiting thread used.
CPU_OF_A_WAIT = r"""
import os, sys, time, leasehold
key, ttl, wait = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
lock = leasehold.open(os.environ["LEASEHOLD_URL"]).lock(key, ttl=ttl)
start = time.thread_time()
try:
    lock.acquire(wait=wait)
    print("acquired")
except leasehold.Timeout:
    print(f"{time.thread_time() - start:.3f}")
"""


def test_a_long_wait_keeps_no_core_busy(store_env: Env) -> None:
    # A blocking call's thread spins briefly before it sleeps (a call's
    # first few ms, for quick answers): a wait for a held key must not.
    store = store_env.open()
    key = store_env.key("cpu")
    wait = 1.5
    with store.lock(key, ttl=store_env.ttl).acquire(wait=30):
        waiter = store_env.child(CPU_OF_A_WAIT, key, str(store_env.ttl), str(wait))
        out = finish(waiter, timeout=60)
    assert waiter.returncode == 0, waiter.stderr_text  # type: ignore[attr-defined]
    cpu = float(out[0])
    assert cpu < wait / 5, f"the waiting thread used {cpu} s of CPU in a {wait} s wait"


def test_a_forked_child_gets_a_clear_error_and_holds_nothing(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("fork")
    held = store.lock(key, ttl=store_env.ttl).acquire(wait=30)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: reports on the pipe, never returns to pytest
        code = 1
        try:
            report = []
            try:
                store.lock(store_env.key("other")).try_acquire()
                report.append("store worked")
            except leasehold.UsageError as e:
                # The advice given must be one that works (it once said to
                # open the store again here, which raises the same).
                told = str(e)
                good = "belongs to process" in told and "spawn" in told and "not even a store opened again" in told
                report.append("store: " + (good and "ok" or told))
            try:
                held.release()
                report.append("release worked")
            except leasehold.UsageError:
                report.append("release: ok")
            try:
                leasehold.open(store_env.url)
                report.append("open worked")
            except leasehold.UsageError as e:
                report.append("open: " + ("before it forked" in str(e) and "spawn" in str(e) and "ok" or str(e)))
            os.write(write_end, "\n".join(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as r:
        report = r.read().splitlines()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report
    assert report == ["store: ok", "release: ok", "open: ok"]
    # The parent's lease is still its own, still held.
    held.check()
    info = store.status(key)
    assert info.holder is not None and info.holder.pid == os.getpid()
    held.release()


def _use_inherited(store: leasehold.Store, url: str, queue: "multiprocessing.Queue[str]") -> None:
    for use in (lambda: store.lock("k").try_acquire(), lambda: leasehold.open(url)):
        try:
            use()
            queue.put("worked")
        except leasehold.UsageError as e:
            queue.put(type(e).__name__)


def test_multiprocessing_fork_children_get_usage_error(store_env: Env) -> None:
    store = store_env.open()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_use_inherited, args=(store, store_env.url, queue))
    proc.start()
    assert [queue.get(timeout=30), queue.get(timeout=30)] == ["UsageError", "UsageError"]
    proc.join(timeout=30)
    assert proc.exitcode == 0
    # The parent's store still works.
    with store.lock(store_env.key("after"), ttl=store_env.ttl):
        pass


def _take_in_spawned(url: str, key: str, ttl: float, queue: "multiprocessing.Queue[str]") -> None:
    held = leasehold.open(url).lock(key, ttl=ttl).try_acquire()
    queue.put("taken" if held is None else "got")
    if held is not None:
        held.release()


def test_the_fork_errors_advice_works_a_spawned_child_uses_the_store(store_env: Env) -> None:
    """What the fork error advises (the "spawn" start method, the store
    opened in the child) works, while the parent holds a lease: the child
    is excluded from the parent's key and granted another."""
    store = store_env.open()
    key = store_env.key("spawned")
    held = store.lock(key, ttl=store_env.ttl).acquire(wait=30)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    for k, want in [(key, "taken"), (store_env.key("spawned-free"), "got")]:
        proc = ctx.Process(target=_take_in_spawned, args=(store_env.url, k, store_env.ttl, queue))
        proc.start()
        assert queue.get(timeout=60) == want
        proc.join(timeout=30)
        assert proc.exitcode == 0
    held.release()


def test_a_guard_still_held_at_exit_is_released(sqlite_env: Env) -> None:
    code = r"""
import os, leasehold
held = leasehold.open(os.environ["LEASEHOLD_URL"]).lock("abandoned", ttl=30).acquire()
print(held.token, flush=True)
"""
    child = sqlite_env.child(code)
    finish(child)
    assert child.returncode == 0
    store = sqlite_env.open()
    assert store.status("abandoned").holder is None, "the lease outlived its process"
