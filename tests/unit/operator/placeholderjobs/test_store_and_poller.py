"""Watch caches, the work queue and the Slurm poller (with a fake Slurm: pure logic only)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, ItemsView
from datetime import UTC, datetime
from typing import Any

import pytest

from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.slurmjobs import poller as poller_module
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import encode_admin_comment
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.runtime import store as store_module
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.slurm.errors import SlurmUnavailable
from slurm_bridge.slurm.models import JobInfo
from tests.builders import slurm_job
from tests.harness import wait_for_async
from tests.unit.fakes import FakeJobReads


def _obj(name: str, rv: int, uid: str = "u") -> dict[str, object]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv), "uid": uid}}


def test_store_never_goes_back_in_time() -> None:
    s = ObjectStore()
    assert s.upsert(_obj("a", 5))
    assert not s.upsert(_obj("a", 4))
    assert s.upsert(_obj("a", 6))
    s.delete(_obj("a", 7))
    assert s.get(("ns", "a")) is None
    assert not s.upsert(_obj("a", 6)), "a late event for a deleted object must not resurrect it"
    assert s.upsert(_obj("a", 8, uid="new"))


def test_delete_of_an_old_incarnation_keeps_the_new_one() -> None:
    s = ObjectStore()
    s.upsert(_obj("a", 10, uid="new"))
    s.delete(_obj("a", 3, uid="old"))
    assert s.get(("ns", "a")) is not None


async def test_queue_deduplicates_and_never_runs_a_key_twice_at_once() -> None:
    running: set[Hashable] = set()
    calls: list[Hashable] = []
    overlap = False
    gate = asyncio.Event()

    async def handler(key: Hashable) -> float | None:
        nonlocal overlap
        overlap = overlap or key in running
        running.add(key)
        calls.append(key)
        await gate.wait()
        running.discard(key)
        return None

    q = WorkQueue(handler, workers=4)
    q.start()
    for _ in range(5):
        q.add("k")
    await asyncio.sleep(0.05)
    q.add("k")  # added while processing: must run once more afterwards
    gate.set()
    await wait_for_async(lambda: len(calls) >= 2, 5, "two calls")
    await asyncio.sleep(0.05)
    await q.stop()
    assert calls == ["k", "k"]
    assert not overlap


async def test_queue_retries_failures_with_backoff() -> None:
    attempts = 0

    async def handler(key: Hashable) -> float | None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError("transient")
        return None

    q = WorkQueue(handler, workers=1)
    q.start()
    q.add("k")
    await wait_for_async(lambda: attempts >= 3, 5, "three attempts")
    await q.stop()
    assert attempts == 3


def _job(job_id: int, uid: str, state: str = "PENDING", nodes: tuple[str, ...] = (), reason: str = "") -> JobInfo:
    return slurm_job(job_id, state, nodes=nodes, reason=reason, ref=PhjRef("bridge", "ns", f"phj-{uid}", uid))


def _poller(slurm: FakeJobReads, changed: list[str]) -> SlurmPoller:
    # Other users' jobs, so that reading one job is cheaper than listing them all.
    for i in range(1, 13):
        slurm.set(JobInfo(job_id=1000 + i, states=("RUNNING",), admin_comment="not ours"))
    return SlurmPoller(slurm, "bridge", 1.0, lambda ref: changed.append(ref.name))


async def test_poller_lists_once_then_reads_only_changed_jobs() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(_job(1, "a", "RUNNING", ("n1",)))
    slurm.set(JobInfo(job_id=2, states=("RUNNING",), admin_comment="not ours"))
    snap = await poller.poll_once()
    assert poller.synced.is_set() and slurm.calls == ["list"]
    assert changed == ["phj-a"], "a job found in the first list is adopted"
    assert snap.job_for_uid("a") is not None and set(snap.refs) == {1}

    changed.clear()
    slurm.calls.clear()
    await poller.poll_once()
    assert slurm.calls == ["states"] and changed == [], "nothing changed: one state read, no job read"

    slurm.set(_job(1, "a", "CANCELLED", ("n1",)))
    slurm.set(JobInfo(job_id=2, states=("COMPLETED",), admin_comment="not ours"))
    slurm.calls.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", "get 1"], "only the bridge's changed job is read"
    assert changed == ["phj-a"] and poller.snapshot is not None and poller.snapshot.by_id[1].state == "CANCELLED"
    assert poller.purge_reads == 0

    changed.clear()
    slurm.calls.clear()
    del slurm.jobs[1]
    await poller.poll_once()
    assert changed == ["phj-a"], "a purged job is reported too"
    assert poller.snapshot is not None and 1 not in poller.snapshot.by_id
    assert poller.purge_reads == 1, "its one read is counted apart (/stats slurm_purge_reads)"


async def test_poller_refresh_and_expected_jobs() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    await poller.poll_once()
    ref = PhjRef("bridge", "ns", "phj-b", "b")
    slurm.set(_job(3, "b", "RUNNING", ("n2",)))
    job = await poller.refresh(3, ref)
    assert job is not None and job.nodes == ("n2",)
    assert poller.snapshot is not None and poller.snapshot.job_for_uid("b") == job
    assert changed == [], "the caller of refresh handles the job itself"

    # The read after a submit fails: the next poll reads the job.
    slurm.set(_job(4, "c", "RUNNING", ("n3",)))
    slurm.fail_gets = True
    assert await poller.refresh(4, PhjRef("bridge", "ns", "phj-c", "c")) is None
    slurm.fail_gets = False
    slurm.calls.clear()
    await poller.poll_once()
    assert "get 4" in slurm.calls and changed == ["phj-c"]
    assert poller.snapshot is not None and poller.snapshot.job_for_uid("c") is not None


async def test_a_cancel_the_bridge_made_is_not_read_back() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(_job(1, "a", "RUNNING", ("n1",)))
    await poller.poll_once()
    slurm.set(_job(1, "a", "CANCELLED", ("n1",)))
    poller.assume_cancelled(1)
    slurm.calls.clear()
    changed.clear()
    await poller.poll_once()
    assert slurm.calls == ["states"] and changed == []
    assert poller.snapshot is not None and poller.snapshot.by_id[1].state == "CANCELLED"


async def test_poller_full_list_when_asked_or_when_cheaper(monkeypatch: pytest.MonkeyPatch) -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    for i in range(1, 4):
        slurm.set(_job(i, f"u{i}"))
    await poller.poll_once()
    slurm.calls.clear()
    poller.poll_soon(full=True)
    await poller.poll_once()
    assert slurm.calls == ["list"], "poll_soon(full=True) makes the next poll a full list"

    # Every job changed: one list costs less than three reads.
    for i in range(1, 4):
        slurm.set(_job(i, f"u{i}", "RUNNING", ("n1",)))
    for i in range(1, 13):
        del slurm.jobs[1000 + i]
    slurm.calls.clear()
    changed.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", "list"] and sorted(changed) == ["phj-u1", "phj-u2", "phj-u3"]


async def test_pending_jobs_are_read_again_for_their_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(_job(1, "a", "PENDING", reason="Priority"))
    await poller.poll_once()
    slurm.set(_job(1, "a", "PENDING", reason="Resources"))
    slurm.calls.clear()
    changed.clear()
    await poller.poll_once()
    assert slurm.calls == ["states"], "a fresh pending job is not read again"
    monkeypatch.setattr(poller_module, "PENDING_REFRESH_SECONDS", 0.0)
    slurm.calls.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", "get 1"] and changed == ["phj-a"]
    assert poller.snapshot is not None and poller.snapshot.by_id[1].reason == "Resources"


async def test_a_pending_jobs_new_expected_start_is_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm's estimate of a pending job's start (start_time) is told to its waiting pods, so a new
    one reaches the view and the PlaceholderJob, as a new reason does."""
    monkeypatch.setattr(poller_module, "PENDING_REFRESH_SECONDS", 0.0)
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    job = _job(1, "a", "PENDING", reason="Resources")
    slurm.set(job)
    await poller.poll_once()
    start = datetime(2030, 1, 1, tzinfo=UTC)
    slurm.set(job.model_copy(update={"start_time": start}))
    changed.clear()
    await poller.poll_once()
    assert changed == ["phj-a"]
    assert poller.snapshot is not None and poller.snapshot.by_id[1].start_time == start
    changed.clear()
    await poller.poll_once()
    assert changed == [], "the same estimate again is no change"


def test_refused_submit_is_not_adopted() -> None:
    from slurm_bridge.operator.views.slurmjobs import JobSnapshot

    failed = _job(5, "x", "FAILED")
    ref = PhjRef("bridge", "ns", "phj-x", "x")
    snap = JobSnapshot({5: failed}, {5: ref}, 0.0)
    assert snap.job_for_uid("x") is None
    ran = _job(6, "x", "CANCELLED", ("n1",))
    snap = JobSnapshot({5: failed, 6: ran}, {5: ref, 6: ref}, 0.0)
    assert snap.job_for_uid("x") == ran


@pytest.mark.parametrize("live_state", ["PENDING", "RUNNING"])
def test_live_job_wins_over_ended_ones(live_state: str) -> None:
    from slurm_bridge.operator.views.slurmjobs import JobSnapshot

    ref = PhjRef("bridge", "ns", "p", "u")
    old, live = _job(1, "u", "CANCELLED", ("n1",)), _job(2, "u", live_state)
    assert JobSnapshot({1: old, 2: live}, {1: ref, 2: ref}, 0.0).job_for_uid("u") == live


async def test_a_job_read_while_a_slow_full_list_runs_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full list is Slurm's table when the list began; a job submitted and read (refresh) while
    it ran is missing from it but not purged. Forgetting it once ended 22 running pods of a
    1,000-pod burst as vanished (issue 15's run 2)."""
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(_job(1, "a", "PENDING"))
    await poller.poll_once()
    listed = list(slurm.jobs.values())  # the table as the slow list sees it
    gate = asyncio.Event()

    async def slow_list(
        since: int | None, *, admin_comment_prefix: str | None = None
    ) -> tuple[list[JobInfo] | None, None]:
        await gate.wait()
        return [j for j in listed if j.admin_comment.startswith(admin_comment_prefix or "")], None

    monkeypatch.setattr(slurm, "list_jobs_since", slow_list)
    poller.poll_soon(full=True)
    polling = asyncio.create_task(poller.poll_once())
    await asyncio.sleep(0)  # the poll is inside the list now
    slurm.set(_job(2, "b", "RUNNING", ("n2",)))
    slurm.set(_job(1, "a", "RUNNING", ("n1",)))
    assert await poller.refresh(2, PhjRef("bridge", "ns", "phj-b", "b")) is not None
    assert await poller.refresh(1, PhjRef("bridge", "ns", "phj-a", "a")) is not None
    gate.set()
    snap = await polling
    assert 2 in snap.by_id, "a job read during the list is not taken for purged"
    assert snap.by_id[1].state == "RUNNING", "the list's older PENDING does not overwrite a newer read"


async def test_a_deep_queue_costs_a_bounded_number_of_reason_reads_per_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reasons of many pending jobs are read a few per poll, the longest unread first, not all at
    once: 300 pending jobs cost 20 GETs a second before (bench/log, run 3)."""
    slurm, changed = FakeJobReads(), list[str]()
    poller = SlurmPoller(slurm, "bridge", 1.0, lambda ref: changed.append(ref.name))
    for i in range(1, 201):  # many other users' jobs: GETs stay cheaper than a full list
        slurm.set(JobInfo(job_id=5000 + i, states=("RUNNING",), admin_comment="not ours"))
    for i in range(1, 31):
        slurm.set(_job(i, f"u{i}", "PENDING", reason="Priority"))
    await poller.poll_once()
    monkeypatch.setattr(poller_module, "PENDING_REFRESH_SECONDS", 0.0)
    read: list[int] = []
    for _ in range(3):
        slurm.calls.clear()
        await poller.poll_once()
        gets = [int(c.split()[1]) for c in slurm.calls if c.startswith("get ")]
        assert len(gets) == poller_module.PENDING_REFRESH_PER_POLL, slurm.calls
        read += gets
    assert len(set(read)) == len(read), "the longest unread go first: no job twice before the others"
    slurm.set(_job(30, "u30", "RUNNING", ("n1",)))
    slurm.calls.clear()
    await poller.poll_once()
    assert "get 30" in slurm.calls, "a job whose state changed is always read"


class _CountingJobs(dict[int, JobInfo]):
    """The view's jobs, counting the walks over them (one per poll that compares job by job)."""

    walks = 0

    def items(self) -> ItemsView[int, JobInfo]:  # type: ignore[override]
        type(self).walks += 1
        return super().items()


async def test_a_state_answer_like_the_last_costs_no_per_job_work() -> None:
    """Idle, with thousands of jobs, comparing each job's state every period was most of the
    poller's CPU (bench/log, run 8): an answer equal to the last one, with the view as
    it was, is not compared again. A change is still seen in the next poll."""
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    for i in range(1, 4):
        slurm.set(_job(i, f"u{i}", "RUNNING", ("n1",)))
    await poller.poll_once()
    await poller.poll_once()  # the first state answer is compared
    assert poller.snapshot is not None
    poller.snapshot.by_id = jobs = _CountingJobs(poller.snapshot.by_id)
    slurm.calls.clear()
    for _ in range(3):
        await poller.poll_once()
    assert slurm.calls == ["states"] * 3 and jobs.walks == 0
    slurm.set(_job(2, "u2", "COMPLETED", ("n1",)))
    slurm.calls.clear()
    changed.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", "get 2"] and changed == ["phj-u2"] and jobs.walks == 1


async def test_the_same_state_answer_is_compared_again_after_the_view_changed() -> None:
    """The bridge's own cancel is written into the view while Slurm still says RUNNING: the same
    answer as before now differs from the view, so the job is read."""
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(_job(1, "a", "RUNNING", ("n1",)))
    await poller.poll_once()
    await poller.poll_once()
    poller.assume_cancelled(1)
    slurm.calls.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", "get 1"]
    assert poller.snapshot is not None and poller.snapshot.by_id[1].state == "RUNNING"


async def test_a_change_whose_read_failed_is_read_on_the_next_poll_with_the_same_answer() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(_job(1, "a", "RUNNING", ("n1",)))
    await poller.poll_once()
    await poller.poll_once()
    slurm.set(_job(1, "a", "COMPLETED", ("n1",)))
    slurm.fail_gets = True
    with pytest.raises(SlurmUnavailable):
        await poller.poll_once()
    slurm.fail_gets = False
    slurm.calls.clear()
    changed.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", "get 1"] and changed == ["phj-a"]


async def _resynced(poller: SlurmPoller) -> None:
    """Wait for the periodic full list that the last poll started beside it."""
    assert poller._resyncing is not None
    await poller._resyncing


async def test_the_periodic_full_list_is_skipped_while_slurm_says_no_job_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every FULL_RESYNC_SECONDS the full list asks for jobs changed since the last one: a few bytes
    while nothing changed (about 8 KB a job otherwise), and the list itself when something did.
    It never counts as a full list for a submit whose outcome is unknown, and a list without
    ``update_time`` still runs every FULL_LIST_MAX_SECONDS."""
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(_job(1, "a", "RUNNING", ("n1",)))
    await poller.poll_once()
    full_at = poller.last_full_at
    monkeypatch.setattr(poller_module, "FULL_RESYNC_SECONDS", 0.0)
    monkeypatch.setattr(poller_module, "FULL_RESYNC_SHARE", float("inf"))  # due at every poll
    slurm.calls.clear()
    await poller.poll_once()
    await _resynced(poller)
    assert slurm.calls == ["states", "list since 0"], "the state poll does not wait for the list"
    assert poller.full_lists == 1 and poller.last_full_at == full_at
    slurm.set(_job(1, "a", "COMPLETED", ("n1",)))
    slurm.set(_job(2, "b", "RUNNING", ("n2",)))  # made by another replica: only a list finds it
    slurm.calls.clear()
    changed.clear()
    await poller.poll_once()
    await _resynced(poller)
    assert sorted(slurm.calls) == ["get 1", "list since 0", "states"] and sorted(changed) == ["phj-a", "phj-b"]
    assert poller.full_lists == 2 and poller.last_full_at > full_at
    slurm.calls.clear()
    await poller.poll_once()
    await _resynced(poller)
    assert slurm.calls == ["states", "list since 1"], "since the list that showed the change"
    monkeypatch.setattr(poller_module, "FULL_LIST_MAX_SECONDS", 0.0)
    slurm.calls.clear()
    await poller.poll_once()
    await _resynced(poller)
    assert slurm.calls == ["states", "list"]


async def test_a_slow_or_failing_periodic_full_list_never_holds_up_the_state_polls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With 10,000 jobs the full list (80 MB) outlasted the request timeout on a busy machine, and
    every poll waited for it and failed: no job state was seen for minutes (bench/log, run 8).
    The periodic list runs beside the polls; a job a poll found purged meanwhile stays purged when
    the older list arrives; a failed list is tried again a period later."""
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    slurm.set(_job(1, "a", "RUNNING", ("n1",)))
    slurm.set(_job(2, "b", "RUNNING", ("n2",)))
    await poller.poll_once()
    monkeypatch.setattr(poller_module, "FULL_RESYNC_SECONDS", 0.0)
    monkeypatch.setattr(poller_module, "FULL_RESYNC_SHARE", float("inf"))  # due at every poll
    gate = asyncio.Event()
    listed = dict(slurm.jobs)
    slurm.set(_job(1, "a", "COMPLETED", ("n1",)))  # the list below shows it RUNNING still

    async def slow_list(
        since: int | None, *, admin_comment_prefix: str | None = None
    ) -> tuple[list[JobInfo] | None, int | None]:
        slurm.calls.append("slow list")
        await gate.wait()
        return [j for j in listed.values() if j.admin_comment.startswith(admin_comment_prefix or "")], 7

    monkeypatch.setattr(slurm, "list_jobs_since", slow_list)
    await poller.poll_once()
    assert poller.snapshot is not None and poller.snapshot.by_id[1].state == "COMPLETED"
    del slurm.jobs[2]  # purged from Slurm while the list runs
    await poller.poll_once()
    await poller.poll_once()
    assert slurm.calls.count("slow list") == 1, "one list at a time"
    assert 2 not in poller.snapshot.by_id
    gate.set()
    await _resynced(poller)
    assert poller.snapshot.by_id[1].state == "COMPLETED", "the older list does not undo a newer read"
    assert 2 not in poller.snapshot.by_id, "nor bring back a job found purged after it began"

    async def failing_list(
        since: int | None, *, admin_comment_prefix: str | None = None
    ) -> tuple[list[JobInfo] | None, int | None]:
        slurm.calls.append("failed list")
        raise SlurmUnavailable("no complete answer from slurmrestd")

    monkeypatch.setattr(slurm, "list_jobs_since", failing_list)
    slurm.calls.clear()
    await poller.poll_once()
    await _resynced(poller)
    slurm.set(_job(1, "a", "CANCELLED", ("n1",)))
    await poller.poll_once()
    assert slurm.calls[:2] == ["states", "failed list"], slurm.calls
    assert poller.snapshot.by_id[1].state == "CANCELLED", "the state polls go on"


def _phj(name: str, pods: list[str], rv: int, ns: str = "ns") -> dict[str, object]:
    return {"kind": "PlaceholderJob", "metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv),
                                                  "uid": name}, "spec": {"pods": pods}}  # fmt: skip


def test_the_member_index_follows_every_update_and_delete() -> None:
    from slurm_bridge.operator.placeholderjobs.members import member_pods

    s = ObjectStore(index=member_pods)
    s.upsert(_phj("g", ["a", "b"], 1))
    s.upsert(_phj("h", ["b"], 1))
    s.upsert(_phj("x", ["a"], 1, ns="other"))
    assert [p["metadata"]["name"] for p in s.indexed(("ns", "a"))] == ["g"]
    assert sorted(p["metadata"]["name"] for p in s.indexed(("ns", "b"))) == ["g", "h"]
    s.upsert(_phj("g", ["a", "c"], 2))  # b left the gang, c joined
    assert [p["metadata"]["name"] for p in s.indexed(("ns", "b"))] == ["h"]
    assert [p["metadata"]["name"] for p in s.indexed(("ns", "c"))] == ["g"]
    assert not s.upsert(_phj("g", ["a", "b"], 1)), "an older version changes nothing"
    assert [p["metadata"]["name"] for p in s.indexed(("ns", "c"))] == ["g"]
    s.delete(_phj("h", ["b"], 3))
    assert s.indexed(("ns", "b")) == [] and s._index.get(("ns", "b")) is None
    assert ObjectStore().indexed(("ns", "a")) == [], "a store without an index finds nothing"


def test_an_ended_pods_placeholderjobs_are_found_without_a_walk_over_all() -> None:
    """A walk over every PlaceholderJob cost 5 ms a pod with 10,000; a restart reconciles every
    ended pod, and 2,000 of them held the event loop until the Lease was lost (bench/log, run 8)."""
    from slurm_bridge.operator.placeholderjobs.members import Membership, member_pods

    phjs = ParsedStore(PlaceholderJob.parse, index=member_pods)
    for i in range(3):
        phjs.upsert(_phj(f"p{i}", [f"pod{i}"], 1))
    phjs.upsert(_phj("gang", ["pod1", "pod9"], 1))

    def no_walk() -> list[dict[str, object]]:
        raise AssertionError("walked over every PlaceholderJob")

    phjs.values = no_walk  # type: ignore[method-assign]
    m = Membership.__new__(Membership)
    m.phjs = phjs
    assert sorted(p["metadata"]["name"] for p in m._phjs_with_member(("ns", "pod1"))) == ["gang", "p1"]
    assert m._phjs_with_member(("other", "pod1")) == []


# ---- the one answer to "does this PlaceholderJob have a Slurm job?" (SlurmPoller.side) -----------
async def test_side_before_the_first_full_list_is_not_synced_but_knows_its_own_submits() -> None:
    poller = _poller(FakeJobReads(), [])
    side = poller.side("a")
    assert not side.synced and not side.has_job and not side.submitting
    poller.submitted("a", 5)
    side = poller.side("a")
    assert not side.synced and side.has_job and side.submitting and side.job_id == 5


async def test_side_names_the_recorded_job_and_the_others_made_for_the_same_uid() -> None:
    slurm = FakeJobReads()
    poller = _poller(slurm, [])
    slurm.set(_job(1, "a", "RUNNING", ("n1",)))
    slurm.set(_job(2, "a", "PENDING"))  # a second job for the same PlaceholderJob (a crash mid-submit)
    await poller.poll_once()
    side = poller.side("a", 1)
    assert side.synced and side.has_job and side.job_id == 1
    assert side.job is not None and side.job.job_id == 1 and side.found == side.job
    assert side.others == (2,) and side.poll_period == 1.0
    assert poller.snapshot is not None and side.taken_at == poller.snapshot.taken_at
    # Nothing recorded: the newest live job of the uid is adopted, the other is named.
    adopted = poller.side("a")
    assert adopted.job_id == 2 and adopted.found is not None and adopted.found.job_id == 2 and adopted.others == (1,)


async def test_side_a_recorded_job_the_view_lacks_is_named_without_a_record() -> None:
    poller = _poller(FakeJobReads(), [])
    await poller.poll_once()
    side = poller.side("a", 9)
    assert side.has_job and side.job_id == 9 and side.job is None and side.found is None
    assert not side.submitting, "not submitted by this process: the view lacking it means vanished"


async def test_side_a_submit_no_poll_showed_yet_then_the_poll_that_shows_it() -> None:
    slurm = FakeJobReads()
    poller = _poller(slurm, [])
    await poller.poll_once()
    poller.submitted("a", 3)
    side = poller.side("a")
    assert side.has_job and side.submitting and side.job_id == 3 and side.job is None
    assert side.submitted_at is not None
    slurm.set(_job(3, "a", "PENDING"))
    poller.poll_soon(full=True)
    await poller.poll_once()
    side = poller.side("a")
    assert side.has_job and not side.submitting and side.job is not None and side.job.job_id == 3


async def test_side_an_uncertain_submit_is_no_job_until_a_full_list_says() -> None:
    poller = _poller(FakeJobReads(), [])
    await poller.poll_once()
    poller.submitted("a", 3)
    poller.submit_failed("a", maybe_applied=True)
    side = poller.side("a")
    assert not side.has_job and not side.submitting and side.uncertain_since is not None
    assert side.last_full_at <= side.uncertain_since, "the full list that decides is still to come"
    poller.forget_uncertain("a")
    assert poller.side("a").uncertain_since is None
    poller.submit_failed("b", maybe_applied=False)
    assert poller.side("b").uncertain_since is None, "a submit that made nothing leaves nothing"


async def test_side_of_a_heterogeneous_job_holds_every_component() -> None:
    slurm = FakeJobReads()
    poller = _poller(slurm, [])
    ref = encode_admin_comment(PhjRef("bridge", "ns", "phj-h", "h"))
    for job_id, offset in ((10, 0), (11, 1)):
        slurm.set(JobInfo(job_id=job_id, states=("PENDING",), admin_comment=ref, het_job_id=10, het_job_offset=offset))
    await poller.poll_once()
    side = poller.side("h")
    assert side.job_id == 10 and [c.job_id for c in side.components] == [10, 11] and side.others == ()


# ---- one parse per stored version (ParsedStore) -------------------------------------------------
def test_a_parsed_store_parses_each_stored_version_once() -> None:
    parsed: list[str] = []

    def parse(obj: dict[str, Any]) -> str:
        parsed.append(obj["metadata"]["resourceVersion"])
        return f"model of {obj['metadata']['resourceVersion']}"

    s = ParsedStore(parse)
    assert s.model(("ns", "a")) is None
    s.upsert(_obj("a", 1))
    assert s.model(("ns", "a")) == s.model(("ns", "a")) == "model of 1" and parsed == ["1"], "parsed once"
    stored = s.get(("ns", "a"))
    assert stored is not None and s.model_of(stored) == "model of 1" and parsed == ["1"]
    assert s.model_of(_obj("a", 1)) == "model of 1" and parsed == ["1", "1"], "not the stored object: parsed anew"
    s.upsert(_obj("a", 2))
    assert s.model(("ns", "a")) == "model of 2" and parsed == ["1", "1", "2"], "a new version: parsed again"
    s.delete(_obj("a", 3))
    assert s.model(("ns", "a")) is None


def test_a_parsed_store_keeps_only_the_most_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "PARSED_CACHE_SIZE", 2)
    parsed: list[str] = []

    def parse(obj: dict[str, Any]) -> str:
        parsed.append(obj["metadata"]["name"])
        return str(obj["metadata"]["name"])

    s = ParsedStore(parse)
    for name in ("a", "b", "c"):
        s.upsert(_obj(name, 1))
        s.model(("ns", name))
    s.model(("ns", "c"))
    s.model(("ns", "a"))
    assert parsed == ["a", "b", "c", "a"], "a was dropped (least recently used), c was kept"
