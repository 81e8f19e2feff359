"""The PlaceholderJob controller's Plan: what :func:`.lifecycle.decide` asks the shell
(:mod:`.phjsync`) to do, in order. Pure data; each action is idempotent when applied."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_bridge.placeholderjob import PlaceholderJobStatus
from slurm_bridge.slurm.models import JobRequest


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
    job_id: int


@dataclass(frozen=True)
class EndPods:
    """End these member pods as Kubernetes' evictors do (DisruptionTarget, then fail or delete)."""

    pods: tuple[str, ...]
    reason: str
    message: str


@dataclass(frozen=True)
class NoteWaiting:
    """Say once (an Event) that a deleted PlaceholderJob's job waits for these pods."""

    pods: tuple[str, ...]
    job_id: int | None


@dataclass(frozen=True)
class Fence:
    """Mark a gang as submitting with a resourceVersion test; stop (and retry) if it changed."""


@dataclass(frozen=True)
class Submit:
    """Allocate now or queue (see jobs.Placer); ``present``: live members told of a refusal.

    ``components``: a heterogeneous job's component requests in offset order (``request`` is
    component 0's): always queued, Slurm starts such a job only in a backfill pass."""

    request: JobRequest
    present: tuple[str, ...]
    components: tuple[JobRequest, ...] = ()


@dataclass(frozen=True)
class UpdateJob:
    job_id: int
    request: JobRequest


@dataclass(frozen=True)
class Release:
    """Prepare the pods' DRA claims, then name each pod's node and lift its gate (stop if a device
    is missing)."""

    job_id: int
    pods: tuple[tuple[str, str], ...]  # (pod, node)
    # Tell each pod with an Event: only when the job waited in Slurm's queue. An allocation at
    # submit is said by the PlaceholderJob's status and the scheduler's own Scheduled Event.
    announce: bool = True
    # The allocation's status, when it waits for the bind (lifecycle.allocation): written at once
    # if a member cannot be released (a DRA device is missing), so the held pod's PlaceholderJob
    # says which job holds it.
    unless_released: PlaceholderJobStatus | None = None
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


Action = (
    AddFinalizer | ConfirmMembers | WriteStatus | Event | ReportPending | Cancel | EndPods | NoteWaiting | Fence
    | Submit | UpdateJob | Release | ReportPodGroup | RequestFullList | ForgetUncertain | Finalize
)  # fmt: skip


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    requeue: float | None = None  # look again after this many seconds (None: on the next event)
