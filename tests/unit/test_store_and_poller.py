"""Watch caches, the work queue and the Slurm poller (with a fake Slurm: pure logic only)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

import pytest
from slurm_bridge.operator.jobref import PhjRef, encode_admin_comment
from slurm_bridge.operator.poller import SlurmPoller
from slurm_bridge.operator.store import ObjectStore, WorkQueue

from slurm_bridge.slurm.models import JobInfo


async def _until(cond: Callable[[], bool], limit: float = 5.0) -> None:
    """Wait for ``cond`` with a deadline (the queue runs in background tasks)."""
    deadline = asyncio.get_running_loop().time() + limit
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


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
    await _until(lambda: len(calls) >= 2)
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
    await _until(lambda: attempts >= 3)
    await q.stop()
    assert attempts == 3


class FakeSlurm:
    """Answers list_jobs_since like Slurm: every job when anything changed, nothing otherwise."""

    def __init__(self) -> None:
        self.jobs: dict[int, JobInfo] = {}
        self.version = 100
        self.calls: list[int | None] = []

    def set(self, job: JobInfo) -> None:
        self.jobs[job.job_id] = job
        self.version += 1

    async def list_jobs_since(
        self, since: int | None, *, admin_comment_prefix: str | None = None
    ) -> tuple[list[JobInfo], int | None]:
        self.calls.append(since)
        if since is not None and since >= self.version:
            return [], self.version
        jobs = [j for j in self.jobs.values() if j.admin_comment.startswith(admin_comment_prefix or "")]
        return jobs, self.version


def _job(job_id: int, uid: str, state: str = "PENDING", nodes: tuple[str, ...] = ()) -> JobInfo:
    ref = PhjRef("bridge", "ns", f"phj-{uid}", uid)
    return JobInfo(job_id=job_id, states=(state,), nodes=nodes, admin_comment=encode_admin_comment(ref))


async def test_poller_reports_changes_adoption_and_purges() -> None:
    slurm = FakeSlurm()
    changed: list[str] = []
    poller = SlurmPoller(slurm, "bridge", 1.0, lambda ref: changed.append(ref.name))  # type: ignore[arg-type]
    slurm.set(_job(1, "a"))
    slurm.set(JobInfo(job_id=2, states=("RUNNING",), admin_comment="not ours"))
    snap = await poller.poll_once()
    assert poller.synced.is_set()
    assert changed == ["phj-a"]
    assert snap.job_for_uid("a") is not None and set(snap.refs) == {1}

    changed.clear()
    await poller.poll_once()  # nothing changed: Slurm answers with no job at all
    assert changed == [] and poller.snapshot is not None and 1 in poller.snapshot.by_id

    slurm.set(_job(1, "a", "RUNNING", ("n1",)))
    await poller.poll_once()
    assert changed == ["phj-a"]

    changed.clear()
    del slurm.jobs[1]
    slurm.set(_job(3, "b"))
    await poller.poll_once()
    assert sorted(changed) == ["phj-a", "phj-b"], "a purged job is reported too"


def test_refused_submit_is_not_adopted() -> None:
    from slurm_bridge.operator.poller import JobSnapshot

    failed = _job(5, "x", "FAILED")
    ref = PhjRef("bridge", "ns", "phj-x", "x")
    snap = JobSnapshot({5: failed}, {5: ref}, 0.0)
    assert snap.job_for_uid("x") is None
    ran = _job(6, "x", "CANCELLED", ("n1",))
    snap = JobSnapshot({5: failed, 6: ran}, {5: ref, 6: ref}, 0.0)
    assert snap.job_for_uid("x") == ran


@pytest.mark.parametrize("live_state", ["PENDING", "RUNNING"])
def test_live_job_wins_over_ended_ones(live_state: str) -> None:
    from slurm_bridge.operator.poller import JobSnapshot

    ref = PhjRef("bridge", "ns", "p", "u")
    old, live = _job(1, "u", "CANCELLED", ("n1",)), _job(2, "u", live_state)
    assert JobSnapshot({1: old, 2: live}, {1: ref, 2: ref}, 0.0).job_for_uid("u") == live
