"""An allocation kube-scheduler cannot place (docs/design/placeholderjob-lifecycle.md, "The PlaceholderJob
decision table"): Slurm started the job and the bridge released its pods, but a pod is not bound to its node
``bindTimeoutSeconds`` after the job's start. Typically the node's kubelet offers less than Slurm
counts (``SlurmResourcesFit=False``), a taint the pod does not tolerate, or a node that went away.
Without this row the job would hold its cores for ever. Pure.

The wait is measured from Slurm's record of the job's start (``start_time``), or from the
PlaceholderJob's ``Allocated`` condition when that is later (written by the operator's own clock:
a slurmctld clock behind the operator's, or an old job adopted, never releases at once; nor is
anything released while that status is held back unwritten, ``plan.Held``); never
from this process's memory, so a restart neither restarts the clock nor forgets it. The PlaceholderJob ends
Failed ``AllocationNotBound`` with an Event, its pods are ended (a pod that never started turns
Failed), and the terminal rows cancel the job once no member holds it. A pod's controller (a
ReplicaSet, a Job) makes a new pod, whose job is submitted without the nodes whose
``SlurmResourcesFit`` is False (``slurm_bridge/rules/translate.py``, ``exclude_unfit``): a retry goes
elsewhere instead of looping on the same node. A bare pod stays Failed with the reason.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.times import iso, parse_iso
from slurm_bridge.operator.placeholderjobs.decisions.inputs import Clock, Members
from slurm_bridge.operator.placeholderjobs.decisions.phjstatus import terminal_status
from slurm_bridge.operator.placeholderjobs.decisions.plan import Action, EndPods, Event, Plan
from slurm_bridge.operator.placeholderjobs.decisions.pods import live_members
from slurm_bridge.slurm.models import JobInfo


def _released(pod: dict[str, object]) -> str | None:
    """The node a member pod was released to and is not bound to yet (None: not released, or bound)."""
    meta = pod.get("metadata")
    spec = pod.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict) or spec.get("nodeName"):
        return None
    gates = spec.get("schedulingGates") or []
    if any(isinstance(g, dict) and g.get("name") == names.SCHEDULING_GATE for g in gates):
        return None
    node = (meta.get("annotations") or {}).get(names.ANN_SLURM_NODE)
    return str(node) if node else None


def _allocated_at(phj: PlaceholderJob) -> datetime | None:
    """When the PlaceholderJob's ``Allocated`` condition turned True (the operator's clock)."""
    found = next((c for c in phj.status.conditions or [] if c.type == names.COND_ALLOCATED), None)
    if found is None or found.status != "True":
        return None
    try:
        return parse_iso(found.last_transition_time)
    except ValueError:
        return None


def unbound(
    phj: PlaceholderJob, parts: tuple[JobInfo, ...], members: Members
) -> tuple[datetime, dict[str, str]] | None:
    """(since when the pods wait for their binding, each released live member not bound yet -> its
    node), when every part of the job runs with nodes and such a member exists; None otherwise."""
    if not parts or not all(p.is_running and p.nodes for p in parts):
        return None
    starts = [p.start_time for p in parts if p.start_time is not None]
    if not starts:
        return None
    allocated = _allocated_at(phj)
    if allocated is not None:
        starts.append(allocated)
    waiting = {}
    for name in live_members(members):
        node = _released(members[name] or {})
        if node is not None:
            waiting[name] = node
    return (max(starts), waiting) if waiting else None


def bind_deadline(
    phj: PlaceholderJob, parts: tuple[JobInfo, ...], members: Members, timeout: float | None
) -> datetime | None:
    """When the allocation is released if its pods are still not bound (None: nothing waits)."""
    found = unbound(phj, parts, members) if timeout is not None else None
    if found is None or timeout is None:
        return None
    return found[0] + timedelta(seconds=timeout)


def not_bound(phj: PlaceholderJob, job_id: int, parts: tuple[JobInfo, ...], members: Members, now: Clock) -> Plan:
    """Release an allocation kube-scheduler did not place: Failed ``AllocationNotBound``, a Warning
    Event naming each pod and node, the live members ended (the job is cancelled once they are)."""
    found = unbound(phj, parts, members)
    assert found is not None
    started, waiting = found
    pods = ", ".join(f"{pod} on {node}" for pod, node in sorted(waiting.items()))
    message = (
        f"Slurm job {job_id} was allocated at {iso(started)}, but kube-scheduler did not bind its pod(s) ({pods}) "
        f"by {iso(now.wall)} (bindTimeoutSeconds): the allocation is released. See the pod's FailedScheduling "
        f"Events and the node's {names.NODE_COND_SLURM_RESOURCES_FIT} condition (a node whose kubelet offers "
        "less than Slurm counts is left out of new jobs); a pod's controller makes a new pod, whose job goes "
        "elsewhere"
    )
    reason = names.REASON_ALLOCATION_NOT_BOUND
    status = terminal_status(phj, names.PHASE_FAILED, reason, message, now.wall, parts[0])
    live = live_members(members)
    end: tuple[Action, ...] = (EndPods(live, reason, message),) if live else ()
    return Plan((status, Event(reason, message, warning=True), *end))
