"""The reader-writer lock: readers in several processes share it, a
writer in another process is excluded while they hold and granted after,
readers wait while a writer holds; the async sides; the same lock as the
CLI's `run --shared`."""

from __future__ import annotations

import asyncio

import pytest

import leasehold
from conftest import Env, finish, read_line

# Takes one side of the reader-writer lock KEY (waiting up to 60 s),
# prints "holding TOKEN", and releases when a line comes on stdin.
SIDE = r"""
import os, sys, leasehold
side, key, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
rw = leasehold.open(os.environ["LEASEHOLD_URL"]).rw_lock(key, ttl=ttl)
with getattr(rw, side)().acquire(wait=60) as held:
    print("holding", held.token, flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""

# One attempt at a side: prints "got TOKEN" (and releases) or "taken".
TRY_SIDE = r"""
import os, sys, leasehold
side, key, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
rw = leasehold.open(os.environ["LEASEHOLD_URL"]).rw_lock(key, ttl=ttl)
held = getattr(rw, side)().try_acquire()
print("taken" if held is None else f"got {held.token}", flush=True)
if held is not None:
    held.release()
"""


def _side(env: Env, side: str, key: str):
    import subprocess
    import os
    import sys

    return subprocess.Popen(
        [sys.executable, "-c", SIDE, side, key, str(env.ttl)],
        env=dict(os.environ, **env.env, LEASEHOLD_URL=env.url, PYTHONUNBUFFERED="1"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _try(env: Env, side: str, key: str) -> list:
    child = env.child(TRY_SIDE, side, key, str(env.ttl))
    out = finish(child)
    assert child.returncode == 0, child.stderr_text  # type: ignore[attr-defined]
    return out[0].split()


def _end(proc) -> None:
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert read_line(proc, "released") == "released"
    proc.wait(timeout=30)
    assert proc.returncode == 0, proc.stderr.read()


def test_readers_in_processes_share_and_a_writer_excludes_them(store_env: Env) -> None:
    key = store_env.key("rw")
    readers = [_side(store_env, "read", key) for _ in range(2)]
    try:
        tokens = [int(read_line(r, "holding").split()[1]) for r in readers]
        # Both readers hold at once; a third reader gets in too; a writer not.
        assert _try(store_env, "read", key)[0] == "got"
        assert _try(store_env, "write", key) == ["taken"]
        rw = store_env.open().rw_lock(key, ttl=store_env.ttl)
        assert len(rw.readers()) == 2
        for r in readers:
            _end(r)
    finally:
        for r in readers:
            r.kill()
    writer = _side(store_env, "write", key)
    try:
        write_token = int(read_line(writer, "holding").split()[1])
        assert write_token > max(tokens)
        assert _try(store_env, "read", key) == ["taken"]
        assert _try(store_env, "write", key) == ["taken"]
        _end(writer)
    finally:
        writer.kill()
    got = _try(store_env, "read", key)
    assert got[0] == "got" and int(got[1]) >= write_token


def test_a_waiting_writer_goes_before_later_readers_and_sides_are_context_managers(store_env: Env) -> None:
    store = store_env.open()
    key = store_env.key("rw-local")
    rw = store.rw_lock(key, ttl=store_env.ttl, max_readers=4)
    with rw.read() as r1:
        assert rw.write().try_acquire() is None
        assert r1.key.startswith(key + "/:read:")
        with pytest.raises(leasehold.Timeout):
            rw.write().acquire(wait=0.3)

    async def main() -> None:
        async with rw.write() as w:
            assert rw.read().try_acquire() is None
            assert rw.writer() is not None and rw.writer().token == w.token  # type: ignore[union-attr]
        held = await rw.read().acquire_async(wait=30)
        await rw.read().release_async()
        assert held.released

    asyncio.run(main())


def test_bad_rw_lock_arguments(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    for bad in [0, 1001, -1]:
        with pytest.raises(leasehold.UsageError, match="max readers"):
            store.rw_lock("k", max_readers=bad)
    with pytest.raises(TypeError):
        store.rw_lock("k", max_readers="4")  # type: ignore[arg-type]
    with pytest.raises(leasehold.UsageError, match="rw lock key"):
        store.rw_lock("k" * 250)


def test_break_lease_of_a_key_held_by_readers_is_refused_naming_the_slots(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    rw = store.rw_lock("readers", ttl=sqlite_env.ttl)
    with rw.read() as held:
        with pytest.raises(leasehold.UsageError, match=r"readers/:read:\d+ \(held by") as caught:
            store.break_lease("readers")
        assert "nothing was broken" in str(caught.value)
        held.check()
