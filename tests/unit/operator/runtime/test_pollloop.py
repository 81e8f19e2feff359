"""operator/runtime/pollloop.py: the poll loop both Slurm readers share (jobs and nodes)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from slurm_bridge.operator.runtime.pollloop import PollLoop


class Stop(Exception):
    pass


async def run_loop(monkeypatch: pytest.MonkeyPatch, outcomes: list[str], **kw: Any) -> tuple[list[float], PollLoop]:
    """Run the loop over ``outcomes`` ("ok" or "fail"), with a frozen clock; the waits it asked for."""
    waits: list[float] = []
    monkeypatch.setattr(time, "monotonic", lambda: 100.0)

    @contextlib.asynccontextmanager
    async def fake_timeout(delay: float | None) -> AsyncIterator[None]:
        waits.append(delay or 0.0)
        raise TimeoutError  # the wait is over at once
        yield  # pragma: no cover (a generator for asynccontextmanager)

    monkeypatch.setattr(asyncio, "timeout", fake_timeout)
    todo = list(outcomes)

    async def poll() -> None:
        if not todo:
            raise Stop
        if todo.pop(0) == "fail":
            raise RuntimeError("slurmrestd down")

    loop = PollLoop("t", 1.0, poll, log=logging.getLogger("t"), ok_message=lambda: "ok", failed="polling",
                    errors=(RuntimeError,), **kw)  # fmt: skip
    with pytest.raises(Stop):
        await loop.run()
    return waits, loop


async def test_failures_back_off_doubling_to_the_cap_and_a_success_resets(monkeypatch: pytest.MonkeyPatch) -> None:
    waits, loop = await run_loop(monkeypatch, ["fail", "fail", "fail", "fail", "fail", "ok", "fail"])
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 1.0, 1.0]
    assert not loop.healthy and loop.last_error == "slurmrestd down"


async def test_health_follows_the_last_poll_and_after_runs_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []

    waits, loop = await run_loop(monkeypatch, ["fail", "ok"], after=lambda: calls.append(True))
    assert waits == [1.0, 1.0] and loop.healthy and loop.last_error == "" and len(calls) == 2


async def test_an_error_outside_the_given_kinds_stops_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job poller catches only Slurm's errors: a bug surfaces instead of being retried forever."""
    monkeypatch.setattr(time, "monotonic", lambda: 0.0)

    async def poll() -> None:
        raise KeyError("bug")

    loop = PollLoop("t", 1.0, poll, log=logging.getLogger("t"), ok_message=lambda: "ok", failed="polling",
                    errors=(RuntimeError,))  # fmt: skip
    with pytest.raises(KeyError):
        await loop.run()


async def test_a_stop_that_comes_with_a_wake_is_never_lost() -> None:
    """The process's stop cancels the loop in the very turn a wake arrives: the loop ends (3.11's
    ``asyncio.wait_for`` returned the wake's result instead and lost the cancel, so a stop hung
    until the next period; tests/e2e/test_shutdown.py met it in the Slurm client's reads)."""
    polled = asyncio.Event()

    async def poll() -> None:
        polled.set()

    loop = PollLoop("t", 30.0, poll, log=logging.getLogger("t"), ok_message=lambda: "ok", failed="polling")
    loop.start()
    await asyncio.wait_for(polled.wait(), 5)
    await asyncio.sleep(0.01)  # the loop now waits for its period or a wake
    loop.wake()
    assert loop._task is not None
    loop._task.cancel()
    done, _ = await asyncio.wait([loop._task], timeout=2)
    assert done and loop._task.cancelled(), "the cancel that came with the wake was swallowed"
