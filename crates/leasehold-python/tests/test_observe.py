"""Following an election's leader: ``Election.observe``."""

from __future__ import annotations

import pytest

import leasehold
from conftest import Env


def test_observe_sees_each_leader_and_times_out_quietly(store_env: Env) -> None:
    store = store_env.open()
    election = store.election(store_env.key("observe"), ttl=store_env.ttl)
    observer = election.observe(every=0.2)
    now = observer.next(timeout=30)
    assert now is not None and now.leader is None and now.missed_terms == 0
    held = election.campaign(wait=30)
    change = observer.next(timeout=30)
    assert change is not None and change.leader is not None
    assert change.leader.token == held.term == change.last_term
    held.release()
    gone = observer.next(timeout=30)
    assert gone is not None and gone.leader is None
    # Nothing changes: the wait runs out and says None.
    assert observer.next(timeout=0.3) is None


def test_observe_is_an_iterator_and_checks_its_arguments(sqlite_env: Env) -> None:
    store = sqlite_env.open()
    election = store.election("e", ttl=2)
    first = next(iter(election.observe(every=0.1)))
    assert isinstance(first, leasehold.LeaderChange) and first.leader is None
    with pytest.raises(leasehold.UsageError):
        election.observe(every=-1)
    with pytest.raises(TypeError):
        election.observe(every=None)  # type: ignore[arg-type]
