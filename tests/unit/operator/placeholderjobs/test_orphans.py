"""operator/placeholderjobs/slurmjobs/orphans.py: which live bridge jobs may be orphans (each is confirmed
with a GET)."""

from __future__ import annotations

from datetime import UTC, datetime

from slurm_bridge.operator.placeholderjobs.slurmjobs.orphans import candidates
from slurm_bridge.operator.runtime.store import ObjectStore
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, PhjRef
from slurm_bridge.slurm.models import JobInfo

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp()


def snapshot(*jobs: tuple[int, str, str, float]) -> JobSnapshot:
    """(job id, state, PlaceholderJob uid, seconds since submit)"""
    infos = {j: JobInfo(job_id=j, states=(state,), submit_time=datetime.fromtimestamp(NOW - age, UTC))
             for j, state, _, age in jobs}  # fmt: skip
    refs = {j: PhjRef("bridge", "ns", f"phj-{uid}", uid) for j, _, uid, _ in jobs}
    return JobSnapshot(infos, refs, 0.0)


def test_only_live_old_jobs_of_unknown_placeholderjobs_are_candidates() -> None:
    snap = snapshot(
        (1, "RUNNING", "gone", 600),  # a candidate
        (2, "COMPLETED", "gone", 600),  # ended: nothing to cancel
        (3, "RUNNING", "known", 600),  # its PlaceholderJob is cached
        (4, "PENDING", "just-submitted", 600),  # the bridge submitted it and no poll showed it yet
        (5, "PENDING", "young", 10),  # within the grace period after submit
    )
    found = candidates(snap, {"known"}, lambda uid: uid == "just-submitted", NOW, grace=60)
    assert [(j, r.uid) for j, r in found] == [(1, "gone")]


async def test_a_sweep_checks_a_bounded_number_of_candidates() -> None:
    """While a restarted operator's watch still lists its PlaceholderJobs, every live job looks
    orphaned: with 10,000 that was thousands of GETs a sweep (bench/log, run 8)."""
    from types import SimpleNamespace
    from typing import Any, cast

    from slurm_bridge.core.config import Config
    from slurm_bridge.kube.client import KubeClient
    from slurm_bridge.operator.placeholderjobs.slurmjobs import orphans
    from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide

    snap = snapshot(*[(i, "RUNNING", f"u{i}", 600) for i in range(1, 101)])
    gets: list[str] = []

    async def get(path: str) -> dict[str, Any]:
        gets.append(path)
        name = path.rsplit("/", 1)[1]
        uid = name.removeprefix("phj-")
        return {"metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": "1"}}

    async def cancel(job_id: int, ref: PhjRef) -> None:
        raise AssertionError("every PlaceholderJob exists")

    phjs = ObjectStore()
    poller = SimpleNamespace(side=lambda uid, job_id=None: SlurmSide(), unmarked={})  # nothing submitted
    sweeper = orphans.OrphanSweeper(Config(), cast(KubeClient, SimpleNamespace(get=get)), phjs,
                                    cast(Any, poller), cancel)  # fmt: skip
    await sweeper.sweep(snap)
    assert len(gets) == orphans.CHECKS_PER_SWEEP and len(phjs) == orphans.CHECKS_PER_SWEEP
    await sweeper.sweep(snap)
    assert len(gets) == 2 * orphans.CHECKS_PER_SWEEP, "the next sweep checks the next ones"


async def test_a_job_marked_only_in_its_comment_is_cancelled_once_older_than_the_grace() -> None:
    """A job allocated as a tenant carries the bridge's mark in comment until the bridge sets its
    admin_comment (submit.Placer._mark). A full list that shows one still unmarked after the grace
    (the bridge stopped in between, or a user copied the mark) has it cancelled, after a GET says
    so; one marked meanwhile is left alone; it is never adopted."""
    from datetime import UTC, datetime, timedelta

    from slurm_bridge.core.config import Config
    from slurm_bridge.operator.placeholderjobs.slurmjobs import orphans
    from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import encode_admin_comment
    from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
    from slurm_bridge.slurm.models import JobInfo
    from tests.unit.fakes import FakeJobReads

    old = datetime.now(UTC) - timedelta(minutes=5)
    mark = encode_admin_comment(PhjRef("slurm-bridge", "ns", "p", "uid-p"))
    unmarked = JobInfo(job_id=5, states=("RUNNING",), comment=mark, user_name="alice", submit_time=old)
    marked_since = JobInfo(job_id=6, states=("RUNNING",), comment=mark, user_name="alice", submit_time=old)
    young = JobInfo(job_id=7, states=("RUNNING",), comment=mark, user_name="alice", submit_time=datetime.now(UTC))
    slurm = FakeJobReads(unmarked, marked_since, young)
    poller = SlurmPoller(slurm, "slurm-bridge", 1.0, lambda ref: None)
    await poller.poll_once()
    assert set(poller.unmarked) == {5, 6, 7} and poller.snapshot is not None and not poller.snapshot.by_id
    slurm.set(marked_since.model_copy(update={"admin_comment": mark}))
    cancelled: list[int] = []

    async def cancel(job_id: int, ref: PhjRef) -> None:
        cancelled.append(job_id)

    sweeper = orphans.OrphanSweeper(Config(), None, ObjectStore(), poller, cancel)  # type: ignore[arg-type]
    await sweeper._sweep_unmarked()
    assert cancelled == [5] and set(poller.unmarked) == {7}
