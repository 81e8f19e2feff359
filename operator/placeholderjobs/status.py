"""Pure helpers of the PlaceholderJob controller: phases, conditions, assignments, pod patches,
and which pod incarnation a PlaceholderJob counts as its member."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import hostlist
from slurm_bridge.operator.placeholderjobs.groups import is_gang

from slurm_bridge import names
from slurm_bridge.kube import escape_pointer, label_value, now_iso
from slurm_bridge.placeholderjob import Condition
from slurm_bridge.slurm.models import JobInfo

Obj = dict[str, Any]

# Slurm end states -> (PlaceholderJob phase, what to tell the user).
_END_STATES: dict[str, tuple[str, str]] = {
    "COMPLETED": (names.PHASE_COMPLETED, "the Slurm job completed"),
    "CANCELLED": (names.PHASE_CANCELLED, "the Slurm job was cancelled (scancel or an administrator)"),
    "TIMEOUT": (names.PHASE_FAILED, "the Slurm job reached its time limit"),
    "NODE_FAIL": (names.PHASE_FAILED, "a node of the Slurm job failed"),
    "PREEMPTED": (names.PHASE_FAILED, "the Slurm job was preempted"),
    "BOOT_FAIL": (names.PHASE_FAILED, "a node of the Slurm job failed to boot"),
    "DEADLINE": (names.PHASE_FAILED, "the Slurm job reached its deadline"),
    "OUT_OF_MEMORY": (names.PHASE_FAILED, "the Slurm job ran out of memory"),
    "FAILED": (names.PHASE_FAILED, "the Slurm job failed"),
}


REASON_SUBMIT_REJECTED = "SubmitRejected"
# The API server refused a member pod's release for good (HTTP 422): the job is cancelled.
REASON_RELEASE_REJECTED = "ReleaseRejected"
# The API server refused to create a pod's PlaceholderJob (HTTP 422): a Warning Event on the pod.
REASON_PHJ_REFUSED = "PlaceholderJobRefused"


def resubmit_wait(status: Obj, generation: int | None, retry_seconds: float, now: datetime | None = None) -> float:
    """Seconds to wait before submitting again a spec Slurm refused; 0 when a submit may go ahead.

    The refusal is kept in status (reason, submitTime, observedGeneration), so neither a watch
    event nor a restart submits the same refused spec again before ``retry_seconds``.
    """
    if status.get("reason") != REASON_SUBMIT_REJECTED or status.get("jobId"):
        return 0.0
    if generation is not None and status.get("observedGeneration") != generation:
        return 0.0  # the spec changed: try it now
    try:
        attempted = datetime.strptime(str(status.get("submitTime")), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return 0.0
    elapsed = ((now or datetime.now(UTC)) - attempted).total_seconds()
    return max(retry_seconds - elapsed, 0.0)


def end_of_job(job: JobInfo | None, job_id: int) -> tuple[str, str, str]:
    """Phase, reason and message for a Slurm job that ended (or vanished) under live pods."""
    if job is None:
        return (names.PHASE_FAILED, "SlurmJobVanished", f"Slurm job {job_id} no longer exists in Slurm")
    phase, what = _END_STATES.get(job.state, (names.PHASE_FAILED, f"the Slurm job ended as {job.state}"))
    detail = f" ({job.reason})" if job.reason else ""
    return (phase, f"SlurmJob{job.state.title().replace('_', '')}", f"Slurm job {job_id}: {what}{detail}")


def end_phases(members: Mapping[str, Obj | None]) -> dict[str, str | None]:
    """Each ended member's phase for pods_end_phase. A pod the kubelet stopped because it was
    deleted turns Failed before it goes: that is a deletion (None), not a failure."""
    return {n: None if p is None or (pod_terminating(p) and pod_phase(p) == "Failed") else pod_phase(p)
            for n, p in members.items()}  # fmt: skip


def pods_end_phase(phases: Mapping[str, str | None]) -> tuple[str, str, str]:
    """Phase, reason, message once every member pod ended (phase None: the pod was deleted)."""
    if all(p == "Succeeded" for p in phases.values()):
        return names.PHASE_COMPLETED, "PodsSucceeded", "every member pod succeeded; Slurm job released"
    if all(p is None for p in phases.values()):
        return names.PHASE_CANCELLED, "PodsDeleted", "every member pod was deleted; Slurm job cancelled"
    failed = sorted(n for n, p in phases.items() if p == "Failed")
    deleted = sorted(n for n, p in phases.items() if p is None)
    parts = [
        f"failed: {', '.join(failed)}" if failed else "",
        f"deleted: {', '.join(deleted)}" if deleted else "",
    ]
    return names.PHASE_FAILED, "PodsFailed", "member pods ended (" + "; ".join(p for p in parts if p) + ")"


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
    return str(hostlist.collect_hostlist(list(nodes))) if nodes else ""


def set_condition(
    conditions: list[Obj] | None,
    ctype: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
) -> list[Obj]:
    """Conditions with ``ctype`` set; lastTransitionTime moves only when the status flips.

    ``generation`` (the object's metadata.generation) is required: the CRD requires each
    condition's observedGeneration, and a caller that forgets it would write an invalid status."""
    out: list[Obj] = []
    found = False
    value = "Unknown" if status is None else "True" if status else "False"
    for c in conditions or []:
        if c.get("type") != ctype:
            out.append(Condition.model_validate(c).dump())  # every field set, even on older ones
            continue
        found = True
        new = dict(Condition.model_validate(c).dump(), status=value, reason=reason, message=message)
        if c.get("status") != value:
            new["lastTransitionTime"] = now_iso()
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    if not found:
        cond: Obj = {"type": ctype, "status": value, "reason": reason, "message": message,
                     "lastTransitionTime": now_iso()}  # fmt: skip
        if generation is not None:
            cond["observedGeneration"] = generation
        out.append(cond)
    return out


def pod_phase(pod: Obj | None) -> str | None:
    return None if pod is None else str(pod.get("status", {}).get("phase") or "Pending")


def pod_ended(pod: Obj | None) -> bool:
    """Gone, or in a terminal phase. A terminating pod (deletionTimestamp) has not ended: its
    containers run until they exit or its grace period is over, on the node it holds."""
    return pod is None or pod_phase(pod) in ("Succeeded", "Failed")


def pod_terminating(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def holding_allocation(members: Mapping[str, Obj | None]) -> dict[str, Obj]:
    """Member pods (by name) that still need their Slurm allocation: they exist and have not
    ended (a terminating pod still holds its node)."""
    return {n: p for n, p in members.items() if p is not None and not pod_ended(p)}


def all_bound(live: Mapping[str, Obj], assignment: Mapping[str, str]) -> bool:
    """Every live member is bound to the node assigned to it (and there is one)."""
    return bool(live) and all(p.get("spec", {}).get("nodeName") == assignment[n] for n, p in live.items())


def pod_is_released(pod: Obj, node: str) -> bool:
    annotations = pod["metadata"].get("annotations") or {}
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
            ops += [{"op": "add", "path": f"/metadata/{field}/{escape_pointer(k)}", "value": v}
                    for k, v in values.items()]  # fmt: skip
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


def pod_owner_uid(phj: Obj) -> str | None:
    for ref in phj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1":
            return str(ref.get("uid"))
    return None


def owned_by_other_pod(phj: Obj, pod: Obj | None) -> bool:
    """A single-pod PlaceholderJob belongs to one pod incarnation (its Pod owner's uid)."""
    if pod is None:
        return False
    owner = pod_owner_uid(phj)
    return owner is not None and owner != pod["metadata"].get("uid")


def is_member(phj: Obj, pod: Obj) -> bool:
    """Whether ``pod`` is the incarnation the PlaceholderJob counts as its member of that name:
    a gang records each member's uid in spec.podUIDs, a single pod is the PlaceholderJob's owner."""
    if is_gang(phj):
        uid = (phj["spec"].get("podUIDs") or {}).get(pod["metadata"]["name"])
        return uid is None or uid == pod["metadata"].get("uid")
    return not owned_by_other_pod(phj, pod)
