"""Who holds what: a lock, semaphore or reader-writer side shared by
threads or asyncio tasks releases, at each block's end, what that block
took; a lease is held until released, also when the Held is not kept
(`lock.acquire(); ...; lock.release()`, `if lock.try_acquire(): ...`), as
another real process sees; a Held collected unreleased says so."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings

import pytest

import leasehold
from conftest import Env, finish

# Tries the key once, from another process: prints "got TOKEN" (and
# releases) or "taken".
PROBE = r"""
import os, sys, leasehold
store = leasehold.open(os.environ["LEASEHOLD_URL"])
lock = store.lock(sys.argv[1], ttl=float(sys.argv[2]))
held = lock.try_acquire()
print("taken" if held is None else f"got {held.token}")
if held is not None:
    held.release()
"""


def probe(env: Env, key: str) -> str:
    child = env.child(PROBE, key, str(env.ttl))
    out = finish(child)
    assert child.returncode == 0, child.stderr_text  # type: ignore[attr-defined]
    return out[0].split()[0]


def test_a_semaphore_shared_by_two_threads_releases_each_threads_own_permit(store_env: Env) -> None:
    store = store_env.open()
    sem = store.semaphore(store_env.key("shared-sem"), limit=2, ttl=store_env.ttl)
    got: dict = {}
    a_in, b_in, a_out, b_may_leave = (threading.Event() for _ in range(4))

    def a() -> None:
        with sem as held:
            got["a"] = held
            a_in.set()
            assert b_in.wait(30)
        a_out.set()

    def b() -> None:
        assert a_in.wait(30)
        with sem as held:
            got["b"] = held
            b_in.set()
            assert b_may_leave.wait(30)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    try:
        assert a_out.wait(30)
        # A left its block first: its own permit is released, B's still held.
        assert got["a"].released, "A's permit was not released by A's exit"
        assert not got["b"].released, "A's exit released B's permit"
        got["b"].check()
    finally:
        b_may_leave.set()
        for t in threads:
            t.join(30)
    assert got["b"].released
    assert sem.holders() == []


def test_a_semaphore_shared_by_two_tasks_releases_each_tasks_own_permit(store_env: Env) -> None:
    store = store_env.open()
    sem = store.semaphore(store_env.key("task-sem"), limit=2, ttl=store_env.ttl)

    async def main() -> None:
        got: dict = {}
        a_in, b_in, b_may_leave = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def a() -> None:
            async with sem as held:
                got["a"] = held
                a_in.set()
                await b_in.wait()

        async def b() -> None:
            await a_in.wait()
            async with sem as held:
                got["b"] = held
                b_in.set()
                await b_may_leave.wait()

        tb = asyncio.ensure_future(b())
        await asyncio.wait_for(a(), 30)
        try:
            assert got["a"].released, "A's permit was not released by A's exit"
            assert not got["b"].released, "A's exit released B's permit"
        finally:
            b_may_leave.set()
            await asyncio.wait_for(tb, 30)
        assert got["b"].released

    asyncio.run(main())


def test_a_with_block_exited_in_another_thread_is_refused(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    lock = store.lock("elsewhere", ttl=sqlite_env.ttl)
    held = lock.__enter__()
    failed: list = []

    def leave() -> None:
        try:
            lock.__exit__(None, None, None)
        except leasehold.UsageError as e:
            failed.append(str(e))

    t = threading.Thread(target=leave)
    t.start()
    t.join(30)
    assert failed and "did not enter" in failed[0]
    assert not held.released
    lock.__exit__(None, None, None)
    assert held.released


def test_if_try_acquire_holds_the_key_for_the_if_body_though_the_held_is_not_kept(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("if-try")
    lock = store.lock(key, ttl=store_env.ttl)
    if lock.try_acquire():
        gc.collect()
        assert probe(store_env, key) == "taken", "another process got the key inside the `if` body"
        lock.release()
    else:
        raise AssertionError("not granted")
    assert probe(store_env, key) == "got"


def test_lock_acquire_then_lock_release_holds_the_key_between(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("acq-rel")
    lock = store.lock(key, ttl=store_env.ttl)
    lock.acquire(wait=30)
    gc.collect()
    assert probe(store_env, key) == "taken", "another process got the key between acquire() and release()"
    lock.release()
    assert probe(store_env, key) == "got"
    with pytest.raises(leasehold.UsageError, match="holds nothing"):
        lock.release()


def test_lock_release_from_another_thread_and_held_release_are_one(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    lock = store.lock("cross-thread", ttl=sqlite_env.ttl)
    held = lock.acquire()
    t = threading.Thread(target=lock.release)  # as threading.Lock allows
    t.start()
    t.join(30)
    assert held.released
    # A Held released on its own is forgotten by its lock.
    held = lock.acquire()
    held.release()
    with pytest.raises(leasehold.UsageError):
        lock.release()
    # A `with` block's lease is its exit's to release, not release()'s.
    with lock:
        with pytest.raises(leasehold.UsageError, match="with"):
            lock.release()


def test_semaphore_release_takes_this_threads_permit_and_refuses_to_guess(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    sem = store.semaphore("guess", limit=3, ttl=sqlite_env.ttl)
    mine = sem.acquire()
    theirs: list = []
    t = threading.Thread(target=lambda: theirs.append(sem.acquire()))
    t.start()
    t.join(30)
    sem.release()
    assert mine.released and not theirs[0].released
    # One left, another thread's: the only one, released.
    sem.release()
    assert theirs[0].released
    got: list = []
    ts = [threading.Thread(target=lambda: got.append(sem.acquire())) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    with pytest.raises(leasehold.UsageError, match="none taken by this thread"):
        sem.release()
    for h in got:
        h.release()


def test_a_held_collected_unreleased_warns_and_is_released(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Neither the lock nor the Held is kept.
        assert store.lock("dropped", ttl=sqlite_env.ttl).try_acquire() is not None
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) and "garbage collected" in str(w.message) for w in caught), [
        str(w.message) for w in caught
    ]
    leasehold._native.finish_background(5.0)
    assert store.status("dropped").holder is None
