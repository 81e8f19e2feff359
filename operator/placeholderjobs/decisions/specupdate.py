"""A changed spec and its Slurm job (docs/annotations.md, "Changing annotations"): sent to the job
while it waits in Slurm's queue, after the checks Slurm skips; once Slurm allocated the job, found
applied or reported too late. Pure; :mod:`.pending` and the plain job's ``follow`` ask it.

The spec changed when ``metadata.generation`` passed ``status.observedGeneration``. The shell then
gathers what the job asks Slurm for now (``Follow.settings``, one GET) and the partitions' limits
(``Follow.partitions``), so that the Events say what changed from what, and a time limit left
unset becomes the partition's default rather than "keep the old one". Every outcome writes
``observedGeneration`` and the condition ``SpecApplied`` (True, or False with why), so a restart
neither sends a settled generation again nor forgets one that is not: until that write, the
generation is decided again (an update sent twice changes nothing the first did not).

Slurm applies an update sent with the bridge's token (SlurmUser's, an operator) without checking a
partition's MaxTime, AllowAccounts or AllowQos (checked on Slurm 26.05): a job moved where its
account may not run waits for ever with reason "None", and one given more than MaxTime runs that
long. So the bridge checks those itself and sends nothing that fails them. A tenant's job (one
that runs as another user) is updated *as its owner* (:func:`update_as`): Slurm then checks the
update exactly as that user's own (QOS access, MaxWall, MaxTRESPerJob, priority) and says no with
its reason (issue 36, docs/security.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurm_bridge import names
from slurm_bridge.kube.conditions import set_condition
from slurm_bridge.kube.placeholderjob import PlaceholderJob, PlaceholderJobStatus
from slurm_bridge.operator.placeholderjobs.decisions.inputs import TENANCY_WAIT_SECONDS, Follow, Members
from slurm_bridge.operator.placeholderjobs.decisions.plan import (
    Action,
    Event,
    Plan,
    TellGroup,
    TellPods,
    Updated,
    UpdateJob,
    UpdateRefused,
    WriteStatus,
)
from slurm_bridge.operator.placeholderjobs.decisions.pods import holding_allocation, pod_terminating
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import default_job_name
from slurm_bridge.slurm.models import JobInfo, JobRequest, JobSettings, PartitionLimits


@dataclass(frozen=True)
class Step:
    """What a spec change adds to a plan: ``actions`` first, the ``status`` they leave (for the
    rest of the plan to build on), or a ``plan`` that ends the decision here."""

    actions: tuple[Action, ...]
    status: PlaceholderJobStatus
    plan: Plan | None = None


@dataclass(frozen=True)
class Wanted:
    """The job as the spec wants it, with what Slurm fills in for unset fields resolved where the
    bridge knows it: the name, and the time limit (``unlimited``: none at all)."""

    request: JobRequest
    name: str
    unlimited: bool = False


def _items(value: str | None) -> list[str]:
    return [p for p in (value or "").split(",") if p]


def wanted(phj: PlaceholderJob, request: JobRequest, partitions: Mapping[str, PartitionLimits] | None) -> Wanted:
    """``request`` (the spec's, with the tenant's defaults) and its name; no time limit means the
    first listed partition's default (DefaultTime, else MaxTime), as a new job would get."""
    meta = phj.metadata
    name = request.job_name or default_job_name(meta.namespace, meta.name)
    first = next(iter(_items(request.partition)), None)
    limits = (partitions or {}).get(first or "")
    if request.time_limit_minutes is not None or limits is None:
        return Wanted(request, name)
    default = limits.default_time_minutes or limits.max_time_minutes
    if default is None:
        return Wanted(request, name, unlimited=True)
    return Wanted(request.model_copy(update={"time_limit_minutes": default}), name)


def _minutes(value: int | None) -> str:
    return "unlimited" if value is None else f"{value} min"


def differences(want: Wanted, settings: JobSettings, *, running: bool) -> list[str]:
    """What the job asks for that the spec changes, e.g. ``time limit 5 min -> 7 min``. A running
    job runs in one of the listed partitions, on a node count between the spec's bounds."""
    req, out = want.request, []
    if want.unlimited and settings.time_limit_minutes is not None:
        out.append(f"time limit {_minutes(settings.time_limit_minutes)} -> unlimited")
    elif req.time_limit_minutes is not None and req.time_limit_minutes != settings.time_limit_minutes:
        out.append(f"time limit {_minutes(settings.time_limit_minutes)} -> {_minutes(req.time_limit_minutes)}")
    listed, had = set(_items(req.partition)), set(_items(settings.partition))
    if listed and (not had <= listed if running else had != listed):
        out.append(f"partition {settings.partition or '-'} -> {req.partition}")
    for label, value, current in (("account", req.account, settings.account), ("QOS", req.qos, settings.qos)):
        if value and value != current:
            out.append(f"{label} {current or '-'} -> {value}")
    if req.priority is not None and req.priority != settings.priority:
        out.append(f"priority {settings.priority if settings.priority is not None else '-'} -> {req.priority}")
    if (req.constraints or "") != settings.features:
        out.append(f"constraints {settings.features or '-'} -> {req.constraints or '-'}")
    lo, hi = req.nodes, req.max_nodes or req.nodes
    count = settings.node_count
    if running:
        if count is not None and not lo <= count <= hi:
            out.append(f"nodes {count} -> {lo}" + (f"-{hi}" if hi != lo else ""))
    elif count != lo or (settings.max_nodes is not None and settings.max_nodes != hi):
        top = settings.max_nodes if settings.max_nodes is not None else count
        out.append(f"nodes {count}-{top} -> {lo}-{hi}")
    if want.name != settings.name:
        out.append(f"name {settings.name!r} -> {want.name!r}")
    return out


def partition_problems(req: JobRequest, account: str, partitions: Mapping[str, PartitionLimits]) -> list[str]:
    """What each listed partition refuses of the job that Slurm would let an update through with:
    a time limit above its MaxTime, an account or QOS it does not allow (``account``: the job's
    current one, when the request names none). An unknown partition is Slurm's to refuse."""
    problems: list[str] = []
    account = req.account or account
    for name in _items(req.partition):
        p = partitions.get(name)
        if p is None:
            continue
        limit = req.time_limit_minutes
        if limit is not None and p.max_time_minutes is not None and limit > p.max_time_minutes:
            problems.append(f"time limit {limit} min is above partition {name}'s MaxTime ({p.max_time_minutes} min)")
        for what, value, allowed, denied in (
            ("account", account, p.allow_accounts, p.deny_accounts),
            ("QOS", req.qos, p.allow_qos, p.deny_qos),
        ):
            if value and ((allowed is not None and value not in allowed) or value in denied):
                rule = f"allows {', '.join(allowed)}" if allowed is not None and value not in allowed else "denies it"
                problems.append(f"partition {name} does not take {what} {value} (it {rule})")
    return problems


def _settle(
    phj: PlaceholderJob,
    status: PlaceholderJobStatus,
    members: Members,
    applied: bool,
    reason: str,
    message: str,
    *,
    tell: bool,
) -> Step:
    """Generation ``observedGeneration`` is settled: its ``SpecApplied`` condition, and with
    ``tell`` an Event on the PlaceholderJob, its pods and its workload (before the write: a crash
    repeats an Event rather than loses one)."""
    gen = phj.metadata.generation
    conditions = set_condition(status.conditions, names.COND_SPEC_APPLIED, applied, reason, message, gen)
    write = PlaceholderJobStatus(observed_generation=gen, conditions=conditions)
    actions: list[Action] = []
    if tell:
        warning = not applied
        pods = tuple(n for n, p in holding_allocation(members).items() if not pod_terminating(p))
        actions.append(Event(reason, message, warning=warning))
        if pods:
            actions.append(TellPods(pods, reason, message, warning=warning))
        actions.append(TellGroup(reason, message, warning=warning))
    actions.append(WriteStatus(write))
    return Step(tuple(actions), status.merged(write))


def update_as(request: JobRequest, job: JobInfo) -> str | None:
    """Whom a job update is sent as: the job's owner as Slurm records it when the job is a
    tenant's (its request names a user), else None (the bridge's own job, updated with its token)."""
    named = request.user_name or (None if request.user_id is None else str(request.user_id))
    if named is None:
        return None
    return job.user_name or (None if job.user_id is None else str(job.user_id)) or named


def spec_update(
    phj: PlaceholderJob, status: PlaceholderJobStatus, job: JobInfo, members: Members, follow: Follow
) -> Step:
    """A pending job and a spec not acted on: send it (:class:`.plan.UpdateJob`, then decided
    again with the outcome), or say why not."""
    gen, job_id = phj.metadata.generation, job.job_id
    settings = follow.settings
    if not gen or status.observed_generation == gen or settings is None:
        return Step((), status)  # nothing new, or the job's settings not read (it is gone: see the next poll)
    what = f"the spec of generation {gen}"
    request = phj.spec.slurm
    if follow.tenancy is not None:
        verdict = follow.tenancy(request)
        if verdict.waiting:
            return Step((), status, Plan(requeue=TENANCY_WAIT_SECONDS))
        if not verdict.allowed:
            message = f"{what} was not sent to Slurm job {job_id}, which keeps what it had: {verdict.message}"
            return _settle(phj, status, members, False, verdict.reason, message, tell=True)
        request = verdict.request
    want = wanted(phj, request, follow.partitions)
    changes = "; ".join(differences(want, settings, running=False))
    outcome = follow.updated if follow.updated is not None and follow.updated.generation == gen else None
    if isinstance(outcome, Updated):
        message = f"Slurm job {job_id} now has {what}" + (f": {changes}" if changes else "")
        return _settle(phj, status, members, True, names.REASON_SLURM_JOB_UPDATED, message, tell=bool(changes))
    if isinstance(outcome, UpdateRefused):
        reason = names.REASON_UPDATE_TOO_LATE if outcome.started else names.REASON_UPDATE_REJECTED
        sent = f" ({changes})" if changes else ""
        message = f"Slurm refused to update job {job_id} to {what}{sent}: {outcome.message}; the job keeps what it had"
        return _settle(phj, status, members, False, reason, message, tell=True)
    problems = partition_problems(want.request, settings.account, follow.partitions or {})
    if problems:
        message = (
            f"{what}" + (f" ({changes})" if changes else "") + f" was not sent to Slurm job {job_id}, which keeps "
            f"what it had: {'; '.join(problems)} (Slurm would not hold an update from the bridge to that)"
        )
        return _settle(phj, status, members, False, names.REASON_UPDATE_NOT_APPLIED, message, tell=True)
    # Sent even when nothing differs that the job's record shows (a QOS left unset goes back to
    # the association's default): an update that changes nothing is harmless.
    update = UpdateJob(job_id, want.request, gen, want.name, want.unlimited, update_as(want.request, job))
    return Step((), status, Plan((update,)))


def spec_after_allocation(
    phj: PlaceholderJob, status: PlaceholderJobStatus, job: JobInfo, members: Members, follow: Follow
) -> Step:
    """A job Slurm allocated while its spec had changed: found applied (the update went through
    before, or nothing that the job shows changed), or too late, said with what it kept."""
    gen, settings = phj.metadata.generation, follow.settings
    if not gen or status.observed_generation == gen or settings is None:
        return Step((), status)
    request = phj.spec.slurm
    if follow.tenancy is not None:
        verdict = follow.tenancy(request)
        request = verdict.request if verdict.allowed and not verdict.waiting else request
    want = wanted(phj, request, follow.partitions)
    changes = differences(want, settings, running=True)
    what = f"spec generation {gen}"
    if not changes:
        message = f"Slurm job {job.job_id} was allocated with {what}"
        return _settle(phj, status, members, True, names.REASON_SLURM_JOB_UPDATED, message, tell=False)
    message = (
        f"Slurm allocated job {job.job_id} before {what} reached it: {'; '.join(changes)} not applied; a job's "
        "options are fixed once it holds its nodes, and it keeps what it was allocated with"
    )
    return _settle(phj, status, members, False, names.REASON_UPDATE_TOO_LATE, message, tell=True)
