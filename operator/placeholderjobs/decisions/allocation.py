"""A single job's allocation, for :func:`.lifecycle.decide`: record the nodes, release the pods,
Running once they are bound; a release the API server refuses for good fails the job. Pure."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime

import hostlist

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.conditions import Condition, set_condition
from slurm_bridge.kube.placeholderjob import Assignment, PlaceholderJob, PlaceholderJobStatus
from slurm_bridge.kube.times import iso
from slurm_bridge.operator.placeholderjobs.decisions.inputs import DEVICES_RETRY_SECONDS, Clock, Members
from slurm_bridge.operator.placeholderjobs.decisions.phjstatus import identity, terminal_status
from slurm_bridge.operator.placeholderjobs.decisions.plan import (
    Action,
    Cancel,
    DrainNodes,
    EndPods,
    Event,
    Held,
    Plan,
    Release,
    ReportPodGroup,
    WriteStatus,
)
from slurm_bridge.operator.placeholderjobs.decisions.pods import all_bound, holding_allocation, pod_is_released
from slurm_bridge.rules.allocationmatch import compare
from slurm_bridge.slurm.models import JobInfo


def allocation(
    phj: PlaceholderJob,
    members: Members,
    job: JobInfo,
    *,
    scheduler: str,
    now: Clock,
    status: PlaceholderJobStatus | None = None,
    held: Held | None = None,
    devices_missing: bool = False,
) -> Plan:
    """Record the nodes, then release the pods; Running once every live member is bound.

    ``status``: the PlaceholderJob's status as the plan so far leaves it. ``held``: Slurm
    allocated at the submit, and the submit's status is held back (see :class:`.plan.Held`). A
    single pod is then released *before* anything is written, and status is written once,
    Allocated and Running together, when the pod is bound (or at ``held.until``, if the bind takes
    longer): one write instead of two. A crash meanwhile loses nothing: the job carries the
    PlaceholderJob's uid (adopted after a restart) and the pod its node and job id. Gangs always
    record their assignments before any member is released. ``devices_missing``: the release
    found a member's DRA devices missing: the allocation is written at once, so the held pod's
    PlaceholderJob says which job holds it, and looked at again later.
    """
    spec, status = phj.spec, status or phj.status
    gen = phj.metadata.generation
    conditions = status.conditions
    current = {a.pod: a.node for a in status.assignments or []}
    live = holding_allocation(members)
    assignment = assign_nodes(list(members), list(job.nodes), current)
    short = not_held(phj, job, live, assignment is None, now, conditions)
    if short is not None or assignment is None:
        return short or Plan()  # (never empty: too few nodes is a plan)
    nodes = compress_hostlist(job.nodes)
    bound = all_bound(live, assignment)
    write: PlaceholderJobStatus | None = None
    if assignment != current or status.phase not in (names.PHASE_ALLOCATED, names.PHASE_RUNNING):
        write = allocated_status(status, job, nodes, ",".join(spec.pods), assignment, gen, now.wall)
        conditions = write.conditions
    if bound and status.phase != names.PHASE_RUNNING:
        write = with_running(write, conditions, nodes, gen)
    single = len(live) == 1 and not phj.is_gang()
    waiting = write is not None and not bound and single and held is not None and now.mono < held.until
    waiting = waiting and not devices_missing
    actions: list[Action] = []
    if write is not None and not waiting:
        actions.append(WriteStatus(write))  # before the release: a gang's assignments are its record
    if devices_missing:
        return Plan(tuple(actions), requeue=DEVICES_RETRY_SECONDS)
    # Release the pods only once every member has its node: gangs start together.
    actions.append(Release(job.job_id, unreleased_members(live, assignment), announce=held is None))
    scheduled = f"Slurm job {job.job_id} allocated {nodes} to the gang ({scheduler})"
    actions.append(ReportPodGroup(True, names.PODGROUP_REASON_SCHEDULED, scheduled))
    return Plan(tuple(actions), requeue=held.until - now.mono if waiting and held is not None else None)


def allocated_status(
    status: PlaceholderJobStatus,
    job: JobInfo,
    nodes: str,
    pod_list: str,
    assignment: Mapping[str, str],
    gen: int | None,
    wall: datetime,
) -> PlaceholderJobStatus:
    """Phase Allocated with each pod's node: the record written before any pod is released
    (``wall``: the start time, unless the status has one)."""
    message = f"Slurm job {job.job_id} allocated {nodes}"
    conditions = set_condition(status.conditions, names.COND_ALLOCATED, True, names.REASON_ALLOCATED, message, gen)
    assignments = [Assignment(pod=p, node=n) for p, n in sorted(assignment.items())]
    write = PlaceholderJobStatus(
        job_id=job.job_id,
        phase=names.PHASE_ALLOCATED,
        slurm_state=job.state,
        reason="",
        message=message,
        node_list=nodes,
        pod_list=pod_list,
        assignments=assignments,
        start_time=status.start_time or iso(wall),
        conditions=conditions,
        **identity(job),
    )
    if status.expected_start is not None:
        write.expected_start = None  # the estimate of a wait that is over (removed by the merge patch)
    return write


def not_held(
    phj: PlaceholderJob,
    job: JobInfo,
    live: Mapping[str, Obj],
    too_few: bool,
    now: Clock,
    conditions: list[Condition] | None,
) -> Plan | None:
    """Why the job cannot hold its live members (a plan that says so), or None: Slurm holds less
    than they need (slurm_bridge/rules/allocationmatch.py), or too few nodes (``too_few``: one
    distinct node per pod). Never a released mark while a member may run (:func:`held_short`)."""
    placed = placed_members(live)
    if job.signed and not placed:  # its read follows at once (it queues the PlaceholderJob)
        return Plan()
    verdict = compare(phj.spec.slurm, job, placed)
    if not verdict.matches:
        return held_short(phj, job, verdict.message(), placed, now, conditions)
    if not too_few:
        return None
    message = f"Slurm allocated {len(job.nodes)} node(s) for {len(phj.spec.pods)} pods"
    if placed:
        return held_short(phj, job, message, placed, now, conditions, reason=names.REASON_ALLOCATION_MISMATCH)
    ended = terminal_status(
        phj, names.PHASE_FAILED, names.REASON_ALLOCATION_MISMATCH, message, now.wall, conditions=conditions
    )
    return Plan((ended, Cancel(job.job_id)))


def held_short(
    phj: PlaceholderJob,
    job: JobInfo,
    why: str,
    placed: Mapping[str, str],
    now: Clock,
    conditions: list[Condition] | None = None,
    *,
    reason: str | None = None,
) -> Plan:
    """Slurm holds less for the job than its pods need (``why``; its owner changed it in Slurm:
    slurm_bridge/rules/allocationmatch.py): :func:`short_plan`, draining the nodes it gave away
    under its placed members (:func:`lost_drain`)."""
    drains = (lost_drain(job, placed),) if placed else ()
    return short_plan(phj, job, why, drains, placed, now, conditions, reason=reason)


def lost_drain(job: JobInfo, placed: Mapping[str, str]) -> DrainNodes:
    """The nodes of ``placed`` (pod -> node) Slurm gave away from job ``job``, each naming its
    pod; where it holds them all (less of each), every pod's node."""
    lost = {pod: node for pod, node in placed.items() if node not in job.nodes} or placed
    return DrainNodes(job.job_id, tuple(sorted((node, pod) for pod, node in lost.items())))


def short_plan(
    phj: PlaceholderJob,
    job: JobInfo,
    why: str,
    drains: Sequence[DrainNodes],
    placed: Mapping[str, str],
    now: Clock,
    conditions: list[Condition] | None = None,
    *,
    reason: str | None = None,
) -> Plan:
    """The PlaceholderJob of job ``job`` (a heterogeneous job's leader: the whole job) fails,
    saying why, and is not submitted again: the job's owner changed it on purpose, and a new job
    would undo that.

    No member released yet (``placed`` empty): none is released onto it, and the job is cancelled
    at once (nothing runs on it). Members released or bound: they may run on what Slurm gave away,
    so ``drains`` come first (the nodes drained in Slurm, naming each pod: the handoff loop lifts
    the drain once the pod stopped), then every placed pod is ended; the terminal rows cancel the
    job once every member ended, marked released only then."""
    if not placed:
        message = f"{why}: no pod was released onto it, and the job is cancelled"
        reason = reason or names.REASON_ALLOCATION_SHORT
        ended = terminal_status(phj, names.PHASE_FAILED, reason, message, now.wall, job, conditions=conditions)
        return Plan((ended, Event(reason, message, warning=True), Cancel(job.job_id)), requeue=0.0)
    pods = ", ".join(f"{node} for pod {pod}" for d in drains for node, pod in d.pods)
    # No drain: no placed pod is in a part that differs (a heterogeneous job's other component's
    # pods ended already), yet its parts end together.
    drained = (
        f"its pods may run on what Slurm gave away, so Slurm node(s) are drained ({pods}) and the pods ended"
        if pods
        else "the job's components end together, so its pods are ended"
    )
    message = f"{why}: {drained}; the job is cancelled once they stopped"
    reason = reason or names.REASON_ALLOCATION_CHANGED
    ended = terminal_status(phj, names.PHASE_FAILED, reason, message, now.wall, job, conditions=conditions)
    live = tuple(sorted(placed))
    return Plan((*drains, ended, Event(reason, message, warning=True), EndPods(live, reason, message)), requeue=0.0)


def placed_members(live: Mapping[str, Obj]) -> dict[str, str]:
    """pod -> Slurm node of the live members whose containers run or may soon run there: bound,
    or released to it (the scheduler binds it there next). The node is the one the release named
    (the Slurm node), else the one the pod is bound to."""
    placed: dict[str, str] = {}
    for name, pod in live.items():
        bound = (pod.get("spec") or {}).get("nodeName")
        named = objects.annotations(pod).get(names.ANN_SLURM_NODE)
        if bound or (named and pod_is_released(pod, named)):
            placed[name] = str(named or bound)
    return placed


def release_rejected(phj: PlaceholderJob, job_id: int, pod: str, error: str, wall: datetime) -> Plan:
    """The API server refused to release a member pod, and will refuse it again (HTTP 422, checked
    twice): the PlaceholderJob fails with its message and the job is cancelled, so the allocation
    is never held in silence. Its live members are ended by the terminal rows of ``decide``, at
    once."""
    message = f"the API server refused to release pod {pod} for Slurm job {job_id}, which is cancelled: {error}"
    return Plan(
        (
            terminal_status(phj, names.PHASE_FAILED, names.REASON_RELEASE_REJECTED, message, wall),
            Cancel(job_id, released=False),  # members released before the refusal may run: the handoff holds
            Event(names.REASON_RELEASE_REJECTED, message, warning=True),
        ),
        requeue=0.0,
    )


def with_running(
    write: PlaceholderJobStatus | None, conditions: Sequence[Condition] | None, nodes: str, gen: int | None
) -> PlaceholderJobStatus:
    """``write`` (or nothing) and phase Running with Ready: every member is bound to its node."""
    message = f"every member pod is bound to its Slurm node ({nodes})"
    ready = set_condition(conditions, names.COND_READY, True, names.REASON_PODS_BOUND, message, gen)
    running = PlaceholderJobStatus(phase=names.PHASE_RUNNING, conditions=ready)
    return running if write is None else write.merged(running)


def unreleased_members(live: Mapping[str, Obj], assignment: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """(pod, node) of the live members that are neither bound nor released to their node yet."""
    return tuple(
        (n, assignment[n])
        for n, p in live.items()
        if not p.get("spec", {}).get("nodeName") and not pod_is_released(p, assignment[n])
    )


def assign_nodes(pods: Sequence[str], nodes: Sequence[str], current: Mapping[str, str]) -> dict[str, str] | None:
    """One distinct allocated node per pod; keeps assignments already made. None if too few nodes."""
    result = {p: n for p, n in current.items() if p in pods and n in nodes}
    free = [n for n in nodes if n not in result.values()]
    for pod in sorted(p for p in pods if p not in result):
        if not free:
            return None
        result[pod] = free.pop(0)
    return result


def compress_hostlist(nodes: Sequence[str]) -> str:
    return _compressed(tuple(nodes)) if nodes else ""


@functools.lru_cache(maxsize=1024)
def _compressed(nodes: tuple[str, ...]) -> str:
    """Slurm's short form of a node list, once per list: each decision about a running job asks."""
    return str(hostlist.collect_hostlist(list(nodes)))
