"""A plain Slurm job, one component with a node per member pod: the decisions a single pod's job
and a gang's share (they differ in how pods join: :mod:`.single`, :mod:`.gang`). Pure.

Submit once the group has its ``minMember`` live pods (a gang fenced first, so no member joins a
job sized without it); follow the job: a pending job's reason told to the pods, a running one's
nodes recorded and the pods released, an ended or vanished one ending the pods; every member
ended: the job cancelled.
"""

from __future__ import annotations

from typing import ClassVar

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob, PlaceholderJobStatus
from slurm_bridge.operator.placeholderjobs.decisions.allocation import allocation, held_short, placed_members
from slurm_bridge.operator.placeholderjobs.decisions.inputs import (
    SUBMIT_VISIBILITY_GRACE,
    TENANCY_WAIT_SECONDS,
    UNWRITTEN_ALLOCATION_SECONDS,
    Clock,
    Follow,
    Members,
    Tenancy,
)
from slurm_bridge.operator.placeholderjobs.decisions.pending import follow_pending, mirror, pending_report
from slurm_bridge.operator.placeholderjobs.decisions.phjstatus import (
    end_of_job,
    fencing,
    job_ended,
    refused_by_policy,
    waiting_for_pods,
)
from slurm_bridge.operator.placeholderjobs.decisions.plan import (
    Action,
    Cancel,
    Event,
    Held,
    Placed,
    Plan,
    ReportPending,
    Submit,
    WriteStatus,
)
from slurm_bridge.operator.placeholderjobs.decisions.pods import holding_allocation
from slurm_bridge.operator.placeholderjobs.decisions.specupdate import spec_after_allocation
from slurm_bridge.operator.placeholderjobs.shapes.shape import Followed
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide
from slurm_bridge.rules.allocationmatch import compare
from slurm_bridge.slurm.models import JobInfo


class PlainJob:
    """The decisions of :class:`.shape.JobShape` for a job of one component."""

    # A group's members join while its submit is decided: its PlaceholderJob is fenced first.
    fenced: ClassVar[bool] = False
    plain: ClassVar[bool] = True

    def submit(self, phj: PlaceholderJob, members: Members, tenancy: Tenancy | None, now: Clock) -> Plan:
        spec, status = phj.spec, phj.status
        present = tuple(holding_allocation(members))
        need = spec.min_member if spec.min_member is not None else len(members)
        if len(present) < need:
            # The gang is not complete yet; pod events bring us back.
            return waiting_for_pods(
                phj, f"{len(present)} of {need} member pods exist; the Slurm job is submitted once all do"
            )
        request = spec.slurm
        if tenancy is not None:
            verdict = tenancy(request)
            if verdict.waiting:
                return Plan(requeue=TENANCY_WAIT_SECONDS)  # fail closed until the policies are read
            if not verdict.allowed:
                return refused_by_policy(phj, members, verdict, now.wall)
            request = verdict.request  # the tenant's user, group, account and QOS where unset
        fence: tuple[Action, ...] = ()
        if self.fenced and status.reason != names.REASON_SUBMITTING:
            fence = (fencing(phj, "gang's Slurm job"),)
        return Plan((*fence, Submit(request, present)))

    def adopted(self, status: PlaceholderJobStatus, slurm: SlurmSide) -> PlaceholderJobStatus:
        return status

    def placed(self, phj: PlaceholderJob, placed: Placed, submitted: PlaceholderJobStatus) -> PlaceholderJobStatus:
        return submitted

    def cancels(self, slurm: SlurmSide) -> tuple[Action, ...]:
        job = slurm.job
        return (Cancel(slurm.job_id),) if slurm.job_id is not None and (job is None or not job.is_finished) else ()

    def follow(self, followed: Followed) -> Plan:
        phj, status, slurm, now, follow = followed.phj, followed.status, followed.slurm, followed.now, followed.follow
        members = followed.members
        job_id, job = slurm.job_id, slurm.job
        assert job_id is not None
        if job is None:
            if slurm.submitted_at is not None and now.mono - slurm.submitted_at < SUBMIT_VISIBILITY_GRACE:
                return Plan(requeue=slurm.poll_period)
            if slurm.taken_at < (slurm.submitted_at or 0):
                return Plan(requeue=slurm.poll_period)
            return slurm_ended(phj, members, None, job_id, now)
        if job.is_finished:
            return slurm_ended(phj, members, job, job_id, now)
        held = follow.held
        if job.is_pending:
            short = pending_short(phj, status, job, members, now)
            if short is not None:
                return short
            if held is not None and held.queued:
                return quiet_queue(phj, status, job, members, now, follow, held)
            return follow_pending(phj, status, job, members, now, follow)
        if job.is_running and job.nodes:
            if held is not None and held.queued:  # it started before anyone was told it waits
                held = Held(held.status, now.mono + UNWRITTEN_ALLOCATION_SECONDS)
            late = spec_after_allocation(phj, status, job, members, follow)  # a spec changed meanwhile
            plan = allocation(
                phj,
                members,
                job,
                scheduler=follow.scheduler,
                now=now,
                status=late.status,
                held=held,
                devices_missing=follow.devices_missing,
            )
            return Plan((*late.actions, *plan.actions), plan.requeue, held=plan.held if held is follow.held else held)
        # RUNNING without nodes, SUSPENDED, CONFIGURING...: mirror and wait.
        return Plan(mirror(status, job, status.phase or names.PHASE_PENDING, phj.metadata.generation))


def pending_short(
    phj: PlaceholderJob, status: PlaceholderJobStatus, job: JobInfo, members: Members, now: Clock
) -> Plan | None:
    """A waiting job that asks Slurm for less than the bridge submitted (its owner changed it:
    ``scontrol update``): said at once, as its release would refuse it (:func:`.allocation.held_short`),
    rather than when Slurm starts it. Only while the spec is the one the job was sent (a changed spec
    is the update's to follow) and no member was released (a requeued job's pods are not this row's)."""
    gen = phj.metadata.generation
    if (gen and status.observed_generation != gen) or placed_members(holding_allocation(members)):
        return None
    verdict = compare(phj.spec.slurm, job, {})
    return None if verdict.matches else held_short(phj, job, verdict.message(), {}, now)


def quiet_queue(
    phj: PlaceholderJob,
    status: PlaceholderJobStatus,
    job: JobInfo,
    members: Members,
    now: Clock,
    follow: Follow,
    held: Held,
) -> Plan:
    """A queued job whose submit is held back (``held.queued``): nothing until ``held.until``; still
    pending then, the submit is announced as it would have been at once: Event Submitted, its
    status (with Slurm's reason), the waiting pods told why."""
    if now.mono < held.until:
        return Plan(requeue=held.until - now.mono)
    waiting = follow_pending(phj, status, job, members, now, follow)
    announce = Event(names.REASON_SUBMITTED, f"{held.status.message}: waiting in Slurm's queue")
    # The held status has Slurm's reason already, so following the job alone would not tell it.
    told = any(isinstance(a, ReportPending) for a in waiting.actions)
    report: tuple[Action, ...] = () if told or not job.reason else (pending_report(job, members, now.wall),)
    written = any(isinstance(a, WriteStatus) for a in waiting.actions)
    record: tuple[Action, ...] = () if written else (WriteStatus(held.status),)
    return Plan((announce, *report, *waiting.actions, *record), waiting.requeue)


def slurm_ended(phj: PlaceholderJob, members: Members, job: JobInfo | None, job_id: int, now: Clock) -> Plan:
    """Slurm -> Kubernetes: the job ended (scancel, time limit, node failure...) under live pods."""
    return job_ended(phj, members, end_of_job(job, job_id), job, now.wall)
