"""Distributed mutual exclusion on leases: locks, semaphores, reader-writer
locks and leader election over SQLite, Azure Blob Storage, DynamoDB,
PostgreSQL, MySQL, Redis, etcd, S3 and ZooKeeper, from Python.

    import leasehold

    store = leasehold.open("sqlite:leases.db")   # the same URLs as the CLI
    with store.lock("nightly-report", ttl="30s", wait="10s") as held:
        held.token      # fencing token: greater than every earlier grant's
        held.check()    # raises leasehold.LeaseLost once the lease is lost
        ...

A lease is held until it is released: by leaving the ``with`` block, by
``held.release()``, or by ``lock.release()`` (the lock, semaphore, election
or reader-writer side remembers what it granted, as ``threading.Lock`` does:
``lock.acquire(); ...; lock.release()`` and ``if lock.try_acquire(): ...``
hold the key until the release). Only when both the Held and the object
that granted it are garbage collected unreleased is the lease released
then, in the background, with a ``ResourceWarning``.

The lease is renewed in the background (in Rust threads, without the GIL)
while it is held. If it can no longer be renewed, it is *lost*: ``held.lost``
turns True, ``held.check()`` raises ``LeaseLost``, ``on_loss`` callbacks run
and tasks registered with ``held.cancel_on_loss()`` are cancelled. A lease
that runs out unrenewed is signalled lost before anyone else can be granted
the key; a lease broken (``break_lease``, ``leasehold break``) is taken from
its holder at once, and the holder hears of it at its next renewal. What
this module cannot do is stop a Python thread: the code that holds the lease
must stop on that signal. When work must be stopped for sure, run it under
``leasehold run`` (the CLI), which stops the command itself; or pass
``abort_on_loss=True``, which ends the whole process at the loss.

leasehold does not survive ``fork()``: in a forked child of a process that
used it (opened a store), every call raises ``UsageError``, ``open()``
included, and nothing the parent holds is released or renewed by the child.
Fork (start multiprocessing or gunicorn workers) before the first use, or
use the "spawn" or "forkserver" start method.

See docs/python.md.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Dict, Generator, Iterable, List, Optional, Tuple

from . import _leasehold as _native
from ._asyncio import _run_async
from ._checks import Duration, LossCallback, _bool, _callable, _int, _period, _secs, _str, _type_name
from ._entered import _pop, _push, _who
from ._leasehold import Error, LeaseLost, StoreError, Timeout, UsageError
from ._records import Holder, KeyInfo, RunRecord, _holder, _key_info, _record

__all__ = [
    "open",
    "init",
    "Store",
    "Lock",
    "Semaphore",
    "Election",
    "LeaderChange",
    "LeaderObserver",
    "MultiLock",
    "RwLock",
    "ReadLock",
    "WriteLock",
    "Held",
    "Acquiring",
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


def open(url: Optional[str] = None) -> "Store":  # noqa: A001 (mirrors leasehold_stores::open)
    """Opens the store ``url`` names, the same URLs as the ``leasehold``
    command (``sqlite:PATH``, ``postgres://…``, ``redis://…``, ``etcd://…``,
    ``s3://…``, ``dynamodb://…``, ``azblob://…``); None: the default SQLite
    file. Credentials come from the environment, as for the CLI. A store
    that no other process can see (``memory:``, an in-memory SQLite
    database) is refused with ``UsageError``, as the CLI refuses it: a lock
    in it would exclude nobody."""
    return Store(_native.open(_str(url, "url", optional=True)))


def init(url: Optional[str] = None, *, new: bool = False) -> "Store":
    """Creates the store ``url`` names (``leasehold init``), or opens it if it
    exists (nothing changed). A new store grants nothing for a while (the
    quarantine: holders of any lost earlier store's data must have stopped);
    with ``new=True`` you state that no store existed there before, and its
    epoch is settled at once. ``new=True`` where a store exists is refused
    (``UsageError``), as ``leasehold init --new`` refuses it."""
    return Store(_native.init(_str(url, "url", optional=True), _bool(new, "new")))


class Store:
    """An open store. Open one per process (after any fork); it is safe to
    share between threads."""

    def __init__(self, native: _native.Store) -> None:
        self._native = native

    @property
    def url(self) -> str:
        """The store's URL without its secrets."""
        return self._native.url

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._native.closed

    def close(self) -> None:
        """Closes the store: waits (up to 5 s) for the releases left in the
        background (a Held garbage collected unreleased), then refuses every
        further use with ``UsageError``. Leases still held are not released
        by it: release them first. Closing twice does nothing. ``with
        leasehold.open(url) as store:`` closes at the block's end."""
        self._native.close(5.0)

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<leasehold.Store {self.url!r}{state}>"

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
        poll_cap: Optional[Duration] = None,
    ) -> "Lock":
        """A lock on ``key``. ``ttl``: the lease's time to live (default
        30 s); ``wait``: how long ``with lock:`` waits (None: as long as it
        takes); ``data``/``label``: stored with the lease for others to see
        (``status``); ``on_loss``: called with the reason if a lease is
        lost; ``abort_on_loss``: end the process at once if it is;
        ``poll_cap``: the longest pause between two asks of the store while
        waiting (default 2 s: a wait polls every 50-100 ms for its first
        2 s and whenever the key changes hands, then backs off while the
        same holder keeps it; what a long wait costs on stores billed by
        request)."""
        return Lock(self, "lock", key, 1, ttl, wait, data, label, on_loss, abort_on_loss, renew_interval, poll_cap)

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
        poll_cap: Optional[Duration] = None,
    ) -> "Semaphore":
        """At most ``limit`` holders of ``key`` at once; options as ``lock``.
        Each permit holds a slot key (``KEY/:slot:N``) with its own fencing
        tokens: they grow per slot, not across slots."""
        _int(limit, "limit")
        return Semaphore(self, "semaphore", key, limit, ttl, wait, data, label, on_loss, abort_on_loss, renew_interval, poll_cap)

    def rw_lock(
        self,
        key: str,
        *,
        max_readers: int = 16,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        data: Optional[str] = None,
        label: Optional[str] = None,
        on_loss: Optional[LossCallback] = None,
        abort_on_loss: bool = False,
        renew_interval: Optional[Duration] = None,
        poll_cap: Optional[Duration] = None,
    ) -> "RwLock":
        """A reader-writer lock on ``key``: ``with rw.read():`` shares it
        with other readers (up to ``max_readers`` at once), ``with
        rw.write():`` excludes readers and other writers; writer preference.
        The same lock as ``leasehold run --shared KEY`` (a reader) and
        ``leasehold run KEY`` (a writer) take. Options as ``lock``."""
        _int(max_readers, "max_readers")
        return RwLock(self, key, max_readers, ttl, wait, data, label, on_loss, abort_on_loss, renew_interval, poll_cap)

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
        poll_cap: Optional[Duration] = None,
    ) -> "Election":
        """Leader election on ``key``: ``campaign`` to lead, ``leader`` to
        see who does; ``data`` is what the leader publishes."""
        return Election(self, "election", key, 1, ttl, wait, data, label, on_loss, abort_on_loss, renew_interval, poll_cap)

    def lock_all(
        self,
        keys: "Iterable[str]",
        *,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        data: Optional[str] = None,
        label: Optional[str] = None,
        on_loss: Optional[LossCallback] = None,
        abort_on_loss: bool = False,
        renew_interval: Optional[Duration] = None,
        poll_cap: Optional[Duration] = None,
    ) -> "MultiLock":
        """Locks on every one of ``keys``, held all or none: ``with
        store.lock_all(["b", "a"]) as held:`` holds both. The keys are taken
        in one global order (their byte order), whatever order they are
        given in, so two holders of the same keys never deadlock; a wait
        that runs out (or is cancelled, or Ctrl-C) releases the keys it
        took. ``held.tokens`` has each key's fencing token; the Held is lost
        when any one key is. Options as ``lock``. Each key is a plain lock
        (as ``store.lock(key)``): it excludes ``leasehold run a b`` and
        ``run a``, but not ``run --shared a`` readers."""
        return MultiLock(self, "multi", _keys(keys), 1, ttl, wait, data, label, on_loss, abort_on_loss, renew_interval, poll_cap)

    def status(self, key: str) -> KeyInfo:
        """What the store holds for ``key``: its holder, last token, runs."""
        return _key_info(self._native.status(_str(key, "key")))

    def list(self, prefix: str = "") -> List[KeyInfo]:
        """Every key with a record in the store whose name starts with ``prefix``."""
        return [_key_info(d) for d in self._native.list(_str(prefix, "prefix"))]

    def break_lease(self, key: str) -> Optional[Holder]:
        """Ends any lease on ``key``, whoever holds it: the holder it ended,
        or None if none held it. A forced takeover: the key can be granted
        at once, while the holder learns of its loss only at its next
        renewal. A semaphore's key (or a reader-writer lock's held by
        readers) has no lease of its own: ``UsageError``, naming the held
        slot keys to break one at a time, as ``leasehold break`` does."""
        return _holder(self._native.break_lease(_str(key, "key")))

    def last_success_within(self, key: str, period: Duration) -> Optional[RunRecord]:
        """The key's last successful run if it ended less than ``period`` ago."""
        return _record(self._native.last_success_within(_str(key, "key"), _period(period)))

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
        return OncePer(self, lock, _period(period))

class Held:
    """A lease held: renewed in the background until released. A context
    manager (sync and async) that releases it.

    Released by ``release()``, by leaving its block, or by the ``release()``
    of the lock (semaphore, election, reader-writer side) that granted it,
    which keeps it until then. Garbage collected unreleased (the Held and
    that object both unreferenced), it is released in the background, with
    a ``ResourceWarning``."""

    def __init__(self, native: _native.Held, owner: "Optional[_Target]" = None) -> None:
        self._native = native
        self._pid = os.getpid()
        self._owner = None if owner is None else weakref.ref(owner)
        # The tasks cancel_on_loss() cancelled (at the loss); made by the
        # first cancel.
        self._cancelled: "Optional[weakref.WeakSet[asyncio.Task[Any]]]" = None
        _live.add(self)

    @property
    def key(self) -> str:
        """The key held (for a semaphore permit, its slot's key; for a
        reader, its reader slot's; for ``lock_all``, the keys in byte order
        separated by spaces)."""
        return self._native.key

    @property
    def token(self) -> int:
        """The fencing token: greater than every earlier grant's on this key
        (a semaphore permit's: on its slot). Hand it to the resource you
        protect, to reject stale holders. ``UsageError`` for a lease of
        several keys (``lock_all``): see ``tokens``."""
        return self._native.token

    @property
    def tokens(self) -> Dict[str, int]:
        """Each key held and its fencing token (one key: ``{key: token}``;
        ``lock_all``: every key's own, in byte order of the keys)."""
        return dict(self._native.tokens)

    @property
    def slot(self) -> Optional[int]:
        """A semaphore permit's slot (None for locks, elections and
        reader-writer locks)."""
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
        self._native.on_loss(_callable(callback, "callback"))

    def cancel_on_loss(self, task: "Optional[asyncio.Task[Any]]" = None) -> None:
        """Cancels ``task`` (by default the current asyncio task) when the
        lease is lost: its ``await`` raises ``asyncio.CancelledError`` at
        once. Leaving the ``async with`` block of this lease then raises
        ``LeaseLost`` (from that CancelledError) in that task, so the task
        ends with ``LeaseLost``, which says why. No cancel after the lease
        was released."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError("cancel_on_loss() needs a running event loop: call it from a task") from None
        if task is not None and not isinstance(task, asyncio.Task):
            raise TypeError(f"task must be an asyncio.Task or None, not {_type_name(task)}")
        target = task if task is not None else asyncio.current_task()
        if target is None:
            raise UsageError("cancel_on_loss() needs a task: call it from one, or pass it")
        me = weakref.ref(self)

        def cancel_now() -> None:  # on the event loop
            held = me()
            # Not once the lease was released: the block is over, and a
            # cancel now would hit the task's next, unrelated, await.
            if held is not None and not held._native.released and not target.done():
                if held._cancelled is None:
                    held._cancelled = weakref.WeakSet()
                held._cancelled.add(target)
                target.cancel()

        def cancel(_reason: str) -> None:  # on a leasehold thread
            try:
                loop.call_soon_threadsafe(cancel_now)
            except RuntimeError:
                pass  # the loop is closed: nothing left to cancel

        self.on_loss(cancel)

    def _forget(self) -> None:
        owner = None if self._owner is None else self._owner()
        if owner is not None:
            owner._forget(self)

    def release(self) -> None:
        """Ends the lease. Raises ``LeaseLost`` if it was lost first (the work
        may have overlapped another holder's). Releasing again does nothing."""
        try:
            self._native.release()
        finally:
            self._forget()

    async def release_async(self) -> None:
        """``release``, awaited without blocking the event loop."""
        try:
            await _run_async(self._native.release_start)
        finally:
            self._forget()

    def _release_with(self, succeeded: bool, started_at: float) -> None:
        try:
            self._native.release_with(succeeded, started_at)
        finally:
            self._forget()

    async def _leave_async(self, exc: Optional[BaseException]) -> None:
        """Releases at the end of an ``async with`` block: a cancellation
        that cancel_on_loss() made becomes LeaseLost."""
        try:
            await self.release_async()
        except LeaseLost:
            task = asyncio.current_task()
            if task is not None and self._cancelled is not None and task in self._cancelled:
                self._cancelled.discard(task)
                uncancel = getattr(task, "uncancel", None)  # Python 3.11+
                if uncancel is not None and isinstance(exc, asyncio.CancelledError):
                    uncancel()
            raise

    def __enter__(self) -> "Held":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    async def __aenter__(self) -> "Held":
        return self

    async def __aexit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        await self._leave_async(exc)

    def __del__(self) -> None:
        # Garbage collected unreleased: the native guard is released in
        # the background when it goes; say so, as an unclosed file does
        # (with -W error, as an unraisable exception, as a file's is).
        try:
            native = self._native
            unreleased = self._pid == os.getpid() and not native.released
            what = f"{native.key!r} ({_tokens_text(native)})" if unreleased else ""
        except Exception:
            return  # at interpreter exit, or a half-made Held
        if unreleased:
            warnings.warn(
                f"leasehold: the lease on {what} was garbage collected unreleased, and is "
                "released now in the background: keep the lock (or the Held) and release it, "
                "or use `with`",
                ResourceWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        state = "lost" if self.lost else "released" if self.released else "held"
        return f"<leasehold.Held {self.key!r} {_tokens_text(self._native).replace(' ', '=', 1)} {state}>"


def _tokens_text(native: _native.Held) -> str:
    """``token 12``, or ``tokens {'a': 12, 'b': 3}`` for several keys."""
    tokens = native.tokens
    if len(tokens) == 1:
        return f"token {tokens[0][1]}"
    return f"tokens {dict(tokens)}"


def _keys(keys: Any) -> List[str]:
    """``lock_all``'s keys: an iterable of strings, not one string (whose
    characters would be taken for keys)."""
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"keys must be an iterable of str (a list of keys), not one {_type_name(keys)}")
    try:
        items = list(keys)
    except TypeError:
        raise TypeError(f"keys must be an iterable of str, not {_type_name(keys)}") from None
    return [_str(k, "key") for k in items]


class _Default:
    def __repr__(self) -> str:
        return "<the lock's wait>"


_DEFAULT: Any = _Default()


class _Target:
    """What a lock, semaphore, election and each side of a reader-writer
    lock share: the native target, the leases it granted and has not seen
    released, and the context managers."""

    _noun = "lock"

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
        poll_cap: Optional[Duration],
    ) -> None:
        self.store = store
        options = (
            _secs(ttl, "ttl"),
            _str(data, "data", optional=True),
            _str(label, "label", optional=True),
            _bool(abort_on_loss, "abort_on_loss"),
            _secs(renew_interval, "renew_interval"),
            _secs(poll_cap, "poll_cap"),
        )
        if kind == "multi":
            self._native = store._native.multi_target(key, *options)
        else:
            self._native = store._native.target(kind, _str(key, "key"), _int(limit, "limit"), *options)
        self._wait = _secs(wait, "wait")
        self._on_loss = _callable(on_loss, "on_loss")
        # Every lease this object granted and has not seen released, with
        # who took it ((thread, task)) and whether a `with` entered it: kept
        # (strong references) until released, so that a Held nobody kept is
        # not released behind its holder's back. Shared by threads without
        # a lock of its own: each use is one dict operation (or one copy of
        # its values), atomic under the GIL (abi3 builds run with the GIL).
        self._holding: Dict[int, Tuple[Held, Tuple[int, int], bool]] = {}

    @property
    def key(self) -> str:
        return self._native.key

    def _held(self, native: _native.Held, entered: bool = False) -> Held:
        held = Held(native, self)
        self._holding[id(held)] = (held, _who(), entered)
        if self._on_loss is not None:
            held.on_loss(self._on_loss)
        return held

    def _forget(self, held: Held) -> None:
        self._holding.pop(id(held), None)

    def _wait_of(self, wait: Any) -> Optional[float]:
        return self._wait if wait is _DEFAULT else _secs(wait, "wait")

    def _acquire(self, wait: Any, on_wait: Optional[Callable[[], Any]], entered: bool = False) -> Held:
        secs = self._wait_of(wait)
        return self._held(self._native.acquire(secs, _callable(on_wait, "on_wait")), entered)

    def _try_acquire(self) -> Optional[Held]:
        native = self._native.try_acquire()
        return None if native is None else self._held(native)

    def _acquire_async(self, wait: Any, on_wait: Optional[Callable[[], Any]] = None) -> "Acquiring":
        return Acquiring(self, self._wait_of(wait), _callable(on_wait, "on_wait"))

    async def _acquire_coro(
        self, wait: Optional[float], on_wait: Optional[Callable[[], Any]], entered: bool = False
    ) -> Held:
        callback = None
        if on_wait is not None:
            loop = asyncio.get_running_loop()
            user_callback = on_wait

            def callback() -> None:  # on a leasehold thread
                try:
                    loop.call_soon_threadsafe(user_callback)
                except RuntimeError:
                    pass  # the loop is closed

        native = await _run_async(self._native.acquire_start, wait, callback)
        return self._held(native, entered)

    def _to_release(self) -> Held:
        """What ``release()`` releases: of the leases this object granted
        by acquire()/try_acquire() (not those a `with` block holds: its exit
        releases them), the latest taken by this thread or task, or the only
        one."""
        me = _who()
        held = [(h, who) for h, who, entered in list(self._holding.values()) if not entered and not h.released]
        mine = [h for h, who in held if who == me]
        if mine:
            return mine[-1]
        if len(held) == 1:
            return held[0][0]
        if not held:
            raise UsageError(
                f"release(): this {self._noun} holds nothing on {self.key!r} that acquire() took "
                "(already released, never acquired, or held by a `with` block, which releases it)"
            )
        raise UsageError(
            f"release(): this {self._noun} holds {len(held)} leases on {self.key!r}, none taken by "
            "this thread or task: release the Held that acquire() returned instead"
        )

    def release(self) -> None:
        """Releases what this object's ``acquire()`` (or ``try_acquire()``)
        took: the latest taken by this thread or task, else the only one, as
        ``Held.release`` (``LeaseLost`` if it was lost first). ``UsageError``
        if it holds nothing (or several, none of this thread's)."""
        self._to_release().release()

    async def release_async(self) -> None:
        """``release``, awaited without blocking the event loop."""
        await self._to_release().release_async()

    def __enter__(self) -> Held:
        held = self._acquire(_DEFAULT, None, entered=True)
        _push(self, held)
        return held

    def __exit__(self, *exc: Any) -> None:
        held: Held = _pop(self)
        held.release()

    async def __aenter__(self) -> Held:
        return await _enter_async(self, self, self._wait, None)

    async def __aexit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        await _exit_async(self, exc)

    def __repr__(self) -> str:
        return f"<leasehold.{type(self).__name__} {self.key!r} on {self.store.url!r}>"


async def _enter_async(
    owner: object, target: _Target, wait: Any, on_wait: Optional[Callable[[], Any]]
) -> Held:
    """``async with`` entered on ``owner`` (a lock, or what ``acquire_async``
    returned): acquires ``target`` and keeps the lease for the exit."""
    held = await target._acquire_coro(wait, on_wait, entered=True)
    _push(owner, held)
    return held


async def _exit_async(owner: object, exc: Optional[BaseException]) -> None:
    """``async with`` left on ``owner``: releases what its entry acquired."""
    held: Held = _pop(owner)
    await held._leave_async(exc)


class _Acquirable(_Target):
    def acquire(self, wait: Optional[Duration] = _DEFAULT, *, on_wait: Optional[Callable[[], Any]] = None) -> Held:
        """Takes it, waiting up to ``wait`` (None: as long as it takes;
        default: the one given when it was made). Raises ``Timeout`` when
        the wait runs out. ``on_wait()`` is called once, from this thread,
        if the first attempt finds it taken. Ctrl-C (KeyboardInterrupt)
        ends the wait: nothing stays held. Held until released: the Held's
        ``release()``, or this object's."""
        return self._acquire(wait, on_wait)

    def try_acquire(self) -> Optional[Held]:
        """One attempt: the Held, or None when it is taken (or the store
        grants nothing yet). Held until released, as ``acquire``'s."""
        return self._try_acquire()

    def acquire_async(
        self, wait: Optional[Duration] = _DEFAULT, *, on_wait: Optional[Callable[[], Any]] = None
    ) -> "Acquiring":
        """``acquire`` for asyncio: ``await lock.acquire_async(5)``,
        ``asyncio.create_task(lock.acquire_async())`` or ``async with
        lock.acquire_async(5) as held:``. Cancelling the task gives the wait
        up; nothing stays held. ``on_wait()`` is called once, on the event
        loop, if the first attempt finds it taken."""
        return self._acquire_async(wait, on_wait)


class Lock(_Acquirable):
    """A named lock. ``with lock as held:`` takes it (waiting as ``wait``
    said), ``async with lock as held:`` too, without blocking the loop;
    ``lock.acquire()`` / ``lock.release()`` as ``threading.Lock``'s."""

    def holder(self) -> Optional[Holder]:
        """Who holds the lock now, or None."""
        holders = self._native.holders()
        return _holder(holders[0]) if holders else None


class Semaphore(_Acquirable):
    """At most ``limit`` holders at once; each permit is a Held with a slot."""

    _noun = "semaphore"

    def acquire_many(self, permits: int, wait: Optional[Duration] = _DEFAULT) -> Held:
        """Takes ``permits`` permits at once (a job that needs 3 of 10
        slots), all or none, waiting up to ``wait`` (None: as long as it
        takes; default: the one given when it was made); ``Timeout`` when
        the wait runs out. Never holds some while waiting for the rest, so
        takers of several permits never deadlock (but need that many free
        at the same moment). One Held over the slots: ``held.tokens`` has
        each slot key's token, and it is lost when any permit is."""
        native = self._native.acquire_many(_int(permits, "permits"), self._wait_of(wait))
        assert native is not None
        return self._held(native)

    def try_acquire_many(self, permits: int) -> Optional[Held]:
        """One attempt at ``permits`` permits at once: the Held, or None
        when fewer are free (none is kept)."""
        native = self._native.acquire_many(_int(permits, "permits"), None, True)
        return None if native is None else self._held(native)

    def holders(self) -> List[Holder]:
        """Who holds the slots now."""
        return [Holder(**d) for d in self._native.holders()]


class ReadLock(_Acquirable):
    """A reader-writer lock's reader side (``RwLock.read()``): shared with
    other readers, excluded by a writer."""

    _noun = "reader side"

    def holders(self) -> List[Holder]:
        """The readers holding now."""
        return [Holder(**d) for d in self._native.holders()]


class WriteLock(_Acquirable):
    """A reader-writer lock's writer side (``RwLock.write()``): excludes
    readers and other writers."""

    _noun = "writer side"

    def holder(self) -> Optional[Holder]:
        """The writer holding (or waiting for readers to finish), or None."""
        holders = self._native.holders()
        return _holder(holders[0]) if holders else None


class MultiLock(_Acquirable):
    """Locks on several keys held all or none (``Store.lock_all``): ``with
    all as held:``, ``async with``, ``acquire``, ``try_acquire``,
    ``acquire_async`` and ``release`` as a Lock has. The Held's ``tokens``
    has each key's fencing token, and it is lost when any one key is."""

    @property
    def keys(self) -> List[str]:
        """The keys, in the order they are taken (byte order), each once."""
        return self._native.key.split(" ")

    def holders(self) -> List[Holder]:
        """Who holds each of the keys now (the keys nobody holds left out)."""
        return [Holder(**d) for d in self._native.holders()]


class RwLock:
    """A reader-writer lock on a key, with writer preference: ``with
    rw.read() as held:`` (shared, up to ``max_readers``), ``with rw.write()
    as held:`` (exclusive); ``async with`` too, and each side has
    ``acquire``, ``try_acquire``, ``acquire_async`` and ``release`` as a
    Lock has. A writer's fencing token is greater than every earlier
    grant's on the key, readers' included; readers between two writers
    share the last writer's token."""

    def __init__(
        self,
        store: Store,
        key: str,
        max_readers: int,
        ttl: Optional[Duration],
        wait: Optional[Duration],
        data: Optional[str],
        label: Optional[str],
        on_loss: Optional[LossCallback],
        abort_on_loss: bool,
        renew_interval: Optional[Duration],
        poll_cap: Optional[Duration],
    ) -> None:
        args = (key, max_readers, ttl, wait, data, label, on_loss, abort_on_loss, renew_interval, poll_cap)
        self.store = store
        self._reader = ReadLock(store, "read", *args)
        self._writer = WriteLock(store, "write", *args)
        self.max_readers = max_readers

    @property
    def key(self) -> str:
        return self._writer.key

    def read(self) -> ReadLock:
        """The reader side: ``with rw.read() as held:``."""
        return self._reader

    def write(self) -> WriteLock:
        """The writer side: ``with rw.write() as held:``."""
        return self._writer

    def readers(self) -> List[Holder]:
        """The readers holding now."""
        return self._reader.holders()

    def writer(self) -> Optional[Holder]:
        """The writer holding (or waiting for readers to finish), or None."""
        return self._writer.holder()

    def __repr__(self) -> str:
        return f"<leasehold.RwLock {self.key!r} on {self.store.url!r}>"


class Election(_Target):
    """Leader election on a key."""

    _noun = "election"

    def campaign(self, wait: Optional[Duration] = _DEFAULT, *, on_wait: Optional[Callable[[], Any]] = None) -> Held:
        """Becomes leader, waiting as ``Lock.acquire``; the Held's ``term``
        is the leadership's term. Release it (or ``resign()``) to resign."""
        return self._acquire(wait, on_wait)

    def try_campaign(self) -> Optional[Held]:
        """One attempt: the leadership, or None when someone else leads."""
        return self._try_acquire()

    def campaign_async(
        self, wait: Optional[Duration] = _DEFAULT, *, on_wait: Optional[Callable[[], Any]] = None
    ) -> "Acquiring":
        """``campaign`` for asyncio, as ``Lock.acquire_async``."""
        return self._acquire_async(wait, on_wait)

    def observe(self, every: Duration = 1.0) -> "LeaderObserver":
        """Follows the leader: ``for change in election.observe(): ...``
        gives the leader now, then each change (a ``LeaderChange``),
        asking the store every ``every`` and at once when the leader lets
        go on stores that tell of releases (SQLite, PostgreSQL, Redis,
        etcd). A leader that lasted longer than ``every`` is always seen;
        terms begun and ended between two asks are counted
        (``missed_terms``)."""
        secs = _secs(every, "every")
        if secs is None:
            raise TypeError("every must be a duration, not None")
        return LeaderObserver(self._native.observer(secs))

    def resign(self) -> None:
        """Ends the leadership ``campaign()`` took: ``release()``."""
        self.release()

    def leader(self) -> Optional[Holder]:
        """Who leads now (with the data they published), or None."""
        holders = self._native.holders()
        return _holder(holders[0]) if holders else None

@dataclass(frozen=True)
class LeaderChange:
    """A change of leader seen by a ``LeaderObserver``."""

    leader: Optional[Holder]
    """Who leads now (None: nobody)."""
    last_term: int
    """The last term ever begun on the key (0 if nobody ever led)."""
    missed_terms: int
    """Terms that began and ended unseen since the previous change."""


class LeaderObserver:
    """Follows an election's leader (``Election.observe``): an endless
    iterator of ``LeaderChange``, or ``next(timeout)``."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def next(self, timeout: Optional[Duration] = None) -> Optional[LeaderChange]:
        """The next change (the leader now, at the first call), or None
        when ``timeout`` passes first. Ctrl-C ends the wait."""
        got = self._native.next(_secs(timeout, "timeout"))
        if got is None:
            return None
        leader, last_term, missed = got
        return LeaderChange(_holder(leader), last_term, missed)

    def __iter__(self) -> "LeaderObserver":
        return self

    def __next__(self) -> LeaderChange:
        change = self.next()
        assert change is not None
        return change


class Acquiring(Coroutine[Any, Any, Held]):
    """An acquisition for asyncio (``acquire_async``, ``campaign_async``): a
    coroutine, so ``await``, ``asyncio.create_task``, ``asyncio.run`` and
    ``asyncio.wait_for`` take it, and an async context manager that
    releases at the block's end. Nothing starts until it is awaited or
    entered."""

    def __init__(self, target: _Target, wait: Optional[float], on_wait: Optional[Callable[[], Any]]) -> None:
        self._target = target
        self._wait = wait
        self._on_wait = on_wait
        self._coro: Optional[Coroutine[Any, Any, Held]] = None

    def _started(self) -> Coroutine[Any, Any, Held]:
        if self._coro is None:
            self._coro = self._target._acquire_coro(self._wait, self._on_wait)
        return self._coro

    def __await__(self) -> Generator[Any, None, Held]:
        return self._started().__await__()

    def send(self, value: Any) -> Any:
        return self._started().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        coro = self._started()
        if val is None and tb is None:
            return coro.throw(typ)
        return coro.throw(typ, val, tb)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()

    async def __aenter__(self) -> Held:
        return await _enter_async(self, self._target, self._wait, self._on_wait)

    async def __aexit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        await _exit_async(self, exc)

    def __repr__(self) -> str:
        return f"<leasehold.Acquiring {self._target.key!r}>"


class OncePer:
    """The context manager ``Store.once_per`` returns."""

    def __init__(self, store: Store, lock: Lock, period: float) -> None:
        self._store = store
        self._lock = lock
        self._period = period

    def __enter__(self) -> Optional[Held]:
        held = self._lock._acquire(_DEFAULT, None, entered=True)
        try:
            recent = self._store._native.last_success_within(self._lock.key, self._period)
        except BaseException:
            held.release()
            raise
        if recent is not None:
            held.release()
            _push(self, None)
            return None
        _push(self, (held, time.time()))
        return held

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        entered = _pop(self)
        if entered is not None:
            held, started = entered
            held._release_with(exc_type is None, started)


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
