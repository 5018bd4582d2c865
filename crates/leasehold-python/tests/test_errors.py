"""Errors a careless caller meets: wrong types are TypeError, bad values
UsageError (a ValueError), a timeout a TimeoutError; stores no other
process sees are refused; a negative duration says so; break_lease on a
semaphore's key and init(new=True) on a store are refused, as the CLI
refuses them."""

from __future__ import annotations

import datetime

import pytest

import leasehold
from conftest import Env


def test_timeout_is_a_timeout_error_and_usage_error_a_value_error(sqlite_env: Env) -> None:
    assert issubclass(leasehold.Timeout, TimeoutError)
    assert issubclass(leasehold.Timeout, leasehold.Error)
    assert issubclass(leasehold.UsageError, ValueError)
    assert issubclass(leasehold.UsageError, leasehold.Error)
    store = sqlite_env.open()
    with store.lock("t", ttl=sqlite_env.ttl):
        with pytest.raises(TimeoutError) as caught:
            store.lock("t", ttl=sqlite_env.ttl).acquire(wait=0.1)
    assert isinstance(caught.value, leasehold.Timeout)
    assert "t" in str(caught.value)
    with pytest.raises(ValueError):
        store.lock("t", ttl=-1)


def test_wrong_types_are_type_errors_everywhere(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    lock = store.lock("k", ttl=sqlite_env.ttl)
    wrong = [
        lambda: store.lock(1),  # type: ignore[arg-type]
        lambda: store.lock("k", ttl=object()),  # type: ignore[arg-type]
        lambda: store.lock("k", ttl=True),  # type: ignore[arg-type]
        lambda: store.lock("k", ttl=[2]),  # type: ignore[arg-type]
        lambda: store.lock("k", wait=object()),  # type: ignore[arg-type]
        lambda: store.lock("k", renew_interval=b"1s"),  # type: ignore[arg-type]
        lambda: store.lock("k", data=7),  # type: ignore[arg-type]
        lambda: store.lock("k", label=b"x"),  # type: ignore[arg-type]
        lambda: store.lock("k", on_loss=3),  # type: ignore[arg-type]
        lambda: store.lock("k", abort_on_loss=1),  # type: ignore[arg-type]
        lambda: store.semaphore("k", "3"),  # type: ignore[arg-type]
        lambda: store.semaphore("k", 2.0),  # type: ignore[arg-type]
        lambda: store.semaphore("k", True),  # type: ignore[arg-type]
        lambda: store.rw_lock("k", max_readers=None),  # type: ignore[arg-type]
        lambda: store.status(None),  # type: ignore[arg-type]
        lambda: store.list(3),  # type: ignore[arg-type]
        lambda: store.break_lease(3),  # type: ignore[arg-type]
        lambda: store.once_per("k", object()),  # type: ignore[arg-type]
        lambda: store.last_success_within("k", None),  # type: ignore[arg-type]
        lambda: lock.acquire(wait="soon"),
        lambda: lock.acquire(wait=[1]),  # type: ignore[arg-type]
        lambda: lock.acquire(on_wait=1),  # type: ignore[arg-type]
        lambda: leasehold.open(3),  # type: ignore[arg-type]
        lambda: leasehold.init(sqlite_env.url, new="yes"),  # type: ignore[arg-type]
    ]
    for i, call in enumerate(wrong):
        try:
            call()
        except TypeError:
            continue
        except leasehold.UsageError as e:
            if i == 19:  # "soon" is a str: a bad value, not a wrong type
                continue
            raise AssertionError(f"case {i}: UsageError for a wrong type: {e}") from e
        except BaseException as e:
            raise AssertionError(f"case {i}: {type(e).__name__}: {e}") from e
        else:
            raise AssertionError(f"case {i}: accepted")
    # The right types still work.
    with store.lock("k", ttl=datetime.timedelta(seconds=2), wait=1.5, data="d", label="l", on_loss=print):
        pass


def test_a_negative_duration_says_so(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    for bad in ["-5s", " -1m", -5, -0.5, datetime.timedelta(seconds=-5)]:
        with pytest.raises(leasehold.UsageError, match="must not be negative") as caught:
            store.lock("k", ttl=bad)
        assert "expected number at 0" not in str(caught.value)
    with pytest.raises(leasehold.UsageError, match="e.g. 30s"):
        store.lock("k", ttl="5 parsecs")


def test_stores_no_other_process_sees_are_refused(sqlite_env: Env) -> None:
    for url in ["memory:", "sqlite::memory:", "sqlite:file::memory:?cache=shared"]:
        with pytest.raises(leasehold.UsageError, match="sqlite:PATH") as caught:
            leasehold.open(url)
        assert "private to this one process" in str(caught.value)
        with pytest.raises(leasehold.UsageError):
            leasehold.init(url)


def test_break_lease_on_a_semaphore_key_is_refused_naming_the_slots(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    sem = store.semaphore("uploads", limit=2, ttl=sqlite_env.ttl)
    assert store.break_lease("uploads") is None  # nothing held: nothing to say
    with pytest.raises(leasehold.LeaseLost):  # the block's exit: the permit was broken
        with sem as permit:
            with pytest.raises(leasehold.UsageError) as caught:
                store.break_lease("uploads")
            told = str(caught.value)
            assert "semaphore" in told and "nothing was broken" in told
            assert f"uploads/:slot:{permit.slot} (held by" in told, told
            permit.check()
            # The slot key itself is broken as a lock's key is.
            assert store.break_lease(permit.key) is not None


def test_init_new_on_an_existing_store_is_refused(sqlite_env: Env) -> None:
    leasehold.init(sqlite_env.url, new=True)
    with pytest.raises(leasehold.UsageError, match="already exists") as caught:
        leasehold.init(sqlite_env.url, new=True)
    assert "nothing changed" in str(caught.value)
    # Without new=True, an existing store is opened, nothing changed.
    store = leasehold.init(sqlite_env.url)
    with store.lock("k", ttl=sqlite_env.ttl):
        pass


def test_a_closed_store_refuses_use_with_usage_error(sqlite_env: Env) -> None:
    with sqlite_env.open() as store:
        lock = store.lock("c", ttl=sqlite_env.ttl)
        held = lock.acquire()
        held.release()
    assert store.closed
    for use in (lambda: lock.acquire(wait=1), lock.try_acquire, lambda: store.status("c"), lambda: store.lock("d")):
        with pytest.raises(leasehold.UsageError, match="closed"):
            use()
    store.close()  # twice: nothing
    again = sqlite_env.open()
    with again.lock("c", ttl=sqlite_env.ttl):
        pass


def test_a_poll_cap_reaches_the_lock_options_and_is_checked(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    # Shorter than the polls' 100 ms: refused, as the Rust options refuse it
    # (which shows the value got there).
    with pytest.raises(leasehold.UsageError) as caught:
        store.lock("k", ttl=sqlite_env.ttl, poll_cap=0.05)
    assert "poll cap" in str(caught.value) and "100ms" in str(caught.value)
    with pytest.raises(TypeError):
        store.semaphore("k", 2, poll_cap=b"2s")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.election("k", poll_cap=-1)
    with store.rw_lock("k", ttl=sqlite_env.ttl, poll_cap=datetime.timedelta(seconds=5)).write():
        pass
    with store.semaphore("k2", 2, ttl=sqlite_env.ttl, poll_cap="1s"):
        pass
    with store.lock("k3", ttl=sqlite_env.ttl, poll_cap=0.1):
        pass
