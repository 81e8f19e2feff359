"""Requests that need an API this cluster may not serve, refused at admission with why.

A pod that names a PodGroup (``spec.schedulingGroup``) on a cluster without the Workload API,
or asks for DRA devices without ``resource.k8s.io/v1``, would not fail: the API server drops a
field whose feature gate is off before it stores the pod, and the pod would run alone, not in its
gang, or without its devices. Only a mutating webhook still sees such a field (the validating one
is called after the drop), so the mutating webhook asks here, for pods and for the pod templates of
Jobs, JobSets and LeaderWorkerSets (and a Job's ``spec.scheduling``), and refuses with a message
naming the Kubernetes version it found and the feature gate and runtime-config it lacks
(slurm_bridge/kube/schedulingapi.py). Kubernetes 1.35's ``spec.workloadRef`` is refused on any cluster:
the bridge does not read that API.

:func:`needs` and :func:`problems` are pure; :func:`facts` asks discovery (cached,
slurm_bridge/kube/clusterapis.py) only what the request needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurm_bridge.core.config import Config
from slurm_bridge.kube import schedulingapi
from slurm_bridge.kube.client import FAILED
from slurm_bridge.kube.clusterapis import Discovery
from slurm_bridge.rules import workloadkinds
from slurm_bridge.rules.dra.admission import device_requests

from .mutate import goes_to_bridge
from .review import AdmissionRequest
from .templates import pod_templates, spec_of


@dataclass(frozen=True)
class Needs:
    """The fields of a request that need an API, by location (``spec``, ``spec.template.spec``...)."""

    workload: list[str] = field(default_factory=list)  # name a PodGroup, or ask the Job controller for one
    devices: list[str] = field(default_factory=list)  # DRA extended resources
    v1alpha1: list[str] = field(default_factory=list)  # Kubernetes 1.35's spec.workloadRef

    def __bool__(self) -> bool:
        return bool(self.workload or self.devices or self.v1alpha1)


def needs(request: AdmissionRequest, config: Config) -> Needs:
    """What a CREATE of a pod or a workload with pod templates needs, for pods the bridge takes."""
    out = Needs()
    if request.operation != "CREATE" or request.sub_resource or not isinstance(request.object, Mapping):
        return out
    gk = (request.group, request.kind)
    specs: dict[str, Mapping[str, Any]] = {}
    if gk == workloadkinds.POD.group_kind:
        specs["spec"] = spec_of(request.object)
    else:
        for where, template in pod_templates(request.object, workloadkinds.POD_TEMPLATES.get(gk, ())).items():
            specs[f"{where}.spec"] = spec_of(template)
        asks = gk == workloadkinds.JOB.group_kind and schedulingapi.job_scheduling(spec_of(request.object)) is not None
        if asks and any(goes_to_bridge(s.get("schedulerName"), config.schedulerName) for s in specs.values()):
            out.workload.append("spec.scheduling")
    for where, spec in specs.items():
        if not goes_to_bridge(spec.get("schedulerName"), config.schedulerName):
            continue
        if schedulingapi.scheduling_group(spec):
            out.workload.append(f"{where}.schedulingGroup")
        if schedulingapi.v1alpha1_workload_ref(spec):
            out.v1alpha1.append(f"{where}.workloadRef")
        if device_requests(spec, where)[0]:
            out.devices.append(f"{where}.containers[*].resources")
    return out


@dataclass(frozen=True)
class Facts:
    """What discovery said about the APIs a request needs: why each cannot be used, or None."""

    workload_missing: str | None = None
    resource_missing: str | None = None


async def facts(need: Needs, apis: Discovery) -> Facts:
    """Ask discovery what ``need`` needs; an unreadable answer refuses (fail closed), so a gang never
    runs pod by pod for want of a read."""
    workload = resource = None
    try:
        if need.workload:
            what = (
                f"{', '.join(need.workload)} {'asks' if len(need.workload) == 1 else 'ask'} for the Kubernetes "
                "Workload API (without it the API server drops the field and the pods run one by one, not as a gang)"
            )
            workload = await apis.workload_api_missing(what)
            if workload and "spec.scheduling" in need.workload:
                workload += f"; a Job's spec.scheduling also needs the feature gate {schedulingapi.JOB_GATE}=true"
        if need.devices and not await apis.serves_resource_claims():
            kube = await apis.kube_version()
            api = f"{schedulingapi.RESOURCE_GROUP}/{schedulingapi.RESOURCE_VERSION}"
            resource = (
                f"{', '.join(need.devices)} asks for DRA devices, which slurm-bridge gives the pod as a ResourceClaim, "
                f"but the API server serves no ResourceClaims at {api}; {schedulingapi.resource_api_needs(kube)}"
            )
    except FAILED as e:
        unknown = f"slurm-bridge cannot read the API server's discovery to check this request ({e}); try again"
        return Facts(
            workload_missing=unknown if need.workload else None, resource_missing=unknown if need.devices else None
        )
    return Facts(workload, resource)


def problems(need: Needs, found: Facts) -> list[str]:
    """Why the request cannot work on this cluster, each naming its field."""
    out = [f"{where}: {schedulingapi.V1ALPHA1_WHY}" for where in need.v1alpha1]
    if need.workload and found.workload_missing:
        out.append(found.workload_missing)
    if need.devices and found.resource_missing:
        out.append(found.resource_missing)
    return out
