"""Pure predicates on member pods (ended, terminating, holding their allocation, bound, released)
and the one patch that releases a pod to its Slurm node."""

from __future__ import annotations

from collections.abc import Mapping

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.kubeformats import escape_pointer, exit_codes, label_value
from slurm_bridge.core.objects import Obj
from slurm_bridge.rules.podphase import pod_ended


def pod_terminating(pod: Obj) -> bool:
    return bool(objects.deletion_timestamp(pod))


def holding_allocation(members: Mapping[str, Obj | None]) -> dict[str, Obj]:
    """Member pods (by name) that still need their Slurm allocation: they exist and have not
    ended (a terminating pod still holds its node)."""
    return {n: p for n, p in members.items() if p is not None and not pod_ended(p)}


def all_ended(members: Mapping[str, Obj | None], confirmed: Mapping[str, Obj | None] | None) -> bool | None:
    """Whether every member ended; None when the cache says so and a GET must confirm it."""
    if not all(pod_ended(p) for p in members.values()):
        return False
    if confirmed is None:
        return None
    return all(pod_ended(p) for p in confirmed.values())


def live_members(members: Mapping[str, Obj | None]) -> tuple[str, ...]:
    """Members that exist, have not ended and are not terminating yet: those an end must end."""
    return tuple(n for n, p in members.items() if p is not None and not pod_ended(p) and not pod_terminating(p))


def all_bound(live: Mapping[str, Obj], assignment: Mapping[str, str]) -> bool:
    """Every live member is bound to the node assigned to it (and there is one)."""
    return bool(live) and all(p.get("spec", {}).get("nodeName") == assignment[n] for n, p in live.items())


def pod_is_released(pod: Obj, node: str) -> bool:
    annotations = objects.annotations(pod)
    gates = pod.get("spec", {}).get("schedulingGates") or []
    return annotations.get(names.ANN_SLURM_NODE) == node and all(g.get("name") != names.SCHEDULING_GATE for g in gates)


def release_pod_patch(
    pod: Obj, node: str, job_id: int, phj_name: str, extra_annotations: Mapping[str, str] | None = None
) -> list[Obj]:
    """One JSON patch: name the node (and the Slurm devices, ``extra_annotations``), label the job,
    and lift the bridge's scheduling gate."""
    meta = pod["metadata"]
    ops: list[Obj] = [{"op": "test", "path": "/metadata/uid", "value": meta["uid"]}]
    annotations = {names.ANN_SLURM_NODE: node, names.ANN_PLACEHOLDER_JOB: phj_name, **(extra_annotations or {})}
    labels = {names.LABEL_SLURM_JOB_ID: str(job_id), names.LABEL_PLACEHOLDER_JOB: label_value(phj_name)}
    for field, values in (("annotations", annotations), ("labels", labels)):
        if meta.get(field):
            ops += [
                {"op": "add", "path": f"/metadata/{field}/{escape_pointer(k)}", "value": v} for k, v in values.items()
            ]
        else:
            ops.append({"op": "add", "path": f"/metadata/{field}", "value": values})
    gates = pod.get("spec", {}).get("schedulingGates") or []
    remaining = [g for g in gates if g.get("name") != names.SCHEDULING_GATE]
    if len(remaining) != len(gates):
        if remaining:
            ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": remaining})
        else:
            ops.append({"op": "remove", "path": "/spec/schedulingGates"})
    return ops


def highest_exit_code(members: Mapping[str, Obj | None]) -> int | None:
    """The highest exit code of the member pods' terminated containers, as Slurm derives a job's
    from its steps'; None when no container's is known."""
    return max((code for pod in members.values() if pod is not None for code in exit_codes(pod)), default=None)
