"""CompositePodGroups, the reads and the status write (the rules are
operator/placeholderjobs/grouping/compositepodgroups.py's).

``CompositeReader`` finds whether a pod's PodGroup belongs to a gang CompositePodGroup (the
resolver asks it once the PodGroup is read); ``CompositeReporter`` sets the composite's
``CompositePodGroupInitiallyScheduled`` condition for the heterogeneous jobs Slurm places, as
kube-scheduler does for the groups it places.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from slurm_bridge import names
from slurm_bridge.clusterapis import Discovery
from slurm_bridge.kube import KubeError, resource_path
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import (
    API_GROUP,
    PLURAL,
    VERSIONS,
    composite_group,
    is_composite,
    min_group_count,
    nested,
    parent_name,
)
from slurm_bridge.operator.placeholderjobs.grouping.groups import Getter, Group, GroupError, read_group_object
from slurm_bridge.operator.placeholderjobs.sync.podgroups import ConditionWriter

log = logging.getLogger(__name__)
Obj = dict[str, Any]
KIND = "CompositePodGroup"


class CompositeReader:
    """Reads a PodGroup's parent CompositePodGroup (and its parent) through ``get``; the served
    version is found by discovery once."""

    def __init__(self, get: Getter, apis: Discovery) -> None:
        self._get = get
        self._apis = apis  # the discovery the resolver shares (slurm_bridge/clusterapis.py)

    async def group(self, pod: Obj, podgroup: Obj, controller: Obj | None, workload: Obj | None) -> Group | None:
        """The composite's group for a pod of gang PodGroup ``podgroup``, which names a parent;
        None when the parent's policy is ``basic`` (its children are scheduled independently, so
        the PodGroup stays a gang of its own)."""
        ns, pg = pod["metadata"]["namespace"], podgroup["metadata"]["name"]
        parent = parent_name(podgroup)
        assert parent is not None
        api_version = f"{API_GROUP}/{await self.version(pg, parent)}"
        composite = await self._read(api_version, ns, parent, f"PodGroup {pg} names as its parent")
        if min_group_count(composite) is None:
            return None
        outer = parent_name(composite)
        if outer:
            grand = await self._read(api_version, ns, outer, f"CompositePodGroup {parent} names as its parent")
            if min_group_count(grand) is not None:
                raise nested(composite, grand)
        return composite_group(pod, podgroup, composite, controller, workload)

    async def version(self, podgroup: str = "", parent: str = "") -> str:
        """The served CompositePodGroup version the bridge knows (the shared, cached discovery)."""
        try:
            served_by_version = await self._apis.workload_versions()
        except KubeError as e:
            raise GroupError(
                "CompositePodGroupAPIUnreadable", f"cannot discover the {API_GROUP} API: {e}", 30.0
            ) from None
        for version in VERSIONS:
            if PLURAL in served_by_version.get(version, ()):
                return version
        served = sorted(served_by_version)
        known = ", ".join(f"{API_GROUP}/{v}" for v in VERSIONS)
        raise GroupError(
            "CompositePodGroupAPINotServed",
            f"PodGroup {podgroup} names CompositePodGroup {parent} as its parent, but the API server serves no "
            f"CompositePodGroups in {known} (served versions: {', '.join(served) or 'none'}); enable the "
            f"CompositePodGroup feature gate (Kubernetes 1.37) and --runtime-config={API_GROUP}/{VERSIONS[0]}=true",
            60.0,
        )

    async def _read(self, api_version: str, ns: str, name: str, why: str) -> Obj:
        return await read_group_object(self._get, api_version, KIND, PLURAL, ns, name, why)


def composite_of(phj: Mapping[str, Any]) -> Obj | None:
    """The CompositePodGroup a PlaceholderJob was made for (its spec.group), if any."""
    return dict((phj.get("spec") or {}).get("group") or {}) if is_composite(phj) else None


class CompositeReporter(ConditionWriter):
    """Writes the composite's scheduled condition once per change, never back to False once True
    (Kubernetes' rule: the condition records the first scheduling). What it wrote is a cache."""

    async def report(self, phj: Obj, scheduled: bool, reason: str, message: str) -> None:
        source = composite_of(phj)
        if source is None:
            return
        uid, said = str(source.get("uid")), (scheduled, reason, message)
        if self.told(uid, said):
            return
        ctype = names.COMPOSITE_COND_SCHEDULED
        path = resource_path(
            str(source.get("apiVersion")), PLURAL, phj["metadata"]["namespace"], str(source.get("name"))
        )

        def needed(conditions: list[Obj]) -> bool:
            current = next((c for c in conditions if c.get("type") == ctype), None)
            if current is None:
                return True
            if current.get("status") == "True" and not scheduled:
                return False  # final once True
            wanted = ("True" if scheduled else "False", reason, message)
            return (current.get("status"), current.get("reason"), current.get("message")) != wanted

        await self.write(path, uid, ctype, said, needed)

    def forget(self, phj: Mapping[str, Any]) -> None:
        source = composite_of(phj)
        if source is not None:
            self.forget_uid(str(source.get("uid")))
