"""The handoff's shared rules (pure): the scope the bridge tells the project's EpilogSlurmctld in a
job's admin_comment, the reservations and drains it reads back, and the grace periods it can
hold. Used by the webhook (admission of a pod's grace period), the PlaceholderJob controller (the
submit's handoff scope, a time limit's ending) and the handoff loop (reservations, drains).

Why this shape (docs/colocation.md, "The handoff"): Slurm 26.05 frees an external job's cores in
the job's completion path, so nothing in Slurm holds them for a pod still shutting down. Where the
end is foreseen (the pods ended, a time limit, a preemption with GraceTime) the bridge ends the
pods first and releases the job itself, exactly; where it is not (scancel by someone else, a node
failure) the EpilogSlurmctld script reserves the job's cores (``handoff-<job id>_<bridgeId>_<node>``)
for at most its configured ceiling, and the bridge deletes the reservation once the pod's
containers stopped, or drains the node if the pod outlives its grace period and the margin.

Names and reasons are matched by the EXACT bridge id (``_`` and ``[...]`` delimit it: bridge ids
are DNS labels, slurm_bridge/core/config.py): two bridges on one Slurm cluster never take each other's
reservations or lift each other's drains, even where one id is a prefix of the other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.rules.dra.recorded import recorded_requests
from slurm_bridge.slurm.models import JobRequest, ReservationRecord

# Kubernetes' default terminationGracePeriodSeconds.
DEFAULT_GRACE_SECONDS = 30

_RESERVATION = re.compile(
    rf"^{re.escape(names.HANDOFF_RESERVATION_PREFIX)}(?P<job>\d+)_(?P<bridge>[a-z0-9-]+)_(?P<node>[^\s_][^\s]*)$"
)
_DRAIN = re.compile(
    rf"^{re.escape(names.HANDOFF_DRAIN_REASON_PREFIX)}(?P<bridge>[a-z0-9-]+)\]: "
    r"pod (?P<ns>[^/\s]+)/(?P<pod>\S+) of Slurm job (?P<job>\d+) "
)


def pod_grace_seconds(pod: dict[str, Any]) -> int:
    """The pod's grace period, as the kubelet applies it when the pod is deleted."""
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return int(value) if isinstance(value, int) and value >= 0 else DEFAULT_GRACE_SECONDS


@dataclass(frozen=True)
class HandoffReservation:
    """A reservation the script made (``handoff-<job id>_<bridge id>_<node>``): the ended job's id
    and the node it holds cores on; ``start_time``: when the job ended."""

    name: str
    job_id: int
    node: str
    end_time: datetime | None = None
    start_time: datetime | None = None


def reservation_name(job_id: int, bridge_id: str, node: str) -> str:
    """What the script names the reservation for a job's node (slurm-hooks/)."""
    return f"{names.HANDOFF_RESERVATION_PREFIX}{job_id}_{bridge_id}_{node}"


def reservation_of(
    name: str, bridge_id: str, *, end_time: datetime | None = None, start_time: datetime | None = None
) -> HandoffReservation | None:
    """The handoff reservation named ``name`` for one of ``bridge_id``'s jobs; None for any other
    reservation (another bridge's too, whatever its id shares with this one: each bridge releases
    only its own)."""
    m = _RESERVATION.match(name)
    if m is None or m.group("bridge") != bridge_id:
        return None
    return HandoffReservation(name, int(m.group("job")), m.group("node"), end_time, start_time)


def reservations_of(found: Iterable[ReservationRecord], bridge_id: str) -> list[HandoffReservation]:
    """This bridge's handoff reservations among Slurm's (the client lists them all, as plain data)."""
    out = []
    for r in found:
        mine = reservation_of(r.name, bridge_id, end_time=r.end_time, start_time=r.start_time)
        if mine is not None:
            out.append(mine)
    return out


def drain_prefix(bridge_id: str) -> str:
    """The start of every handoff drain reason of ``bridge_id`` (``slurm-bridge-handoff[<id>]:``)."""
    return f"{names.HANDOFF_DRAIN_REASON_PREFIX}{bridge_id}]:"


def drain_reason(bridge_id: str, namespace: str, pod: str, job_id: int, grace: int, margin: int) -> str:
    """The Slurm node reason of a handoff drain for a pod that outlived its hold: it names the pod
    (an administrator reads it in ``sinfo -R``) and the bridge, and is the bridge's record of the
    drain (it lifts only a drain of its own, :func:`drain_of`)."""
    return (
        f"{drain_prefix(bridge_id)} pod {namespace}/{pod} of Slurm job {job_id} still runs "
        f"{grace}s+{margin}s after the job ended"
    )


def unheld_drain_reason(bridge_id: str, namespace: str, pod: str, job_id: int) -> str:
    """The reason of the fail-safe drain: the pod runs, its job ended, and no reservation holds its
    cores (the script could not reserve, or the hold ended while the operator was away)."""
    return (
        f"{drain_prefix(bridge_id)} pod {namespace}/{pod} of Slurm job {job_id} still runs "
        "after the job ended, and nothing holds its CPUs"
    )


def changed_drain_reason(bridge_id: str, namespace: str, pod: str, job_id: int) -> str:
    """The reason of the drain of a pod's node when Slurm no longer holds for its job what the
    pod uses (its owner moved or shrank it: rules/allocationmatch.py): lifted by the handoff loop
    once the pod stopped, as its own drains."""
    return (
        f"{drain_prefix(bridge_id)} pod {namespace}/{pod} of Slurm job {job_id} runs on "
        "resources Slurm no longer holds for the job"
    )


@dataclass(frozen=True)
class HandoffDrain:
    namespace: str
    pod: str
    job_id: int


def drain_of(reason: str, bridge_id: str) -> HandoffDrain | None:
    """The pod and job a handoff drain of ``bridge_id`` names; None for any other reason (another
    bridge's drain too)."""
    m = _DRAIN.match(reason or "")
    if m is None or m.group("bridge") != bridge_id:
        return None
    return HandoffDrain(m.group("ns"), m.group("pod"), int(m.group("job")))


def grace_refusal(grace: int, limit: int, what: str) -> str | None:
    """Why a pod's grace period cannot be held (None: it can): the handoff holds a job's cores for
    at most the configured grace period (and the bridge QOS's GraceTime is sized for it)."""
    if grace <= limit:
        return None
    return (
        f"{what}: terminationGracePeriodSeconds {grace} is longer than the bridge can hold a Slurm "
        f"job's CPUs for a terminating pod (handoff.maxGracePeriodSeconds: {limit}); "
        f"use at most {limit} seconds, or ask the administrator to raise the limit (docs/colocation.md)"
    )


def grace_problems(spec: dict[str, Any] | Any, limit: int, where: str) -> list[str]:
    """Admission's check of a pod spec (or a pod template's) at ``where``: its grace period must be
    one the handoff can hold (``handoff.maxGracePeriodSeconds``)."""
    value = spec.get("terminationGracePeriodSeconds") if hasattr(spec, "get") else None
    if not isinstance(value, int):
        return []
    problem = grace_refusal(value, limit, f"{where}.terminationGracePeriodSeconds")
    return [problem] if problem else []


def ending_starts_at(end_time: datetime, over_time_limit: timedelta, grace: int, margin: int) -> datetime:
    """When the bridge starts ending a job's pods ahead of its time limit.

    Slurm never ends a job before ``end_time`` and does so at the earliest ``over_time_limit``
    after it (then within its ~30 s check). Starting at ``end_time`` gives the pods their whole
    time limit when the OverTimeLimit covers their grace period and the margin; else they start
    early enough to have stopped before Slurm may end the job.
    """
    return min(end_time, end_time + over_time_limit - timedelta(seconds=grace + margin))


def job_handoff_scope(request: JobRequest, pods: Iterable[dict[str, Any]]) -> str:
    """The scope the EpilogSlurmctld holds a job's nodes in (its admin_comment's ``handoff``). All
    of a node's free cores (``node``) where the pod's exact cores or the node's exclusivity
    matter -- a whole-node job, a time-shared (MCS) one, a pod bound to exact ``dra.cpu`` devices
    -- since a reservation takes the lowest free cores, not the job's; and where the job holds
    GRES (GPUs, MIG slices, shards: a GPU's memory is freed only when the pod's process exits, and
    a GRES reservation needs the GRES in AccountingStorageTRES, docs/gpus.md); else the job's CPU
    count (``cores``)."""
    node = (
        bool(request.exclusive) or bool(request.mcs_label) or bool(request.gres) or any(_exact_cores(p) for p in pods)
    )
    return names.HANDOFF_SCOPE_NODE if node else names.HANDOFF_SCOPE_CORES


def _exact_cores(pod: dict[str, Any]) -> bool:
    try:
        return "dra.cpu" in recorded_requests(objects.annotations(pod))
    except ValueError:
        return False
