"""The handoff's rows of the decision table (docs/design/placeholderjob-lifecycle.md; docs/colocation.md, "The
handoff"), for every job shape: a running job whose end Slurm announces -- a preemption with its
QOS GraceTime, a time limit -- has its pods ended by the bridge first, and is released (marked
released, then cancelled) only once their containers stopped, so native work never starts under them. Pure.

- **Preempted**: Slurm set the job's ``preempt_time`` (any component of a heterogeneous job: Slurm
  preempts the whole job) and keeps it RUNNING until ``end_time`` = preempt_time + GraceTime.
  The PlaceholderJob ends Failed ``SlurmJobPreempted``; its live pods are ended gracefully with an
  Event naming the likely preemptor (:class:`.plan.EndPreempted`).
- **Time limit**: Slurm never ends a job before ``end_time``, and at the earliest the partition's
  OverTimeLimit after it. The pods are ended at :func:`slurm_bridge.rules.handoff.ending_starts_at`
  (their grace period and the margin before Slurm may end the job, or ``end_time`` when the
  OverTimeLimit covers that): Failed ``SlurmTimeLimitReached``.

A terminal PlaceholderJob's job is then cancelled once every member ended (``lifecycle._terminal``).
"""

from __future__ import annotations

from datetime import datetime

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.times import iso
from slurm_bridge.operator.placeholderjobs.decisions.inputs import Clock, Handoff, Members
from slurm_bridge.operator.placeholderjobs.decisions.phjstatus import terminal_status
from slurm_bridge.operator.placeholderjobs.decisions.plan import Action, EndPods, EndPreempted, Event, Plan
from slurm_bridge.operator.placeholderjobs.decisions.pods import holding_allocation, live_members
from slurm_bridge.rules.handoff import ending_starts_at, pod_grace_seconds
from slurm_bridge.slurm.models import JobInfo


def preempted_part(parts: tuple[JobInfo, ...]) -> JobInfo | None:
    """The running part of the job Slurm chose as a preemption victim, if any."""
    return next((p for p in parts if p.is_running and p.preempt_time is not None), None)


def grace_of(members: Members) -> int:
    """The longest grace period of the members that hold the allocation (0: none)."""
    return max((pod_grace_seconds(p) for p in holding_allocation(members).values()), default=0)


def preempted(phj: PlaceholderJob, job_id: int, part: JobInfo, members: Members, now: Clock) -> Plan:
    """Slurm preempts the job: end the pods gracefully now; the job is released once they stopped."""
    until = f" (Slurm ends it at {iso(part.end_time)} at the latest)" if part.end_time is not None else ""
    qos = f" (QOS {part.qos})" if part.qos else ""
    message = (
        f"Slurm job {job_id}{qos} is preempted{until}: its pods are ended gracefully, and the job is "
        "released once their containers stopped"
    )
    status = terminal_status(phj, names.PHASE_FAILED, names.REASON_SLURM_JOB_PREEMPTED, message, now.wall, part)
    return Plan((status, EndPreempted(part, live_members(members), message)))


def ending_at(parts: tuple[JobInfo, ...], members: Members, handoff: Handoff) -> datetime | None:
    """When the pods of a running job with a time limit are ended ahead of it (None: no limit)."""
    grace = grace_of(members)
    times: list[datetime] = []
    for part in parts:
        if not part.is_running or part.time_limit_minutes is None or part.end_time is None:
            continue
        over = handoff.over_time_of(part.partition)
        if over is None:
            continue  # OverTimeLimit=UNLIMITED: Slurm never ends the job
        times.append(ending_starts_at(part.end_time, over, grace, handoff.margin))
    return min(times, default=None)


def time_limit_reached(phj: PlaceholderJob, job_id: int, at: datetime, members: Members, now: Clock) -> Plan:
    """The job's time limit leaves the pods no more than their grace period and the margin: end
    them now (Failed ``SlurmTimeLimitReached``); the job is released once they stopped."""
    message = (
        f"Slurm job {job_id} reaches its time limit: its pods are ended from {iso(at)} on, so that "
        "their containers stop before Slurm ends the job; the job is released once they stopped"
    )
    reason = names.REASON_SLURM_TIME_LIMIT_REACHED
    status = terminal_status(phj, names.PHASE_FAILED, reason, message, now.wall)
    live = live_members(members)
    end: tuple[Action, ...] = (EndPods(live, reason, message),) if live else ()
    return Plan((status, Event(reason, message, warning=True), *end))
