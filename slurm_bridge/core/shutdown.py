"""How every component stops on SIGTERM (and SIGINT): at once, at any moment, exit status 0.

Kubernetes sends SIGTERM at each rollout and gives ``terminationGracePeriodSeconds`` before a
SIGKILL; a component that ignores it stalls every rollout and, for the operator, leaves its Lease
held until it expires. So the process owns its signals from its first line to its last:

* before the event loop runs (imports, argument parsing, config): the signal ends the process
  with status 0, as nothing has started yet (slurm_bridge/core/signals.py);
* in the event loop: :class:`Stop` turns the signal into one stop request. :func:`serve` runs the
  component's main coroutine as a task and cancels it on that request, so every start-up step,
  retry and loop ends where it awaits, and the coroutine's ``finally`` blocks stop its parts in
  order (the operator: its controllers, then the Lease's release);
* whatever still hangs (a thread, a task that swallowed its cancellation) is cut off by a
  watchdog thread STOP_DEADLINE_SECONDS after the request, with EXIT_STOP_TIMEOUT and a log line
  naming what still ran (docs/design/processes.md, "Stopping").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from slurm_bridge.core.signals import SIGNALS, exit_on_signal

log = logging.getLogger("slurm_bridge.core.shutdown")

# A stop request cut off after this long: well inside the chart's terminationGracePeriodSeconds.
STOP_DEADLINE_SECONDS = 10.0
EXIT_STOP_TIMEOUT = 1
# What an HTTP server's stop gives the requests in flight (aiohttp's default is 60 s).
HTTP_SHUTDOWN_SECONDS = 2.0
# A stop still running after this long logs the tasks it waits for, each with where it awaits: the
# tests ask for a stop within 5 s, and a slow one then says which step held it.
SLOW_STOP_SECONDS = 3.0


class Stop:
    """The process's one stop request, made by SIGTERM or SIGINT (or :meth:`request`)."""

    def __init__(self, deadline: float = STOP_DEADLINE_SECONDS, hard_exit: Callable[[int], Any] = os._exit) -> None:
        self.requested = asyncio.Event()
        self.reason = ""
        self.deadline = deadline
        self._hard_exit = hard_exit
        self._on_request: Callable[[], object] | None = None
        self._watchdog: threading.Timer | None = None

    def install(self) -> None:
        """Take SIGTERM and SIGINT on the running loop (again after a library took them)."""
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self.request, sig.name)

    def request(self, reason: str) -> None:
        """Ask the process to stop; a second request (a second Ctrl-C) cancels again."""
        first = not self.requested.is_set()
        if first:
            self.reason = reason
            log.info("%s received: stopping (at most %.0f s)", reason, self.deadline)
            self.requested.set()
            self._watchdog = threading.Timer(self.deadline, self._too_late)
            self._watchdog.daemon = True
            self._watchdog.start()
        if self._on_request is not None:
            self._on_request()

    def _too_late(self) -> None:
        log.error(
            "did not stop within %.0f s of %s; exiting with status %d",
            self.deadline,
            self.reason,
            EXIT_STOP_TIMEOUT,
        )
        for handler in logging.getLogger().handlers:
            # A closed or broken stream must not keep the process from exiting.
            with contextlib.suppress(Exception):
                handler.flush()
        self._hard_exit(EXIT_STOP_TIMEOUT)

    def disarm(self) -> None:
        """End the watchdog. Only for an embedding that outlives its stop (the tests): a component's
        process keeps it armed until the interpreter has exited (:func:`run`)."""
        if self._watchdog is not None:
            self._watchdog.cancel()

    async def serve(self, main: Coroutine[Any, Any, None]) -> None:
        """Run ``main`` until it returns or a stop is requested; on a request, cancel it and wait
        until its cleanup is done (the watchdog bounds that wait)."""
        task = asyncio.create_task(main, name="main")
        self._on_request = functools.partial(task.cancel)
        if self.requested.is_set():  # requested before main could start
            task.cancel()
        asked = asyncio.create_task(self.requested.wait(), name="stop-request")
        try:
            await asyncio.wait([task, asked], return_when=asyncio.FIRST_COMPLETED)
            if not task.done():  # stopping: main's cleanup runs
                await asyncio.wait([task], timeout=SLOW_STOP_SECONDS)
                if not task.done():
                    log.warning("still stopping after %.0f s; waiting for:\n%s", SLOW_STOP_SECONDS, pending_tasks())
                await asyncio.wait([task])
        except asyncio.CancelledError:  # serve() itself cancelled (asyncio.run's own Ctrl-C)
            task.cancel()
            await asyncio.wait([task])
            raise
        finally:
            asked.cancel()
            self._on_request = None
        if task.cancelled() and self.requested.is_set():
            log.info("stopped")
            return
        task.result()  # main's own end: its error, if any, is the process's


def pending_tasks() -> str:
    """Every task of the running loop but the caller's, each with the line it awaits at."""
    lines = []
    for t in sorted(asyncio.all_tasks() - {asyncio.current_task()}, key=lambda t: t.get_name()):
        frames = t.get_stack(limit=1)
        code = frames[-1].f_code if frames else None
        where = f"{code.co_filename}:{frames[-1].f_lineno} in {code.co_name}" if code else "?"
        lines.append(f"  {t.get_name()}: {where}")
    return "\n".join(lines) or "  (none)"


def run(main: Callable[[Stop], Coroutine[Any, Any, None]], deadline: float = STOP_DEADLINE_SECONDS) -> None:
    """``asyncio.run`` for a component: ``main(stop)`` runs as a task that SIGTERM cancels, and the
    process exits with status 0 once it has stopped."""
    exit_on_signal()
    stop = Stop(deadline)

    async def _main() -> None:
        stop.install()  # before anything that awaits
        await stop.serve(main(stop))

    try:
        asyncio.run(_main())
    finally:
        # asyncio restored the defaults when its loop closed; the watchdog stays armed until the
        # interpreter has exited (it joins the threads of ``asyncio.to_thread`` first).
        exit_on_signal()
