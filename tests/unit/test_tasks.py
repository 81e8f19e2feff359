"""cancel_and_wait: a component's stop returns only once its tasks have ended."""

from __future__ import annotations

import asyncio

import pytest

from slurm_bridge.tasks import cancel_and_wait

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
