"""Pod -> group resolution with API reads: the owner walk (depth-limited, discovery cached), the
PodGroup and Workload reads at the Workload API version the cluster serves. The rules it applies
are pure and live in :mod:`.groups` (and :mod:`slurm_bridge.kube.schedulingapi` for the Workload API's
shapes); this module is the I/O around them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import KubeError, api_prefix, resource_path
from slurm_bridge.kube.clusterapis import Discovery
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import parent_name
from slurm_bridge.operator.placeholderjobs.grouping.compositereader import CompositeReader
from slurm_bridge.operator.placeholderjobs.grouping.groups import (
    JOB,
    JOBSET,
    LWS,
    MAX_OWNER_DEPTH,
    PODGROUP,
    PODGROUP_API_VERSION,
    RECOGNIZED,
    WORKLOAD_API_GROUP,
    Getter,
    Group,
    GroupError,
    gang_min_count,
    jobset_group,
    lws_group,
    pod_group,
    podgroup_group,
    read_group_object,
    unsupported_podgroup,
    workload_name,
    workload_podgroup_group,
)
from slurm_bridge.rules import workloadkinds
from slurm_bridge.rules.workloadkinds import api_group, controller_of, group_kind, scheduling_group_name


class GroupResolver:
    """Resolves pods to groups with GETs through ``get``; caches API discovery (kind -> resource)."""

    def __init__(self, get: Getter, *, max_depth: int = MAX_OWNER_DEPTH, apis: Discovery | None = None) -> None:
        self._get = get
        self.max_depth = max_depth
        self._plurals: dict[tuple[str, str], str] = {}
        self.apis = apis or Discovery(get)
        self.composites = CompositeReader(get, self.apis)

    async def resolve(self, pod: Obj) -> Group:
        """The pod's group; raises GroupError when it cannot be known now."""
        scheduling_group = scheduling_group_name(pod.get("spec") or {})
        if scheduling_group:
            group = await self._workload_podgroup(pod, scheduling_group)
            if group is not None:
                return group
        labels = objects.labels(pod)
        podgroup = labels.get(names.LABEL_POD_GROUP)
        if podgroup:
            return podgroup_group(pod, await self._podgroup(pod, podgroup))
        recognized, highest = await self._walk(pod)
        if recognized is not None:
            kind = group_kind(recognized)
            if kind == JOBSET:
                return jobset_group(pod, recognized)
            if kind == LWS:
                return lws_group(pod, recognized)
            return pod_group(pod, recognized)  # a batch Job: one group per pod
        return pod_group(pod, highest)

    async def _podgroup(self, pod: Obj, name: str) -> Obj:
        ns = pod["metadata"]["namespace"]
        path = resource_path(PODGROUP_API_VERSION, workloadkinds.PLURALS[PODGROUP], ns, name)
        try:
            obj = await self._get(path)
        except KubeError as e:
            raise GroupError(
                names.REASON_PODGROUP_UNREADABLE,
                f"cannot read PodGroup {ns}/{name} ({PODGROUP_API_VERSION}): {e}",
                30.0,
            ) from None
        if obj is None:
            # Coscheduling users often create the pods and the PodGroup together: wait for it.
            raise GroupError(
                names.REASON_PODGROUP_NOT_FOUND,
                f"the pod's {names.LABEL_POD_GROUP} label names PodGroup {name}, which does not exist "
                f"(or the {PODGROUP_API_VERSION} PodGroup CRD is not installed); the pod waits for it",
                5.0,
            )
        return obj

    async def workload_api_version(self) -> str:
        """The served Workload API version the bridge reads (v1beta1 preferred, then v1alpha2),
        found by discovery and remembered for a while (slurm_bridge/kube/clusterapis.py)."""
        try:
            version = await self.apis.workload_version()
            if version:
                return version
            message = await self.apis.workload_api_missing("the pod sets spec.schedulingGroup")
        except KubeError as e:
            message = f"cannot discover the {WORKLOAD_API_GROUP} API: {e}"
            raise GroupError(names.REASON_WORKLOAD_API_UNREADABLE, message, 30.0) from None
        raise GroupError(names.REASON_WORKLOAD_API_NOT_SERVED, message or "the Workload API is not served", 60.0)

    async def _workload_podgroup(self, pod: Obj, name: str) -> Group | None:
        """The gang of the pod's built-in PodGroup; None for a ``basic`` policy, which (as in the
        Go slurm-bridge) asks for no gang, so the usual rules below decide. A PodGroup the 1.37
        Job controller made (``spec.scheduling`` of a Job, gate WorkloadWithJob) is read like one
        made by hand: its pods name it, it names its Workload, and the Job is their controller."""
        ns = pod["metadata"]["namespace"]
        api_version = f"{WORKLOAD_API_GROUP}/{await self.workload_api_version()}"
        podgroup = await self._read(api_version, "PodGroup", ns, name, "spec.schedulingGroup.podGroupName names")
        problem = unsupported_podgroup(podgroup)  # whatever its policy: Slurm places each of its pods
        if problem is not None:
            raise problem
        if gang_min_count(podgroup) is None:
            return None
        workload: Obj | None = None
        wname = workload_name(podgroup)
        if wname:
            workload = await self._read(api_version, "Workload", ns, wname, f"PodGroup {name} was made from")
        recognized, _ = await self._walk(pod)
        controller = recognized if recognized is not None and group_kind(recognized) in (JOB, JOBSET) else None
        if parent_name(podgroup):  # a CompositePodGroup's child (Kubernetes 1.37): composite.py
            composite = await self.composites.group(pod, podgroup, controller, workload)
            if composite is not None:
                return composite
        return workload_podgroup_group(pod, podgroup, controller, workload)

    async def _read(self, api_version: str, kind: str, ns: str, name: str, why: str) -> Obj:
        """A Workload API object the pod's group depends on; the pod waits while it is missing."""
        plural = workloadkinds.PLURALS[(WORKLOAD_API_GROUP, kind)]
        return await read_group_object(self._get, api_version, kind, plural, ns, name, why)

    async def _walk(self, pod: Obj) -> tuple[Obj | None, Obj | None]:
        """(highest recognised workload, highest readable controller) above the pod.

        As in the Go slurm-bridge: an unreadable (403) owner above a readable controller ends the
        walk there unless it is a recognised workload kind (that is missing RBAC, an error); a
        missing owner, one the bridge may not read directly above the pod, and a chain longer
        than ``max_depth`` are errors.
        """
        ns = pod["metadata"]["namespace"]
        recognized: Obj | None = None
        highest: Obj | None = None
        seen = {objects.uid(pod)}
        obj: Obj = pod
        depth = 0
        while (ref := controller_of(obj)) is not None:
            gk = group_kind(ref)
            what = f"{ref.get('kind')} {ns}/{ref.get('name')} ({ref.get('apiVersion')})"
            if depth >= self.max_depth:
                raise GroupError(
                    names.REASON_OWNER_CHAIN_TOO_DEEP,
                    f"the pod's controller owner chain is longer than {self.max_depth} objects (at {what})",
                    300.0,
                )
            depth += 1
            if ref.get("uid") in seen:
                raise GroupError(
                    names.REASON_OWNER_CHAIN_LOOP, f"the pod's controller owner chain loops at {what}", 300.0
                )
            seen.add(ref.get("uid"))
            try:
                path = resource_path(str(ref.get("apiVersion")), await self._plural(ref), ns, str(ref.get("name")))
                owner = await self._get(path)
            except KubeError as e:
                if e.status == 403 and highest is not None and gk not in RECOGNIZED:
                    break  # stop at the highest controller the bridge may read
                if e.status == 403:
                    raise GroupError(
                        names.REASON_OWNER_FORBIDDEN,
                        f"the bridge may not read the pod's owner {what}; grant it get on that resource",
                        60.0,
                    ) from None
                raise GroupError(
                    names.REASON_OWNER_UNREADABLE, f"cannot read the pod's owner {what}: {e}", 10.0
                ) from None
            if owner is None or objects.uid(owner) != ref.get("uid"):
                # Usually a workload being deleted: the garbage collector removes the pod soon.
                raise GroupError(names.REASON_OWNER_NOT_FOUND, f"the pod's owner {what} does not exist", 10.0)
            owner.setdefault("apiVersion", ref.get("apiVersion"))
            owner.setdefault("kind", ref.get("kind"))
            highest = owner
            if gk in RECOGNIZED:
                recognized = owner
            obj = owner
        return recognized, highest

    async def _plural(self, ref: Mapping[str, Any]) -> str:
        """The resource name of an owner's kind: well-known, or found once by API discovery."""
        api_version, kind = str(ref.get("apiVersion", "")), str(ref.get("kind", ""))
        known = workloadkinds.PLURALS.get((api_group(api_version), kind))
        if known:
            return known
        cached = self._plurals.get((api_version, kind))
        if cached:
            return cached
        doc = await self._get(api_prefix(api_version))
        for resource in (doc or {}).get("resources") or []:
            name = str(resource.get("name", ""))
            if resource.get("kind") == kind and "/" not in name:
                self._plurals[(api_version, kind)] = name
                return name
        raise GroupError(
            names.REASON_OWNER_KIND_NOT_SERVED,
            f"the pod's owner kind {kind} ({api_version}) is not served by the API server",
            60.0,
        )
