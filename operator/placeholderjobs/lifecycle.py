"""The PlaceholderJob <-> Slurm job lifecycle as one pure decision: observed state in, a Plan out.

``decide(phj, slurm, members, now)`` reads the PlaceholderJob, what the poller's view says about
its Slurm job (known, vanished, not seen yet, or no job at all) and its member pods, and returns
the actions that bring the two sides together, in order. It does no I/O: the shell
(:mod:`.phjsync`) gathers the inputs, applies the actions and re-queues. The table of cases is in
docs/architecture.md ("The PlaceholderJob decision table"); tests/unit/test_lifecycle.py checks
every phase x Slurm state x member state, and the crash-recovery cases.

Two actions need the shell before the rest can be decided. ``ConfirmMembers``: members the
watch cache lacks are read with a GET (a deletion is never inferred from a cold cache); the shell
then decides again with ``confirmed``. ``Submit`` and ``Release``: what follows depends on
Slurm's answer (an immediate allocation) or on the DRA claims; the shell asks :func:`allocation`
and :func:`submitted_status` for those steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from slurm_bridge.operator.placeholderjobs import status as st
from slurm_bridge.operator.placeholderjobs.composite import is_composite
from slurm_bridge.operator.placeholderjobs.groups import is_gang
from slurm_bridge.operator.placeholderjobs.plan import (
    Action,
    AddFinalizer,
    Cancel,
    ConfirmMembers,
    EndPods,
    Event,
    Fence,
    Finalize,
    ForgetUncertain,
    NoteWaiting,
    Plan,
    Release,
    ReportPending,
    ReportPodGroup,
    RequestFullList,
    Submit,
    UpdateJob,
    WriteStatus,
)

from slurm_bridge import names
from slurm_bridge.kube import now_iso
from slurm_bridge.placeholderjob import Phase, PlaceholderJobStatus, spec_of, status_of
from slurm_bridge.slurm.models import JobInfo, JobRequest
from slurm_bridge.slurm.reasons import explain
from slurm_bridge.tenancy import Verdict

Obj = st.Obj
Members = Mapping[str, Obj | None]
# The namespace's TenantPolicy verdict on a request (slurm_bridge/tenancy.py), asked only right
# before a submit or a job update: the policy as it is then applies (docs/tenancy.md).
Tenancy = Callable[[JobRequest], Verdict]

# A job submitted this recently may not be in the snapshot yet; wait for it rather than
# concluding it vanished.
SUBMIT_VISIBILITY_GRACE = 30.0
# A spec Slurm refused is submitted again this long after the refusal (or at once when it changes).
SUBMIT_RETRY_SECONDS = 30.0
# A deleted PlaceholderJob whose pods still run is looked at again this often (pod events sooner).
FINALIZE_RECHECK_SECONDS = 5.0
# A single pod's job allocated at its submit: its status is written once the pod is bound, or after
# this many seconds (when the scheduler is slower), whichever comes first (see allocation()).
UNWRITTEN_SECONDS = 10.0
# "Why is my pod pending?" (Event SlurmJobPending on the waiting pods, docs/troubleshooting.md):
# a reason not told before is told at once; a reason told before (Slurm's reasons flip between
# Priority and Resources) and a move of the expected start alone are told at most this often.
PENDING_REPORT_SECONDS = 600.0
# The expected start has moved when it moved by more than a minute and a tenth of the wait ahead.
EXPECTED_START_MIN_SHIFT = 60.0
EXPECTED_START_SHARE = 0.1
# Status reasons of a gang PlaceholderJob before its job exists.
REASON_WAITING_FOR_PODS = "WaitingForPods"
REASON_SUBMITTING = "Submitting"
# The Submitted condition's reason after Slurm refused a job for its association, QOS or wckey
# once: the next such refusal of the same spec ends the PlaceholderJob (no retry storm).
REASON_ASSOCIATION_REJECTED = "AssociationRejected"
# While the TenantPolicies are not read yet, a submit waits this long.
TENANCY_WAIT_SECONDS = 2.0


# ---- inputs -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SlurmSide:
    """What the poller's view says about the PlaceholderJob's Slurm job.

    ``job_id``: status.jobId, else ``found`` (adoption after a crash), else a submit the view does
    not show yet. ``job``: Slurm's record of ``job_id``; None
    with a ``job_id`` means the view lacks it (vanished, or not visible yet: see ``submitted_at``).
    """

    synced: bool = True  # a full job list arrived since start-up
    poll_period: float = 1.0
    job_id: int | None = None
    job: JobInfo | None = None
    # The job the view first names for the PlaceholderJob: status.jobId's record, else its uid's
    # newest live job (else newest that ran). What an ended or deleted PlaceholderJob cancels.
    found: JobInfo | None = None
    others: tuple[int, ...] = ()  # other live jobs made for this PlaceholderJob (a crash mid-submit)
    # A heterogeneous job's components as the view holds them, by offset (the leader first): a
    # CompositePodGroup's (operator/placeholderjobs/hetjob.py). () for any other job.
    components: tuple[JobInfo, ...] = ()
    submitted_at: float | None = None  # monotonic time of the bridge's submit of job_id, until seen
    taken_at: float = 0.0  # when the view was taken (monotonic)
    uncertain_since: float | None = None  # a submit that may have made a job, not yet resolved
    last_full_at: float = 0.0  # when the last full job list was taken


@dataclass(frozen=True)
class Told:
    """What this process last told the waiting pods (Event SlurmJobPending), and when (monotonic).

    In memory only: it rate-limits Events and nothing else. After a restart ``status.reason`` and
    ``status.expectedStart`` say what was reported; at most one Event is repeated."""

    at: float
    reason: str
    reasons: frozenset[str] = frozenset()  # every reason told for this job


@dataclass(frozen=True)
class Clock:
    mono: float
    wall: datetime = field(default_factory=lambda: datetime.now(UTC))


# ---- the decision -----------------------------------------------------------------------------
def decide(
    phj: Obj,
    slurm: SlurmSide,
    members: Members,
    now: Clock,
    confirmed: Members | None = None,
    *,
    scheduler: str,
    at_once: float | None = None,
    told: Told | None = None,
    tenancy: Tenancy | None = None,
) -> Plan:
    """The PlaceholderJob's next steps (docs/architecture.md, "The PlaceholderJob decision table").

    ``members``: each member's pod from the watch cache (None: not there, or another incarnation);
    ``confirmed``: the same after a GET of the missing ones (see ConfirmMembers); ``scheduler``:
    the bridge's scheduler name (PodGroup messages say it); ``at_once``: see :func:`allocation`
    (``phj`` then carries the unwritten status of its submit); ``told``: what the waiting pods
    were last told about their pending job (see :func:`pending`); ``tenancy``: the namespace's
    policy, asked before a submit or job update (None: no policy applies, as before tenancy).
    """
    if not slurm.synced:
        return Plan(requeue=slurm.poll_period)  # adopt, never resubmit, after a restart
    meta = phj["metadata"]
    if meta.get("deletionTimestamp"):
        return _finalize(phj, slurm, confirmed)
    pre: tuple[Action, ...] = ()
    if names.FINALIZER_PLACEHOLDER_JOB not in (meta.get("finalizers") or []):
        pre = (AddFinalizer(),)
    status = status_of(phj)
    if status.phase in names.TERMINAL_PHASES:
        return _chain(pre, _terminal(status, slurm, members))
    if slurm.job_id is None:
        return _chain(pre, _no_job(phj, slurm, members, now, confirmed, tenancy))
    if status.job_id != slurm.job_id:  # found by its uid: a crash between submit and status
        adopt = WriteStatus(PlaceholderJobStatus(job_id=slurm.job_id, phase=names.PHASE_PENDING, **identity(slurm.job)))
        if slurm.job is not None and slurm.job.het_job_id == slurm.job_id:
            adopt.status.het_job_id = slurm.job_id  # a CompositePodGroup's heterogeneous job
        pre = (*pre, adopt)
        status = status.model_copy(update={"job_id": slurm.job_id, "phase": names.PHASE_PENDING})
    return _chain(pre, _with_job(phj, status, slurm, members, now, confirmed, scheduler, at_once, told, tenancy))


def identity(job: JobInfo | None) -> dict[str, str]:
    """Whom Slurm runs and charges the job as, for the status write that records its id."""
    if job is None:
        return {}
    return {k: v for k, v in (("slurm_user", job.user_name), ("account", job.account)) if v}


def _chain(pre: tuple[Action, ...], plan: Plan) -> Plan:
    return Plan((*pre, *plan.actions), plan.requeue)


def _all_ended(members: Members, confirmed: Members | None) -> bool | None:
    """Whether every member ended; None when the cache says so and a GET must confirm it."""
    if not all(st.pod_ended(p) for p in members.values()):
        return False
    if confirmed is None:
        return None
    return all(st.pod_ended(p) for p in confirmed.values())


def _terminal(status: PlaceholderJobStatus, slurm: SlurmSide, members: Members) -> Plan:
    """An ended PlaceholderJob: finish what a crash may have interrupted (cancel, end pods)."""
    actions: list[Action] = []
    if slurm.found is not None and not slurm.found.is_finished:
        actions.append(Cancel(slurm.found.job_id))  # a cancel lost in a crash, done again
    actions += _leftovers(slurm)
    live = tuple(n for n, p in members.items() if p is not None and not st.pod_ended(p) and not st.pod_terminating(p))
    if live:
        actions.append(EndPods(live, status.reason or "SlurmJobEnded", status.message or ""))
    return Plan(tuple(actions))


def _no_job(
    phj: Obj, slurm: SlurmSide, members: Members, now: Clock, confirmed: Members | None, tenancy: Tenancy | None
) -> Plan:
    """No job yet: end with the pods, wait after a refusal or an uncertain submit, else submit."""
    meta = phj["metadata"]
    ended = _all_ended(members, confirmed)
    if ended is None:
        return Plan((ConfirmMembers(),))
    if ended:
        return Plan((_terminal_status(phj, *st.pods_end_phase(st.end_phases(members))),))
    wait = st.resubmit_wait(phj.get("status") or {}, meta.get("generation"), SUBMIT_RETRY_SECONDS, now.wall)
    if wait > 0:
        return Plan(requeue=wait)  # Slurm refused this very spec moments ago: watch events must not hammer it
    pre: tuple[Action, ...] = ()
    if slurm.uncertain_since is not None:
        if slurm.last_full_at <= slurm.uncertain_since:
            return Plan((RequestFullList(),), requeue=slurm.poll_period)
        pre = (ForgetUncertain(),)
    return _chain(pre, _submit(phj, members, tenancy))


def _submit(phj: Obj, members: Members, tenancy: Tenancy | None = None) -> Plan:
    if is_composite(phj):
        from slurm_bridge.operator.placeholderjobs import hetjob  # it builds on this module

        return hetjob.submit(phj, members, tenancy)
    spec, status = spec_of(phj), status_of(phj)
    present = tuple(st.holding_allocation(members))
    need = spec.min_member if spec.min_member is not None else len(members)
    if len(present) < need:
        # The gang is not complete yet; pod events bring us back.
        message = f"{len(present)} of {need} member pods exist; the Slurm job is submitted once all do"
        if status.reason == REASON_WAITING_FOR_PODS and status.message == message:
            return Plan()
        return Plan((WriteStatus(PlaceholderJobStatus(
            phase=names.PHASE_PENDING, reason=REASON_WAITING_FOR_PODS, message=message, pod_list=",".join(spec.pods),
        )),))  # fmt: skip
    request = spec.slurm
    if tenancy is not None:
        verdict = tenancy(request)
        if verdict.waiting:
            return Plan(requeue=TENANCY_WAIT_SECONDS)  # fail closed until the policies are read
        if not verdict.allowed:
            return refused_by_policy(phj, members, verdict)
        request = verdict.request  # the tenant's user, group, account and QOS where unset
    fence: tuple[Action, ...] = ()
    if is_gang(phj) and status.reason != REASON_SUBMITTING:
        fence = (Fence(),)
    return Plan((*fence, Submit(request, present)))


def refused_by_policy(phj: Obj, members: Members, verdict: Verdict) -> Plan:
    """The namespace's TenantPolicy refuses the job: Failed, nothing submitted, the pods ended with
    the policy's words (a Warning Event on each, as on the PlaceholderJob)."""
    gen = phj["metadata"].get("generation")
    message = f"refused by the tenant policy, nothing was submitted to Slurm: {verdict.message}"
    conditions = st.set_condition(
        status_of(phj).condition_dicts(), names.COND_SUBMITTED, False, verdict.reason, message, gen
    )
    ended = _terminal_status(phj, names.PHASE_FAILED, verdict.reason, message, conditions=conditions)
    live = tuple(n for n, p in members.items() if p is not None and not st.pod_ended(p) and not st.pod_terminating(p))
    end: tuple[Action, ...] = (EndPods(live, verdict.reason, message),) if live else ()
    return Plan((ended, Event(verdict.reason, message, warning=True), *end))


def _with_job(
    phj: Obj,
    status: PlaceholderJobStatus,
    slurm: SlurmSide,
    members: Members,
    now: Clock,
    confirmed: Members | None,
    scheduler: str,
    at_once: float | None = None,
    told: Told | None = None,
    tenancy: Tenancy | None = None,
) -> Plan:
    """A job exists (or existed): follow it, or end it when every member pod ended."""
    if is_composite(phj):
        from slurm_bridge.operator.placeholderjobs import hetjob  # it builds on this module

        return hetjob.follow(phj, status, slurm, members, now, confirmed, scheduler, told)
    job_id, job = slurm.job_id, slurm.job
    assert job_id is not None
    ended = _all_ended(members, confirmed)
    if ended is None:
        return Plan((ConfirmMembers(),))
    if ended:  # Kubernetes -> Slurm
        phase, reason, message = st.pods_end_phase(st.end_phases(members))
        cancel: tuple[Action, ...] = (Cancel(job_id),) if job is None or not job.is_finished else ()
        return Plan((_terminal_status(phj, phase, reason, message), *cancel, Event(reason, message)))
    if job is None:
        if slurm.submitted_at is not None and now.mono - slurm.submitted_at < SUBMIT_VISIBILITY_GRACE:
            return Plan(requeue=slurm.poll_period)
        if slurm.taken_at < (slurm.submitted_at or 0):
            return Plan(requeue=slurm.poll_period)
        return slurm_ended(phj, members, None, job_id)
    if job.is_finished:
        return slurm_ended(phj, members, job, job_id)
    if job.is_pending:
        return _pending(phj, status, job, members, now, told, tenancy)
    if job.is_running and job.nodes:
        return allocation(phj, members, job, scheduler=scheduler, status=status, now=now.mono, at_once=at_once)
    # RUNNING without nodes, SUSPENDED, CONFIGURING...: mirror and wait.
    return Plan(_mirror(status, job, status.phase or names.PHASE_PENDING, phj["metadata"].get("generation")))


def slurm_ended(phj: Obj, members: Members, job: JobInfo | None, job_id: int) -> Plan:
    """Slurm -> Kubernetes: the job ended (scancel, time limit, node failure...) under live pods."""
    phase, reason, message = st.end_of_job(job, job_id)
    live = tuple(st.holding_allocation(members))
    end: tuple[Action, ...] = (EndPods(live, reason, message),) if live else ()
    return Plan((
        _terminal_status(phj, phase, reason, message, job),
        Event(reason, message, warning=phase != names.PHASE_COMPLETED),
        *end,
    ))  # fmt: skip


def _pending(
    phj: Obj,
    status: PlaceholderJobStatus,
    job: JobInfo,
    members: Members,
    now: Clock,
    told: Told | None,
    tenancy: Tenancy | None = None,
    *,
    update_job: bool = True,
) -> Plan:
    """A pending job: update it to a changed spec (not a heterogeneous job, ``update_job``
    False: its components' requests stay as submitted), mirror Slurm's reason, tell the pods."""
    gen = phj["metadata"].get("generation")
    update: tuple[Action, ...] = ()
    if gen and status.observed_generation != gen and not update_job:
        update = (WriteStatus(PlaceholderJobStatus(observed_generation=gen)),)
    elif gen and status.observed_generation != gen:
        request = spec_of(phj).slurm
        verdict = tenancy(request) if tenancy is not None else None
        seen = WriteStatus(PlaceholderJobStatus(observed_generation=gen))
        if verdict is not None and verdict.waiting:
            return Plan(requeue=TENANCY_WAIT_SECONDS)
        if verdict is not None and not verdict.allowed:
            # The job keeps the spec it was submitted with; the change is refused, not applied.
            message = f"the spec change was not applied to Slurm job {job.job_id}: {verdict.message}"
            update = (Event(verdict.reason, message, warning=True), seen)
        else:
            update = (UpdateJob(job.job_id, verdict.request if verdict is not None else request), seen)
    mirror = _mirror(status, job, names.PHASE_PENDING, gen)
    expected = expected_start(job, now.wall)
    report, requeue = pending(status, job, members, now, told)
    if mirror:  # Slurm's state or reason changed: the estimate goes into the same write
        *before, write = mirror
        assert isinstance(write, WriteStatus)
        if expected != status.expected_start:
            write = WriteStatus(PlaceholderJobStatus.model_validate(write.status.dump() | {"expectedStart": expected}))
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
        n for n, p in st.holding_allocation(members).items()
        if not p.get("spec", {}).get("nodeName") and not st.pod_terminating(p)
    )  # fmt: skip
    return ReportPending(waiting, job.reason, pending_message(job.job_id, job.reason, expected_start(job, wall)))


def pending_message(job_id: int, reason: str, expected: str | None) -> str:
    """E.g. ``Slurm job 123 is waiting: Resources (the nodes it needs are busy); Slurm expects it
    to start at 2026-11-24T10:00:00Z``."""
    message = f"Slurm job {job_id} is waiting" + (f": {reason} ({explain(reason)})" if reason else " in Slurm's queue")
    return message + (f"; Slurm expects it to start at {expected}" if expected else "")


def expected_start(job: JobInfo, wall: datetime) -> str | None:
    """Slurm's estimate of a pending job's start (its backfill scheduler's ``start_time``); None
    when it has none: unset (0) or not in the future (the estimate has passed)."""
    start = job.start_time
    if not job.is_pending or start is None or start <= wall:
        return None
    return start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def start_moved(recorded: str | None, expected: str | None, wall: datetime) -> bool:
    """Whether the expected start moved enough to report: it appeared or went, or moved by more
    than EXPECTED_START_MIN_SHIFT and EXPECTED_START_SHARE of the wait still ahead (an estimate
    8 hours away moves 48 minutes before it is news; one 5 minutes away, a minute)."""
    if recorded == expected:
        return False
    if recorded is None or expected is None:
        return True
    try:
        old, new = (datetime.strptime(t, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) for t in (recorded, expected))
    except ValueError:
        return True  # not the bridge's form (an edit by hand): replace it
    ahead = max((new - wall).total_seconds(), 0.0)
    return abs((new - old).total_seconds()) > max(EXPECTED_START_MIN_SHIFT, EXPECTED_START_SHARE * ahead)


def _mirror(status: PlaceholderJobStatus, job: JobInfo, phase: Phase, gen: int | None) -> tuple[Action, ...]:
    """Slurm's state and reason in status, written only when they changed."""
    if status.slurm_state == job.state and (status.reason or "") == job.reason and status.phase == phase:
        return ()
    mirrored = PlaceholderJobStatus(
        slurm_state=job.state, reason=job.reason, phase=phase, job_id=job.job_id, **identity(job)
    )
    if not job.is_pending:
        return (WriteStatus(mirrored),)
    message = f"Slurm job {job.job_id} is pending" + (f": {job.reason}" if job.reason else "")
    conditions = st.set_condition(
        status.condition_dicts(), names.COND_ALLOCATED, False, job.reason or "Pending", message, gen
    )
    pending = PlaceholderJobStatus.model_validate(mirrored.dump() | {"message": message, "conditions": conditions})
    report = ReportPodGroup(False, names.PODGROUP_REASON_UNSCHEDULABLE, message)
    return (report, WriteStatus(pending))


def allocation(
    phj: Obj,
    members: Members,
    job: JobInfo,
    *,
    scheduler: str,
    status: PlaceholderJobStatus | None = None,
    now: float = 0.0,
    at_once: float | None = None,
) -> Plan:
    """Record the nodes, then release the pods; Running once every live member is bound.

    ``status``: the PlaceholderJob's status as the plan so far leaves it. ``at_once``: Slurm
    allocated at the submit, and the shell holds the submit's status unwritten until this
    (monotonic) time. A single pod is then released *before* anything is written, and status is
    written once, Allocated and Running together, when the pod is bound (or at ``at_once``, if
    the bind takes longer): one write instead of two. A crash meanwhile loses nothing: the job
    carries the PlaceholderJob's uid (adopted after a restart) and the pod its node and job id.
    Gangs always record their assignments before any member is released.
    """
    spec, status = spec_of(phj), status or status_of(phj)
    gen = phj["metadata"].get("generation")
    conditions = status.condition_dicts()
    current = {a.pod: a.node for a in status.assignments or []}
    assignment = st.assign_nodes(list(members), list(job.nodes), current)
    if assignment is None:
        message = f"Slurm allocated {len(job.nodes)} node(s) for {len(members)} pods"
        ended = _terminal_status(phj, names.PHASE_FAILED, "AllocationMismatch", message, conditions=conditions)
        return Plan((ended, Cancel(job.job_id)))
    nodes = st.compress_hostlist(job.nodes)
    live = st.holding_allocation(members)
    bound = st.all_bound(live, assignment)
    write: PlaceholderJobStatus | None = None
    if assignment != current or status.phase not in (names.PHASE_ALLOCATED, names.PHASE_RUNNING):
        message = f"Slurm job {job.job_id} allocated {nodes}"
        conditions = st.set_condition(conditions, names.COND_ALLOCATED, True, "Allocated", message, gen)
        write = PlaceholderJobStatus(
            job_id=job.job_id, phase=names.PHASE_ALLOCATED, slurm_state=job.state, reason="", message=message,
            node_list=nodes, pod_list=",".join(spec.pods),
            assignments=[{"pod": p, "node": n} for p, n in sorted(assignment.items())],
            start_time=status.start_time or now_iso(), conditions=conditions, **identity(job),
        )  # fmt: skip
        if status.expected_start is not None:
            write.expected_start = None  # the estimate of a wait that is over (removed by the merge patch)
    if bound and status.phase != names.PHASE_RUNNING:
        write = with_running(write, conditions, nodes, gen)
    unreleased = unreleased_members(live, assignment)
    single = len(live) == 1 and not is_gang(phj)
    waiting = write is not None and not bound and single and at_once is not None and now < at_once
    actions: list[Action] = []
    if write is not None and not waiting:
        actions.append(WriteStatus(write))  # before the release: a gang's assignments are its record
    # Release the pods only once every member has its node: gangs start together.
    actions.append(
        Release(job.job_id, unreleased, announce=at_once is None, unless_released=write if waiting else None)
    )
    scheduled = f"Slurm job {job.job_id} allocated {nodes} to the gang ({scheduler})"
    actions.append(ReportPodGroup(True, names.PODGROUP_REASON_SCHEDULED, scheduled))
    return Plan(tuple(actions), requeue=at_once - now if waiting and at_once is not None else None)


def release_rejected(phj: Obj, job_id: int, pod: str, error: str) -> Plan:
    """The API server refused to release a member pod, and will refuse it again (HTTP 422, checked
    twice): the PlaceholderJob fails with its message and the job is cancelled, so the allocation
    is never held in silence. Its live members are ended by the terminal rows of :func:`decide`."""
    message = f"the API server refused to release pod {pod} for Slurm job {job_id}, which is cancelled: {error}"
    return Plan((
        _terminal_status(phj, names.PHASE_FAILED, st.REASON_RELEASE_REJECTED, message),
        Cancel(job_id),
        Event(st.REASON_RELEASE_REJECTED, message, warning=True),
    ))  # fmt: skip


def with_running(
    write: PlaceholderJobStatus | None, conditions: list[Obj] | None, nodes: str, gen: int | None
) -> PlaceholderJobStatus:
    """``write`` (or nothing) and phase Running with Ready: every member is bound to its node."""
    message = f"every member pod is bound to its Slurm node ({nodes})"
    ready = st.set_condition(conditions, names.COND_READY, True, "PodsBound", message, gen)
    running = PlaceholderJobStatus(phase=names.PHASE_RUNNING, conditions=ready)
    return running if write is None else PlaceholderJobStatus.model_validate(write.dump() | running.dump())


def unreleased_members(live: Mapping[str, Obj], assignment: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """(pod, node) of the live members that are neither bound nor released to their node yet."""
    return tuple(
        (n, assignment[n]) for n, p in live.items()
        if not p.get("spec", {}).get("nodeName") and not st.pod_is_released(p, assignment[n])
    )  # fmt: skip


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
    SUBMIT_RETRY_SECONDS (slurmctld learns of a new association from slurmdbd a moment later); the
    second one of the same spec ends the PlaceholderJob Failed with Slurm's message (phase Failed
    in the returned status: the shell says so with Events, and the pods are ended).
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
            ended = _terminal_status(phj, names.PHASE_FAILED, reason, final, conditions=conditions)
            return ended.status
    why = REASON_ASSOCIATION_REJECTED if association else "SubmitRejected"
    return PlaceholderJobStatus(
        phase=names.PHASE_PENDING, reason=st.REASON_SUBMIT_REJECTED, message=message, submit_time=now_iso(),
        observed_generation=gen,
        conditions=st.set_condition(conditions, names.COND_SUBMITTED, False, why, message, gen),
    )  # fmt: skip


def _terminal_status(
    phj: Obj, phase: str, reason: str, message: str, job: JobInfo | None = None, conditions: list[Obj] | None = None
) -> WriteStatus:
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


def _leftovers(slurm: SlurmSide) -> tuple[Cancel, ...]:
    """Components of a heterogeneous job that live on while its leader does not (the leader
    component alone was cancelled): cancelling the leader no longer reaches them, so each is
    cancelled on its own."""
    if slurm.found is not None and not slurm.found.is_finished:
        return ()
    return tuple(Cancel(c.job_id) for c in slurm.components if not c.is_finished)


def _finalize(phj: Obj, slurm: SlurmSide, confirmed: Members | None) -> Plan:
    """A deleted PlaceholderJob: release its Slurm job, but never under a live pod.

    A terminating pod still runs on its node until its grace period ends or its containers exit,
    so the allocation outlives it: members that exist and have not reached a terminal phase are
    ended first (those not terminating yet), and the job is cancelled once every one is gone or
    terminal.
    """
    job_id, job = slurm.job_id, slurm.found
    live_job = job_id is not None and (job is None or not job.is_finished)
    leftovers = _leftovers(slurm)
    if live_job or slurm.others or leftovers:
        if confirmed is None:
            return Plan((ConfirmMembers(),))
        holding = list(st.holding_allocation(confirmed))
        if holding:
            name = phj["metadata"]["name"]
            what = f"Slurm job {job_id}" if job_id is not None else "its Slurm job"
            to_end = tuple(n for n in holding if not st.pod_terminating(confirmed[n] or {"metadata": {}}))
            end: tuple[Action, ...] = ()
            if to_end:
                end = (EndPods(to_end, "PlaceholderJobDeleted",
                               f"PlaceholderJob {name} was deleted, so its {what} is released"),)  # fmt: skip
            return Plan((*end, NoteWaiting(tuple(holding), job_id)), requeue=FINALIZE_RECHECK_SECONDS)
    actions: list[Action] = []
    if live_job:
        assert job_id is not None
        actions += [Cancel(job_id), Event("Cancelled", f"PlaceholderJob deleted: cancelled Slurm job {job_id}")]
    # Any other live job this PlaceholderJob made (a crash between submit and status).
    actions += [Cancel(o) for o in slurm.others]
    actions += leftovers
    actions.append(Finalize())
    return Plan(tuple(actions))
