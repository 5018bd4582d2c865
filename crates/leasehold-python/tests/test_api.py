"""The Python API on every store, in one process: locks, try_acquire,
timeouts, semaphores, elections, once_per, status/list, durations, errors,
asyncio (with cancellation) and the loss signals."""

from __future__ import annotations

import asyncio
import datetime
import threading

import pytest

import leasehold
from conftest import Env


def test_lock_grants_tokens_that_grow_and_try_acquire_returns_none_when_taken(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("lock")
    with store.lock(key, ttl=store_env.ttl, data="report 7", label="py-test") as held:
        assert held.key == key
        assert not held.lost
        held.check()
        assert store.lock(key, ttl=store_env.ttl).try_acquire() is None
        info = store.status(key)
        assert info.holder is not None
        assert info.holder.token == held.token == info.token
        assert info.holder.data == "report 7"
        assert info.holder.label == "py-test"
        assert key in [k.key for k in store.list(key[:-3])]
        first = held.token
    assert store.status(key).holder is None
    again = store.lock(key, ttl=store_env.ttl).try_acquire()
    assert again is not None
    try:
        assert again.token > first
    finally:
        again.release()


def test_a_wait_runs_out_with_timeout(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("timeout")
    with store.lock(key, ttl=store_env.ttl):
        with pytest.raises(leasehold.Timeout) as caught:
            store.lock(key, ttl=store_env.ttl).acquire(wait=0.2)
        assert isinstance(caught.value, leasehold.Error)
        assert not isinstance(caught.value, RuntimeError)


def test_a_semaphore_admits_limit_holders(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("sem")
    sem = store.semaphore(key, limit=2, ttl=store_env.ttl)
    with sem as a, sem.acquire() as b:
        assert {a.slot, b.slot} == {0, 1}
        assert store.semaphore(key, limit=2, ttl=store_env.ttl).try_acquire() is None
        assert len(sem.holders()) == 2
    third = sem.try_acquire()
    assert third is not None
    third.release()


def test_an_election_has_one_leader_who_publishes_data(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("svc")
    election = store.election(key, ttl=store_env.ttl, data="10.0.0.7:8080")
    assert election.leader() is None
    with election.campaign(wait=30) as leadership:
        leader = election.leader()
        assert leader is not None
        assert leader.data == "10.0.0.7:8080"
        assert leader.token == leadership.term
        assert store.election(key, ttl=store_env.ttl).try_campaign() is None
    assert election.leader() is None


def test_once_per_runs_once_per_period_and_records_failures(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("job")
    with pytest.raises(ZeroDivisionError):
        with store.once_per(key, "1h", ttl=store_env.ttl) as held:
            assert held is not None
            1 / 0
    info = store.status(key)
    assert info.last_success is None
    assert info.last_run is not None and not info.last_run.succeeded
    with store.once_per(key, datetime.timedelta(hours=1), ttl=store_env.ttl) as held:
        assert held is not None
        token = held.token
    with store.once_per(key, 3600, ttl=store_env.ttl) as held:
        assert held is None, "a success less than an hour ago"
    found = store.last_success_within(key, "1h")
    assert found is not None and found.token == token


def test_a_broken_lease_is_lost_and_signalled(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("broken")
    lost, told = threading.Event(), threading.Event()
    reasons: list[str] = []

    def on_loss(reason: str) -> None:
        reasons.append(reason)
        told.set()

    held = store.lock(key, ttl=store_env.ttl, on_loss=on_loss).acquire(wait=30)
    held.on_loss(lambda reason: lost.set())
    assert store.break_lease(key) is not None
    # The guard notices at its next renewal (a third of the TTL); both
    # callbacks run.
    assert lost.wait(timeout=store_env.ttl * 3), "no loss signalled"
    assert told.wait(timeout=store_env.ttl * 3), "the lock's on_loss did not run"
    assert held.lost
    assert len(reasons) == 1 and held.loss_reason
    with pytest.raises(leasehold.LeaseLost):
        held.check()
    with pytest.raises(leasehold.LeaseLost):
        held.release()


def test_async_with_and_cancel_on_loss(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("async")

    async def main() -> None:
        async with store.lock(key, ttl=store_env.ttl).acquire_async(wait=30) as held:
            assert store.status(key).holder is not None

            task = asyncio.ensure_future(asyncio.sleep(600))
            held.cancel_on_loss(task)
            store.break_lease(key)
            done, _ = await asyncio.wait({task}, timeout=store_env.ttl * 3)
            assert task in done and task.cancelled(), "the task was not cancelled at the loss"
            assert held.lost
            with pytest.raises(leasehold.LeaseLost):
                await held.release_async()
        async with store.lock(key, ttl=store_env.ttl) as again:
            assert not again.lost

    asyncio.run(main())


def test_a_cancelled_async_wait_leaves_nothing_held(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("cancel")

    async def main() -> None:
        holder = await store.lock(key, ttl=store_env.ttl).acquire_async()
        waiting = asyncio.Event()
        # Another Store: waits on a lease of this same Store queue in the
        # process before any attempt (no on_wait).
        other = store_env.open()
        waiter = asyncio.ensure_future(_take(other, key, store_env.ttl, waiting))
        await asyncio.wait_for(waiting.wait(), timeout=30)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await holder.release_async()
        # Nothing of the cancelled wait holds the key.
        assert store.status(key).holder is None
        free = store.lock(key, ttl=store_env.ttl).try_acquire()
        assert free is not None
        free.release()

    asyncio.run(main())


async def _take(store: leasehold.Store, key: str, ttl: float, waiting: asyncio.Event) -> None:
    async with store.lock(key, ttl=ttl).acquire_async(wait=60, on_wait=waiting.set):
        raise AssertionError("granted while held")


def test_durations_and_usage_errors(sqlite_env: Env) -> None:
    with pytest.raises(leasehold.UsageError):
        leasehold.open("nosuch://x")
    store = sqlite_env.open()
    for bad in ["abc", -1, float("nan"), float("inf"), "-5s", 10**400]:
        with pytest.raises(leasehold.UsageError):
            store.lock("k", ttl=bad)  # type: ignore[arg-type]
    with pytest.raises(leasehold.UsageError):
        store.lock("k", ttl="0.01s").acquire()
    for limit in [0, -3, 2**40, 1001, 2**70]:
        with pytest.raises(leasehold.UsageError, match="semaphore limit|out of range"):
            store.semaphore("k", limit=limit)
    for ttl in ["2s", 2, 2.0, datetime.timedelta(seconds=2)]:
        with store.lock("k", ttl=ttl) as held:
            assert 0 < held.valid_for() <= 2
    assert issubclass(leasehold.Timeout, leasehold.Error)
    assert issubclass(leasehold.LeaseLost, leasehold.Error)
    assert issubclass(leasehold.StoreError, leasehold.Error)
    assert issubclass(leasehold.UsageError, leasehold.Error)
