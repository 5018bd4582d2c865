"""Python code that keeps the GIL cannot hold up a renewal: leasehold's
callbacks into Python (asyncio completions, ``on_wait``, ``on_loss``) wait
for the GIL on threads of their own, never on the runtime's workers that
renew leases and signal their loss."""

from __future__ import annotations

import asyncio
import ctypes
import threading

import leasehold

from conftest import Env, read_line

# Holds the keys argv[2:] (TTL argv[1]) until killed.
HOLDER = """
import os, signal, sys, leasehold
store = leasehold.open(os.environ["LEASEHOLD_URL"])
held = [store.lock(key, ttl=float(sys.argv[1])).acquire() for key in sys.argv[2:]]
print("held", flush=True)
signal.pause()
"""


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _sleep_keeping_the_gil(seconds: float) -> None:
    """One C call of ``seconds`` that keeps the GIL (``PyDLL`` functions are
    called with it held), as a long computation in a C extension does."""
    libc = ctypes.PyDLL(None)
    whole = int(seconds)
    libc.nanosleep(ctypes.byref(_Timespec(whole, int((seconds - whole) * 1e9))), None)


def test_a_thread_that_keeps_the_gil_for_two_ttls_holds_up_no_renewal(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    ttl = sqlite_env.ttl
    held = store.lock(sqlite_env.key("gil"), ttl=ttl).acquire()
    busy = [sqlite_env.key("gil-busy") for _ in range(4)]
    holder = sqlite_env.child(HOLDER, str(ttl), *busy)
    assert read_line(holder, "the holder") == "held"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        # Four asyncio waits for keys another process holds, that run out a
        # quarter TTL after they start: while this thread keeps the GIL, so
        # that their completions (more of them than the runtime has
        # workers) wait for the GIL.
        waiting = [threading.Event() for _ in busy]

        async def wait_in_vain(key: str, started: threading.Event) -> str:
            try:
                await store.lock(key, ttl=ttl).acquire_async(ttl / 4, on_wait=started.set)
            except leasehold.Timeout:
                return "timed out"
            return "granted"

        ends = [asyncio.run_coroutine_threadsafe(wait_in_vain(k, e), loop) for k, e in zip(busy, waiting)]
        for started in waiting:
            assert started.wait(10), "a wait did not start"
        _sleep_keeping_the_gil(2 * ttl)
        # Renewed throughout: still certainly ours, never marked lost.
        assert held.valid_for() > 0
        assert not held.lost, held.loss_reason
        held.check()
        assert [end.result(10) for end in ends] == ["timed out"] * 4
        held.release()
    finally:
        holder.kill()
        holder.wait()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
