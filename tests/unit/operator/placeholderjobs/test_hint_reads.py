"""Reads of hinted jobs (issue 31): each hinted job is read as its hint arrives and applied as its
answer comes, never behind a slower read of another job; a job hinted again while its read is in
flight is read once more; a failed read is left to the next poll. Pure logic, a fake Slurm."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from slurm_bridge.operator.placeholderjobs.slurmjobs.hints import SlurmHints
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import JobOwner, SignedStart
from slurm_bridge.slurm.models import JobInfo
from tests.builders import bridge_job, phj_ref
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


async def test_a_signed_start_is_taken_at_once_and_its_read_still_wins() -> None:
    """The pods of a signed start are released before its read answers (the view shows the job
    RUNNING on the notice's nodes, and its PlaceholderJob is told); the read still comes, and what
    Slurm says then is the view's."""
    slurm, changed = HeldReads(), list[str]()
    poller = await _started(slurm, changed, 1)
    slurm.set(bridge_job(1, "u1", "RUNNING", ("n9",), partition="pods"))  # what Slurm will answer
    hints = SlurmHints(poller)
    slurm.held[1] = asyncio.Event()
    began = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert hints.hint(1, "started", SignedStart(nodes=("n1",), partition="pods", start_time=began))
    snap = poller.snapshot
    assert snap is not None
    job = snap.by_id[1]
    assert (job.states, job.nodes, job.partition, job.start_time) == (
        ("RUNNING", "CONFIGURING"),
        ("n1",),
        "pods",
        began,
    )
    assert changed == ["phj-u1"] and hints.signed_starts == 1
    await wait_for_async(lambda: slurm.calls[-1:] == ["get 1"], 5, "the read asked all the same")
    slurm.held[1].set()
    await wait_for_async(lambda: hints.in_flight == 0, 5, "the read done")
    assert snap.by_id[1].nodes == ("n9",) and snap.by_id[1].states == ("RUNNING",), "Slurm's answer wins"
    await hints.stop()


@pytest.mark.parametrize(
    "job",
    [
        bridge_job(1, "u1", "RUNNING", ("n1",)),  # already read running: no news
        bridge_job(1, "u1", partition="gpu,batch"),  # waits in other partitions than the notice says
        bridge_job(1, "u1", het_job_id=1),  # heterogeneous: decided on every component
    ],
)
async def test_a_signed_start_the_view_cannot_take_is_only_read(job: JobInfo) -> None:
    slurm, changed = FakeJobReads(), list[str]()
    slurm.add_strangers()
    poller = SlurmPoller(slurm, "bridge", 1.0, lambda ref: changed.append(ref.name))
    slurm.set(job)
    await poller.poll_once()
    before = poller.snapshot.by_id[1] if poller.snapshot is not None else None
    hints = SlurmHints(poller)
    hints.hint(1, "started", SignedStart(nodes=("n7",), partition="pods", start_time=datetime.now(UTC)))
    assert hints.signed_starts == 0 and poller.snapshot is not None and poller.snapshot.by_id[1] == before
    await hints.stop()


async def test_a_signed_start_of_a_job_not_read_yet_is_taken_when_it_says_whose() -> None:
    """A queued job is not read after its submit: the notice that says whose it is (as slurmctld
    does) stands for the read until it comes; one that does not is only read."""
    slurm, changed = HeldReads(), list[str]()
    poller = await _started(slurm, changed, 1)
    slurm.set(bridge_job(2, "u2", "RUNNING", ("n1",), user_name="alice", account="a"))
    poller.expect(2, phj_ref("u2"))
    hints = SlurmHints(poller)
    slurm.held[2] = asyncio.Event()
    began = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    start = SignedStart(nodes=("n1",), partition="pods", start_time=began)
    assert hints.hint(2, "started", start) and hints.signed_starts == 0 and changed == []
    snap = poller.snapshot
    assert snap is not None and 2 not in snap.by_id, "not taken: the notice did not say whose"
    slurm.held[2].set()
    await wait_for_async(lambda: hints.in_flight == 0, 5, "the read done")
    slurm.set(bridge_job(3, "u3", "RUNNING", ("n1",), user_name="alice", account="a"))
    poller.expect(3, phj_ref("u3"))
    slurm.held[3] = asyncio.Event()
    owner = JobOwner("alice", 2001, "team-a", 2001, "a", "normal")
    assert hints.hint(3, "started", SignedStart(nodes=("n1",), partition="pods", start_time=began, owner=owner))
    job = snap.by_id[3]
    assert (job.state, job.nodes, job.user_name, job.account, job.user_id) == ("RUNNING", ("n1",), "alice", "a", 2001)
    assert hints.signed_starts == 1 and changed[-1] == "phj-u3"
    slurm.held[3].set()
    await wait_for_async(lambda: hints.in_flight == 0, 5, "its read done")
    assert snap.by_id[3].states == ("RUNNING",), "Slurm's answer wins"
    await hints.stop()
