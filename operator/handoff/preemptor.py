"""The likely preemptor of a preempted bridge job, in words for the ``SlurmJobPreempted`` Event.

Slurm names no preemptor in its answers (only slurmctld's log does, Slurm 26.05): the victim has
``preempt_time`` and nothing points back. A job is taken for the likely preemptor when its QOS may
preempt the victim's (``Preempt=`` in Slurm's accounting) and it is planned on, or started on, the
victim's nodes: a pending job's ``scheduled_nodes``, or a running one's nodes when it started at
or after the preemption; failing that (Slurm does not always show a pending job's planned nodes),
the newest pending job whose QOS may preempt the victim's. The read is bounded: one
``jobs/state`` and at most MAX_READS job reads, newest jobs first, once per preemption.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from slurm_bridge.operator.views.slurmpolicy import PolicyHolder
from slurm_bridge.slurm.models import JobInfo, JobStates

# Job reads per preemption at most (the newest pending or running jobs).
MAX_READS = 8


class SlurmJobLookups(Protocol):
    async def job_states(self, previous: JobStates | None = None) -> JobStates: ...
    async def get_job(self, job_id: int) -> JobInfo | None: ...


def is_likely(victim: JobInfo, candidate: JobInfo, preemptors: tuple[str, ...]) -> bool:
    """Whether ``candidate`` is likely the job that preempts ``victim`` (pure)."""
    if candidate.job_id == victim.job_id or (victim.het_job_id and candidate.het_job_id == victim.het_job_id):
        return False
    if preemptors and candidate.qos not in preemptors:
        return False
    nodes = set(candidate.scheduled_nodes)
    started = candidate.start_time
    since = victim.preempt_time
    if candidate.is_running and since is not None and started is not None and started >= since - timedelta(seconds=1):
        nodes |= set(candidate.nodes)
    return bool(nodes & set(victim.nodes))


def _since(victim: JobInfo, job: JobInfo) -> bool:
    """Pending, or started at or after the preemption: it may be the one (its nodes unknown)."""
    started, at = job.start_time, victim.preempt_time
    return job.is_pending or (started is not None and at is not None and started >= at - timedelta(seconds=1))


def describe(job: JobInfo) -> str:
    who = ", ".join(x for x in (job.name, f"user {job.user_name}" if job.user_name else "", f"QOS {job.qos}") if x)
    return f"Slurm job {job.job_id} ({who})"


class PreemptorFinder:
    def __init__(self, slurm: SlurmJobLookups, policy: PolicyHolder) -> None:
        self.slurm = slurm
        self.policy = policy

    async def __call__(self, victim: JobInfo) -> str:
        """ "likely preempted by ..." for the Event (SlurmError when Slurm cannot be read)."""
        preemptors = self.policy.current.preemptors_of(victim.qos) if victim.qos else ()
        states = await self.slurm.job_states()
        live = sorted(
            (j for j, s in states.by_id.items() if j != victim.job_id and s and s[0] in ("PENDING", "RUNNING")),
            reverse=True,
        )
        fallback: JobInfo | None = None  # the newest that may preempt it, when none shows its nodes
        for job_id in live[:MAX_READS]:
            job = await self.slurm.get_job(job_id)
            if job is None:
                continue
            if is_likely(victim, job, preemptors):
                return f"likely preempted by {describe(job)}"
            if fallback is None and preemptors and job.qos in preemptors and _since(victim, job):
                fallback = job
        if fallback is not None:
            return f"likely preempted by {describe(fallback)}"
        which = f" (QOS that may preempt it: {', '.join(preemptors)})" if preemptors else ""
        return f"its preemptor was not found among the {min(len(live), MAX_READS)} newest live jobs{which}"
