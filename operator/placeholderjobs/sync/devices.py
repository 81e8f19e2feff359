"""Exact DRA devices at release: each pod's ResourceClaim names the devices Slurm allocated.

Called by the controller after Slurm allocated a job and before it releases the job's pods
(slurm_bridge/rules/dra/ says why and how devices are mapped). For every member pod that asked for
DRA devices: read which indices the job holds on the pod's node (one fresh job read), find them
in that node's ResourceSlices, and make the pod's claim allocated to exactly those and reserved
for the pod. A device that cannot be found stops the release of the whole group (a gang starts
together or not at all), with a Warning Event saying what is missing; the controller looks again.

Every step is idempotent: an existing claim of the pod is reused when it names the same
devices, and its status is written only when it has none.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import Conflict, KubeError
from slurm_bridge.kube.seams import DeviceKube
from slurm_bridge.operator.placeholderjobs.decisions.inputs import DEVICES_RETRY_SECONDS
from slurm_bridge.rules.dra.claims import ClaimPlan, allocated_to, allocation_status, claim_object, plan_claim
from slurm_bridge.rules.dra.classes import RESOURCE_API
from slurm_bridge.rules.dra.recorded import claim_name_of, recorded_requests
from slurm_bridge.slurm.models import NodeDevices

log = logging.getLogger(__name__)

SLICES_PATH: Final = f"/apis/{RESOURCE_API}/resourceslices"


def claims_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/{RESOURCE_API}/namespaces/{namespace}/resourceclaims"
    return f"{base}/{name}" if name else base


@dataclass
class Prepared:
    """The outcome for one group: annotations per pod to add at release, or why nothing is released."""

    annotations: dict[str, dict[str, str]] = field(default_factory=dict)
    problem: str = ""


def wants_devices(pod: Mapping[str, Any]) -> bool:
    annotations = objects.annotations(pod)
    return names.ANN_DEVICE_REQUESTS in annotations and claim_name_of(pod) is not None


class SlurmJobDevices(Protocol):
    """The Slurm call the binder reads a job's devices with."""

    async def job_devices(self, job_id: int) -> dict[str, NodeDevices] | None: ...


class DeviceBinder:
    def __init__(self, kube: DeviceKube, slurm: SlurmJobDevices) -> None:
        self.kube = kube
        self.slurm = slurm
        # pod uid -> the last problem reported (dropped once the pod's claim is made)
        self._told: dict[str, str] = {}

    async def prepare(self, phj: Obj, job_id: int, pods: Mapping[str, tuple[Obj, str]]) -> Prepared:
        """Claims for the pods (name -> (pod, node)) of ``phj`` that asked for devices."""
        wanting = {name: (pod, node) for name, (pod, node) in pods.items() if wants_devices(pod)}
        if not wanting:
            return Prepared()
        held = await self.slurm.job_devices(job_id)
        if held is None:
            return Prepared(problem=f"Slurm no longer knows job {job_id}")
        slices: dict[str, list[Obj]] = {}
        plans: dict[str, tuple[Obj, ClaimPlan, dict[str, int]]] = {}
        for name, (pod, node) in sorted(wanting.items()):
            counts = recorded_requests(pod["metadata"]["annotations"])
            if node not in slices:
                found = await self.kube.get(SLICES_PATH, params={"fieldSelector": f"spec.nodeName={node}"})
                slices[node] = list((found or {}).get("items") or [])
            plan = plan_claim(counts, node, held.get(node), slices[node], job_id)
            if isinstance(plan, str):
                await self._tell(phj, pod, names.REASON_SLURM_DEVICES_NOT_FOUND, plan)
                return Prepared(problem=f"pod {name}: {plan}")
            plans[name] = (pod, plan, counts)
        out = Prepared()
        for name, (pod, plan, counts) in plans.items():
            problem = await self._bind(pod, plan, counts)
            if problem:
                await self._tell(phj, pod, names.REASON_SLURM_DEVICES_NOT_BOUND, problem)
                return Prepared(problem=f"pod {name}: {problem}")
            out.annotations[name] = {names.ANN_SLURM_DEVICES: plan.annotation()}
            self._told.pop(pod["metadata"]["uid"], None)
        return out

    async def _bind(self, pod: Obj, plan: ClaimPlan, counts: Mapping[str, int]) -> str:
        """The pod's claim exists, allocated to the plan's devices and reserved for the pod; or
        why it cannot be."""
        meta = pod["metadata"]
        claim_name = claim_name_of(pod)
        assert claim_name is not None
        path = claims_path(meta["namespace"], claim_name)
        claim = await self.kube.get(path)
        if claim is None:
            try:
                body = claim_object(pod, claim_name, counts)
                claim = await self.kube.create(claims_path(meta["namespace"]), body)
            except Conflict:
                claim = await self.kube.get(path)
                if claim is None:
                    return f"ResourceClaim {claim_name} was deleted while it was made; trying again"
        owners = [r.get("uid") for r in claim["metadata"].get("ownerReferences") or [] if r.get("kind") == "Pod"]
        if owners != [meta["uid"]]:
            return (
                f"ResourceClaim {claim_name} exists and does not belong to this pod; delete it, or the pod "
                "(its claim name is fixed at creation)"
            )
        status = allocation_status(pod, plan)
        wanted = allocated_to({"status": status})
        if (claim.get("status") or {}).get("allocation"):
            held = allocated_to(claim)
            if held != wanted:
                return (
                    f"ResourceClaim {claim_name} is already allocated to other devices "
                    f"({sorted(d[3] for d in held)}) than Slurm's ({plan.annotation()})"
                )
            return ""
        try:
            await self.kube.patch(f"{path}/status", {"status": status})
        except KubeError as e:
            return f"cannot allocate ResourceClaim {claim_name}: {e}"
        log.info("ResourceClaim %s/%s allocated %s on %s", meta["namespace"], claim_name, plan.annotation(), plan.node)
        return ""

    async def _tell(self, phj: Obj, pod: Obj, reason: str, message: str) -> None:
        """A Warning Event on the pod and its PlaceholderJob, once per distinct problem."""
        uid = pod["metadata"]["uid"]
        if self._told.get(uid) == message:
            return
        self._told[uid] = message
        log.warning("pod %s/%s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], message)
        again = f"looked at again every {DEVICES_RETRY_SECONDS:.0f} s"
        await self.kube.event(pod, reason, f"{message}; the pod stays unreleased ({again})", warning=True)
        await self.kube.event(
            phj, reason, f"pod {pod['metadata']['name']}: {message}; no member is released ({again})", warning=True
        )
