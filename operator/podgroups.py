"""The scheduled condition of a built-in PodGroup (Kubernetes 1.36 Workload API).

kube-scheduler reports on a PodGroup whether its gang was scheduled; for a gang the bridge
places, nobody else would, so ``kubectl get podgroups`` would show it unscheduled forever. The
PlaceholderJob stays the full record; this mirrors its outcome where Workload users look.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from slurm_bridge.operator import status as st
from slurm_bridge.operator.groups import SCHED_PODGROUP, WORKLOAD_API_VERSIONS

from slurm_bridge.kube import Conflict, KubeClient, KubeError, resource_path
from slurm_bridge.workloads import group_kind

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def podgroup_of(phj: Mapping[str, Any]) -> Obj | None:
    """The built-in PodGroup a PlaceholderJob was made for (its spec.group), if any."""
    source = ((phj.get("spec") or {}).get("group")) or {}
    return dict(source) if group_kind(source) == SCHED_PODGROUP else None


class PodGroupReporter:
    """Writes the condition once per change; remembers what it wrote (a cache: after a restart
    the first report reads the PodGroup and finds the condition already there)."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self._said: dict[str, tuple[bool, str, str]] = {}  # PodGroup uid -> last condition written

    async def report(self, phj: Obj, scheduled: bool, reason: str, message: str) -> None:
        source = podgroup_of(phj)
        if source is None:
            return
        uid = str(source.get("uid"))
        said = (scheduled, reason, message)
        if self._said.get(uid) == said:
            return
        api_version = str(source.get("apiVersion"))
        ctype = WORKLOAD_API_VERSIONS.get(api_version.rpartition("/")[2])
        if ctype is None:
            return
        path = resource_path(api_version, "podgroups", phj["metadata"]["namespace"], str(source.get("name")))
        try:
            podgroup = await self.kube.get(path)
            if podgroup is None or podgroup["metadata"].get("uid") != uid:
                return  # deleted; its PlaceholderJob goes with it
            conditions = (podgroup.get("status") or {}).get("conditions") or []
            current = next((c for c in conditions if c.get("type") == ctype), None)
            wanted = ("True" if scheduled else "False", reason, message)
            if current and (current.get("status"), current.get("reason"), current.get("message")) == wanted:
                self._said[uid] = said
                return
            new = st.set_condition(conditions, ctype, scheduled, reason, message,
                                   podgroup["metadata"].get("generation"))  # fmt: skip
            body = {"metadata": {"resourceVersion": podgroup["metadata"]["resourceVersion"]},
                    "status": {"conditions": new}}  # fmt: skip
            await self.kube.patch(f"{path}/status", body)
        except Conflict:
            return  # changed meanwhile: the next reconcile reports again
        except KubeError as e:
            log.warning("cannot set %s on PodGroup %s: %s", ctype, path, e)
            if e.status in (403, 404, 422):
                self._said[uid] = said  # asking again will not help: say it once, try the next change
            return
        self._said[uid] = said

    def forget(self, phj: Mapping[str, Any]) -> None:
        source = podgroup_of(phj)
        if source is not None:
            self._said.pop(str(source.get("uid")), None)
