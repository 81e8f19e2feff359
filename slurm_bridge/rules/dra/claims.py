"""The claim the operator makes at a pod's release: the devices Slurm allocated the job on the pod's
node found in the node's ResourceSlices, and the ResourceClaim allocated to them and reserved for the pod."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_bridge import names
from slurm_bridge.core.objects import Obj
from slurm_bridge.rules.dra.classes import RESOURCE_API, SHARD_CAPACITY, DeviceClass, mapped_class
from slurm_bridge.rules.dra.inventory import Device, node_devices
from slurm_bridge.slurm.models import NodeDevices


@dataclass(frozen=True)
class ClaimPlan:
    """The devices a pod's claim is allocated to, by request, and the indices for its annotation."""

    node: str
    results: dict[str, list[Device]] = field(default_factory=dict)  # request name -> devices
    indices: dict[str, list[int]] = field(default_factory=dict)  # request name -> Slurm indices
    consumed: dict[str, int] = field(default_factory=dict)  # request name -> shards it consumes

    def annotation(self) -> str:
        """``gpu:0,2`` (one ``name:indices`` item per request, ``;``-separated)."""
        return ";".join(f"{k}:{','.join(map(str, v))}" for k, v in sorted(self.indices.items()))


def plan_claim(
    counts: Mapping[str, int], node: str, held: NodeDevices | None, slices: Sequence[Mapping[str, Any]], job_id: int
) -> ClaimPlan | str:
    """The devices for a pod on ``node``, or why there are none (for a Warning Event).

    ``held``: what Slurm says the job holds on the node. The pod is the job's only pod there, so
    every device of a requested kind on the node is the pod's.
    """
    if held is None:
        return f"Slurm job {job_id} reports nothing allocated on node {node}"
    plan = ClaimPlan(node)
    for cls_name, count in sorted(counts.items()):
        cls = mapped_class(cls_name)
        if cls.shared:
            found = _plan_shards(cls, count, node, held, slices, job_id)
            if isinstance(found, str):
                return found
            plan.results[cls.request], plan.indices[cls.request] = [found[1]], [found[0]]
            plan.consumed[cls.request] = count
            continue
        if cls.kind == "gres":
            indices = held.gres.get(cls.slurm_gres)
            if indices is None:
                return (
                    f"Slurm does not say which {cls.slurm_gres} devices job {job_id} holds on node {node}: its "
                    "GRES has no device files in gres.conf, so Slurm keeps no indices and exact devices cannot be "
                    "given"
                )
        else:
            indices = held.cpus
        if len(indices) != count:
            return (
                f"Slurm job {job_id} holds {len(indices)} {cls.request} device(s) on node {node} "
                f"({list(indices)}), the pod asked for {count}"
            )
        by_index = node_devices(slices, cls.driver, node)
        missing = [i for i in indices if i not in by_index]
        if missing:
            return (
                f"node {node}'s ResourceSlices (driver {cls.driver}) publish no device with Slurm index "
                f"{', '.join(map(str, missing))} of the {cls.request} devices job {job_id} holds there "
                f"({len(by_index)} published)"
            )
        devices = [by_index[i] for i in indices]
        wrong = _kind_problem(cls, devices, indices)
        if wrong:
            return (
                f"Slurm and node {node}'s ResourceSlices disagree: job {job_id} holds {cls.slurm_gres} {wrong}; "
                "no device is given until gres.conf and the DRA driver describe the same GPUs (docs/gpus.md)"
            )
        plan.results[cls.request] = devices
        plan.indices[cls.request] = list(indices)
    return plan


def _plan_shards(
    cls: DeviceClass, count: int, node: str, held: NodeDevices, slices: Sequence[Mapping[str, Any]], job_id: int
) -> tuple[int, Device] | str:
    """(the GPU's Slurm index, its device) that the job's ``count`` shards are on, or why there is
    none. Slurm says how many of the job's shards each of the node's shard records holds; the n-th
    record is the n-th GPU with shards, in Slurm's order (docs/gpus.md#shards). One GPU only: a
    claim's request of shards is one device (Slurm gives one unless MULTIPLE_SHARING_GRES_PJ)."""
    shares = held.shares.get(cls.gres)
    if shares is None:
        return f"Slurm does not say which GPU the {count} {cls.gres} of job {job_id} are on, on node {node}"
    whole = [(i, d) for i, d in sorted(node_devices(slices, cls.driver, node).items()) if d.type != "mig"]
    gpus = [(i, d) for i, d in whole if d.shards]
    if len(gpus) != len(shares):
        return (
            f"Slurm and node {node}'s ResourceSlices disagree: Slurm has {len(shares)} {cls.gres} record(s) there, "
            f"the driver {len(gpus)} GPU(s) with a {SHARD_CAPACITY!r} capacity; no device is given until gres.conf "
            "and the DRA driver describe the same GPUs (docs/gpus.md)"
        )
    on = [(n, gpus[pos]) for pos, n in enumerate(shares) if n]
    if sum(n for n, _ in on) != count or len(on) != 1:
        return (
            f"Slurm job {job_id} holds {cls.gres} {list(shares)} (per GPU) on node {node}; the pod asked for {count} "
            f"on one GPU (a site that sets SelectTypeParameters=MULTIPLE_SHARING_GRES_PJ spreads them: unset it)"
        )
    n, (index, device) = on[0]
    if n > device.shards:
        return f"Slurm job {job_id} holds {n} {cls.gres} on {device.name} of node {node}, which has {device.shards}"
    return index, device


def _kind_problem(cls: DeviceClass, devices: Sequence[Device], indices: Sequence[int]) -> str:
    """Why the devices at Slurm's indices are not what the class asks for ("" when they are): a
    MIG class's must be MIG devices of its profile, a whole-GPU class's no MIG device."""
    for i, d in zip(indices, devices, strict=True):
        if cls.profile and (d.type != "mig" or d.profile != cls.profile):
            what = f"a {d.type or 'device'}" + (f" of profile {d.profile}" if d.profile else "")
            return f"index {i}, which is {d.name} ({what}), not a MIG device of profile {cls.profile}"
        if not cls.profile and cls.kind == "gres" and d.type == "mig":
            return f"index {i}, which is the MIG device {d.name} (profile {d.profile}), not a whole GPU"
    return ""


def claim_object(pod: Mapping[str, Any], name: str, counts: Mapping[str, int]) -> Obj:
    """The ResourceClaim for the pod: owned by it (garbage collection removes it with the pod) and
    protected by Kubernetes' own finalizer, which kube-controller-manager lifts once no pod uses it."""
    meta = pod["metadata"]
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }
    requests = [_claim_request(c, n) for c, n in sorted(counts.items())]
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {names.LABEL_APP_MANAGED_BY: names.APP_NAME},
            "finalizers": [names.RESOURCE_CLAIM_FINALIZER],
            "ownerReferences": [owner],
        },
        "spec": {"devices": {"requests": requests}},
    }


def _claim_request(class_name: str, count: int) -> Obj:
    """One request of the claim: ``count`` devices, or for shards one GPU and ``count`` of its
    ``shards`` capacity."""
    cls = mapped_class(class_name)
    exactly: Obj = {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count}
    if cls.shared:
        exactly.update(count=1, capacity={"requests": {SHARD_CAPACITY: str(count)}})
    return {"name": cls.request, "exactly": exactly}


def _result(pod_uid: str, request: str, device: Device, shards: int | None) -> Obj:
    """One allocation result; a share of a device that allows several allocations names its share
    (an ID of the pod and the device: the same each time the operator computes it) and what it consumes."""
    out: Obj = {"request": request, "driver": device.driver, "pool": device.pool, "device": device.name}
    if shards is not None:
        out["shareID"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{pod_uid}/{device.pool}/{device.name}"))
        out["consumedCapacity"] = {SHARD_CAPACITY: str(shards)}
    return out


def allocation_status(pod: Mapping[str, Any], plan: ClaimPlan) -> Obj:
    """The claim's status as kube-scheduler writes it: allocated to exactly the plan's devices on
    its node, and reserved for the pod. The scheduler then only checks it and binds the pod there."""
    meta = pod["metadata"]
    results = [
        _result(meta["uid"], req, d, plan.consumed.get(req))
        for req, devices in sorted(plan.results.items())
        for d in devices
    ]
    return {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [plan.node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
    }


def allocated_to(claim: Mapping[str, Any]) -> set[tuple[str, str, str, str]]:
    """(request, driver, pool, device) of each device a claim is allocated to."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
    return {(str(r.get("request")), str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results}
