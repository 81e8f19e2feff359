"""Cancels that come together go to Slurm in one call (operator/placeholderjobs/slurmjobs/cancels.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from slurm_bridge.operator.placeholderjobs.slurmjobs.cancels import Cancels
from slurm_bridge.slurm.errors import SlurmError, SlurmUnavailable

pytestmark = pytest.mark.unit


class Slurm:
    """Records each call; the first call waits until ``go`` is set (a call on its way)."""

    def __init__(self, failing: dict[int, SlurmError] | None = None, down: bool = False) -> None:
        self.calls: list[tuple[int, ...]] = []
        self.go = asyncio.Event()
        self.failing = failing or {}
        self.down = down

    async def cancel_job(self, job_id: int) -> None:
        self.calls.append((job_id,))
        await self.go.wait()
        if self.down:
            raise SlurmUnavailable("slurmrestd is down")

    async def cancel_jobs(self, job_ids: Sequence[int]) -> dict[int, SlurmError]:
        self.calls.append(tuple(job_ids))
        if self.down:
            raise SlurmUnavailable("slurmrestd is down")
        return {j: e for j, e in self.failing.items() if j in job_ids}


async def test_a_lone_cancel_goes_at_once_as_one_job_cancel() -> None:
    slurm = Slurm()
    slurm.go.set()
    await Cancels(slurm).cancel(7)
    assert slurm.calls == [(7,)]


async def test_cancels_asked_while_one_is_on_its_way_go_together_in_one_call() -> None:
    slurm = Slurm()
    cancels = Cancels(slurm)
    first = asyncio.create_task(cancels.cancel(1))
    await asyncio.sleep(0)  # the first call is on its way
    others = [asyncio.create_task(cancels.cancel(j)) for j in (2, 3, 4, 3)]  # 3 twice: once
    await asyncio.sleep(0)
    slurm.go.set()
    await asyncio.gather(first, *others)
    assert slurm.calls == [(1,), (2, 3, 4)]
    assert (cancels.calls, cancels.jobs) == (2, 4)


async def test_each_caller_hears_its_own_jobs_outcome() -> None:
    refused = SlurmError("Slurm could not cancel job 3")
    slurm = Slurm(failing={3: refused})
    cancels = Cancels(slurm)
    first = asyncio.create_task(cancels.cancel(1))
    await asyncio.sleep(0)
    two, three = asyncio.create_task(cancels.cancel(2)), asyncio.create_task(cancels.cancel(3))
    await asyncio.sleep(0)
    slurm.go.set()
    await first
    await two
    with pytest.raises(SlurmError, match="job 3"):
        await three


async def test_a_failed_call_fails_every_job_in_it_and_the_next_cancel_is_sent_again() -> None:
    slurm = Slurm(down=True)
    slurm.go.set()
    cancels = Cancels(slurm)
    with pytest.raises(SlurmUnavailable):
        await cancels.cancel(5)
    slurm.down = False
    await cancels.cancel(5)
    assert slurm.calls == [(5,), (5,)]
