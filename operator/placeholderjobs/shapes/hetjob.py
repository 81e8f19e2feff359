"""A CompositePodGroup's heterogeneous Slurm job: the decisions of the composite job shape
(:mod:`.composite`), which ``lifecycle.decide`` hands over through the shape's interface. Pure,
like the rest of the decision table (docs/design/placeholderjob-lifecycle.md, "Heterogeneous jobs");
``sync.phjsync`` applies the plans.

The job has a component per child PodGroup (``spec.components``, offset = place in the list).
Slurm lists each component as a job of its own (the leader, component 0, has the job's id; the
poller's view holds the others as ``SlurmSide.components``), starts them together, and cancels
them all when the leader is cancelled. So:

- **submit** once at least ``spec.minComponents`` components exist and every component has all
  its member pods; the TenantPolicy judges each component's request;
- **all or nothing**: pods are released only when every component is RUNNING with nodes; each
  pod gets a node of its own component's, recorded with its offset before any pod is touched;
- **each component holds what its pods need**: the tenant owns the job in Slurm and may change
  any component on its own (``scontrol update JobId=<leader+offset>``), so each component's record
  is compared with what the bridge asked for it (rules/allocationmatch.py), before the release
  (any component short: nothing released, the job cancelled) and on every read of the running job
  (the short components' lost nodes drained naming their pods, and every pod ended);
- **ending any part ends the whole**: a component that ends (``scancel`` of the leader, or of
  one component, a time limit, a node failure) or a leader that vanishes ends every member pod
  and cancels what is left of the job; every member pod ending cancels it (the leader, hence
  every part). A component missing from the view while its leader lives is looked for (a full
  list), never taken for ended: Slurm purges a job's components together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from slurm_bridge import names
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.conditions import set_condition
from slurm_bridge.kube.placeholderjob import (
    Assignment,
    Component,
    ComponentStatus,
    PlaceholderJob,
    PlaceholderJobStatus,
)
from slurm_bridge.kube.times import iso
from slurm_bridge.operator.placeholderjobs.decisions.allocation import (
    assign_nodes,
    compress_hostlist,
    lost_drain,
    placed_members,
    short_plan,
    unreleased_members,
    with_running,
)
from slurm_bridge.operator.placeholderjobs.decisions.inputs import (
    DEVICES_RETRY_SECONDS,
    SUBMIT_VISIBILITY_GRACE,
    TENANCY_WAIT_SECONDS,
    Clock,
    Members,
    Tenancy,
)
from slurm_bridge.operator.placeholderjobs.decisions.pending import follow_pending, mirror
from slurm_bridge.operator.placeholderjobs.decisions.phjstatus import (
    end_of_job,
    fencing,
    identity,
    job_ended,
    refused_by_policy,
    terminal_status,
    waiting_for_pods,
)
from slurm_bridge.operator.placeholderjobs.decisions.plan import (
    Action,
    Cancel,
    Plan,
    Release,
    ReportPodGroup,
    RequestFullList,
    Submit,
    WriteStatus,
)
from slurm_bridge.operator.placeholderjobs.decisions.pods import all_bound, holding_allocation
from slurm_bridge.operator.placeholderjobs.shapes.shape import Followed
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import FULL_RESYNC_SECONDS
from slurm_bridge.rules.allocationmatch import compare_components
from slurm_bridge.slurm.models import JobInfo


def submit(phj: PlaceholderJob, members: Members, tenancy: Tenancy | None, now: Clock) -> Plan:
    """No job yet and some member lives: wait for the components, or fence and submit."""
    spec, status = phj.spec, phj.status
    parts = spec.components or []
    live = holding_allocation(members)
    need = spec.min_components or 1
    short = [(c, sum(p in live for p in c.pods)) for c in parts]
    short = [(c, n) for c, n in short if n < c.min_member]
    if short or len(parts) < need:
        return waiting_for_pods(phj, waiting_message(parts, short, need))
    requests = [c.slurm for c in parts]
    if tenancy is not None:
        verdicts = [tenancy(r) for r in requests]
        if any(v.waiting for v in verdicts):
            return Plan(requeue=TENANCY_WAIT_SECONDS)  # fail closed until the policies are read
        refused = next((v for v in verdicts if not v.allowed), None)
        if refused is not None:
            return refused_by_policy(phj, members, refused, now.wall)
        requests = [v.request for v in verdicts]
    fence: tuple[Action, ...] = ()
    if status.reason != names.REASON_SUBMITTING:
        fence = (fencing(phj, "gang's Slurm job"),)
    return Plan((*fence, Submit(requests[0], tuple(live), components=tuple(requests))))


def waiting_message(parts: Sequence[Component], short: Sequence[tuple[Component, int]], need: int) -> str:
    """What the composite waits for, e.g. ``1 of 2 PodGroups have pods; PodGroup a has 1 of 2
    member pods``."""
    said = [f"{len(parts)} of {need} PodGroups have pods"] if len(parts) < need else []
    said += [f"PodGroup {c.pod_group} has {n} of {c.min_member} member pods" for c, n in short]
    return (
        "; ".join(said) + f"; the heterogeneous Slurm job is submitted once at least {need} PodGroups have pods "
        "and every one has all its member pods"
    )


def follow(followed: Followed) -> Plan:
    """The job exists (or existed) and some member lives: follow every component."""
    phj, status, slurm, now, follow = followed.phj, followed.status, followed.slurm, followed.now, followed.follow
    members = followed.members
    job_id, leader = slurm.job_id, slurm.job
    assert job_id is not None
    spec = phj.spec
    count = len(spec.components or [])
    soon = slurm.submitted_at is not None and (
        now.mono - slurm.submitted_at < SUBMIT_VISIBILITY_GRACE or slurm.taken_at < slurm.submitted_at
    )
    if leader is None:
        if soon:
            return Plan(requeue=slurm.poll_period)
        return ended_part(phj, members, slurm, None, 0, now)
    if not count:  # not a spec this bridge writes: follow the leader, release nothing
        return Plan(mirror(status, leader, status.phase or names.PHASE_PENDING, phj.metadata.generation))
    parts = components(leader, slurm, count)
    for offset, part in enumerate(parts):
        if part is not None and part.is_finished:
            return ended_part(phj, members, slurm, part, offset, now)
    if any(part is None for part in parts):
        # The view shows the live leader but not every component (Slurm purges them together):
        # a full list, which keeps every job with the bridge's admin_comment, brings them.
        if soon or now.mono - slurm.last_full_at < FULL_RESYNC_SECONDS:
            return Plan(requeue=slurm.poll_period)
        return Plan((RequestFullList(),), requeue=slurm.poll_period)
    if leader.is_pending:
        return follow_pending(phj, status, leader, members, now, replace(follow, tenancy=None), update_job=False)
    running = [p for p in parts if p is not None and p.is_running and p.nodes]
    if len(running) == len(parts):
        return allocation(
            phj,
            members,
            running,
            scheduler=follow.scheduler,
            now=now,
            status=status,
            devices_missing=follow.devices_missing,
        )
    # RUNNING without nodes, SUSPENDED, CONFIGURING...: mirror the leader and wait.
    return Plan(mirror(status, leader, status.phase or names.PHASE_PENDING, phj.metadata.generation))


def components(leader: JobInfo, slurm: SlurmSide, count: int) -> list[JobInfo | None]:
    """Each component's record by offset (None: not in the view). A single-component composite
    may come back from Slurm as a plain job: the leader is then its only component."""
    if not leader.het_job_id:
        return [leader, *([None] * (count - 1))]
    by_offset = {c.het_job_offset: c for c in slurm.components}
    by_offset.setdefault(0, leader)
    return [by_offset.get(i) for i in range(count)]


def cancels(slurm: SlurmSide) -> tuple[Cancel, ...]:
    """Cancel what lives of the job: the leader (which cancels every component), or, when the
    leader itself ended alone (``scancel <leader>+0``), each live component on its own."""
    leader = slurm.job if slurm.job is not None else slurm.found
    if leader is not None and not leader.is_finished:
        return (Cancel(leader.job_id),)
    if leader is None and slurm.job_id is not None and not slurm.components:
        return (Cancel(slurm.job_id),)  # nothing in the view says it ended: cancel to be sure
    return tuple(Cancel(c.job_id) for c in slurm.components if not c.is_finished)


def ended_part(
    phj: PlaceholderJob, members: Members, slurm: SlurmSide, part: JobInfo | None, offset: int, now: Clock
) -> Plan:
    """Slurm -> Kubernetes: one component ended or vanished, so the whole job ends (the rest is
    cancelled) and every live member pod is ended, whichever component it ran in."""
    spec = phj.spec
    parts = spec.components or []
    pod_group = parts[offset].pod_group if offset < len(parts) else "?"
    leader = slurm.job_id
    assert leader is not None
    phase, reason, message = end_of_job(part, part.job_id if part is not None else leader)
    if part is None and offset:
        message = f"component {offset} of Slurm job {leader} no longer exists in Slurm"
    message += (
        f" (component {offset}, PodGroup {pod_group}, of heterogeneous Slurm job {leader}); "
        "every component and member pod is ended with it"
    )
    return job_ended(phj, members, (phase, reason, message), part, now.wall, cancels(slurm))


def allocation(
    phj: PlaceholderJob,
    members: Members,
    parts: Sequence[JobInfo],
    *,
    scheduler: str,
    now: Clock,
    status: PlaceholderJobStatus,
    devices_missing: bool = False,
) -> Plan:
    """Every component RUNNING with nodes: record each pod's node (one of its own component's)
    and offset, then release every pod at once; Running once every live member is bound.

    Components may share a node (Slurm sizes each component on its own): two pods of different
    components may then run on one node, each in its component's share of it."""
    spec, gen, leader, conditions = phj.spec, phj.metadata.generation, parts[0], status.conditions
    current = {a.pod: a.node for a in status.assignments or []}
    live = holding_allocation(members)
    if (short := not_held(phj, parts, live, now, status)) is not None:
        return short
    placed = place_pods(phj, parts, current)
    if isinstance(placed, TooFew):
        return too_few(phj, parts, placed, live, now, status)
    assignment, where = placed
    nodes = compress_hostlist(list(dict.fromkeys(n for job in parts for n in job.nodes)))
    bound = all_bound(live, assignment)
    write: PlaceholderJobStatus | None = None
    if assignment != current or status.phase not in (names.PHASE_ALLOCATED, names.PHASE_RUNNING):
        message = f"Slurm heterogeneous job {leader.job_id} allocated {nodes} ({len(parts)} components)"
        conditions = set_condition(conditions, names.COND_ALLOCATED, True, names.REASON_ALLOCATED, message, gen)
        write = PlaceholderJobStatus(
            job_id=leader.job_id,
            het_job_id=leader.job_id,
            phase=names.PHASE_ALLOCATED,
            slurm_state=leader.state,
            reason="",
            message=message,
            node_list=nodes,
            pod_list=",".join(spec.pods),
            components=component_status(spec.components or [], parts),
            assignments=[Assignment(pod=p, node=n, offset=where[p][1]) for p, n in sorted(assignment.items())],
            start_time=status.start_time or iso(now.wall),
            conditions=conditions,
            **identity(leader),
        )
        if status.expected_start is not None:
            write.expected_start = None  # the estimate of a wait that is over (removed by the merge patch)
    if bound and status.phase != names.PHASE_RUNNING:
        write = with_running(write, conditions, nodes, gen)
    unreleased = unreleased_members(live, assignment)
    actions: list[Action] = [WriteStatus(write)] if write is not None else []  # the record before any pod
    if devices_missing:
        return Plan(tuple(actions), requeue=DEVICES_RETRY_SECONDS)
    het = tuple((n, *where[n]) for n, _ in unreleased)
    actions.append(Release(leader.job_id, unreleased, het=het))
    scheduled = f"Slurm heterogeneous job {leader.job_id} allocated {nodes} to the composite's {len(parts)} PodGroups"
    actions.append(ReportPodGroup(True, names.PODGROUP_REASON_SCHEDULED, f"{scheduled} ({scheduler})"))
    return Plan(tuple(actions))


@dataclass(frozen=True)
class TooFew:
    """Component ``offset`` has fewer nodes than pods (``message`` says so)."""

    offset: int
    message: str


def place_pods(
    phj: PlaceholderJob, parts: Sequence[JobInfo], current: dict[str, str]
) -> tuple[dict[str, str], dict[str, tuple[int, int]]] | TooFew:
    """Each pod's node, one of its own component's (assignments made already kept), and where it
    runs: (its component's job id, offset); else the component with too few nodes."""
    assignment: dict[str, str] = {}
    where: dict[str, tuple[int, int]] = {}
    for offset, (component, job) in enumerate(zip(phj.spec.components or [], parts, strict=True)):
        mine = assign_nodes(component.pods, job.nodes, {p: n for p, n in current.items() if p in component.pods})
        if mine is None:
            message = (
                f"Slurm allocated {len(job.nodes)} node(s) to component {offset} (PodGroup {component.pod_group}) "
                f"of heterogeneous job {parts[0].job_id} for {len(component.pods)} pods"
            )
            return TooFew(offset, message)
        assignment.update(mine)
        where.update({p: (job.job_id, offset) for p in component.pods})
    return assignment, where


def placed_by_component(phj: PlaceholderJob, live: Mapping[str, Obj]) -> list[dict[str, str]]:
    """By offset: the component's live members released or bound to a node (pod -> node)."""
    placed = placed_members(live)
    return [{p: n for p, n in placed.items() if p in c.pods} for c in phj.spec.components or []]


def not_held(
    phj: PlaceholderJob, parts: Sequence[JobInfo], live: Mapping[str, Obj], now: Clock, status: PlaceholderJobStatus
) -> Plan | None:
    """Why the job cannot hold its live members (a plan that says so), or None: some component
    holds less than its pods need (slurm_bridge/rules/allocationmatch.py; its owner changed that
    component in Slurm: each is a job of its own). All or nothing, as the release: no pod is
    released onto a job any component of which is short; under placed pods, the nodes each short
    component gave away are drained naming the pod, and every pod of the job is ended
    (:func:`.allocation.short_plan`)."""
    specs = phj.spec.components or []
    by_part = placed_by_component(phj, live)
    verdict = compare_components(
        parts[0].job_id,
        [(c.slurm, job, placed) for c, job, placed in zip(specs, parts, by_part, strict=True)],
        [f"PodGroup {c.pod_group}" for c in specs],
    )
    if verdict.matches:
        return None
    drains = tuple(lost_drain(parts[o], by_part[o]) for o in verdict.short if by_part[o])
    placed = {p: n for mine in by_part for p, n in mine.items()}
    return short_plan(phj, parts[0], verdict.message(), drains, placed, now, status.conditions)


def too_few(
    phj: PlaceholderJob,
    parts: Sequence[JobInfo],
    short: TooFew,
    live: Mapping[str, Obj],
    now: Clock,
    status: PlaceholderJobStatus,
) -> Plan:
    """A component has fewer nodes than pods: the composite fails (AllocationMismatch). Nothing
    placed: the job is cancelled at once. Else, as a short component (:func:`not_held`): never
    cancelled, nor marked released, while a member may run on it."""
    by_part = placed_by_component(phj, live)
    placed = {p: n for mine in by_part for p, n in mine.items()}
    leader = parts[0]
    if not placed:
        failed = terminal_status(phj, names.PHASE_FAILED, names.REASON_ALLOCATION_MISMATCH, short.message, now.wall)
        return Plan((failed, Cancel(leader.job_id)))
    mine = by_part[short.offset]
    drains = (lost_drain(parts[short.offset], mine),) if mine else ()
    reason = names.REASON_ALLOCATION_MISMATCH
    return short_plan(phj, leader, short.message, drains, placed, now, status.conditions, reason=reason)


def component_status(parts: Sequence[Component], jobs: Sequence[JobInfo | None]) -> list[ComponentStatus]:
    """Each component as Slurm reports it, for status.components."""
    out = []
    for offset, (component, job) in enumerate(zip(parts, jobs, strict=False)):
        entry = ComponentStatus(offset=offset, pod_group=component.pod_group)
        if job is not None:
            entry.job_id, entry.slurm_state = job.job_id, job.state
            if job.nodes:
                entry.node_list = compress_hostlist(job.nodes)
        out.append(entry)
    return out
