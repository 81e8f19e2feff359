"""Reads of hinted jobs (issue 31): each hinted job is read as its hint arrives and applied as its
answer comes, never behind a slower read of another job; a job hinted again while its read is in
flight is read once more; a failed read is left to the next poll. Pure logic, a fake Slurm."""

from __future__ import annotations

import asyncio

import pytest

from slurm_bridge.operator.placeholderjobs.slurmjobs.hints import SlurmHints
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.slurm.models import JobInfo
from tests.builders import bridge_job
from tests.harness import wait_for_async
from tests.unit.fakes import FakeJobReads

pytestmark = pytest.mark.unit


class HeldReads(FakeJobReads):
    """A GET of a job in ``held`` is answered (as of when it was asked) only once it is let go."""

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[int, asyncio.Event] = {}

    async def get_job(self, job_id: int) -> JobInfo | None:
        answer = await super().get_job(job_id)
        if (gate := self.held.get(job_id)) is not None:
            await gate.wait()
        return answer


async def _started(slurm: FakeJobReads, changed: list[str], jobs: int) -> SlurmPoller:
    slurm.add_strangers()
    poller = SlurmPoller(slurm, "bridge", 1.0, lambda ref: changed.append(ref.name))
    for i in range(1, jobs + 1):
        slurm.set(bridge_job(i, f"u{i}"))
    await poller.poll_once()
    for i in range(1, jobs + 1):
        slurm.set(bridge_job(i, f"u{i}", "RUNNING", (f"n{i}",)))
    changed.clear()
    return poller


async def _read_of_job_1_out() -> tuple[HeldReads, SlurmPoller, SlurmHints]:
    """Job 1 started; its hint's read is asked and held."""
    slurm = HeldReads()
    poller = await _started(slurm, [], 1)
    hints = SlurmHints(poller)
    slurm.held[1] = asyncio.Event()
    assert hints.hint(1, "started")
    await wait_for_async(lambda: slurm.calls[-1:] == ["get 1"], 5, "the read asked")
    return slurm, poller, hints


async def test_a_hinted_start_is_applied_while_an_earlier_hints_read_is_still_out() -> None:
    slurm, changed = HeldReads(), list[str]()
    poller = await _started(slurm, changed, 2)
    hints = SlurmHints(poller)
    slurm.held[1] = asyncio.Event()
    assert hints.hint(1, "started") and hints.hint(2, "started")
    snap = poller.snapshot
    assert snap is not None
    await wait_for_async(lambda: snap.by_id[2].is_running, 5, "job 2's read applied")
    assert not snap.by_id[1].is_running and changed == ["phj-u2"], "job 1's read is still out"
    slurm.held[1].set()
    await wait_for_async(lambda: hints.in_flight == 0, 5, "both reads done")
    assert snap.by_id[1].is_running and sorted(changed) == ["phj-u1", "phj-u2"]
    assert (hints.received, hints.read, hints.failed) == (2, 2, 0)
    await hints.stop()


async def test_no_more_reads_in_flight_than_the_slots() -> None:
    slurm, changed = HeldReads(), list[str]()
    poller = await _started(slurm, changed, 3)
    hints = SlurmHints(poller, reads_in_flight=2)
    for i in (1, 2, 3):
        slurm.held[i] = asyncio.Event()
    slurm.calls.clear()
    for i in (1, 2, 3):
        assert hints.hint(i, "started")
    await wait_for_async(lambda: len(slurm.calls) == 2, 5, "two reads asked")
    await asyncio.sleep(0.05)  # give a third read the chance to go out, which it must not
    assert slurm.calls == ["get 1", "get 2"]
    slurm.held[1].set()
    await wait_for_async(lambda: slurm.calls == ["get 1", "get 2", "get 3"], 5, "job 3's read once a slot is free")
    slurm.held[2].set()
    slurm.held[3].set()
    await wait_for_async(lambda: hints.in_flight == 0, 5, "all reads done")
    await hints.stop()


async def test_a_job_hinted_again_during_its_read_is_read_once_more() -> None:
    slurm, poller, hints = await _read_of_job_1_out()
    slurm.set(bridge_job(1, "u1", "COMPLETED", ("n1",)))  # it ended after that read was answered
    assert hints.hint(1, "ended") is True, "the view has not seen the start yet: the end is news"
    slurm.held.pop(1).set()  # the first read's answer (RUNNING) comes back; the next is not held
    await wait_for_async(lambda: hints.in_flight == 0, 5, "both reads done")
    snap = poller.snapshot
    assert snap is not None and snap.by_id[1].is_finished, "the second read saw the end"
    assert slurm.calls.count("get 1") == 2
    await hints.stop()


async def test_a_failed_hint_read_asks_for_a_poll_and_counts_as_failed() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = await _started(slurm, changed, 1)
    hints = SlurmHints(poller)
    slurm.fail_gets = True
    assert hints.hint(1, "started")
    await wait_for_async(lambda: hints.in_flight == 0, 5, "the read done")
    assert (hints.read, hints.failed) == (0, 1)
    snap = poller.snapshot
    assert snap is not None and not snap.by_id[1].is_running
    await hints.stop()


async def test_stop_cancels_reads_in_flight() -> None:
    slurm, _, hints = await _read_of_job_1_out()
    assert hints.hint(1, "ended"), "hinted again while its read is out"
    await hints.stop()
    assert hints.in_flight == 0
    slurm.held.clear()
    slurm.calls.clear()
    assert hints.hint(1, "started")
    await wait_for_async(lambda: hints.in_flight == 0, 5, "the new read done")
    assert slurm.calls == ["get 1"], "one read: nothing left over from before the stop"
