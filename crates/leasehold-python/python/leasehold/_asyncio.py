"""Native operations that call back from leasehold's threads, as
awaitables on the event loop."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from . import _leasehold as _native

async def _run_async(start: Callable[..., Any], *args: Any) -> Any:
    """Runs a native operation started by ``start(*args, done)`` on the
    runtime, as an awaitable; cancelling the awaiting task cancels it, and
    a lease it granted meanwhile is released."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def settle(ok: bool, value: Any) -> None:  # on the event loop
        if fut.cancelled():
            if ok and value is not None:
                value.release_background()
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def done(ok: bool, value: Any) -> None:  # on a leasehold thread
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop is closed
            if ok and value is not None:
                value.release_background()

    pending = start(*args, done)
    try:
        return await fut
    except asyncio.CancelledError:
        if pending is not None:
            # Stop the operation; a lease it was granted meanwhile is
            # released (by settle() above if it had completed, in the
            # background otherwise); re-raise once those releases ended.
            await _signalled(loop, pending.cancel)
            await _signalled(loop, _native.settle)
        raise


async def _signalled(loop: asyncio.AbstractEventLoop, start: Callable[[Callable[[], None]], Any]) -> None:
    """Awaits a native operation that calls back, from a leasehold thread,
    when it is over."""
    over = loop.create_future()

    def finish() -> None:  # on the event loop
        if not over.done():
            over.set_result(None)

    def done() -> None:  # on a leasehold thread
        try:
            loop.call_soon_threadsafe(finish)
        except RuntimeError:
            pass  # the loop is closed

    start(done)
    await asyncio.shield(over)
