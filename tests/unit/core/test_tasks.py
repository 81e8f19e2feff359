"""cancel_and_wait: a component's stop returns only once its tasks have ended."""

from __future__ import annotations

import asyncio

import pytest

from slurm_bridge.core.tasks import cancel_and_wait

pytestmark = pytest.mark.unit


async def test_every_task_is_cancelled_and_has_ended_when_it_returns() -> None:
    cleaned: list[str] = []

    async def worker(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # cleanup that itself awaits
            cleaned.append(name)

    tasks = [asyncio.create_task(worker(n)) for n in ("a", "b")]
    await asyncio.sleep(0)
    await cancel_and_wait([*tasks, None])  # None: a task never started
    assert sorted(cleaned) == ["a", "b"]
    assert all(t.cancelled() for t in tasks)


async def test_a_finished_task_and_no_tasks_are_fine() -> None:
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    await cancel_and_wait([done])
    await cancel_and_wait([])
    assert done.done() and not done.cancelled()


async def test_a_cancel_of_the_caller_is_not_swallowed() -> None:
    # A process's stop cancels a component's stop while it waits for a slow task: the cancel
    # must reach the caller, or the process goes on as if nothing had asked it to stop.
    release = asyncio.Event()

    async def slow_to_end() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()

    slow = asyncio.create_task(slow_to_end())
    await asyncio.sleep(0)
    after: list[str] = []

    async def component_stop() -> None:
        await cancel_and_wait([slow])
        after.append("went on after its cancel")

    stopping = asyncio.create_task(component_stop())
    await asyncio.sleep(0.05)
    stopping.cancel()
    await asyncio.wait([stopping], timeout=1)
    release.set()
    await asyncio.wait([slow], timeout=1)
    assert stopping.cancelled() and after == []


async def test_a_failed_task_raises_its_error() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    failed = asyncio.create_task(fails())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="boom"):
        await cancel_and_wait([failed])
