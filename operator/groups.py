"""Which PlaceholderJob a pod belongs to, and where that job's options come from.

A bare pod, and each pod of a batch Job, is its own group: one PlaceholderJob named after the
pod, one Slurm job on one node. Options are read from the root workload (the pod for a bare
pod, the Job for a Job's pods).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurm_bridge import names
from slurm_bridge.translate import time_limit_from_deadline

Obj = dict[str, Any]


@dataclass(frozen=True)
class Group:
    name: str  # the PlaceholderJob's name
    namespace: str
    min_member: int
    owner: Obj  # ownerReference placed on the PlaceholderJob
    source: Obj  # group reference recorded in spec.group
    annotations: dict[str, str] = field(default_factory=dict)  # root workload's annotations
    derived: dict[str, object] = field(default_factory=dict)  # options derived from the workload


def controller_of(obj: Obj) -> Obj | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def pod_group(pod: Obj, job: Obj | None = None) -> Group:
    """The single-pod group of ``pod``; ``job`` is its owning batch Job when it has one."""
    meta = pod["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
             "blockOwnerDeletion": False}  # fmt: skip
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(names.SLURMJOB_PREFIX)}
    derived: dict[str, object] = {}
    source: Obj = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    if job is not None:
        jmeta = job["metadata"]
        source = {"apiVersion": "batch/v1", "kind": "Job", "name": jmeta["name"], "uid": jmeta["uid"]}
        # The workload's annotations win over what its pod template carried.
        annotations = {k: v for k, v in (jmeta.get("annotations") or {}).items() if k.startswith(names.SLURMJOB_PREFIX)}
        deadline = job.get("spec", {}).get("activeDeadlineSeconds")
        if deadline:
            derived["time_limit_minutes"] = time_limit_from_deadline(int(deadline))
    return Group(meta["name"], meta["namespace"], 1, owner, source, annotations, derived)
