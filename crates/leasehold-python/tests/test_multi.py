"""Locks on several keys at once (``Store.lock_all``): all or none, in one
global order (no deadlock between processes that name the keys in other
orders), nothing left held by a wait that runs out, a token per key, lost
when any key is."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading

import pytest

import leasehold
from conftest import Env, finish

# Takes the keys (argv[2:], in the order given) ROUNDS times, each time
# checking that no other holder is inside any of them (a file per key,
# created exclusively), and prints each grant's tokens.
TURNS = r"""
import json, os, sys, leasehold
rounds, keys = int(sys.argv[1]), sys.argv[2:]
store = leasehold.open(os.environ["LEASEHOLD_URL"])
all = store.lock_all(keys, ttl=float(os.environ["TTL"]))
for _ in range(rounds):
    with all.acquire(wait=120) as held:
        inside = [os.path.join(os.environ["DIR"], k) for k in held.tokens]
        for path in inside:
            os.mkdir(path)  # fails if another holder is inside
        print(json.dumps(held.tokens), flush=True)
        for path in inside:
            os.rmdir(path)
"""


def test_holders_of_two_keys_in_either_order_in_processes_never_deadlock_or_overlap(store_env: Env, tmp_path) -> None:
    a, b = store_env.key("multi-a"), store_env.key("multi-b")
    env = dict(os.environ, **store_env.env, LEASEHOLD_URL=store_env.url, TTL=str(store_env.ttl), DIR=str(tmp_path))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TURNS, "4", *keys],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for keys in ([a, b], [b, a], [a], [b, a])
    ]
    grants = []
    for p in procs:
        lines = finish(p, timeout=180)
        assert p.returncode == 0, p.stderr_text  # type: ignore[attr-defined]
        grants.append([json.loads(line) for line in lines])
    # Each key's tokens grow within every process, and are all distinct.
    for key in (a, b):
        seen = [g[key] for proc in grants for g in proc if key in g]
        assert len(seen) == len(set(seen)) == (16 if key == a else 12)
        for proc in grants:
            mine = [g[key] for g in proc if key in g]
            assert mine == sorted(mine)


def test_lock_all_holds_every_key_with_its_own_token_and_releases_together(store_env: Env) -> None:
    store = store_env.open()
    a, b = store_env.key("multi-a"), store_env.key("multi-b")
    single = store.lock(b, ttl=store_env.ttl)
    with single as before:
        b_token = before.token
    all = store.lock_all([b, a, b], ttl=store_env.ttl)
    assert all.keys == sorted([a, b])
    with all as held:
        assert list(held.tokens) == sorted([a, b])
        assert held.tokens[b] > b_token
        with pytest.raises(leasehold.UsageError, match="held.tokens"):
            held.token
        assert single.try_acquire() is None
        assert {h.host for h in all.holders()} and len(all.holders()) == 2
        assert not held.lost and held.valid_for() > 0
        assert "tokens" in repr(held)
    assert held.released
    got = single.try_acquire()
    assert got is not None and got.tokens == {b: got.token}
    single.release()


def test_a_wait_that_runs_out_leaves_every_key_free(store_env: Env) -> None:
    store = store_env.open()
    other = store_env.open()
    a, b = store_env.key("multi-a"), store_env.key("multi-b")
    # Long TTLs (within the test stores' max TTL): a key left held would
    # stay held past the checks below.
    long_ttl = store_env.ttl
    blocker = other.lock(b, ttl=long_ttl)
    with blocker:
        all = store.lock_all([a, b], ttl=long_ttl)
        with pytest.raises(leasehold.Timeout):
            all.acquire(wait=0.3)
        assert all.try_acquire() is None
        lone = other.lock(a, ttl=store_env.ttl).try_acquire()
        assert lone is not None, f"{a} was left held"
        lone.release()

    async def cancelled() -> None:
        with other.lock(b, ttl=long_ttl):
            task = asyncio.ensure_future(all.acquire_async())
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(cancelled())
    lone = other.lock(a, ttl=store_env.ttl).try_acquire()
    assert lone is not None, f"{a} was left held by the cancelled wait"
    lone.release()


def test_the_held_is_lost_when_any_one_key_is(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    held = store.lock_all(["a", "b"], ttl=2, renew_interval=0.2).acquire()
    told = threading.Event()
    reasons = []
    held.on_loss(lambda reason: (reasons.append(reason), told.set()))
    store.break_lease("b")
    assert told.wait(10)
    assert held.lost and reasons and "lost" in reasons[0]
    assert held.loss_reason is not None and held.loss_reason.startswith("b: "), held.loss_reason
    with pytest.raises(leasehold.LeaseLost):
        held.check()
    with pytest.raises(leasehold.LeaseLost):
        held.release()
    assert store.lock("a", ttl=2).try_acquire() is not None


def test_bad_lock_all_arguments(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    with pytest.raises(TypeError, match="iterable of str"):
        store.lock_all("ab")
    with pytest.raises(TypeError):
        store.lock_all([1, 2])  # type: ignore[list-item]
    with pytest.raises(leasehold.UsageError, match="at least one key"):
        store.lock_all([])
    with pytest.raises(leasehold.UsageError, match="key"):
        store.lock_all(["a", "b//"])
    # A run record takes one key; the keys stay held when it is refused.
    held = store.lock_all(["a", "b"], ttl=2).acquire()
    with pytest.raises(leasehold.UsageError, match="one key"):
        held._release_with(True, 0.0)
    assert not held.released
    held.release()


def test_semaphore_acquire_many_is_all_or_none(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("many")
    sem = store.semaphore(key, 4, ttl=store_env.ttl)
    with sem.acquire_many(3, wait=30) as held:
        assert len(held.tokens) == 3, held.tokens
        assert all(k.startswith(key + "/:slot:") for k in held.tokens)
        other = store_env.open().semaphore(key, 4, ttl=store_env.ttl)
        assert other.try_acquire_many(2) is None
        with pytest.raises(leasehold.Timeout):
            other.acquire_many(2, wait=0.3)
        # None was kept: the fourth permit is free.
        one = other.try_acquire()
        assert one is not None
        one.release()
    assert held.released
    for bad in (0, 5, -1):
        with pytest.raises(leasehold.UsageError, match="permits"):
            sem.acquire_many(bad)
    with pytest.raises(leasehold.UsageError, match="semaphore"):
        store.lock(key + "-lock", ttl=store_env.ttl)._native.acquire_many(2)
