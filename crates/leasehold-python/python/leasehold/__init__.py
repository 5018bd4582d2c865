"""Distributed mutual exclusion on leases: locks, semaphores and leader
election over SQLite, Azure Blob Storage, DynamoDB, PostgreSQL, Redis, etcd
and S3, from Python.

    import leasehold

    store = leasehold.open("sqlite:leases.db")   # the same URLs as the CLI
    with store.lock("nightly-report", ttl="30s", wait="10s") as held:
        held.token      # fencing token: greater than every earlier grant's
        held.check()    # raises leasehold.LeaseLost once the lease is lost
        ...

The lease is renewed in the background (in Rust threads, without the GIL)
while it is held. If it can no longer be renewed, it is *lost*: ``held.lost``
turns True, ``held.check()`` raises ``LeaseLost``, ``on_loss`` callbacks run
and tasks registered with ``held.cancel_on_loss()`` are cancelled, all before
anyone else can be granted the key. What this module cannot do is stop a
Python thread: the code that holds the lease must stop on that signal. When
work must be stopped for sure, run it under ``leasehold run`` (the CLI),
which stops the command itself; or pass ``abort_on_loss=True``, which ends
the whole process at the loss.

leasehold does not survive ``fork()``: a forked child of a process that used
it (opened a store) gets ``UsageError`` from every call, and nothing the
parent holds is released or renewed by the child. Fork (start
multiprocessing or gunicorn workers) before the first use, or use the
"spawn" or "forkserver" start method.

See docs/python.md.
"""

from __future__ import annotations

import asyncio
import atexit
import datetime
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Union

from . import _leasehold as _native
from ._leasehold import Error, LeaseLost, StoreError, Timeout, UsageError

__all__ = [
    "open",
    "init",
    "Store",
    "Lock",
    "Semaphore",
    "Election",
    "Held",
    "Holder",
    "KeyInfo",
    "RunRecord",
    "OncePer",
    "Duration",
    "Error",
    "Timeout",
    "LeaseLost",
    "StoreError",
    "UsageError",
]

#: A duration: seconds (int or float), a ``datetime.timedelta``, or a string
#: in the CLI's syntax ("30s", "500ms", "5m", "1h 30m").
Duration = Union[int, float, datetime.timedelta, str]

LossCallback = Callable[[str], Any]


def _secs(value: Optional[Duration], what: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool):
        raise UsageError(f"invalid {what}: {value!r} (expected seconds, a timedelta or a string like '30s')")
    if isinstance(value, (int, float)):
        secs = float(value)
    elif isinstance(value, datetime.timedelta):
        secs = value.total_seconds()
    elif isinstance(value, str):
        secs = _native.parse_duration(value)
    else:
        raise UsageError(f"invalid {what}: {value!r} (expected seconds, a timedelta or a string like '30s')")
    if not secs >= 0 or secs == float("inf"):
        raise UsageError(f"invalid {what}: {value!r} (expected a finite duration of zero or more seconds)")
    return secs


@dataclass(frozen=True)
class Holder:
    """Who holds a key, as the store describes them."""

    host: str
    pid: int
    label: Optional[str]
    data: Optional[str]
    token: int
    acquired_at: Optional[float]
    """Unix seconds, on the holder's clock, when known."""
    expires_in: Optional[float]
    """Seconds until the lease runs out without renewal, when known."""
    ttl: Optional[float]


@dataclass(frozen=True)
class RunRecord:
    """How a run under the key's lease ended (``once_per``, ``leasehold run``)."""

    succeeded: bool
    outcome: str
    started_at: float
    ended_at: float
    token: int
    host: str
    pid: int


@dataclass(frozen=True)
class KeyInfo:
    """What the store holds for a key."""

    key: str
    token: int
    """The last fencing token issued for the key (0 if none ever was)."""
    holder: Optional[Holder]
    last_success: Optional[RunRecord]
    last_run: Optional[RunRecord]


def _holder(d: Optional[dict]) -> Optional[Holder]:
    return None if d is None else Holder(**d)


def _record(d: Optional[dict]) -> Optional[RunRecord]:
    return None if d is None else RunRecord(**d)


def _key_info(d: dict) -> KeyInfo:
    return KeyInfo(
        key=d["key"],
        token=d["token"],
        holder=_holder(d["holder"]),
        last_success=_record(d["last_success"]),
        last_run=_record(d["last_run"]),
    )


def open(url: Optional[str] = None) -> "Store":  # noqa: A001 (mirrors leasehold_stores::open)
    """Opens the store ``url`` names, the same URLs as the ``leasehold``
    command (``sqlite:PATH``, ``postgres://…``, ``redis://…``, ``etcd://…``,
    ``s3://…``, ``dynamodb://…``, ``azblob://…``); None: the default SQLite
    file. Credentials come from the environment, as for the CLI."""
    return Store(_native.open(url))


def init(url: Optional[str] = None, *, new: bool = False) -> "Store":
    """Creates the store ``url`` names (``leasehold init``), or opens it if it
    exists (nothing changed). A new store grants nothing for a while (the
    quarantine: holders of any lost earlier store's data must have stopped);
    with ``new=True`` you state that no store existed there before, and its
    epoch is settled at once."""
    return Store(_native.init(url, new))


class Store:
    """An open store. Open one per process (after any fork); it is safe to
    share between threads."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def url(self) -> str:
        """The store's URL without its secrets."""
        return self._native.url

    def __repr__(self) -> str:
        return f"leasehold.Store({self.url!r})"

    def lock(
        self,
        key: str,
        *,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        data: Optional[str] = None,
        label: Optional[str] = None,
        on_loss: Optional[LossCallback] = None,
        abort_on_loss: bool = False,
        renew_interval: Optional[Duration] = None,
    ) -> "Lock":
        """A lock on ``key``. ``ttl``: the lease's time to live (default
        30 s); ``wait``: how long ``with lock:`` waits (None: as long as it
        takes); ``data``/``label``: stored with the lease for others to see
        (``status``); ``on_loss``: called with the reason if a lease is
        lost; ``abort_on_loss``: end the process at once if it is."""
        return Lock(self, "lock", key, 1, ttl, wait, data, label, on_loss, abort_on_loss, renew_interval)

    def semaphore(
        self,
        key: str,
        limit: int,
        *,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        data: Optional[str] = None,
        label: Optional[str] = None,
        on_loss: Optional[LossCallback] = None,
        abort_on_loss: bool = False,
        renew_interval: Optional[Duration] = None,
    ) -> "Semaphore":
        """At most ``limit`` holders of ``key`` at once; options as ``lock``."""
        return Semaphore(self, "semaphore", key, limit, ttl, wait, data, label, on_loss, abort_on_loss, renew_interval)

    def election(
        self,
        key: str,
        *,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        data: Optional[str] = None,
        label: Optional[str] = None,
        on_loss: Optional[LossCallback] = None,
        abort_on_loss: bool = False,
        renew_interval: Optional[Duration] = None,
    ) -> "Election":
        """Leader election on ``key``: ``campaign`` to lead, ``leader`` to
        see who does; ``data`` is what the leader publishes."""
        return Election(self, "election", key, 1, ttl, wait, data, label, on_loss, abort_on_loss, renew_interval)

    def status(self, key: str) -> KeyInfo:
        """What the store holds for ``key``: its holder, last token, runs."""
        return _key_info(self._native.status(key))

    def list(self, prefix: str = "") -> List[KeyInfo]:
        """Every key with a record in the store whose name starts with ``prefix``."""
        return [_key_info(d) for d in self._native.list(prefix)]

    def break_lease(self, key: str) -> Optional[Holder]:
        """Ends any lease on ``key``, whoever holds it; the holder it ended."""
        return _holder(self._native.break_lease(key))

    def last_success_within(self, key: str, period: Duration) -> Optional[RunRecord]:
        """The key's last successful run if it ended less than ``period`` ago."""
        return _record(self._native.last_success_within(key, _secs(period, "period")))

    def once_per(
        self,
        key: str,
        period: Duration,
        *,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        data: Optional[str] = None,
        label: Optional[str] = None,
        on_loss: Optional[LossCallback] = None,
    ) -> "OncePer":
        """``leasehold run --once-per``: a context manager that takes the lock
        on ``key`` and yields the Held, or None (releasing at once) when a run
        succeeded less than ``period`` ago. Leaving the block normally records
        a success, by an exception a failure (the exception goes on)."""
        lock = self.lock(key, ttl=ttl, wait=wait, data=data, label=label, on_loss=on_loss)
        return OncePer(self, lock, _secs(period, "period"))


class Held:
    """A lease held: renewed in the background until released. A context
    manager (sync and async) that releases it."""

    def __init__(self, native: Any) -> None:
        self._native = native
        _live.add(self)

    @property
    def key(self) -> str:
        """The key held (for a semaphore permit, its slot's key)."""
        return self._native.key

    @property
    def token(self) -> int:
        """The fencing token: greater than every earlier grant's on this key.
        Hand it to the resource you protect, to reject stale holders."""
        return self._native.token

    @property
    def slot(self) -> Optional[int]:
        """A semaphore permit's slot (None for locks and elections)."""
        return self._native.slot

    @property
    def term(self) -> int:
        """A leadership's term: its fencing token."""
        return self._native.token

    @property
    def lost(self) -> bool:
        """Whether the lease is lost, checked against the clock now (so it is
        right even if renewals could not run)."""
        return self._native.lost

    @property
    def loss_reason(self) -> Optional[str]:
        """Why the lease is lost, or None."""
        return self._native.loss_reason

    @property
    def released(self) -> bool:
        return self._native.released

    def valid_for(self) -> float:
        """Seconds the lease is certainly ours without another renewal."""
        return self._native.valid_for()

    def check(self) -> None:
        """Raises ``LeaseLost`` if the lease is lost (and ``UsageError`` if it
        was released): call it between steps of the work."""
        self._native.check()

    def on_loss(self, callback: LossCallback) -> None:
        """Calls ``callback(reason)`` once when the lease is lost (at once if
        it is already), on a leasehold thread: keep it short, e.g.
        ``threading.Event.set``; no blocking leasehold call from it."""
        self._native.on_loss(callback)

    def cancel_on_loss(self, task: "Optional[asyncio.Task[Any]]" = None) -> None:
        """Cancels ``task`` (by default the current asyncio task) when the
        lease is lost; its ``await`` raises ``asyncio.CancelledError``."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError("cancel_on_loss() needs a running event loop: call it from a task") from None
        target = task if task is not None else asyncio.current_task()
        if target is None:
            raise UsageError("cancel_on_loss() needs a task: call it from one, or pass it")

        def cancel(_reason: str) -> None:
            try:
                loop.call_soon_threadsafe(target.cancel)
            except RuntimeError:
                pass  # the loop is closed: nothing left to cancel

        self.on_loss(cancel)

    def release(self) -> None:
        """Ends the lease. Raises ``LeaseLost`` if it was lost first (the work
        may have overlapped another holder's). Releasing again does nothing."""
        self._native.release()

    async def release_async(self) -> None:
        """``release``, awaited without blocking the event loop."""
        await _run_async(self._native.release_start)

    def __enter__(self) -> "Held":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    async def __aenter__(self) -> "Held":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release_async()

    def __repr__(self) -> str:
        state = "lost" if self.lost else "released" if self.released else "held"
        return f"<leasehold.Held {self.key!r} token={self.token} {state}>"


class _Target:
    def __init__(
        self,
        store: Store,
        kind: str,
        key: str,
        limit: int,
        ttl: Optional[Duration],
        wait: Optional[Duration],
        data: Optional[str],
        label: Optional[str],
        on_loss: Optional[LossCallback],
        abort_on_loss: bool,
        renew_interval: Optional[Duration],
    ) -> None:
        self.store = store
        self._native = store._native.target(
            kind,
            key,
            limit,
            _secs(ttl, "ttl"),
            data,
            label,
            abort_on_loss,
            _secs(renew_interval, "renew_interval"),
        )
        self._wait = _secs(wait, "wait")
        self._on_loss = on_loss
        self._entered: List[Held] = []
        self._entered_lock = threading.Lock()

    @property
    def key(self) -> str:
        return self._native.key

    def _held(self, native: Any) -> Held:
        held = Held(native)
        if self._on_loss is not None:
            held.on_loss(self._on_loss)
        return held

    def _acquire(self, wait: Optional[Duration], on_wait: Optional[Callable[[], Any]]) -> Held:
        secs = self._wait if wait is _DEFAULT else _secs(wait, "wait")
        return self._held(self._native.acquire(secs, on_wait))

    def _try_acquire(self) -> Optional[Held]:
        native = self._native.try_acquire()
        return None if native is None else self._held(native)

    def _acquire_async(self, wait: Any, on_wait: Optional[Callable[[], Any]] = None) -> "_AsyncAcquire":
        secs = self._wait if wait is _DEFAULT else _secs(wait, "wait")
        return _AsyncAcquire(self, secs, on_wait)

    def __enter__(self) -> Held:
        held = self._acquire(_DEFAULT, None)
        with self._entered_lock:
            self._entered.append(held)
        return held

    def __exit__(self, *exc: Any) -> None:
        with self._entered_lock:
            held = self._entered.pop()
        held.release()

    async def __aenter__(self) -> Held:
        held = await self._acquire_async(_DEFAULT)
        with self._entered_lock:
            self._entered.append(held)
        return held

    async def __aexit__(self, *exc: Any) -> None:
        with self._entered_lock:
            held = self._entered.pop()
        await held.release_async()

    def __repr__(self) -> str:
        return f"<leasehold.{type(self).__name__} {self.key!r} on {self.store.url!r}>"


class _Default:
    def __repr__(self) -> str:
        return "<the lock's wait>"


_DEFAULT: Any = _Default()


class Lock(_Target):
    """A named lock. ``with lock as held:`` takes it (waiting as ``wait``
    said), ``async with lock as held:`` too, without blocking the loop."""

    def acquire(self, wait: Optional[Duration] = _DEFAULT, *, on_wait: Optional[Callable[[], Any]] = None) -> Held:
        """Takes the lock, waiting up to ``wait`` (None: as long as it takes;
        default: the lock's). Raises ``Timeout`` when the wait runs out.
        ``on_wait()`` is called once, from this thread, if the first attempt
        finds it taken. Ctrl-C (KeyboardInterrupt) ends the wait: nothing
        stays held."""
        return self._acquire(wait, on_wait)

    def try_acquire(self) -> Optional[Held]:
        """One attempt: the Held, or None when someone else holds it (or
        the store grants nothing yet)."""
        return self._try_acquire()

    def acquire_async(
        self, wait: Optional[Duration] = _DEFAULT, *, on_wait: Optional[Callable[[], Any]] = None
    ) -> "_AsyncAcquire":
        """``acquire`` for asyncio: ``await lock.acquire_async(5)`` or
        ``async with lock.acquire_async(5) as held:``. Cancelling the task
        gives the wait up; nothing stays held. ``on_wait()`` is called once,
        on the event loop, if the first attempt finds it taken."""
        return self._acquire_async(wait, on_wait)

    def holder(self) -> Optional[Holder]:
        """Who holds the lock now, or None."""
        holders = self._native.holders()
        return _holder(holders[0]) if holders else None


class Semaphore(_Target):
    """At most ``limit`` holders at once; each permit is a Held with a slot."""

    def acquire(self, wait: Optional[Duration] = _DEFAULT, *, on_wait: Optional[Callable[[], Any]] = None) -> Held:
        """Takes a permit, waiting as ``Lock.acquire``."""
        return self._acquire(wait, on_wait)

    def try_acquire(self) -> Optional[Held]:
        """One attempt: a permit, or None when every slot is held."""
        return self._try_acquire()

    def acquire_async(
        self, wait: Optional[Duration] = _DEFAULT, *, on_wait: Optional[Callable[[], Any]] = None
    ) -> "_AsyncAcquire":
        """``acquire`` for asyncio, as ``Lock.acquire_async``."""
        return self._acquire_async(wait, on_wait)

    def holders(self) -> List[Holder]:
        """Who holds the slots now."""
        return [Holder(**d) for d in self._native.holders()]


class Election(_Target):
    """Leader election on a key."""

    def campaign(self, wait: Optional[Duration] = _DEFAULT, *, on_wait: Optional[Callable[[], Any]] = None) -> Held:
        """Becomes leader, waiting as ``Lock.acquire``; the Held's ``term``
        is the leadership's term. Release it to resign."""
        return self._acquire(wait, on_wait)

    def try_campaign(self) -> Optional[Held]:
        """One attempt: the leadership, or None when someone else leads."""
        return self._try_acquire()

    def campaign_async(
        self, wait: Optional[Duration] = _DEFAULT, *, on_wait: Optional[Callable[[], Any]] = None
    ) -> "_AsyncAcquire":
        """``campaign`` for asyncio."""
        return self._acquire_async(wait, on_wait)

    def leader(self) -> Optional[Holder]:
        """Who leads now (with the data they published), or None."""
        holders = self._native.holders()
        return _holder(holders[0]) if holders else None


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

    def done() -> None:  # on a leasehold thread
        try:
            loop.call_soon_threadsafe(lambda: over.done() or over.set_result(None))
        except RuntimeError:
            pass  # the loop is closed

    start(done)
    await asyncio.shield(over)


class _AsyncAcquire:
    """An acquisition for asyncio: awaitable, and an async context manager."""

    def __init__(self, target: _Target, wait: Optional[float], on_wait: Optional[Callable[[], Any]]) -> None:
        self._target = target
        self._wait = wait
        self._on_wait = on_wait
        self._held: Optional[Held] = None

    async def _get(self) -> Held:
        on_wait = None
        if self._on_wait is not None:
            loop = asyncio.get_running_loop()
            callback = self._on_wait

            def on_wait() -> None:  # on a leasehold thread
                try:
                    loop.call_soon_threadsafe(callback)
                except RuntimeError:
                    pass  # the loop is closed

        native = await _run_async(self._target._native.acquire_start, self._wait, on_wait)
        return self._target._held(native)

    def __await__(self) -> Iterator[Any]:
        return self._get().__await__()

    async def __aenter__(self) -> Held:
        self._held = await self._get()
        return self._held

    async def __aexit__(self, *exc: Any) -> None:
        held, self._held = self._held, None
        if held is not None:
            await held.release_async()


class OncePer:
    """The context manager ``Store.once_per`` returns."""

    def __init__(self, store: Store, lock: Lock, period: Optional[float]) -> None:
        self._store = store
        self._lock = lock
        self._period = period
        self._held: Optional[Held] = None
        self._started = 0.0

    def __enter__(self) -> Optional[Held]:
        held = self._lock.acquire()
        try:
            recent = self._store._native.last_success_within(self._lock.key, self._period)
        except BaseException:
            held.release()
            raise
        if recent is not None:
            held.release()
            return None
        self._held = held
        self._started = time.time()
        return held

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        held, self._held = self._held, None
        if held is not None:
            held._native.release_with(exc_type is None, self._started)


# Every Held not yet garbage collected, for the release at exit.
_live: "weakref.WeakSet[Held]" = weakref.WeakSet()


def _finish_background() -> None:
    # Leases still held at exit are released, and releases left in the
    # background (guards garbage collected, a wait given up by Ctrl-C)
    # finish, before the process exits (up to 5 s). Not in a forked child:
    # those leases are the parent's.
    try:
        for held in list(_live):
            if held._native.released is False:
                try:
                    held._native.release_background()
                except Error:
                    pass
        _native.finish_background(5.0)
    except BaseException:
        pass


atexit.register(_finish_background)
