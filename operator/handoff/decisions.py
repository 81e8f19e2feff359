"""The handoff loop's decisions (pure): for each ``handoff-<job>-<node>`` reservation the project's
EpilogSlurmctld made when Slurm ended a bridge job, and each node the loop drained, what to do now.

- A reservation whose job's pods no longer run on its node is deleted: their containers stopped
  (the pod is gone, or Succeeded/Failed), so the cores may go to native work.
- A pod that still runs there once its grace period and the margin have passed since the job
  ended gets its node drained in Slurm, with a reason that names it
  (:func:`slurm_bridge.handoff.drain_reason`): never silently shared, even after the reservation
  ends (its EndTime leaves one more margin for the drain to take effect).
- A node drained by the loop whose named pod no longer runs there is undrained (UNDRAIN), unless
  another pod is overdue there (the drain then names that one). Only drains with the loop's own
  reason prefix are ever lifted.
- Only this bridge's reservations are looked at (its bridgeId is in their names): another
  bridge's are left to that bridge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurm_bridge.handoff import HandoffDrain, HandoffReservation, drain_of, drain_reason, pod_grace_seconds
from slurm_bridge.operator.placeholderjobs.decisions.pods import Obj, pod_ended
from slurm_bridge.slurm.models import NodeInfo


@dataclass(frozen=True)
class Release:
    """Delete the reservation: no pod of its job runs on its node any more."""

    reservation: HandoffReservation


@dataclass(frozen=True)
class Held:
    """Keep the reservation; tell these pods (once) that their job's cores are held for them."""

    reservation: HandoffReservation
    pods: tuple[Obj, ...]


@dataclass(frozen=True)
class Drain:
    """Drain ``node`` in Slurm for ``pod``, which outlived its grace period and the margin."""

    node: str
    pod: Obj
    job_id: int
    reason: str


@dataclass(frozen=True)
class Undrain:
    """Lift the loop's own drain of ``node``: the pod it named no longer runs there."""

    node: str
    drain: HandoffDrain


Step = Release | Held | Drain | Undrain


def running_on(pod: Obj, node: str) -> bool:
    """Whether the pod's containers may still run on ``node`` (bound there, not ended)."""
    return not pod_ended(pod) and (pod.get("spec") or {}).get("nodeName") == node


def decide(
    reservations: Sequence[HandoffReservation],
    pods_by_job: Mapping[int, Sequence[Obj]],
    slurm_nodes: Mapping[str, NodeInfo],
    now: datetime,
    margin: int,
) -> list[Step]:
    """The steps for the reservations and the loop's drains, given each job's pods (by the
    ``slurm-jobid`` label the release gives them) and Slurm's nodes."""
    steps: list[Step] = []
    overdue: dict[str, list[tuple[Obj, int]]] = {}  # node -> (pod, job id), oldest first
    for r in sorted(reservations, key=lambda r: (r.start_time or now, r.name)):
        here = [p for p in pods_by_job.get(r.job_id, ()) if running_on(p, r.node)]
        if not here:
            steps.append(Release(r))
            continue
        steps.append(Held(r, tuple(here)))
        ended = r.start_time or now
        for pod in here:
            if now >= ended + timedelta(seconds=pod_grace_seconds(pod) + margin):
                overdue.setdefault(r.node, []).append((pod, r.job_id))
    drained: dict[str, HandoffDrain] = {}
    for name, info in slurm_nodes.items():
        d = drain_of(info.reason) if "DRAIN" in info.states else None
        if d is not None:
            drained[name] = d
    for node, late in overdue.items():
        named = drained.get(node)
        if named is not None and any(_is(p, named) for p, _ in late):
            continue  # drained for a pod still overdue there
        pod, job_id = late[0]
        meta = pod["metadata"]
        grace = pod_grace_seconds(pod)
        steps.append(Drain(node, pod, job_id, drain_reason(meta["namespace"], meta["name"], job_id, grace, margin)))
    for node, d in drained.items():
        if node in overdue:
            continue
        if not any(_is(p, d) and running_on(p, node) for p in pods_by_job.get(d.job_id, ())):
            steps.append(Undrain(node, d))
    return steps


def _is(pod: Obj, drain: HandoffDrain) -> bool:
    meta = pod["metadata"]
    return bool(meta.get("namespace") == drain.namespace and meta.get("name") == drain.pod)


def preemption_checks(
    running: Sequence[tuple[int, str]], checked_at: Mapping[int, float], now: float, every: float, limit: int
) -> list[int]:
    """Which running jobs (job id, QOS) of a preemptable QOS to read again now, to see Slurm's
    ``preempt_time`` (a preempted job stays RUNNING: the state polls cannot tell): those not read
    for ``every`` seconds, the longest unread first, at most ``limit``."""
    due = [(checked_at.get(j, 0.0), j) for j, _ in running if now - checked_at.get(j, 0.0) >= every]
    return [j for _, j in sorted(due)[:limit]]
