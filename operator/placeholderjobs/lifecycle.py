"""The PlaceholderJob <-> Slurm job lifecycle as one pure decision: observed state in, a Plan out.

``decide(phj, slurm, members, now)`` reads the PlaceholderJob, what the poller's view says about
its Slurm job (known, vanished, not seen yet, or no job at all) and its member pods, and returns
the actions that bring the two sides together, in order. It does no I/O: the shell
(``sync.phjsync``) gathers the inputs, applies the actions and re-queues. The table of cases is in
docs/design/placeholderjob-lifecycle.md ("The PlaceholderJob decision table");
tests/unit/operator/placeholderjobs/test_lifecycle.py checks every phase x Slurm state x member state,
and the crash-recovery cases.

Some actions end a plan because what follows depends on what only the shell can learn; the shell
then decides again with it. ``ConfirmMembers``: members the watch cache lacks are read with a
GET (a deletion is never inferred from a cold cache): ``confirmed``. ``Submit``: Slurm's answer
(``outcome``: Placed, Refused, Unavailable). ``Release``: a member's DRA devices missing, or a
release the API server refuses (``outcome``: DevicesMissing, ReleaseRefused). A status held back
for one write (``held``, see ``decisions.plan.Held``) is an input too, and the plan says what stays
held after it.

What differs by the job's shape (a single pod's, a gang's, a CompositePodGroup's heterogeneous
job: when to submit, how to follow the job, what the submit records) is asked of the shape,
through one interface (``shapes.shape.JobShape``); what every shape shares is decided here. The
pieces: ``decisions.pending`` (a job in Slurm's queue), ``decisions.allocation`` (a job's nodes),
``decisions.phjstatus`` (the statuses written).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob, PlaceholderJobStatus
from slurm_bridge.operator.placeholderjobs.decisions.allocation import allocation, release_rejected
from slurm_bridge.operator.placeholderjobs.decisions.bindtimeout import bind_deadline, not_bound
from slurm_bridge.operator.placeholderjobs.decisions.handoff import (
    ending_at,
    preempted,
    preempted_part,
    time_limit_reached,
)
from slurm_bridge.operator.placeholderjobs.decisions.inputs import (
    QUIET_QUEUE_SECONDS,
    UNWRITTEN_ALLOCATION_SECONDS,
    Clock,
    Follow,
    Handoff,
    Members,
    Tenancy,
    Told,
)
from slurm_bridge.operator.placeholderjobs.decisions.pending import pending_report
from slurm_bridge.operator.placeholderjobs.decisions.phjstatus import (
    end_phases,
    identity,
    pods_end_phase,
    refused_unsent,
    rejected_status,
    submitted_status,
    terminal_status,
)
from slurm_bridge.operator.placeholderjobs.decisions.plan import (
    Action,
    AddFinalizer,
    Cancel,
    ConfirmMembers,
    DevicesMissing,
    EndPods,
    Event,
    Finalize,
    ForgetUncertain,
    Held,
    NoteWaiting,
    Outcome,
    Placed,
    Plan,
    Refused,
    ReleaseRefused,
    RequestFullList,
    SubmitFailed,
    TellPods,
    Unavailable,
    Updated,
    UpdateRefused,
    WriteStatus,
)
from slurm_bridge.operator.placeholderjobs.decisions.pods import (
    all_ended,
    highest_exit_code,
    holding_allocation,
    live_members,
    pod_terminating,
)
from slurm_bridge.operator.placeholderjobs.decisions.vanished import Departed, hold_release
from slurm_bridge.operator.placeholderjobs.shapes.registry import shape_of
from slurm_bridge.operator.placeholderjobs.shapes.shape import Followed
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import JobOutcome
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide
from slurm_bridge.slurm.models import JobSettings, PartitionLimits

__all__ = ["Clock", "Handoff", "Situation", "SlurmSide", "Tenancy", "Told", "decide"]

# A spec Slurm refused is submitted again this long after the refusal (or at once when it changes).
SUBMIT_RETRY_SECONDS = 30.0
# A deleted PlaceholderJob whose pods still run is looked at again this often (pod events sooner).
FINALIZE_RECHECK_SECONDS = 5.0
# A single pod's job allocated at its submit: its status is written once the pod is bound, or after
# this many seconds (when the scheduler is slower), whichever comes first (see allocation()).
UNWRITTEN_SECONDS = UNWRITTEN_ALLOCATION_SECONDS
# A queued job's submit is announced (Event Submitted, its status, the pods told Slurm's reason)
# only if it still waits this long: Slurm starts most queued jobs within a scheduling pass (0.2 s
# to 1 s with the settings of docs/configuration.md), and such a pod then costs the writes of one
# allocated at once (bench/log, "API writes per bridge pod").
QUEUED_QUIET_SECONDS = QUIET_QUEUE_SECONDS


# ---- the decision -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Situation:
    """Everything :func:`decide` decides on, gathered once by the shell (``sync.phjsync``); each
    round of one reconcile is the same situation with the PlaceholderJob as written, the members
    as confirmed and the last action's outcome replaced.

    ``members``: each member's pod from the watch cache (None: not there, or another incarnation);
    ``confirmed``: the same after a GET of the missing ones (see ConfirmMembers); ``scheduler``:
    the bridge's scheduler name (PodGroup messages say it); ``held``: a status not written yet
    (decided on as if written, and written with the plan's first status write); ``told``: what the
    waiting pods were last told about their pending job (see :func:`.pending.pending`);
    ``tenancy``: the namespace's policy, asked before a submit or job update (None: no policy
    applies, as before tenancy); ``outcome``: the result of the action that ended the last plan;
    ``handoff``: the margin and OverTimeLimits the time-limit rows need (None: no such row);
    ``settings``, ``partitions``: what the job asks Slurm for and the partitions' limits, read by
    the shell when the spec changed (:mod:`.decisions.specupdate`); ``bind_timeout``: config
    ``bindTimeoutSeconds`` (:mod:`.decisions.bindtimeout`; None: an unbound allocation is kept);
    ``departed``: what the shell knows of the members that are gone (:mod:`.decisions.vanished`:
    a job is not released under a member that vanished while it ran; a member gone and not in it
    is taken to have vanished).
    """

    phj: PlaceholderJob
    slurm: SlurmSide
    members: Members
    now: Clock
    scheduler: str
    confirmed: Members | None = None
    held: Held | None = None
    told: Told | None = None
    tenancy: Tenancy | None = None
    outcome: Outcome | None = None
    handoff: Handoff | None = None
    settings: JobSettings | None = None
    partitions: Mapping[str, PartitionLimits] | None = None
    bind_timeout: float | None = None
    departed: Departed | None = None


def decide(s: Situation) -> Plan:
    """The PlaceholderJob's next steps in situation ``s`` (docs/design/placeholderjob-lifecycle.md,
    "The PlaceholderJob decision table")."""
    if isinstance(s.outcome, Placed):
        return after_submit(s.phj, s.outcome, s.members, s.now, s.scheduler)
    if s.held is not None and s.phj.status.job_id is not None:
        s = replace(s, held=None)  # written meanwhile (e.g. by a previous leader)
    if s.held is not None:  # decided on as the PlaceholderJob will be once it is written
        s = replace(s, phj=s.phj.with_status(s.phj.status.merged(s.held.status)))
    plan = _decide(s)
    seen = s.confirmed if s.confirmed is not None else s.members
    plan = hold_release(plan, s.phj, s.slurm, seen, s.departed or {}, s.handoff or Handoff(), s.now)
    return _hold(plan, s.held)


def _hold(plan: Plan, held: Held | None) -> Plan:
    """The held status goes into the plan's first status write; without one it stays held."""
    if held is None:
        return plan
    actions = list(plan.actions)
    for i, action in enumerate(actions):
        if isinstance(action, WriteStatus):
            actions[i] = WriteStatus(held.status.merged(action.status))
            return Plan(tuple(actions), plan.requeue)
    kept = plan.held or held  # a shape may hold it on other terms (a queued job that started)
    return Plan(plan.actions, plan.requeue, held=None if any(isinstance(a, Finalize) for a in actions) else kept)


def _decide(s: Situation) -> Plan:
    phj, slurm, members, now, confirmed = s.phj, s.slurm, s.members, s.now, s.confirmed
    scheduler, told, tenancy, outcome, held = s.scheduler, s.told, s.tenancy, s.outcome, s.held
    if not slurm.synced:
        return Plan(requeue=slurm.poll_period)  # adopt, never resubmit, after a restart
    match outcome:
        case Refused():
            return after_refusal(phj, outcome, now)
        case Unavailable(maybe_applied=maybe):
            return Plan((SubmitFailed(maybe),))
        case ReleaseRefused(job_id=job_id, pod=pod, error=error):
            return release_rejected(phj, job_id, pod, error, now.wall)
    if phj.deleted:
        return _finalize(phj, slurm, confirmed)
    pre: tuple[Action, ...] = ()
    if names.FINALIZER_PLACEHOLDER_JOB not in (phj.metadata.finalizers or []):
        pre = (AddFinalizer(),)
    status = phj.status
    if status.phase in names.TERMINAL_PHASES:
        return _chain(pre, _terminal(status, slurm, members, confirmed))
    if slurm.job_id is None:
        return _chain(pre, _no_job(phj, slurm, members, now, confirmed, tenancy))
    if status.job_id != slurm.job_id:  # found by its uid: a crash between submit and status
        found = PlaceholderJobStatus(job_id=slurm.job_id, phase=names.PHASE_PENDING, **identity(slurm.job))
        pre = (*pre, WriteStatus(shape_of(phj).adopted(found, slurm)))
        status = status.model_copy(update={"job_id": slurm.job_id, "phase": names.PHASE_PENDING})
    follow = Follow(
        scheduler,
        told,
        tenancy,
        held,
        isinstance(outcome, DevicesMissing),
        handoff=s.handoff,
        settings=s.settings,
        partitions=s.partitions,
        updated=outcome if isinstance(outcome, Updated | UpdateRefused) else None,
        bind_timeout=s.bind_timeout,
    )
    return _chain(pre, _with_job(phj, status, slurm, members, now, confirmed, follow))


def _members_ended(
    phj: PlaceholderJob, slurm: SlurmSide, members: Members, now: Clock, confirmed: Members | None
) -> Plan | None:
    """The rows every shape shares: a member the cache lacks is read first; once every member
    ended (Kubernetes -> Slurm), the PlaceholderJob ends and the shape's cancels end its job.
    None: some member lives, the shape follows the job."""
    ended = all_ended(members, confirmed)
    if ended is None:
        return Plan((ConfirmMembers(),))
    if not ended:
        return None
    phase, reason, message = pods_end_phase(end_phases(members))
    ending = terminal_status(phj, phase, reason, message, now.wall)
    outcome = JobOutcome(phase, highest_exit_code(members))  # for sacct: Slurm records CANCELLED
    cancels = tuple(replace(a, outcome=outcome) if isinstance(a, Cancel) else a for a in shape_of(phj).cancels(slurm))
    return Plan((ending, *cancels, Event(reason, message)))


def _chain(pre: tuple[Action, ...], plan: Plan) -> Plan:
    return Plan((*pre, *plan.actions), plan.requeue, plan.held)


def _terminal(status: PlaceholderJobStatus, slurm: SlurmSide, members: Members, confirmed: Members | None) -> Plan:
    """An ended PlaceholderJob: cancel its job, end its pods; a cancel lost in a crash is done
    again. A running job is cancelled only once every member ended (confirmed): the handoff --
    a job Slurm preempts, or whose time limit comes, is ended by the bridge this way, its pods
    first. A pending job holds nothing and is cancelled at once."""
    live = live_members(members)
    end: tuple[Action, ...] = ()
    if live:
        end = (EndPods(live, status.reason or names.REASON_SLURM_JOB_ENDED, status.message or ""),)
    job = slurm.found
    cancel: tuple[Action, ...] = ()
    if job is not None and not job.is_finished:
        if not job.is_pending:
            ended = all_ended(members, confirmed)
            if ended is None:
                return Plan((*end, ConfirmMembers()))
            if not ended:
                return Plan(end)  # their containers still run: pod events bring us back
        # A cancel a crash lost after the end was written: the pods' outcome as that plan had it.
        outcome = JobOutcome(status.phase, highest_exit_code(members)) if status.phase else None
        cancel = (Cancel(job.job_id, outcome=outcome),)
    return Plan((*cancel, *_leftovers(slurm), *end))


def _no_job(
    phj: PlaceholderJob,
    slurm: SlurmSide,
    members: Members,
    now: Clock,
    confirmed: Members | None,
    tenancy: Tenancy | None,
) -> Plan:
    """No job yet: end with the pods, wait after a refusal or an uncertain submit, else submit."""
    ended = all_ended(members, confirmed)
    if ended is None:
        return Plan((ConfirmMembers(),))
    if ended:
        return Plan((terminal_status(phj, *pods_end_phase(end_phases(members)), now.wall),))
    wait = phj.resubmit_wait(SUBMIT_RETRY_SECONDS, now.wall)
    if wait > 0:
        return Plan(requeue=wait)  # Slurm refused this very spec moments ago: watch events must not hammer it
    pre: tuple[Action, ...] = ()
    if slurm.uncertain_since is not None:
        if slurm.last_full_at <= slurm.uncertain_since:
            return Plan((RequestFullList(),), requeue=slurm.poll_period)
        pre = (ForgetUncertain(),)
    return _chain(pre, shape_of(phj).submit(phj, members, tenancy, now))


# ---- after a submit ---------------------------------------------------------------------------
def after_submit(phj: PlaceholderJob, placed: Placed, members: Members, now: Clock, scheduler: str) -> Plan:
    """The job's id goes into status at once; with its allocation when Slurm allocated at once.

    An allocation at once releases the pods now, and the submit's status is held back to be
    written with the allocation's (a single pod's once it is bound: :func:`.allocation.allocation`).
    No Event: the status says it, and the scheduler posts Scheduled on each pod (as for any pod);
    Events are for what is unusual, such as waiting in Slurm's queue: then the pods also hear why,
    when Slurm already said (status records the reason, so the next decision does not tell it again).
    """
    job, shape = placed.job, shape_of(phj)
    submitted = submitted_status(phj, placed.job_id, job, placed.request, now.wall, components=placed.components)
    submitted = shape.placed(phj, placed, submitted)
    if job is not None and job.is_running and job.nodes and shape.plain:
        held = Held(submitted, now.mono + UNWRITTEN_SECONDS)
        view = phj.with_status(phj.status.merged(submitted))
        return _hold(allocation(view, members, job, scheduler=scheduler, now=now, held=held), held)
    if shape.plain and (job is None or job.is_pending) and QUEUED_QUIET_SECONDS > 0:
        # Queued: said only if it waits (QUEUED_QUIET_SECONDS; the shape's follow decides then).
        return Plan(requeue=QUEUED_QUIET_SECONDS, held=Held(submitted, now.mono + QUEUED_QUIET_SECONDS, queued=True))
    report = (pending_report(job, members, now.wall),) if job is not None and job.is_pending and job.reason else ()
    return Plan(
        (
            Event(names.REASON_SUBMITTED, f"{submitted.message}: waiting in Slurm's queue"),
            *report,
            WriteStatus(submitted),
        )
    )


def after_refusal(phj: PlaceholderJob, refused: Refused, now: Clock) -> Plan:
    """Slurm refused the job: status and Warning Events say why; submitted again after
    SUBMIT_RETRY_SECONDS (Slurm's limits may change: a partition up, a QOS raised), unless it was
    the second refusal for the association (the status write then brings the PlaceholderJob back
    Failed, and its pods are ended). One the bridge made itself for good (``final``): Failed at once,
    its pods ended."""
    if refused.final:
        return refused_unsent(phj, refused.present, refused.final, refused.message, now.wall)
    rejected = rejected_status(phj, refused.message, now.wall, association=refused.association)
    final = rejected.phase == names.PHASE_FAILED
    reason = names.REASON_SLURM_ASSOCIATION_REJECTED if final else names.REASON_SUBMIT_REJECTED
    shown = rejected.message or refused.message
    tell: tuple[Action, ...] = ()
    if refused.present:
        told = reason if final else names.REASON_SLURM_SUBMIT_REJECTED
        tell = (TellPods(refused.present, told, shown, warning=True),)
    return Plan(
        (WriteStatus(rejected), Event(reason, shown, warning=True), *tell),
        requeue=None if final else SUBMIT_RETRY_SECONDS,
    )


# ---- a job exists -----------------------------------------------------------------------------
def _with_job(
    phj: PlaceholderJob,
    status: PlaceholderJobStatus,
    slurm: SlurmSide,
    members: Members,
    now: Clock,
    confirmed: Members | None,
    follow: Follow,
) -> Plan:
    """A job exists (or existed): its shape follows it, or ends it when every member pod ended.

    Before the shape, the handoff's rows (every shape alike, :mod:`.decisions.handoff`): a running
    job Slurm preempts, or whose time limit comes, has its pods ended by the bridge first; then an
    allocation kube-scheduler did not bind within ``bindTimeoutSeconds`` is released
    (:mod:`.decisions.bindtimeout`)."""
    job_id = slurm.job_id
    assert job_id is not None
    parts = slurm.components or ((slurm.job,) if slurm.job is not None else ())
    holding = bool(holding_allocation(members))
    victim = preempted_part(parts)
    if victim is not None and holding:
        return preempted(phj, job_id, victim, members, now)
    at = ending_at(parts, members, follow.handoff) if follow.handoff is not None and holding else None
    if at is not None and now.wall >= at:
        return time_limit_reached(phj, job_id, at, members, now)
    # Not while the allocation's status is held back (its Allocated condition not written yet).
    bind_by = bind_deadline(phj, parts, members, follow.bind_timeout) if follow.held is None else None
    if bind_by is not None and now.wall >= bind_by:
        return not_bound(phj, job_id, parts, members, now)
    plan = _members_ended(phj, slurm, members, now, confirmed)
    if plan is None:
        plan = shape_of(phj).follow(Followed(phj, status, slurm, members, now, follow))
    for when in (at, bind_by):
        if when is not None:
            wait = max((when - now.wall).total_seconds(), 0.0)
            if plan.requeue is None or wait < plan.requeue:
                plan = Plan(plan.actions, wait, plan.held)
    return plan


# ---- deleted ----------------------------------------------------------------------------------
def _leftovers(slurm: SlurmSide) -> tuple[Cancel, ...]:
    """Components of a heterogeneous job that live on while its leader does not (the leader
    component alone was cancelled): cancelling the leader no longer reaches them, so each is
    cancelled on its own."""
    if slurm.found is not None and not slurm.found.is_finished:
        return ()
    return tuple(Cancel(c.job_id) for c in slurm.components if not c.is_finished)


def _finalize(phj: PlaceholderJob, slurm: SlurmSide, confirmed: Members | None) -> Plan:
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
        holding = list(holding_allocation(confirmed))
        if holding:
            name = phj.metadata.name
            what = f"Slurm job {job_id}" if job_id is not None else "its Slurm job"
            to_end = tuple(n for n in holding if not pod_terminating(confirmed[n] or {"metadata": {}}))
            end: tuple[Action, ...] = ()
            if to_end:
                end = (
                    EndPods(
                        to_end,
                        names.REASON_PHJ_DELETED,
                        f"PlaceholderJob {name} was deleted, so its {what} is released",
                    ),
                )
            return Plan((*end, NoteWaiting(tuple(holding), job_id)), requeue=FINALIZE_RECHECK_SECONDS)
    actions: list[Action] = []
    if live_job:
        assert job_id is not None
        actions += [
            Cancel(job_id),
            Event(names.REASON_CANCELLED, f"PlaceholderJob deleted: cancelled Slurm job {job_id}"),
        ]
    # Any other live job this PlaceholderJob made (a crash between submit and status).
    actions += [Cancel(o) for o in slurm.others]
    actions += leftovers
    actions.append(Finalize())
    return Plan(tuple(actions))
