"""operator/runtime/pollloop.py: the poll loop both Slurm readers share (jobs and nodes)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any

import pytest

from slurm_bridge.operator.runtime.pollloop import PollLoop


class Stop(Exception):
    pass


async def run_loop(monkeypatch: pytest.MonkeyPatch, outcomes: list[str], **kw: Any) -> tuple[list[float], PollLoop]:
    """Run the loop over ``outcomes`` ("ok" or "fail"), with a frozen clock; the waits it asked for."""
    waits: list[float] = []
    monkeypatch.setattr(time, "monotonic", lambda: 100.0)

    async def fake_wait_for(aw: Awaitable[Any], timeout: float) -> None:  # noqa: ASYNC109 (wait_for's signature)
        waits.append(timeout)
        if asyncio.iscoroutine(aw):
            aw.close()
        raise TimeoutError

    monkeypatch.setattr(asyncio, "wait_for", fake_wait_for)
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
