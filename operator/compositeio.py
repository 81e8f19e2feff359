"""CompositePodGroups, the reads and the status write (the rules are operator/composite.py's).

``CompositeReader`` finds whether a pod's PodGroup belongs to a gang CompositePodGroup (the
resolver asks it once the PodGroup is read); ``CompositeReporter`` sets the composite's
``CompositePodGroupInitiallyScheduled`` condition for the heterogeneous jobs Slurm places, as
kube-scheduler does for the groups it places.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from slurm_bridge.operator import status as st
from slurm_bridge.operator.composite import (
    API_GROUP,
    PLURAL,
    VERSIONS,
    composite_group,
    is_composite,
    min_group_count,
    nested,
    parent_name,
)
from slurm_bridge.operator.groups import Getter, Group, GroupError

from slurm_bridge import names
from slurm_bridge.clusterapis import Discovery
from slurm_bridge.kube import Conflict, KubeClient, KubeError, resource_path

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
        path = resource_path(api_version, PLURAL, ns, name)
        try:
            obj = await self._get(path)
        except KubeError as e:
            if e.status == 403:
                raise GroupError(f"{KIND}Forbidden", f"the bridge may not read {KIND} {ns}/{name} ({api_version}); "
                                 f"grant it get on {PLURAL}", 60.0) from None  # fmt: skip
            raise GroupError(
                f"{KIND}Unreadable", f"cannot read {KIND} {ns}/{name} ({api_version}): {e}", 30.0
            ) from None
        if obj is None:
            # A workload controller creates the CompositePodGroup, the PodGroups and the pods in some order.
            raise GroupError(f"{KIND}NotFound",
                             f"{why} {KIND} {name}, which does not exist ({api_version}); the pod waits for it",
                             5.0)  # fmt: skip
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", KIND)
        return obj


def composite_of(phj: Mapping[str, Any]) -> Obj | None:
    """The CompositePodGroup a PlaceholderJob was made for (its spec.group), if any."""
    return dict((phj.get("spec") or {}).get("group") or {}) if is_composite(phj) else None


class CompositeReporter:
    """Writes the composite's scheduled condition once per change, never back to False once True
    (Kubernetes' rule: the condition records the first scheduling). What it wrote is a cache."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self._said: dict[str, tuple[bool, str, str]] = {}  # CompositePodGroup uid -> last condition written

    async def report(self, phj: Obj, scheduled: bool, reason: str, message: str) -> None:
        source = composite_of(phj)
        if source is None:
            return
        uid, said = str(source.get("uid")), (scheduled, reason, message)
        if self._said.get(uid) == said:
            return
        ctype = names.COMPOSITE_COND_SCHEDULED
        path = resource_path(
            str(source.get("apiVersion")), PLURAL, phj["metadata"]["namespace"], str(source.get("name"))
        )
        try:
            composite = await self.kube.get(path)
            if composite is None or composite["metadata"].get("uid") != uid:
                return  # deleted; its PlaceholderJob goes with it
            conditions = (composite.get("status") or {}).get("conditions") or []
            current = next((c for c in conditions if c.get("type") == ctype), None)
            wanted = ("True" if scheduled else "False", reason, message)
            final = current is not None and current.get("status") == "True" and not scheduled
            if final or (current and (current.get("status"), current.get("reason"), current.get("message")) == wanted):
                self._said[uid] = said
                return
            new = st.set_condition(conditions, ctype, scheduled, reason, message,
                                   composite["metadata"].get("generation"))  # fmt: skip
            body = {"metadata": {"resourceVersion": composite["metadata"]["resourceVersion"]},
                    "status": {"conditions": new}}  # fmt: skip
            await self.kube.patch(f"{path}/status", body)
        except Conflict:
            return  # changed meanwhile: the next reconcile reports again
        except KubeError as e:
            log.warning("cannot set %s on CompositePodGroup %s: %s", ctype, path, e)
            if e.status in (403, 404, 422):
                self._said[uid] = said  # asking again will not help: say it once, try the next change
            return
        self._said[uid] = said

    def forget(self, phj: Mapping[str, Any]) -> None:
        source = composite_of(phj)
        if source is not None:
            self._said.pop(str(source.get("uid")), None)
