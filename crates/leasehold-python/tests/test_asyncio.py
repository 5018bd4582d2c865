"""asyncio: acquire_async() is a coroutine (create_task, run, wait_for,
mypy); a loss under cancel_on_loss() ends the task with LeaseLost."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
from typing import List

import pytest

import leasehold
from conftest import Env


def test_acquire_async_is_a_coroutine_for_create_task_run_and_wait_for(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("coro")
    lock = store.lock(key, ttl=store_env.ttl)
    assert asyncio.iscoroutine(lock.acquire_async())
    held = asyncio.run(lock.acquire_async(wait=30))
    assert isinstance(held, leasehold.Held) and not held.released
    lock.release()
    assert held.released

    async def main() -> None:
        task = asyncio.create_task(lock.acquire_async(wait=30))
        held = await task
        assert store.status(key).holder is not None
        await lock.release_async()
        assert held.released
        held = await asyncio.wait_for(lock.acquire_async(), 30)
        await held.release_async()
        sem = store.semaphore(store_env.key("coro-sem"), limit=1, ttl=store_env.ttl)
        permit = await asyncio.ensure_future(sem.acquire_async())
        # Taken: a wait that runs out is a Timeout, which is a TimeoutError.
        with pytest.raises(TimeoutError):
            await sem.acquire_async(wait=0.2)
        permit.release()
        leadership = await store.election(store_env.key("coro-el"), ttl=store_env.ttl).campaign_async()
        await leadership.release_async()

    asyncio.run(main())


def test_a_loss_under_cancel_on_loss_ends_the_task_with_lease_lost(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("cancel-loss")
    lock = store.lock(key, ttl=store_env.ttl)

    async def work() -> None:
        async with lock as held:
            held.cancel_on_loss()
            store.break_lease(key)
            await asyncio.sleep(600)

    async def main() -> None:
        task = asyncio.ensure_future(work())
        done, _ = await asyncio.wait({task}, timeout=store_env.ttl * 3 + 10)
        assert task in done, "the task was not stopped at the loss"
        assert not task.cancelled(), "the task ended cancelled, not with LeaseLost"
        assert isinstance(task.exception(), leasehold.LeaseLost), repr(task.exception())
        assert isinstance(task.exception().__context__, asyncio.CancelledError)
        if sys.version_info >= (3, 11):
            assert task.cancelling() == 0

    asyncio.run(main())


def test_a_cancel_by_anything_else_stays_a_cancel(sqlite_env: Env) -> None:
    store = sqlite_env.open()

    async def work(started: asyncio.Event) -> None:
        async with store.lock("plain-cancel", ttl=sqlite_env.ttl) as held:
            held.cancel_on_loss()
            started.set()
            await asyncio.sleep(600)

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.ensure_future(work(started))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.status("plain-cancel").holder is None

    asyncio.run(main())


MYPY_PROGRAM = """
import asyncio
import leasehold

async def main(store: leasehold.Store) -> int:
    lock = store.lock("k")
    held = await lock.acquire_async()
    reveal_type(held)
    task = asyncio.create_task(lock.acquire_async(5))
    other: leasehold.Held = await task
    async with lock.acquire_async(wait=5) as h:
        h.check()
    async with store.rw_lock("r").read() as r:
        r.check()
    await lock.release_async()
    return held.token + other.token

def sync(store: leasehold.Store) -> leasehold.Held:
    return asyncio.run(store.semaphore("s", 2).acquire_async())
"""


def _mypy() -> List[str]:
    """A command that runs mypy on this interpreter's packages: mypy
    installed here, or a `mypy` on PATH told to look at this interpreter's
    (`--python-executable`); the test is skipped without either."""
    try:
        import mypy  # noqa: F401
    except ImportError:
        found = shutil.which("mypy")
        if found is None:
            pytest.skip("mypy is neither installed in the test environment nor on PATH")
        return [found, "--python-executable", sys.executable]
    return [sys.executable, "-m", "mypy"]


def test_mypy_accepts_await_on_acquire_async(tmp_path) -> None:
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(MYPY_PROGRAM))
    run = subprocess.run(
        [*_mypy(), "--strict", "--no-incremental", "--cache-dir", os.devnull, str(program)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    out = run.stdout + run.stderr
    # The package is checked as an installed one: the program's errors only.
    assert 'Revealed type is "leasehold.Held"' in out, out
    assert "error:" not in out, out
