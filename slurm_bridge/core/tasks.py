"""Stopping background tasks, the one way every component does it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel every task, then wait until each has ended, so none still runs (or writes) after a
    component's stop returns; a task that ended by its cancel is not an error, one that failed
    raises its error here. A cancel of the caller itself is never swallowed: it propagates at
    once (the tasks are cancelled already), so a process's stop cannot be lost in a component's."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    if not live:
        return
    await asyncio.wait(live)
    errors = [t.exception() for t in live if not t.cancelled()]
    for e in errors:
        if e is not None:
            raise e
