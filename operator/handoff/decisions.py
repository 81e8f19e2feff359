"""The handoff loop's decisions (pure): for each ``handoff-<job>_<bridge>_<node>`` reservation the
project's EpilogSlurmctld made when Slurm ended a bridge job, each node the loop drained, and each
bridge pod that runs on while its job ended, what to do now (docs/colocation.md, "The handoff").

- A reservation whose job's containers stopped on its node is deleted: every pod of the job there
  ended (Succeeded/Failed), or left after it ended (:mod:`..runtime.departures`). A pod that
  *vanished* (its object removed while it was not terminal: a forced delete, PodGC, a deleted
  Node) may still run for its grace period: the reservation is kept until the time it was noticed
  plus its grace and the margin. Where the loop knows nothing of the job's pods on the node (they
  went while the operator was away) it keeps the reservation until it first saw it plus the
  longest grace (``handoff.maxGracePeriodSeconds``) and the margin: fail safe.
- A pod that still runs there once its grace period and the margin have passed since the job
  ended gets its node drained in Slurm, with a reason that names it
  (:func:`slurm_bridge.rules.handoff.drain_reason`): never silently shared.
- **Fail safe**: a bridge pod that runs (bound, not terminal; or vanished within its grace) on a
  node where native work can run while its Slurm job ended, with no reservation of that job on
  that node, gets its node drained at once (:func:`slurm_bridge.rules.handoff.unheld_drain_reason`): the
  script could not reserve, or the hold ended while the operator was away. Which pods those are is
  decided by :func:`unheld`, from a job state the loop has seen twice (:class:`Unheld`).
- A node drained by this bridge's loop whose named pod's containers stopped is undrained (UNDRAIN),
  unless another pod is late there (the drain then names that one). Only drains whose reason
  names this bridge exactly are ever lifted; a node someone else drained is never drained over
  (native work is kept off it already, and its reason stays the owner's).
- Only this bridge's reservations are looked at (their names carry its exact bridgeId).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurm_bridge.core.objects import Obj
from slurm_bridge.operator.runtime.departures import Departure, slurm_job_of
from slurm_bridge.rules.handoff import (
    HandoffDrain,
    HandoffReservation,
    drain_of,
    drain_reason,
    pod_grace_seconds,
    unheld_drain_reason,
)
from slurm_bridge.rules.podphase import pod_ended
from slurm_bridge.slurm.models import NodeInfo


@dataclass(frozen=True)
class Rules:
    """What the loop decides with: its bridge's id (the names it owns), ``handoff.marginSeconds``
    and ``handoff.maxGracePeriodSeconds`` (the hold of a pod the loop knows nothing of)."""

    bridge_id: str
    margin: int
    max_grace: int


@dataclass(frozen=True)
class Release:
    """Delete the reservation: no container of its job runs on its node any more."""

    reservation: HandoffReservation


@dataclass(frozen=True)
class Held:
    """Keep the reservation; tell these pods (once) that their job's cores are held for them."""

    reservation: HandoffReservation
    pods: tuple[Obj, ...]


@dataclass(frozen=True)
class Drain:
    """Drain ``node`` in Slurm for ``pod``: it outlived its grace period and the margin, or it runs
    with nothing holding its cores (``unheld``)."""

    node: str
    pod: Obj
    job_id: int
    reason: str
    unheld: bool = False


@dataclass(frozen=True)
class Undrain:
    """Lift the loop's own drain of ``node``: the pod it named no longer runs there."""

    node: str
    drain: HandoffDrain


@dataclass(frozen=True)
class Unheld:
    """A bridge pod whose containers may run on ``node`` while its Slurm job ended, and no
    reservation of that job holds the node."""

    node: str
    pod: Obj
    job_id: int


Step = Release | Held | Drain | Undrain


def running_on(pod: Obj, node: str) -> bool:
    """Whether the pod's containers may still run on ``node`` (bound there, not ended)."""
    return not pod_ended(pod) and (pod.get("spec") or {}).get("nodeName") == node


def _known_on(node: str, pods: Sequence[Obj], departed: Sequence[Departure]) -> bool:
    """Whether the loop knows how the job's pods on ``node`` are (present, or seen leaving)."""
    return any((p.get("spec") or {}).get("nodeName") == node for p in pods) or any(d.node == node for d in departed)


def runs_until(
    node: str, pods: Sequence[Obj], departed: Sequence[Departure], first_seen: datetime | None, rules: Rules
) -> datetime | None:
    """Until when a job's containers may run on ``node`` when none of its pods runs there: its
    vanished pods' deadlines; with nothing known of its pods there, ``first_seen`` (when the loop
    first saw the hold) plus the longest grace and the margin. None: they stopped."""
    ends = [u for d in departed if d.node == node and (u := d.runs_until(rules.margin)) is not None]
    if not _known_on(node, pods, departed) and first_seen is not None:
        ends.append(first_seen + timedelta(seconds=rules.max_grace + rules.margin))
    return max(ends, default=None)


def decide(
    reservations: Sequence[HandoffReservation],
    pods_by_job: Mapping[int, Sequence[Obj]],
    slurm_nodes: Mapping[str, NodeInfo],
    now: datetime,
    rules: Rules,
    *,
    departed: Mapping[int, Sequence[Departure]] | None = None,
    first_seen: Mapping[str, datetime] | None = None,
    unheld: Sequence[Unheld] = (),
) -> list[Step]:
    """The steps for the reservations, the loop's drains and the unheld pods, given each job's pods
    (by the ``slurm-jobid`` label the release gives them) and departed pods, Slurm's nodes, and when
    the loop first saw each reservation (by name) and each of its drains (by node)."""
    departed, first_seen = departed or {}, first_seen or {}
    steps: list[Step] = []
    late: dict[str, list[tuple[Obj, int, str, bool]]] = {}  # node -> (pod, job id, reason, unheld)
    for r in sorted(reservations, key=lambda r: (r.start_time or now, r.name)):
        pods, gone = pods_by_job.get(r.job_id, ()), departed.get(r.job_id, ())
        here = [p for p in pods if running_on(p, r.node)]
        if not here:
            until = runs_until(r.node, pods, gone, first_seen.get(r.name), rules)
            steps.append(Held(r, ()) if until is not None and now < until else Release(r))
            continue
        steps.append(Held(r, tuple(here)))
        ended = r.start_time or now
        for pod in here:
            grace = pod_grace_seconds(pod)
            if now >= ended + timedelta(seconds=grace + rules.margin):
                meta = pod["metadata"]
                why = drain_reason(rules.bridge_id, meta["namespace"], meta["name"], r.job_id, grace, rules.margin)
                late.setdefault(r.node, []).append((pod, r.job_id, why, False))
    for u in unheld:
        meta = u.pod["metadata"]
        why = unheld_drain_reason(rules.bridge_id, meta["namespace"], meta["name"], u.job_id)
        late.setdefault(u.node, []).append((u.pod, u.job_id, why, True))
    return steps + _drains(late, pods_by_job, slurm_nodes, now, rules, departed, first_seen)


def _drains(
    late: Mapping[str, list[tuple[Obj, int, str, bool]]],
    pods_by_job: Mapping[int, Sequence[Obj]],
    slurm_nodes: Mapping[str, NodeInfo],
    now: datetime,
    rules: Rules,
    departed: Mapping[int, Sequence[Departure]],
    first_seen: Mapping[str, datetime],
) -> list[Step]:
    """Drain each node with a late pod (unless drained for one already, or by someone else); lift
    the loop's drains whose pod's containers stopped."""
    steps: list[Step] = []
    ours: dict[str, HandoffDrain] = {}
    foreign: set[str] = set()
    for name, info in slurm_nodes.items():
        if "DRAIN" not in info.states:
            continue
        d = drain_of(info.reason, rules.bridge_id)
        if d is not None:
            ours[name] = d
        else:
            foreign.add(name)
    for node, here in late.items():
        named = ours.get(node)
        if node in foreign or (named is not None and any(_is(p, named) for p, *_ in here)):
            continue  # drained already: for a pod still late there, or by its owner
        pod, job_id, why, unheld_ = here[0]
        steps.append(Drain(node, pod, job_id, why, unheld=unheld_))
    for node, d in ours.items():
        if node in late:
            continue
        pods, gone = pods_by_job.get(d.job_id, ()), departed.get(d.job_id, ())
        if any(_is(p, d) and running_on(p, node) for p in pods):
            continue
        mine = [g for g in gone if _is(g.pod, d)]
        until = runs_until(node, [p for p in pods if _is(p, d)], mine, first_seen.get(drain_key(node)), rules)
        if until is None or now >= until:
            steps.append(Undrain(node, d))
    return steps


def drain_key(node: str) -> str:
    """How the loop's first sighting of its drain of ``node`` is keyed beside reservation names."""
    return f"drain {node}"


def _is(pod: Obj, drain: HandoffDrain) -> bool:
    meta = pod["metadata"]
    return bool(meta.get("namespace") == drain.namespace and meta.get("name") == drain.pod)


def unheld(
    pods: Iterable[Obj],
    departed: Iterable[Departure],
    ended_jobs: Collection[int],
    held: Collection[tuple[int, str]],
    native_nodes: Collection[str],
    now: datetime,
    margin: int,
) -> list[Unheld]:
    """The fail safe's candidates: bridge pods whose containers may run (bound and not ended, or
    vanished within their grace and the margin) on a node where native work can run
    (``native_nodes``: Slurm nodes with a slurmd, not EXTERNAL), while their Slurm job ended
    (``ended_jobs``: as the caller could tell for sure) and no reservation of that job holds that
    node (``held``: (job id, node))."""
    out: list[Unheld] = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName") or ""
        job_id = slurm_job_of(pod)
        if (
            job_id is not None
            and job_id in ended_jobs
            and node in native_nodes
            and not pod_ended(pod)
            and (job_id, node) not in held
        ):
            out.append(Unheld(node, pod, job_id))
    for d in departed:
        until = d.runs_until(margin)
        live = until is not None and now < until
        if (
            live
            and d.job_id is not None
            and d.job_id in ended_jobs
            and d.node in native_nodes
            and (d.job_id, d.node) not in held
        ):
            out.append(Unheld(d.node, d.pod, d.job_id))
    return out


def preemption_checks(
    running: Sequence[tuple[int, str]], checked_at: Mapping[int, float], now: float, every: float, limit: int
) -> list[int]:
    """Which running jobs (job id, QOS) of a preemptable QOS to read again now, to see Slurm's
    ``preempt_time`` (a preempted job stays RUNNING: the state polls cannot tell): those not read
    for ``every`` seconds, the longest unread first, at most ``limit``."""
    due = [(checked_at.get(j, 0.0), j) for j, _ in running if now - checked_at.get(j, 0.0) >= every]
    return [j for _, j in sorted(due)[:limit]]
