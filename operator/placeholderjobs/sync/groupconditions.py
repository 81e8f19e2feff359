"""The scheduled condition of a built-in PodGroup (the Kubernetes Workload API), and of a
CompositePodGroup (``CompositeReporter``).

kube-scheduler reports on a PodGroup whether its gang was scheduled; for a gang the bridge
places, nobody else would, so ``kubectl get podgroups`` would show it unscheduled forever. The
PlaceholderJob stays the full record; this mirrors its outcome where Workload users look.

The condition is written at the version the API server serves now (the PodGroup is the same
object at every version; the one recorded in the PlaceholderJob may be gone after an upgrade),
with that version's type: ``PodGroupScheduled`` at v1alpha2, ``PodGroupInitiallyScheduled`` at
v1beta1, which stays True once True (a later run of the gang waiting in Slurm does not turn it
back to False), as kube-scheduler does it (slurm_bridge/kube/schedulingapi.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube import schedulingapi
from slurm_bridge.kube.client import Conflict, KubeError, resource_path
from slurm_bridge.kube.clusterapis import Discovery
from slurm_bridge.kube.conditions import set_condition_dicts
from slurm_bridge.kube.schedulingapi import APIVersion
from slurm_bridge.kube.seams import StatusKube
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import API_GROUP as COMPOSITE_GROUP
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import PLURAL as COMPOSITE_PLURAL
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import is_composite
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import served_version as composite_version
from slurm_bridge.operator.placeholderjobs.grouping.groups import SCHED_PODGROUP
from slurm_bridge.rules.workloadkinds import group_kind

log = logging.getLogger(__name__)


def podgroup_of(phj: Mapping[str, Any]) -> Obj | None:
    """The built-in PodGroup a PlaceholderJob was made for (its spec.group), if any."""
    source = ((phj.get("spec") or {}).get("group")) or {}
    return dict(source) if group_kind(source) == SCHED_PODGROUP else None


def condition_change(version: APIVersion, conditions: list[Obj], scheduled: bool, reason: str, message: str) -> bool:
    """Whether the PodGroup's ``conditions`` need this report written (pure)."""
    current = next((c for c in conditions if c.get("type") == version.condition), None)
    if current is None:
        return True
    if version.sticky and current.get("status") == "True":
        return False  # PodGroupInitiallyScheduled: True is final
    wanted = ("True" if scheduled else "False", reason, message)
    return (current.get("status"), current.get("reason"), current.get("message")) != wanted


class ConditionWriter:
    """Writes a workload object's scheduled condition once per change; remembers what it wrote by
    the object's uid (a cache: after a restart the first report reads the object and finds the
    condition already there). Shared by PodGroups and CompositePodGroups."""

    def __init__(self, kube: StatusKube) -> None:
        self.kube = kube
        # (object uid, condition type) -> last condition written
        self._said: dict[tuple[str, str], tuple[bool, str, str]] = {}

    def told(self, uid: str, said: tuple[bool, str, str], ctype: str = "") -> bool:
        return self._said.get((uid, ctype)) == said

    async def write_disrupted(self, path: str, uid: str, message: str) -> None:
        """``DisruptionTarget`` (reason ``PreemptionByScheduler``) on the group: Slurm preempts its
        gang's job, as kube-scheduler says of a gang it preempts. Once per object and message."""
        ctype, reason = names.GROUP_COND_DISRUPTION_TARGET, names.GROUP_REASON_PREEMPTION_BY_SCHEDULER
        said = (True, reason, message)
        if self.told(uid, said, ctype):
            return

        def needed(conditions: list[Obj]) -> bool:
            current = next((c for c in conditions if c.get("type") == ctype), None)
            return current is None or (current.get("status"), current.get("reason"), current.get("message")) != (
                "True",
                reason,
                message,
            )

        await self.write(path, uid, ctype, said, needed, key=ctype)

    async def write(
        self,
        path: str,
        uid: str,
        ctype: str,
        said: tuple[bool, str, str],
        needed: Callable[[list[Obj]], bool],
        key: str = "",
    ) -> None:
        """Set condition ``ctype`` to ``said`` on the object at ``path`` when ``needed`` says its
        conditions lack it; the resourceVersion is tested, so a concurrent change wins."""
        scheduled, reason, message = said
        try:
            obj = await self.kube.get(path)
            if obj is None or objects.uid(obj) != uid:
                return  # deleted; its PlaceholderJob goes with it
            conditions = (obj.get("status") or {}).get("conditions") or []
            if not needed(conditions):
                self._said[(uid, key)] = said
                return
            new = set_condition_dicts(conditions, ctype, scheduled, reason, message, obj["metadata"].get("generation"))
            body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": {"conditions": new}}
            await self.kube.patch(f"{path}/status", body)
        except Conflict:
            return  # changed meanwhile: the next reconcile reports again
        except KubeError as e:
            log.warning("cannot set %s on %s: %s", ctype, path, e)
            if e.status in (403, 404, 422):
                self._said[(uid, key)] = said  # asking again will not help: say it once, try the next change
            return
        self._said[(uid, key)] = said

    def forget_uid(self, uid: str) -> None:
        for key in [k for k in self._said if k[0] == uid]:
            self._said.pop(key, None)


class PodGroupReporter(ConditionWriter):
    """The PodGroup's scheduled condition, at the Workload API version the cluster serves."""

    def __init__(self, kube: StatusKube, apis: Discovery | None = None) -> None:
        super().__init__(kube)
        self.apis = apis or Discovery(kube.get)

    async def _version(self, recorded: str) -> APIVersion | None:
        """The served version to write at; the recorded one when discovery cannot say."""
        try:
            served = await self.apis.workload_version()
        except KubeError as e:
            log.warning("cannot discover the Workload API (%s); writing at %s", e, recorded)
            served = None
        return schedulingapi.VERSIONS.get(served) if served else schedulingapi.version_of(recorded)

    async def report(self, phj: Obj, scheduled: bool, reason: str, message: str) -> None:
        source = podgroup_of(phj)
        if source is None:
            return
        uid = str(source.get("uid"))
        said = (scheduled, reason, message)
        if self.told(uid, said):
            return
        version = await self._version(str(source.get("apiVersion")))
        if version is None:
            return
        path = resource_path(version.api_version, "podgroups", phj["metadata"]["namespace"], str(source.get("name")))
        await self.write(
            path, uid, version.condition, said, lambda c: condition_change(version, c, scheduled, reason, message)
        )

    async def disrupted(self, phj: Obj, message: str) -> None:
        """Slurm preempts the PodGroup's gang: ``DisruptionTarget`` on it (the served version)."""
        source = podgroup_of(phj)
        if source is None:
            return
        version = await self._version(str(source.get("apiVersion")))
        if version is None:
            return
        path = resource_path(version.api_version, "podgroups", phj["metadata"]["namespace"], str(source.get("name")))
        await self.write_disrupted(path, str(source.get("uid")), message)

    def forget(self, phj: Mapping[str, Any]) -> None:
        source = podgroup_of(phj)
        if source is not None:
            self.forget_uid(str(source.get("uid")))


def composite_of(phj: Mapping[str, Any]) -> Obj | None:
    """The CompositePodGroup a PlaceholderJob was made for (its spec.group), if any."""
    return dict((phj.get("spec") or {}).get("group") or {}) if is_composite(phj) else None


class CompositeReporter(ConditionWriter):
    """Writes the composite's scheduled condition once per change, never back to False once True
    (Kubernetes' rule: the condition records the first scheduling). What it wrote is a cache.

    Written at the newest version the API server serves now (v1beta1 on Kubernetes 1.38, v1alpha3 on
    1.37), as for PodGroups: the one recorded in the PlaceholderJob may be gone after an upgrade."""

    def __init__(self, kube: StatusKube, apis: Discovery | None = None) -> None:
        super().__init__(kube)
        self.apis = apis or Discovery(kube.get)

    async def _api_version(self, recorded: str) -> str:
        """The served version's ``group/version``; the recorded one when discovery cannot say."""
        try:
            served = composite_version(await self.apis.workload_versions())
        except KubeError as e:
            log.warning("cannot discover the CompositePodGroup API (%s); writing at %s", e, recorded)
            served = None
        return f"{COMPOSITE_GROUP}/{served}" if served else recorded

    async def report(self, phj: Obj, scheduled: bool, reason: str, message: str) -> None:
        source = composite_of(phj)
        if source is None:
            return
        uid, said = str(source.get("uid")), (scheduled, reason, message)
        if self.told(uid, said):
            return
        ctype = names.COMPOSITE_COND_SCHEDULED
        api_version = await self._api_version(str(source.get("apiVersion")))
        path = resource_path(api_version, COMPOSITE_PLURAL, phj["metadata"]["namespace"], str(source.get("name")))

        def needed(conditions: list[Obj]) -> bool:
            current = next((c for c in conditions if c.get("type") == ctype), None)
            if current is None:
                return True
            if current.get("status") == "True" and not scheduled:
                return False  # final once True
            wanted = ("True" if scheduled else "False", reason, message)
            return (current.get("status"), current.get("reason"), current.get("message")) != wanted

        await self.write(path, uid, ctype, said, needed)

    async def disrupted(self, phj: Obj, message: str) -> None:
        """Slurm preempts the composite's heterogeneous job: ``DisruptionTarget`` on it."""
        source = composite_of(phj)
        if source is None:
            return
        api_version = await self._api_version(str(source.get("apiVersion")))
        path = resource_path(api_version, COMPOSITE_PLURAL, phj["metadata"]["namespace"], str(source.get("name")))
        await self.write_disrupted(path, str(source.get("uid")), message)

    def forget(self, phj: Mapping[str, Any]) -> None:
        source = composite_of(phj)
        if source is not None:
            self.forget_uid(str(source.get("uid")))
