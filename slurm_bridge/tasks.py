"""Stopping background tasks, the one way every component does it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel every task, then wait until each has ended, so none still runs (or writes) after a
    component's stop returns; a task that ended by its cancel is not an error."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    for t in live:
        with contextlib.suppress(asyncio.CancelledError):
            await t
