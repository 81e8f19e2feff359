"""The poller's reads outside the poll cycle and the polls it skips (issue 31): reads applied as of
when they were asked (a cancel the bridge made is never undone by an older read), hints from
slurmctld confirmed with one read of that job, no state poll while Slurm's node table is unchanged,
and a job's CONFIGURING flag going, or an ended job's COMPLETING coming and going, without a
read. Pure logic, a fake Slurm."""

from __future__ import annotations

import asyncio

import pytest

from slurm_bridge.operator.placeholderjobs.slurmjobs import poller as poller_module
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.slurm.errors import SlurmUnavailable
from slurm_bridge.slurm.models import JobInfo
from tests.builders import bridge_job, phj_ref
from tests.unit.fakes import FakeJobReads

pytestmark = pytest.mark.unit


def _poller(slurm: FakeJobReads, changed: list[str]) -> SlurmPoller:
    slurm.add_strangers()
    return SlurmPoller(slurm, "bridge", 1.0, lambda ref: changed.append(ref.name))


class CancelDuringRead(FakeJobReads):
    """A GET answered by Slurm before the bridge's cancel reached it, returned after the cancel."""

    poller: SlurmPoller | None = None

    async def get_job(self, job_id: int) -> JobInfo | None:
        answer = await super().get_job(job_id)
        if self.poller is not None:
            self.poller.assume_cancelled(job_id)
        return answer


async def test_a_poll_begun_before_the_bridges_cancel_does_not_bring_the_job_back() -> None:
    """The second DELETE (issue 30's carried-over item): a poll that began before the cancel read
    the job running; applying it would make the PlaceholderJob decide to cancel again."""
    slurm, changed = CancelDuringRead(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(bridge_job(1, "a", "PENDING"))
    await poller.poll_once()
    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",)))  # it started; the poll reads it ...
    slurm.poller = poller  # ... and the bridge cancels it while that read is on its way
    changed.clear()
    await poller.poll_once()
    assert poller.snapshot is not None and poller.snapshot.by_id[1].state == "CANCELLED"
    assert changed == [], "the older read is not a change"


async def test_a_list_begun_before_the_bridges_cancel_does_not_bring_the_job_back() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",)))
    await poller.poll_once()
    began = asyncio.get_running_loop().time()
    poller.assume_cancelled(1)
    poller._replace(began - 1.0, [bridge_job(1, "a", "RUNNING", ("n1",))], None)  # a list taken before
    assert poller.snapshot is not None and poller.snapshot.by_id[1].state == "CANCELLED"


class SlowFirstRead(FakeJobReads):
    """The first GET of a job waits until a second read of it has been answered."""

    def __init__(self) -> None:
        super().__init__()
        self.second = asyncio.Event()
        self.gets = 0

    async def get_job(self, job_id: int) -> JobInfo | None:
        self.gets += 1
        if self.gets == 1:
            answer = await super().get_job(job_id)  # Slurm's answer as of now ...
            await self.second.wait()  # ... handed back after a newer one
            return answer
        answer = await super().get_job(job_id)
        self.second.set()
        return answer


async def test_the_read_after_a_submit_never_overwrites_a_newer_read_of_the_job() -> None:
    slurm, changed = SlowFirstRead(), list[str]()
    poller = _poller(slurm, changed)
    await poller.poll_once()
    slurm.set(bridge_job(5, "e", "PENDING"))
    refresh = asyncio.create_task(poller.refresh(5, phj_ref("e")))
    await asyncio.sleep(0)
    slurm.set(bridge_job(5, "e", "RUNNING", ("n1",)))  # it starts; a hint's read sees it
    await poller.read_now({5: phj_ref("e")})
    await refresh
    assert poller.snapshot is not None and poller.snapshot.by_id[5].state == "RUNNING"


async def test_a_hinted_start_is_read_at_once_and_the_next_poll_reads_nothing_more() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(bridge_job(1, "a", "PENDING"))
    await poller.poll_once()
    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",)).model_copy(update={"states": ("RUNNING", "CONFIGURING")}))
    ref = poller.news(1, "started")
    assert ref == phj_ref("a")
    slurm.calls.clear()
    changed.clear()
    await poller.read_now({1: ref})
    assert slurm.calls == ["get 1"] and changed == ["phj-a"]
    assert poller.snapshot is not None and poller.snapshot.by_id[1].nodes == ("n1",)
    # The prolog ended: only the CONFIGURING flag went, which needs no read.
    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",)))
    slurm.calls.clear()
    changed.clear()
    await poller.poll_once()
    assert slurm.calls == ["states"] and changed == []
    assert poller.snapshot.by_id[1].states == ("RUNNING",)


async def test_the_bridges_cancelled_job_completing_and_completed_costs_no_read() -> None:
    """EpilogSlurmctld runs after the bridge's cancel: a poll meets the job CANCELLED,COMPLETING,
    the next one CANCELLED. The end is already in the view: neither poll reads the job."""
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",)))
    await poller.poll_once()
    poller.assume_cancelled(1)
    for states in (("CANCELLED", "COMPLETING"), ("CANCELLED",)):
        slurm.set(bridge_job(1, "a", "CANCELLED", ("n1",)).model_copy(update={"states": states}))
        slurm.calls.clear()
        changed.clear()
        await poller.poll_once()
        assert slurm.calls == ["states"] and changed == [], states
        assert poller.snapshot is not None and poller.snapshot.by_id[1].states == states


async def test_a_job_ended_by_someone_else_is_read_once() -> None:
    """RUNNING -> CANCELLED,COMPLETING is news (read); its COMPLETING going is not."""
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",)))
    await poller.poll_once()
    slurm.set(bridge_job(1, "a", "CANCELLED", ("n1",)).model_copy(update={"states": ("CANCELLED", "COMPLETING")}))
    slurm.calls.clear()
    changed.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", "get 1"] and changed == ["phj-a"]
    slurm.set(bridge_job(1, "a", "CANCELLED", ("n1",)))
    slurm.calls.clear()
    await poller.poll_once()
    assert slurm.calls == ["states"]


@pytest.mark.parametrize(
    ("old", "new", "settled"),
    [
        (("RUNNING", "CONFIGURING"), ("RUNNING",), True),
        (("RUNNING",), ("RUNNING", "CONFIGURING"), False),  # a flag that comes on a live job is read
        (("RUNNING",), ("RUNNING", "COMPLETING"), False),
        (("CANCELLED",), ("CANCELLED", "COMPLETING"), True),
        (("CANCELLED", "COMPLETING"), ("CANCELLED",), True),
        (("COMPLETED", "COMPLETING"), ("COMPLETED",), True),
        (("CANCELLED",), ("CANCELLED",), False),  # nothing changed: nothing to settle
        (("CANCELLED",), ("CANCELLED", "REQUEUED"), False),
        (("RUNNING",), ("CANCELLED", "COMPLETING"), False),
        (("CANCELLED",), ("FAILED", "COMPLETING"), False),
        ((), ("RUNNING",), False),
    ],
)
def test_settled_only(old: tuple[str, ...], new: tuple[str, ...], settled: bool) -> None:
    assert poller_module._settled_only(old, new) is settled


async def test_hints_that_are_no_news_cost_nothing() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    assert poller.news(1, "started") is None, "before the first list nothing is known"
    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",)))  # allocated at once: its read had the nodes
    slurm.set(bridge_job(2, "b", "COMPLETED", ("n1",)))
    slurm.set(bridge_job(3, "c", "PENDING"))
    await poller.poll_once()
    assert poller.news(1, "started") is None
    assert poller.news(1001, "started") is None, "another user's job"
    assert poller.news(4242, "ended") is None, "a job Slurm has that is not the bridge's"
    assert poller.news(2, "ended") is None, "already ended in the view"
    assert poller.news(1, "ended") == phj_ref("a")
    assert poller.news(3, "started") == phj_ref("c")


async def test_a_hinted_job_that_fails_to_read_is_left_to_the_next_poll() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(bridge_job(1, "a", "PENDING"))
    await poller.poll_once()
    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",)))
    slurm.fail_gets = True
    with pytest.raises(SlurmUnavailable):
        await poller.read_now({1: phj_ref("a")})
    slurm.fail_gets = False
    changed.clear()
    await poller.poll_once()
    assert changed == ["phj-a"] and poller.snapshot is not None and poller.snapshot.by_id[1].is_running


async def test_no_state_poll_while_slurms_node_table_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    healthy = [True]
    poller.watch_nodes(lambda: healthy[0])
    slurm.set(bridge_job(1, "a", "PENDING"))
    await poller.poll_once()  # the first full list
    await poller.poll_once()  # the node table was never read: a state poll
    slurm.calls.clear()
    for _ in range(3):
        await poller.poll_once()
    assert slurm.calls == [] and poller.states_skipped == 3, "nothing moved: nothing read"

    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",)))
    poller.nodes_changed()  # the allocation changed the node table
    changed.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", "get 1"] and changed == ["phj-a"]

    slurm.calls.clear()
    healthy[0] = False  # the node table cannot be read: every poll reads the states again
    await poller.poll_once()
    assert slurm.calls == ["states"]
    healthy[0] = True
    slurm.calls.clear()
    monkeypatch.setattr(poller_module, "STATES_MAX_SECONDS", 0.0)  # the safety net is due
    await poller.poll_once()
    assert slurm.calls == ["states"]


async def test_pending_reasons_are_read_again_only_when_something_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(poller_module, "PENDING_REFRESH_SECONDS", 0.0)
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    poller.watch_nodes(lambda: True)
    slurm.set(bridge_job(1, "a", "PENDING", reason="Priority"))
    await poller.poll_once()
    await poller.poll_once()
    slurm.calls.clear()
    monkeypatch.setattr(poller_module, "STATES_MAX_SECONDS", 0.0)
    await poller.poll_once()
    assert slurm.calls == ["states"], "the safety net's poll reads no single job"
    poller.nodes_changed()
    slurm.calls.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", "get 1"], "a node moved: the waiting job's reason may have too"


async def test_a_submit_the_view_lacks_keeps_state_polls_going() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    poller.watch_nodes(lambda: True)
    await poller.poll_once()
    await poller.poll_once()
    slurm.fail_gets = True
    assert await poller.refresh(7, phj_ref("g")) is None  # the read after the submit failed
    slurm.fail_gets = False
    slurm.set(bridge_job(7, "g", "PENDING"))
    slurm.calls.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", "get 7"]
