"""The PlaceholderJob statuses the lifecycle writes at its turning points: the job submitted,
refused by Slurm, ended. Pure: :func:`.lifecycle.decide` and its helpers put them in WriteStatus."""

from __future__ import annotations

from datetime import UTC, datetime

from slurm_bridge.operator.placeholderjobs import status as st
from slurm_bridge.operator.placeholderjobs.plan import WriteStatus

from slurm_bridge import names
from slurm_bridge.kube import now_iso
from slurm_bridge.placeholderjob import PlaceholderJobStatus, spec_of, status_of
from slurm_bridge.slurm.models import JobInfo, JobRequest

Obj = st.Obj

# The Submitted condition's reason after Slurm refused a job for its association, QOS or wckey
# once: the next such refusal of the same spec ends the PlaceholderJob (no retry storm).
REASON_ASSOCIATION_REJECTED = "AssociationRejected"


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
    return start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def submitted_status(
    phj: Obj,
    job_id: int,
    job: JobInfo | None,
    request: JobRequest,
    now: str | None = None,
    components: tuple[JobRequest, ...] = (),
) -> PlaceholderJobStatus:
    """The status of a job just submitted (written with the allocation when Slurm allocated at
    once); ``components``: a heterogeneous job's component requests (``job_id`` its leader)."""
    meta, spec, status = phj["metadata"], spec_of(phj), status_of(phj)
    gen = meta.get("generation")
    message = f"submitted Slurm job {job_id} ({request.nodes} node(s), partition {request.partition or '-'})"
    if components:
        sizes = "+".join(str(r.nodes) for r in components)
        message = (
            f"submitted heterogeneous Slurm job {job_id} ({len(components)} components of {sizes} node(s), "
            f"partition {request.partition or '-'}; Slurm starts it in a backfill pass)"
        )
    submitted = PlaceholderJobStatus(
        job_id=job_id, phase=names.PHASE_PENDING, slurm_state=job.state if job else "PENDING",
        reason=job.reason if job else "", message=message, submit_time=now or now_iso(),
        observed_generation=gen, pod_list=",".join(spec.pods),
        conditions=st.set_condition(status.condition_dicts(), names.COND_SUBMITTED, True, "Submitted", message, gen),
        **identity(job),
    )  # fmt: skip
    expected = expected_start(job, datetime.now(UTC)) if job is not None else None
    if expected is not None:
        submitted.expected_start = expected
    if components:
        submitted.het_job_id = job_id
    return submitted


def rejected_status(phj: Obj, message: str, *, association: bool = False) -> PlaceholderJobStatus:
    """Slurm refused the job: kept in status so no event resubmits the same spec at once.

    ``association``: Slurm refused it for its association, QOS, wckey or accounting policy
    (``SlurmError.is_association_refusal``). The first such refusal is retried once, after
    lifecycle.SUBMIT_RETRY_SECONDS (slurmctld learns of a new association from slurmdbd a moment
    later); the second one of the same spec ends the PlaceholderJob Failed with Slurm's message
    (phase Failed in the returned status: Events say so, and the pods are ended).
    """
    meta = phj["metadata"]
    gen = meta.get("generation")
    status = status_of(phj)
    conditions = status.condition_dicts()
    if association:
        before = next((c for c in status.conditions or [] if c.type == names.COND_SUBMITTED), None)
        if (
            before is not None
            and before.reason == REASON_ASSOCIATION_REJECTED
            and status.observed_generation == gen
            and status.reason == st.REASON_SUBMIT_REJECTED
        ):
            reason = names.REASON_SLURM_ASSOCIATION_REJECTED
            final = (
                f"{message} (refused again after a retry; fix the Slurm association or the job's account, "
                "QOS or wckey and create the pod again)"
            )
            conditions = st.set_condition(conditions, names.COND_SUBMITTED, False, reason, final, gen)
            ended = terminal_status(phj, names.PHASE_FAILED, reason, final, conditions=conditions)
            return ended.status
    why = REASON_ASSOCIATION_REJECTED if association else "SubmitRejected"
    return PlaceholderJobStatus(
        phase=names.PHASE_PENDING, reason=st.REASON_SUBMIT_REJECTED, message=message, submit_time=now_iso(),
        observed_generation=gen,
        conditions=st.set_condition(conditions, names.COND_SUBMITTED, False, why, message, gen),
    )  # fmt: skip


def terminal_status(
    phj: Obj, phase: str, reason: str, message: str, job: JobInfo | None = None, conditions: list[Obj] | None = None
) -> WriteStatus:
    """The write that ends the PlaceholderJob: phase, reason, message, Ended condition."""
    if conditions is None:
        conditions = status_of(phj).condition_dicts()
    ended = PlaceholderJobStatus(
        phase=phase, reason=reason, message=message, end_time=now_iso(),
        conditions=st.set_condition(conditions, names.COND_ENDED, True, reason, message,
                                    phj["metadata"].get("generation")),
    )  # fmt: skip
    if job is not None:
        ended.slurm_state = job.state
    if status_of(phj).expected_start is not None:
        ended.expected_start = None
    return WriteStatus(ended)
