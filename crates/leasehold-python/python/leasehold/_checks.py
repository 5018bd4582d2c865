"""Argument checks: a wrong *type* is a TypeError; a value of the right
type that leasehold cannot take is a UsageError (a ValueError too)."""

from __future__ import annotations

import datetime
from typing import Any, Callable, Optional, Union

from . import _leasehold as _native
from ._leasehold import UsageError

#: A duration: seconds (int or float), a ``datetime.timedelta``, or a string
#: in the CLI's syntax ("30s", "500ms", "5m", "1h 30m").
Duration = Union[int, float, datetime.timedelta, str]

LossCallback = Callable[[str], Any]

# The longest duration taken (about 31,700 years): beyond it a number is
# a mistake, and Rust's Duration may not hold it.
_LONGEST = 1e12

_DURATION_FORMS = "seconds (int or float), a datetime.timedelta or a string like '30s'"


def _type_name(value: Any) -> str:
    return type(value).__name__


def _secs(value: Optional[Duration], what: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{what} must be {_DURATION_FORMS}, not bool")
    if isinstance(value, (int, float)):
        try:
            secs = float(value)
        except OverflowError:
            raise UsageError(f"invalid {what}: {value!r} s is too long") from None
    elif isinstance(value, datetime.timedelta):
        secs = value.total_seconds()
    elif isinstance(value, str):
        secs = _native.parse_duration(value)
    else:
        raise TypeError(f"{what} must be {_DURATION_FORMS}, not {_type_name(value)}")
    if secs != secs or secs == float("inf"):
        raise UsageError(f"invalid {what}: {value!r} (expected a finite duration of zero or more seconds)")
    if secs < 0:
        raise UsageError(f"invalid {what}: {value!r}: a duration must not be negative (expected zero or more seconds)")
    if secs > _LONGEST:
        raise UsageError(f"invalid {what}: {value!r} is too long (at most {_LONGEST:.0f} s; None: no limit, for a wait)")
    return secs


def _period(value: Duration) -> float:
    secs = _secs(value, "period")
    if secs is None:
        raise TypeError(f"period must be {_DURATION_FORMS}, not None")
    return secs


def _str(value: Any, what: str, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        expected = "a str or None" if optional else "a str"
        raise TypeError(f"{what} must be {expected}, not {_type_name(value)}")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {_type_name(value)}")
    if not -(2**62) < value < 2**62:
        raise UsageError(f"invalid {what}: {value} is far out of range")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be True or False, not {_type_name(value)}")
    return value


def _callable(value: Any, what: str) -> Any:
    if value is not None and not callable(value):
        raise TypeError(f"{what} must be callable or None, not {_type_name(value)}")
    return value


