"""What `with` and `async with` entered, per thread and per asyncio task,
and who is calling."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any, List, Tuple

from ._leasehold import UsageError

# What `with` and `async with` entered, per thread and per asyncio task: one
# stack of (entered object, value, token) in a context variable, so that
# each exit releases what its own enter acquired, whichever other thread or
# task shares the object (a new thread starts with an empty context; a task
# runs in a copy of its creator's). Exits in the order of the enters reset
# the variable, which then holds nothing of them.
_ENTERED: "contextvars.ContextVar[Tuple[Tuple[object, Any, Any], ...]]" = contextvars.ContextVar(
    "leasehold_entered", default=()
)


def _push(owner: object, value: Any) -> None:
    # The entry holds the token of the set that made it (in a box: the
    # token exists only once the entry is set), for its exit's reset.
    box: List[Any] = []
    box.append(_ENTERED.set(_ENTERED.get() + ((owner, value, box),)))


def _pop(owner: object) -> Any:
    stack = _ENTERED.get()
    for i in range(len(stack) - 1, -1, -1):
        entered, value, box = stack[i]
        if entered is owner:
            break
    else:
        raise UsageError(
            f"{owner!r}: leaving a `with` block that this thread or task did not enter "
            "(enter and exit a lock's block in the same thread or asyncio task)"
        )
    token = box[0]
    below = () if token.old_value is contextvars.Token.MISSING else token.old_value
    if i == len(stack) - 1 and len(below) == i and all(a is b for a, b in zip(below, stack)):
        # The stack below is as this entry's set found it: undo that set
        # (which leaves the context as it was, without the variable if it
        # was not set).
        try:
            _ENTERED.reset(token)
            return value
        except ValueError:  # entered in another context (a copy of this one)
            pass
    _ENTERED.set(stack[:i] + stack[i + 1 :])
    return value


def _who() -> Tuple[int, int]:
    """The thread, and the asyncio task if any, calling."""
    # No exception raised and caught on the common, synchronous path.
    task = None if asyncio._get_running_loop() is None else asyncio.current_task()
    return (threading.get_ident(), 0 if task is None else id(task))
