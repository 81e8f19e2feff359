"""Preempted work comes back at its place (docs/colocation.md, "Preemption"). Pure.

Slurm requeues a preempted native batch job, which keeps its place in the queue; it cannot requeue
an external job, so a preempted pod's workload makes new pods and the bridge submits a new job.
These rules decide whether that new job gets the preempted one's place:

- **Who comes back**: the same workload, recognised by what only Kubernetes sets -- the uid of the
  workload object the pod's controller chain leads to (a JobSet, a Job, a PodGroup...), as the
  bridge read it from the API server -- and the place within it: the gang's PlaceholderJob name
  (one per JobSet, LeaderWorkerSet group, PodGroup), or a Job's completion index. Labels and names
  are never part of it, so a workload that copies another's cannot take its place. A bare pod has
  no controller to make it again: it never comes back.
- **When**: only where Slurm was asked for it. The preempted job's QOS (else the cluster's)
  ``PreemptMode``: ``REQUEUE`` means "come back at your place"; ``CANCEL`` means "do not come
  back" (the pods end as failed, for the workload's policy to count); ``SUSPEND`` and ``GANG``
  cannot be done to an external job (a start-up finding).
- **For how long**: a bounded number of returns (``preemption.maxReturns``), counted across the
  workload's successive jobs; the next preemption sends it to the back. A count, not a time,
  because a time bound lets a workload preempted often within it keep the head of the queue
  forever, and a count is what a user can reason about ("three returns at its place"). The
  replacement must come within ``preemption.returnWindowSeconds`` of the preemption: later it is
  new work.
- **At which place**: the preempted job's priority, set on the new job by the bridge (an operator),
  which Slurm then keeps (an operator-set priority no longer ages). Jobs queued while the
  preempted one ran had a lower priority than it, so the new job goes ahead of them again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.slurm.models import JobRequest

Mode = Literal["REQUEUE", "CANCEL", "SUSPEND", "GANG", "OFF"]


@dataclass(frozen=True)
class ResumePolicy:
    """The site's rule (config ``preemption``): whether preempted work keeps its place at all, for
    how many returns, and how soon its replacement must come."""

    keep_place: bool = True
    max_returns: int = 3
    window_seconds: int = 600


@dataclass(frozen=True)
class Place:
    """A preempted job's place, recorded when Slurm preempts it and taken by its replacement.

    ``workload``: the key (:func:`workload_key`); ``returns``: how many times this workload has
    already come back at its place before this preemption; ``taken_by``: the PlaceholderJob that
    took it ("" until then)."""

    workload: str
    job_id: int
    priority: int
    preempted_at: str  # RFC 3339
    by: str = ""  # the likely preemptor, as the SlurmJobPreempted Event says
    returns: int = 0
    taken_by: str = ""

    def encode(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @property
    def next_returns(self) -> int:
        """The count a job that takes this place carries into its own preemption."""
        return self.returns + 1


def decode_place(raw: str | None) -> Place | None:
    """A recorded place; None for anything that is not one (never trusted beyond its shape)."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
        place = Place(
            workload=str(data["workload"]),
            job_id=int(data["job_id"]),
            priority=int(data["priority"]),
            preempted_at=str(data["preempted_at"]),
            by=str(data.get("by", "")),
            returns=int(data.get("returns", 0)),
            taken_by=str(data.get("taken_by", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None
    return place if place.job_id > 0 and place.priority >= 0 and place.returns >= 0 else None


def workload_key(namespace: str, group_kind: str, group_uid: str, slot: str) -> str | None:
    """Who comes back: the workload object's uid and the slot within it. None for a bare pod (its
    group is the pod itself: nothing makes it again) or a group without a uid."""
    if group_kind == "Pod" or not group_uid:
        return None
    return f"{namespace}/{group_uid}/{slot}"


def single_slot(pod: Mapping[str, Any]) -> str:
    """The slot of a pod that is its own group under a controller: an Indexed Job's completion
    index (set by the Job controller at create); "" otherwise (any replacement takes any place)."""
    annotations = objects.annotations(pod)
    index = annotations.get(names.ANN_K8S_JOB_COMPLETION_INDEX)
    return f"index-{index}" if isinstance(index, str) and index.isdigit() else ""


def preempt_mode(qos_mode: Iterable[str], cluster_mode: Iterable[str]) -> Mode:
    """How Slurm was asked to preempt the job: its QOS's ``PreemptMode`` unless that defers to the
    cluster's (empty or ``CLUSTER``), else slurm.conf's. ``OFF``: preemption is off."""
    modes = {m.upper() for m in qos_mode} - {"CLUSTER", "WITHIN"}
    if not modes:
        modes = {m.upper() for m in cluster_mode} - {"WITHIN"}
    for mode in ("SUSPEND", "GANG", "REQUEUE", "CANCEL"):
        if mode in modes:
            return mode
    return "OFF" if "OFF" in modes else "CANCEL"


@dataclass(frozen=True)
class AtPreemption:
    """What a preemption leaves: the place to record (None: nothing comes back at its place), and
    the words for the PlaceholderJob's Event; ``disrupted``: the pods end with ``DisruptionTarget``
    (a workload's podFailurePolicy may ignore it) -- not under CANCEL, whose failures count."""

    place: Place | None
    message: str
    disrupted: bool = True


def at_preemption(
    policy: ResumePolicy,
    workload: str | None,
    mode: Mode,
    *,
    job_id: int,
    priority: int | None,
    preempted_at: datetime,
    by: str,
    returns: int,
) -> AtPreemption:
    """Whether a preempted job's workload keeps its place (module docstring)."""
    if mode == "CANCEL":
        return AtPreemption(
            None,
            "its QOS preempts by CANCEL: the work does not come back at its place (its pods end as failed)",
            disrupted=False,
        )
    if workload is None:
        return AtPreemption(None, "a pod without a controller is not made again: it does not come back")
    if not policy.keep_place:
        return AtPreemption(None, "the bridge keeps no place for preempted work (preemption.returnToPlace)")
    if mode != "REQUEUE":
        return AtPreemption(None, f"its QOS preempts by {mode}, which Slurm cannot do to a pod's job")
    if priority is None:
        return AtPreemption(None, "Slurm did not say the job's priority: its replacement queues anew")
    if returns >= policy.max_returns:
        return AtPreemption(
            None,
            f"it came back at its place {returns} times already (preemption.maxReturns {policy.max_returns}): "
            "its replacement queues at the back",
        )
    place = Place(workload, job_id, max(priority, 1), preempted_at.isoformat(), by, returns)
    return AtPreemption(
        place,
        f"its replacement comes back at this job's place (priority {place.priority}) if made within "
        f"{policy.window_seconds}s (return {returns + 1} of {policy.max_returns})",
    )


def expired(place: Place, policy: ResumePolicy, now: datetime) -> bool:
    """A place not taken within the window is new work's to take; a taken one is kept as long
    (a restart between taking it and submitting finds it again)."""
    try:
        at = datetime.fromisoformat(place.preempted_at)
    except ValueError:
        return True
    return now - at > timedelta(seconds=policy.window_seconds)


def choose_place(places: Iterable[Place], taker: str, policy: ResumePolicy, now: datetime) -> Place | None:
    """The place ``taker`` (a PlaceholderJob's name) takes of its workload's: the one it took
    already (a restart), else the best free one (highest priority, then the earliest preempted) that
    has not expired."""
    live = [p for p in places if not expired(p, policy, now)]
    mine = [p for p in live if p.taken_by == taker]
    if mine:
        return mine[0]
    free = sorted((p for p in live if not p.taken_by), key=lambda p: (-p.priority, p.preempted_at, p.job_id))
    return replace(free[0], taken_by=taker) if free else None


def at_place(request: JobRequest, place: Place) -> JobRequest:
    """The request with the place's priority (a priority delegated to the tenant that is higher
    stays: the place is a floor, never a demotion)."""
    return request.model_copy(update={"priority": max(place.priority, request.priority or 0)})


def resumed_message(place: Place, policy: ResumePolicy) -> str:
    """The new job's Event: whose place it has and why."""
    by = f"; {place.by}" if place.by else ""
    return (
        f"resumed at the place of Slurm job {place.job_id} (preempted at {place.preempted_at}{by}): priority "
        f"{place.priority}, return {place.next_returns} of {policy.max_returns}"
    )
