"""The PlaceholderJob statuses the lifecycle writes at its turning points: the group fenced for its
submit, the job submitted, refused by Slurm or by the TenantPolicy, ended (by Slurm or with its
pods). Pure: ``lifecycle.decide`` and the job shapes put them in their plans."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from slurm_bridge import names
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.conditions import Condition, set_condition
from slurm_bridge.kube.placeholderjob import PlaceholderJob, PlaceholderJobStatus
from slurm_bridge.kube.times import iso
from slurm_bridge.operator.placeholderjobs.decisions.plan import Action, EndPods, Event, Fence, Plan, WriteStatus
from slurm_bridge.operator.placeholderjobs.decisions.pods import (
    holding_allocation,
    live_members,
    pod_terminating,
)
from slurm_bridge.rules.podphase import pod_phase
from slurm_bridge.rules.tenancy import Verdict
from slurm_bridge.slurm.models import JobInfo, JobRequest

# Slurm end states -> (PlaceholderJob phase, what to tell the user).
_END_STATES: dict[str, tuple[str, str]] = {
    "COMPLETED": (names.PHASE_COMPLETED, "the Slurm job completed"),
    "CANCELLED": (names.PHASE_CANCELLED, "the Slurm job was cancelled (scancel or an administrator)"),
    "TIMEOUT": (names.PHASE_FAILED, "the Slurm job reached its time limit"),
    "NODE_FAIL": (names.PHASE_FAILED, "a node of the Slurm job failed"),
    "PREEMPTED": (names.PHASE_FAILED, "the Slurm job was preempted"),
    "BOOT_FAIL": (names.PHASE_FAILED, "a node of the Slurm job failed to boot"),
    "DEADLINE": (names.PHASE_FAILED, "the Slurm job reached its deadline"),
    "OUT_OF_MEMORY": (names.PHASE_FAILED, "the Slurm job ran out of memory"),
    "FAILED": (names.PHASE_FAILED, "the Slurm job failed"),
}


def identity(job: JobInfo | None) -> dict[str, str]:
    """Whom Slurm runs and charges the job as, for the status write that records its id."""
    if job is None:
        return {}
    return {k: v for k, v in (("slurm_user", job.user_name), ("account", job.account)) if v}


def expected_start(job: JobInfo, wall: datetime) -> str | None:
    """Slurm's estimate of a pending job's start (its backfill scheduler's ``start_time``); None
    when it has none: unset (0) or not in the future (the estimate has passed)."""
    start = job.start_time
    if not job.is_pending or start is None or start <= wall:
        return None
    return iso(start)


def submitted_status(
    phj: PlaceholderJob,
    job_id: int,
    job: JobInfo | None,
    request: JobRequest,
    wall: datetime,
    components: tuple[JobRequest, ...] = (),
) -> PlaceholderJobStatus:
    """The status of a job just submitted at ``wall`` (written with the allocation when Slurm
    allocated at once); ``components``: a heterogeneous job's component requests (``job_id`` its
    leader)."""
    spec, status, gen = phj.spec, phj.status, phj.metadata.generation
    message = f"submitted Slurm job {job_id} ({request.nodes} node(s), partition {request.partition or '-'})"
    if components:
        sizes = "+".join(str(r.nodes) for r in components)
        message = (
            f"submitted heterogeneous Slurm job {job_id} ({len(components)} components of {sizes} node(s), "
            f"partition {request.partition or '-'}; Slurm starts it in a backfill pass)"
        )
    submitted = PlaceholderJobStatus(
        job_id=job_id,
        phase=names.PHASE_PENDING,
        slurm_state=job.state if job else "PENDING",
        reason=job.reason if job else "",
        message=message,
        submit_time=iso(wall),
        observed_generation=gen,
        pod_list=",".join(spec.pods),
        conditions=set_condition(status.conditions, names.COND_SUBMITTED, True, names.REASON_SUBMITTED, message, gen),
        **identity(job),
    )
    expected = expected_start(job, wall) if job is not None else None
    if expected is not None:
        submitted.expected_start = expected
    if components:
        submitted.het_job_id = job_id
    return submitted


def rejected_status(
    phj: PlaceholderJob, message: str, wall: datetime, *, association: bool = False
) -> PlaceholderJobStatus:
    """Slurm refused the job (at ``wall``): kept in status so no event resubmits the same spec at once.

    ``association``: Slurm refused it for its association, QOS, wckey or accounting policy
    (``SlurmError.is_association_refusal``). The first such refusal is retried once, after
    lifecycle.SUBMIT_RETRY_SECONDS (slurmctld learns of a new association from slurmdbd a moment
    later); the second one of the same spec ends the PlaceholderJob Failed with Slurm's message
    (phase Failed in the returned status: Events say so, and the pods are ended).
    """
    status, gen = phj.status, phj.metadata.generation
    conditions = status.conditions
    if association:
        before = next((c for c in status.conditions or [] if c.type == names.COND_SUBMITTED), None)
        if (
            before is not None
            and before.reason == names.REASON_ASSOCIATION_REJECTED
            and status.observed_generation == gen
            and status.reason == names.REASON_SUBMIT_REJECTED
        ):
            reason = names.REASON_SLURM_ASSOCIATION_REJECTED
            final = (
                f"{message} (refused again after a retry; fix the Slurm association or the job's account, "
                "QOS or wckey and create the pod again)"
            )
            conditions = set_condition(conditions, names.COND_SUBMITTED, False, reason, final, gen)
            ended = terminal_status(phj, names.PHASE_FAILED, reason, final, wall, conditions=conditions)
            return ended.status
    why = names.REASON_ASSOCIATION_REJECTED if association else names.REASON_SUBMIT_REJECTED
    return PlaceholderJobStatus(
        phase=names.PHASE_PENDING,
        reason=names.REASON_SUBMIT_REJECTED,
        message=message,
        submit_time=iso(wall),
        observed_generation=gen,
        conditions=set_condition(conditions, names.COND_SUBMITTED, False, why, message, gen),
    )


def terminal_status(
    phj: PlaceholderJob,
    phase: str,
    reason: str,
    message: str,
    wall: datetime,
    job: JobInfo | None = None,
    conditions: list[Condition] | None = None,
) -> WriteStatus:
    """The write that ends the PlaceholderJob (at ``wall``): phase, reason, message, Ended condition."""
    if conditions is None:
        conditions = phj.status.conditions
    ended = PlaceholderJobStatus(
        phase=phase,
        reason=reason,
        message=message,
        end_time=iso(wall),
        conditions=set_condition(conditions, names.COND_ENDED, True, reason, message, phj.metadata.generation),
    )
    if job is not None:
        ended.slurm_state = job.state
    if phj.status.expected_start is not None:
        ended.expected_start = None
    return WriteStatus(ended)


def fencing(phj: PlaceholderJob, what: str) -> Fence:
    """The Fence before a group's submit: status reason Submitting."""
    message = f"submitting the {what} for {len(phj.spec.pods)} pods"
    return Fence(PlaceholderJobStatus(phase=names.PHASE_PENDING, reason=names.REASON_SUBMITTING, message=message))


def refused_by_policy(phj: PlaceholderJob, members: Mapping[str, Obj | None], verdict: Verdict, wall: datetime) -> Plan:
    """The namespace's TenantPolicy refuses the job: Failed, nothing submitted, the pods ended with
    the policy's words (a Warning Event on each, as on the PlaceholderJob)."""
    message = f"refused by the tenant policy, nothing was submitted to Slurm: {verdict.message}"
    return refused_unsent(phj, live_members(members), verdict.reason, message, wall)


def refused_unsent(phj: PlaceholderJob, live: tuple[str, ...], reason: str, message: str, wall: datetime) -> Plan:
    """The bridge refuses the job for good before sending it: Failed (``Submitted=False``), a
    Warning Event, and the ``live`` member pods ended with the same words."""
    gen = phj.metadata.generation
    conditions = set_condition(phj.status.conditions, names.COND_SUBMITTED, False, reason, message, gen)
    ended = terminal_status(phj, names.PHASE_FAILED, reason, message, wall, conditions=conditions)
    end: tuple[Action, ...] = (EndPods(live, reason, message),) if live else ()
    return Plan((ended, Event(reason, message, warning=True), *end))


def waiting_for_pods(phj: PlaceholderJob, message: str) -> Plan:
    """Pending until the group's member pods exist (pod events bring the PlaceholderJob back):
    the status says what is missing, written only when that changed."""
    status = phj.status
    if status.reason == names.REASON_WAITING_FOR_PODS and status.message == message:
        return Plan()
    return Plan(
        (
            WriteStatus(
                PlaceholderJobStatus(
                    phase=names.PHASE_PENDING,
                    reason=names.REASON_WAITING_FOR_PODS,
                    message=message,
                    pod_list=",".join(phj.spec.pods),
                )
            ),
        )
    )


def job_ended(
    phj: PlaceholderJob,
    members: Mapping[str, Obj | None],
    end: tuple[str, str, str],
    job: JobInfo | None,
    wall: datetime,
    cancel: tuple[Action, ...] = (),
) -> Plan:
    """Slurm -> Kubernetes: the job (``end``: phase, reason, message) ended under the PlaceholderJob.
    Its terminal status, ``cancel`` (what of the job still runs), an Event, and the live member pods
    ended: a pod whose allocation is gone must not keep running."""
    phase, reason, message = end
    live = tuple(holding_allocation(members))
    pods: tuple[Action, ...] = (EndPods(live, reason, message),) if live else ()
    status = terminal_status(phj, phase, reason, message, wall, job)
    return Plan((status, *cancel, Event(reason, message, warning=phase != names.PHASE_COMPLETED), *pods))


def end_of_job(job: JobInfo | None, job_id: int) -> tuple[str, str, str]:
    """Phase, reason and message for a Slurm job that ended (or vanished) under live pods."""
    if job is None:
        return (names.PHASE_FAILED, names.REASON_SLURM_JOB_VANISHED, f"Slurm job {job_id} no longer exists in Slurm")
    phase, what = _END_STATES.get(job.state, (names.PHASE_FAILED, f"the Slurm job ended as {job.state}"))
    detail = f" ({job.reason})" if job.reason else ""
    return (phase, names.slurm_job_ended(job.state), f"Slurm job {job_id}: {what}{detail}")


def end_phases(members: Mapping[str, Obj | None]) -> dict[str, str | None]:
    """Each ended member's phase for pods_end_phase. A pod the kubelet stopped because it was
    deleted turns Failed before it goes: that is a deletion (None), not a failure."""
    return {
        n: None if p is None or (pod_terminating(p) and pod_phase(p) == "Failed") else pod_phase(p)
        for n, p in members.items()
    }


def pods_end_phase(phases: Mapping[str, str | None]) -> tuple[str, str, str]:
    """Phase, reason, message once every member pod ended (phase None: the pod was deleted)."""
    if all(p == "Succeeded" for p in phases.values()):
        return names.PHASE_COMPLETED, names.REASON_PODS_SUCCEEDED, "every member pod succeeded; Slurm job released"
    if all(p is None for p in phases.values()):
        return names.PHASE_CANCELLED, names.REASON_PODS_DELETED, "every member pod was deleted; Slurm job cancelled"
    failed = sorted(n for n, p in phases.items() if p == "Failed")
    deleted = sorted(n for n, p in phases.items() if p is None)
    parts = [
        f"failed: {', '.join(failed)}" if failed else "",
        f"deleted: {', '.join(deleted)}" if deleted else "",
    ]
    return names.PHASE_FAILED, names.REASON_PODS_FAILED, "member pods ended (" + "; ".join(p for p in parts if p) + ")"
