"""CompositePodGroups, the reads (the rules are :mod:`.compositepodgroups`'s): ``CompositeReader``
finds whether a pod's PodGroup belongs to a gang CompositePodGroup (the resolver asks it once the
PodGroup is read). The composite's scheduled condition is written by
``sync.groupconditions.CompositeReporter``.
"""

from __future__ import annotations

import logging

from slurm_bridge import names
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube import schedulingapi
from slurm_bridge.kube.client import KubeError
from slurm_bridge.kube.clusterapis import Discovery
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import (
    API_GROUP,
    PLURAL,
    composite_group,
    min_group_count,
    nested,
    not_served_message,
    parent_name,
    served_version,
)
from slurm_bridge.operator.placeholderjobs.grouping.groups import Getter, Group, GroupError, read_group_object

log = logging.getLogger(__name__)
KIND = "CompositePodGroup"


class CompositeReader:
    """Reads a PodGroup's parent CompositePodGroup (and its parent) through ``get``; the served
    version is found by discovery once."""

    def __init__(self, get: Getter, apis: Discovery) -> None:
        self._get = get
        self._apis = apis  # the discovery the resolver shares (slurm_bridge/kube/clusterapis.py)

    async def group(self, pod: Obj, podgroup: Obj, controller: Obj | None, workload: Obj | None) -> Group | None:
        """The composite's group for a pod of gang PodGroup ``podgroup``, which names a parent;
        None when the parent's policy is ``basic`` (its children are scheduled independently, so
        the PodGroup stays a gang of its own)."""
        ns, pg = pod["metadata"]["namespace"], podgroup["metadata"]["name"]
        parent = parent_name(podgroup)
        assert parent is not None
        api_version = f"{API_GROUP}/{await self.version(pg, parent)}"
        composite = await self._read(api_version, ns, parent, f"PodGroup {pg} names as its parent")
        problems = schedulingapi.composite_problems(composite.get("spec") or {}, "spec")
        if problems:  # made before the bridge looked, or without its webhook, which refuses it
            raise GroupError(
                names.REASON_PODGROUP_UNSUPPORTED, f"CompositePodGroup {parent}: " + "; ".join(problems), 60.0
            )
        if min_group_count(composite) is None:
            return None
        outer = parent_name(composite)
        if outer:
            grand = await self._read(api_version, ns, outer, f"CompositePodGroup {parent} names as its parent")
            if min_group_count(grand) is not None:
                raise nested(composite, grand)
        return composite_group(pod, podgroup, composite, controller, workload)

    async def version(self, podgroup: str = "", parent: str = "") -> str:
        """The newest served CompositePodGroup version the bridge knows (v1beta1 on Kubernetes 1.38,
        v1alpha3 on 1.37), from the shared, cached discovery."""
        try:
            served_by_version = await self._apis.workload_versions()
        except KubeError as e:
            raise GroupError(
                names.REASON_COMPOSITE_API_UNREADABLE, f"cannot discover the {API_GROUP} API: {e}", 30.0
            ) from None
        version = served_version(served_by_version)
        if version is None:
            raise GroupError(
                names.REASON_COMPOSITE_API_NOT_SERVED, not_served_message(podgroup, parent, served_by_version), 60.0
            )
        return version

    async def _read(self, api_version: str, ns: str, name: str, why: str) -> Obj:
        return await read_group_object(self._get, api_version, KIND, PLURAL, ns, name, why)
