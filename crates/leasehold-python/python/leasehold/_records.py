"""What the store tells about keys: holders, runs, key records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

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


def _holder(d: Optional[Dict[str, Any]]) -> Optional[Holder]:
    return None if d is None else Holder(**d)


def _record(d: Optional[Dict[str, Any]]) -> Optional[RunRecord]:
    return None if d is None else RunRecord(**d)


def _key_info(d: Dict[str, Any]) -> KeyInfo:
    return KeyInfo(
        key=d["key"],
        token=d["token"],
        holder=_holder(d["holder"]),
        last_success=_record(d["last_success"]),
        last_run=_record(d["last_run"]),
    )
