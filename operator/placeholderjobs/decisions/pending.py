"""A job waiting in Slurm's queue, for :func:`.lifecycle.decide`: Slurm's state and reason
mirrored in status, a changed spec sent to the pending job (:mod:`.specupdate`), and the waiting
pods told why they wait (Event SlurmJobPending, docs/troubleshooting.md). Pure."""

from __future__ import annotations

from datetime import datetime

from slurm_bridge import names
from slurm_bridge.kube.conditions import set_condition
from slurm_bridge.kube.placeholderjob import Phase, PlaceholderJob, PlaceholderJobStatus
from slurm_bridge.kube.times import parse_iso
from slurm_bridge.operator.placeholderjobs.decisions.inputs import Clock, Follow, Members, Told
from slurm_bridge.operator.placeholderjobs.decisions.phjstatus import expected_start, identity
from slurm_bridge.operator.placeholderjobs.decisions.plan import (
    Action,
    Plan,
    ReportPending,
    ReportPodGroup,
    WriteStatus,
)
from slurm_bridge.operator.placeholderjobs.decisions.pods import holding_allocation, pod_terminating
from slurm_bridge.operator.placeholderjobs.decisions.specupdate import spec_update
from slurm_bridge.slurm.models import JobInfo
from slurm_bridge.slurm.reasons import explain

# "Why is my pod pending?" (Event SlurmJobPending on the waiting pods, docs/troubleshooting.md):
# a reason not told before is told at once; a reason told before (Slurm's reasons flip between
# Priority and Resources) and a move of the expected start alone are told at most this often.
PENDING_REPORT_SECONDS = 600.0
# The expected start has moved when it moved by more than a minute and a tenth of the wait ahead.
EXPECTED_START_MIN_SHIFT = 60.0
EXPECTED_START_SHARE = 0.1


def follow_pending(
    phj: PlaceholderJob,
    status: PlaceholderJobStatus,
    job: JobInfo,
    members: Members,
    now: Clock,
    follow: Follow,
    *,
    update_job: bool = True,
) -> Plan:
    """A pending job: update it to a changed spec (:func:`.specupdate.spec_update`; not a
    heterogeneous job, ``update_job`` False: its components' requests stay as submitted), mirror
    Slurm's reason, tell the pods."""
    gen = phj.metadata.generation
    update: tuple[Action, ...] = ()
    if gen and status.observed_generation != gen and not update_job:
        update = (WriteStatus(PlaceholderJobStatus(observed_generation=gen)),)
    elif gen and status.observed_generation != gen:
        step = spec_update(phj, status, job, members, follow)
        if step.plan is not None:
            return step.plan
        update, status = step.actions, step.status
    mirrored = mirror(status, job, names.PHASE_PENDING, gen)
    expected = expected_start(job, now.wall)
    report, requeue = pending(status, job, members, now, follow.told)
    if mirrored:  # Slurm's state or reason changed: the estimate goes into the same write
        *before, write = mirrored
        assert isinstance(write, WriteStatus)
        if expected != status.expected_start:
            write = WriteStatus(write.status.model_copy(update={"expected_start": expected}))
        return Plan((*update, *before, *report, write), requeue)
    if report or (requeue is None and start_moved(status.expected_start, expected, now.wall)):
        # The estimate alone moved, and may be told now: status (the -o wide column) with it.
        moved = (
            (WriteStatus(PlaceholderJobStatus(expected_start=expected)),) if expected != status.expected_start else ()
        )
        return Plan((*update, *report, *moved), requeue)
    return Plan(update, requeue)


def pending(
    status: PlaceholderJobStatus, job: JobInfo, members: Members, now: Clock, told: Told | None
) -> tuple[tuple[ReportPending, ...], float | None]:
    """Tell the waiting pods why their job is pending (Event SlurmJobPending) now, later, or not.

    What they were told: ``told`` (this process), else ``status.reason`` and
    ``status.expectedStart`` (written with each report, so a restart does not tell again). A
    reason not told before is told at once (the first wait is one); a reason told before and a
    move of the expected start alone (:func:`start_moved`) at most every PENDING_REPORT_SECONDS
    after the last report. Returns the report (or none) and when to look again for a held one.
    """
    reason, expected = job.reason, expected_start(job, now.wall)
    last_reason = told.reason if told is not None else status.reason or ""
    news = bool(reason) and reason != last_reason
    moved = start_moved(status.expected_start, expected, now.wall) and (expected is not None or news)
    if not news and not moved:
        return (), None
    wait = 0.0 if told is None else told.at + PENDING_REPORT_SECONDS - now.mono
    if news and (told is None or reason not in told.reasons):
        wait = 0.0
    if wait > 0:
        return (), wait
    return (pending_report(job, members, now.wall),), None


def pending_report(job: JobInfo, members: Members, wall: datetime) -> ReportPending:
    """The SlurmJobPending Event for ``job``, on the members that wait for it (not yet bound)."""
    waiting = tuple(
        n
        for n, p in holding_allocation(members).items()
        if not p.get("spec", {}).get("nodeName") and not pod_terminating(p)
    )
    return ReportPending(waiting, job.reason, pending_message(job.job_id, job.reason, expected_start(job, wall)))


def pending_message(job_id: int, reason: str, expected: str | None) -> str:
    """E.g. ``Slurm job 123 is waiting: Resources (the nodes it needs are busy); Slurm expects it
    to start at 2026-11-24T10:00:00Z``."""
    message = f"Slurm job {job_id} is waiting" + (f": {reason} ({explain(reason)})" if reason else " in Slurm's queue")
    return message + (f"; Slurm expects it to start at {expected}" if expected else "")


def start_moved(recorded: str | None, expected: str | None, wall: datetime) -> bool:
    """Whether the expected start moved enough to report: it appeared or went, or moved by more
    than EXPECTED_START_MIN_SHIFT and EXPECTED_START_SHARE of the wait still ahead (an estimate
    8 hours away moves 48 minutes before it is news; one 5 minutes away, a minute)."""
    if recorded == expected:
        return False
    if recorded is None or expected is None:
        return True
    try:
        old, new = parse_iso(recorded), parse_iso(expected)
    except ValueError:
        return True  # not a time (an edit by hand): replace it
    ahead = max((new - wall).total_seconds(), 0.0)
    return abs((new - old).total_seconds()) > max(EXPECTED_START_MIN_SHIFT, EXPECTED_START_SHARE * ahead)


def mirror(status: PlaceholderJobStatus, job: JobInfo, phase: Phase, gen: int | None) -> tuple[Action, ...]:
    """Slurm's state and reason in status, written only when they changed."""
    if status.slurm_state == job.state and (status.reason or "") == job.reason and status.phase == phase:
        return ()
    mirrored = PlaceholderJobStatus(
        slurm_state=job.state, reason=job.reason, phase=phase, job_id=job.job_id, **identity(job)
    )
    if not job.is_pending:
        return (WriteStatus(mirrored),)
    message = f"Slurm job {job.job_id} is pending" + (f": {job.reason}" if job.reason else "")
    conditions = set_condition(
        status.conditions, names.COND_ALLOCATED, False, job.reason or names.REASON_PENDING, message, gen
    )
    pending = mirrored.model_copy(update={"message": message, "conditions": conditions})
    report = ReportPodGroup(False, names.PODGROUP_REASON_UNSCHEDULABLE, message)
    return (report, WriteStatus(pending))
