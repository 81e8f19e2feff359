"""The PlaceholderJob controller's Plan: what :func:`.lifecycle.decide` asks the shell
(:mod:`.phjsync`) to do, in order, and what the shell reports back when an action's result
decides the rest (an ``Outcome``: the submit's, the release's). Pure data; each action is
idempotent when applied."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from slurm_bridge.kube.placeholderjob import PlaceholderJobStatus
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import JobOutcome
from slurm_bridge.slurm.models import JobInfo, JobRequest


@dataclass(frozen=True)
class AddFinalizer:
    pass


@dataclass(frozen=True)
class ConfirmMembers:
    """GET the members the cache lacks, then decide again with ``confirmed`` (last in a plan)."""


@dataclass(frozen=True)
class WriteStatus:
    status: PlaceholderJobStatus


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class ReportPending:
    """Event ``SlurmJobPending`` on these waiting member pods and the PlaceholderJob: why Slurm
    keeps the job pending and when it expects to start it. The shell notes when (in memory), to
    rate-limit the Events of a moving expected start (lifecycle.EXPECTED_START_REPORT_SECONDS)."""

    pods: tuple[str, ...]
    reason: str  # Slurm's reason code ("" when it gave none)
    message: str


@dataclass(frozen=True)
class Cancel:
    """Cancel the job (a heterogeneous job through its leader). ``released``: no member pod runs
    on its allocation any more, so the handoff's EpilogSlurmctld must hold nothing: the shell
    marks the job's admin_comment released first (slurmjobs/jobref.py). False where pods may still run (a refused
    release of a gang): the script's reservation then holds their cores until they stop.
    ``outcome``: how the pods ended, written with the mark (``sacct -o AdminComment``)."""

    job_id: int
    released: bool = True
    outcome: JobOutcome | None = None


@dataclass(frozen=True)
class EndPods:
    """End these member pods as Kubernetes' evictors do (DisruptionTarget, then fail or delete)."""

    pods: tuple[str, ...]
    reason: str
    message: str


@dataclass(frozen=True)
class DrainNodes:
    """Drain each Slurm node at once in the handoff's form, naming the member pod on it
    (rules/handoff.py ``changed_drain_reason``): Slurm no longer holds for job ``job_id`` what the
    pod uses, so nothing native may start beside it. The handoff loop lifts each drain once its pod
    stopped; a node someone else drained is left as it is."""

    job_id: int
    pods: tuple[tuple[str, str], ...]  # (node, pod)


@dataclass(frozen=True)
class EndPreempted:
    """Slurm chose the job as a preemption victim (its QOS GraceTime runs): the shell looks for
    the likely preemptor (a bounded read, docs/colocation.md), then posts ``SlurmJobPreempted`` on
    the PlaceholderJob and ends these member pods with it (as :class:`EndPods`)."""

    job: JobInfo
    pods: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class NoteWaiting:
    """Say once (an Event) that a deleted PlaceholderJob's job waits for these pods."""

    pods: tuple[str, ...]
    job_id: int | None


@dataclass(frozen=True)
class Fence:
    """Mark a gang as submitting (``status``) with a resourceVersion test; stop (and retry) if it
    changed."""

    status: PlaceholderJobStatus


@dataclass(frozen=True)
class Submit:
    """Allocate now or queue (:class:`.submit.Placer`); ``present``: live members told of a
    refusal. Last in a plan: the shell decides again with the outcome (Placed, Refused,
    Unavailable).

    ``components``: a heterogeneous job's component requests in offset order (``request`` is
    component 0's): always queued, Slurm starts such a job only in a backfill pass."""

    request: JobRequest
    present: tuple[str, ...]
    components: tuple[JobRequest, ...] = ()


@dataclass(frozen=True)
class UpdateJob:
    """Send the spec of ``generation`` to the pending job (the whole request: Slurm applies an
    update all or nothing), with its ``name``; ``unlimited_time``: no time limit (the partition's
    default when the spec names none). Last in a plan: the shell decides again with the outcome
    (Updated, UpdateRefused). ``as_user``: the job's owner when it is a tenant's (the update is
    sent as that user, so Slurm checks it with that user's rights: docs/security.md); None: the
    bridge's own job."""

    job_id: int
    request: JobRequest
    generation: int = 0
    name: str | None = None
    unlimited_time: bool = False
    as_user: str | None = None


@dataclass(frozen=True)
class Release:
    """Prepare the pods' DRA claims, then name each pod's node and lift its gate. Should a device
    be missing or the API server refuse a pod for good, the plan stops there and the shell decides
    again with that outcome (DevicesMissing, ReleaseRefused)."""

    job_id: int
    pods: tuple[tuple[str, str], ...]  # (pod, node)
    # Tell each pod with an Event: only when the job waited in Slurm's queue. An allocation at
    # submit is said by the PlaceholderJob's status and the scheduler's own Scheduled Event.
    announce: bool = True
    # A heterogeneous job (``job_id`` its leader): (pod, its component's job id, the offset).
    het: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True)
class ReportPodGroup:
    scheduled: bool
    reason: str
    message: str


@dataclass(frozen=True)
class RequestFullList:
    """Ask the poller for a full job list (it finds a job by admin_comment)."""


@dataclass(frozen=True)
class ForgetUncertain:
    """A full list taken after an uncertain submit did not show a job: none was made."""


@dataclass(frozen=True)
class Finalize:
    """Remove the finalizer and forget the PlaceholderJob's memory (submits, Events, PodGroup)."""


@dataclass(frozen=True)
class TellPods:
    """An Event on each of these member pods."""

    pods: tuple[str, ...]
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class TellGroup:
    """An Event on the workload whose annotations configure the job (``spec.group``: a Job, a
    JobSet, a PodGroup, ...), where a change of them was made; none when that is a member pod."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class RecordVanished:
    """Record on the PlaceholderJob (annotation ``ANN_VANISHED_PODS``, merged) these member pods
    that vanished while they ran, each with the time its containers have stopped at the latest: its
    job's release waits for them, across a restart too (:mod:`.vanished`)."""

    until: tuple[tuple[str, datetime], ...]
    message: str


@dataclass(frozen=True)
class SubmitFailed:
    """Slurm could not be reached for a submit: the poller forgets it, and when the submit may
    still have made a job (``maybe_applied``), nothing is submitted again before a full list says."""

    maybe_applied: bool


Action = (
    AddFinalizer
    | ConfirmMembers
    | WriteStatus
    | Event
    | ReportPending
    | Cancel
    | EndPods
    | DrainNodes
    | EndPreempted
    | NoteWaiting
    | Fence
    | Submit
    | UpdateJob
    | Release
    | ReportPodGroup
    | RequestFullList
    | ForgetUncertain
    | Finalize
    | TellPods
    | TellGroup
    | RecordVanished
    | SubmitFailed
)


# ---- what the shell reports back --------------------------------------------------------------
@dataclass(frozen=True)
class Held:
    """A status not written yet, and the monotonic time by which it must be: the submit's, when
    Slurm allocated a single pod's job at once (lifecycle.allocation) or queued it (``queued``).
    Written with the next status write. In memory only: lost in a crash, it is rebuilt from Slurm
    (the job is adopted by its uid), so it saves a write and is never state."""

    status: PlaceholderJobStatus
    until: float
    # Held while the job waits in Slurm's queue (lifecycle.after_submit): a job Slurm starts by
    # ``until`` costs no write and no Event about waiting; one still pending then is announced.
    queued: bool = False


@dataclass(frozen=True)
class Placed:
    """Slurm took the job: its id, its record read right after (None: not readable yet) and, for a
    heterogeneous job, its components as read (``parts``)."""

    job_id: int
    job: JobInfo | None
    request: JobRequest
    components: tuple[JobRequest, ...] = ()
    parts: tuple[JobInfo, ...] = ()


@dataclass(frozen=True)
class Refused:
    """Slurm refused the job with ``message``; ``association``: for its association, QOS, wckey or
    accounting policy; ``present``: the live members to tell. ``final``: the bridge refused it
    itself, for good (no retry: Failed with this reason)."""

    message: str
    association: bool
    present: tuple[str, ...]
    final: str = ""


@dataclass(frozen=True)
class Unavailable:
    """Slurm could not be reached; ``maybe_applied``: the submit may have made a job all the same."""

    maybe_applied: bool


@dataclass(frozen=True)
class DevicesMissing:
    """A member's DRA devices are not published yet: no member was released."""


@dataclass(frozen=True)
class ReleaseRefused:
    """The API server refused ``pod``'s release for good (HTTP 422, checked twice) with ``error``."""

    job_id: int
    pod: str
    error: str


@dataclass(frozen=True)
class Updated:
    """Slurm took the update of spec ``generation``."""

    generation: int


@dataclass(frozen=True)
class UpdateRefused:
    """Slurm refused the update of spec ``generation`` with ``message`` (and changed nothing);
    ``started``: because the job no longer waits (Slurm allocated it meanwhile)."""

    generation: int
    message: str
    started: bool = False


Outcome = Placed | Refused | Unavailable | DevicesMissing | ReleaseRefused | Updated | UpdateRefused


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    requeue: float | None = None  # look again after this many seconds (None: on the next event)
    held: Held | None = None  # what stays unwritten once the plan is applied
