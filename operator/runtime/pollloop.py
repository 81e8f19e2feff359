"""The one poll loop under both Slurm readers (jobs: operator/placeholderjobs/slurmjobs/poller.py,
nodes: operator/nodes/controller.py).

One poll per period, sooner when woken (never closer than ``min_gap`` after the last start);
a failed poll is retried after a backoff that doubles from the period up to MAX_BACKOFF_SECONDS
and drops back to the period after a success. ``healthy``/``last_error`` feed readiness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from slurm_bridge.core.tasks import cancel_and_wait

MAX_BACKOFF_SECONDS = 10.0


class PollLoop:
    def __init__(
        self,
        name: str,
        period: float,
        poll: Callable[[], Awaitable[object]],
        *,
        log: logging.Logger,
        ok_message: Callable[[], str],
        failed: str,
        errors: tuple[type[Exception], ...] = (Exception,),
        min_gap: Callable[[], float] = lambda: 0.0,
        after: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.period = period
        self._poll = poll
        self._log = log
        self._ok_message = ok_message
        self._failed = failed
        self._errors = errors
        self._min_gap = min_gap
        self._after = after
        self.healthy = False
        self.last_error = ""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name=self.name)

    async def stop(self) -> None:
        await cancel_and_wait([self._task])

    async def run(self) -> None:
        backoff = self.period
        while True:
            started = time.monotonic()
            try:
                await self._poll()
                if not self.healthy:
                    self._log.info("%s", self._ok_message())
                self.healthy, self.last_error, backoff = True, "", self.period
                delay = self.period
            except self._errors as e:  # keep polling whatever went wrong; the error is reported
                self.healthy, self.last_error = False, str(e)
                self._log.warning("%s failed, retrying in %.1fs: %s", self._failed, backoff, e)
                delay, backoff = backoff, min(backoff * 2, MAX_BACKOFF_SECONDS)
            if self._after is not None:
                self._after()
            earliest = started + self._min_gap()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(started + delay - time.monotonic(), 0)):
                    await self._wake.wait()
            await asyncio.sleep(max(earliest - time.monotonic(), 0))
