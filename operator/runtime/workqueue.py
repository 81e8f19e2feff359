"""The work queue each controller drains: de-duplicating, never two reconciles of one item at once,
failures retried with backoff. Items are typed by each controller (``K``): a controller's
dispatch matches on them, so an item of the wrong kind is a type error, not a silent reconcile of
something else."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from slurm_bridge.core.tasks import cancel_and_wait

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """A de-duplicating queue: a key waits at most once, and is never processed concurrently.

    A key added while it is being processed is processed again afterwards, so no change is lost.
    Failed keys come back with exponential backoff.
    """

    def __init__(self, handler: Callable[[K], Awaitable[float | None]], workers: int) -> None:
        self._handler = handler
        self._workers = workers
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._active: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, key: K) -> None:
        if key in self._active:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        """Re-add later, keeping only the earliest pending timer for a key."""
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(), name=f"worker-{i}") for i in range(self._workers)]

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        for timer in self._timers.values():
            timer.cancel()

    def __len__(self) -> int:
        return len(self._queued)

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing being processed (timers of later re-queues aside)."""
        return not self._queued and not self._active and not self._dirty

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            started = time.monotonic()
            try:
                requeue = await self._handler(key)
                self._failures.pop(key, None)
                if requeue is not None:
                    self.add_after(key, requeue)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                n = self._failures.get(key, 0) + 1
                self._failures[key] = n
                delay = min(0.2 * 2 ** (n - 1), 30.0)
                log.warning(
                    "reconcile %s failed (attempt %d, retry in %.1fs): %s",
                    key,
                    n,
                    delay,
                    e,
                    exc_info=n == 1 and not isinstance(e, OSError),
                )
                self.add_after(key, delay)
            finally:
                self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)
                log.debug("reconciled %s in %.3fs", key, time.monotonic() - started)
