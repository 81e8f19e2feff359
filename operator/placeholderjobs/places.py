"""The preempted workloads' places (slurm_bridge/rules/resume.py decides; this keeps them).

A place must outlive the PlaceholderJob that was preempted -- a Job's pod's PlaceholderJob goes
with the pod, a gang's is deleted when its next run starts -- and survive an operator restart, and
nobody but the bridge may write it (a place is a Slurm priority the bridge sets as an operator). So
places live in ConfigMaps in the operator's own namespace, one per workload (its key hashed into
the name), each preempted job's place an entry: tenants cannot reach that namespace. The leader
lists them once when it starts leading and keeps the list as it writes (it is their only writer),
so a new PlaceholderJob costs no read to learn whether it resumes anything.

Taking a place writes ``taken_by`` with a JSON-patch ``test`` of the entry as read, so two
replacements never take one place; a restart between taking it and making the PlaceholderJob
finds it taken by the same name. Entries older than the return window are dropped as they are met.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import Config
from slurm_bridge.core.kubeformats import escape_pointer
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import Conflict, KubeError, NotFound, resource_path
from slurm_bridge.kube.seams import PlacesKube
from slurm_bridge.rules.resume import Place, ResumePolicy, choose_place, decode_place, expired

log = logging.getLogger(__name__)


def policy_of(config: Config) -> ResumePolicy:
    """The config's ``preemption`` section as the rules take it."""
    section = config.preemption
    return ResumePolicy(section.returnToPlace, section.maxReturns, section.returnWindowSeconds)


class Places:
    """The places of preempted workloads, in ConfigMaps of ``namespace``."""

    def __init__(
        self,
        kube: PlacesKube,
        namespace: str,
        bridge_id: str,
        policy: ResumePolicy,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.bridge_id = bridge_id
        self.policy = policy
        self.now = now
        self._by_workload: dict[str, dict[str, Place]] = {}  # workload -> job id -> place
        self._loaded = False

    def reset(self) -> None:
        """Forget what was read: a replica that leads again lists the places anew (another leader
        may have written meanwhile)."""
        self._by_workload.clear()
        self._loaded = False

    def _name(self, workload: str) -> str:
        digest = hashlib.sha256(workload.encode()).hexdigest()[:20]
        return f"{self.bridge_id}-place-{digest}"

    def _path(self, name: str | None = None) -> str:
        return resource_path("v1", "configmaps", self.namespace, name)

    def _selector(self) -> str:
        return f"{names.LABEL_APP_COMPONENT}={names.PLACES_COMPONENT},{names.LABEL_APP_INSTANCE}={self.bridge_id}"

    def _keep(self, cm: Obj) -> None:
        for job, raw in (cm.get("data") or {}).items():
            place = decode_place(raw)
            if place is not None and not expired(place, self.policy, self.now()):
                self._by_workload.setdefault(place.workload, {})[job] = place

    async def _load(self) -> None:
        if self._loaded:
            return
        listed = await self.kube.get(self._path(), params={"labelSelector": self._selector()})
        self._by_workload.clear()
        for cm in (listed or {}).get("items") or []:
            self._keep(cm)
        self._loaded = True

    async def record(self, place: Place) -> None:
        """Keep ``place`` for its workload's replacement (one entry of its workload's ConfigMap)."""
        await self._load()
        name, entry = self._name(place.workload), str(place.job_id)
        patch = {"data": {entry: place.encode()}}
        try:
            await self.kube.patch(self._path(name), patch, "merge")
        except NotFound:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": {
                        names.LABEL_APP_NAME: names.APP_NAME,
                        names.LABEL_APP_MANAGED_BY: names.APP_NAME,
                        names.LABEL_APP_COMPONENT: names.PLACES_COMPONENT,
                        names.LABEL_APP_INSTANCE: self.bridge_id,
                    },
                },
                "data": {entry: place.encode()},
            }
            try:
                await self.kube.create(self._path(), body)
            except Conflict:  # made meanwhile (this leader is its only writer: a retry)
                await self.kube.patch(self._path(name), patch, "merge")
        self._by_workload.setdefault(place.workload, {})[entry] = place
        await self._prune(place.workload)

    async def take(self, workload: str | None, taker: str) -> Place | None:
        """The place ``taker`` (the new PlaceholderJob's name) gets of ``workload``'s, marked taken
        in the ConfigMap before it is used; None: there is none (the common case, read from memory)."""
        if workload is None or not self.policy.keep_place:
            return None
        await self._load()
        for _ in range(3):
            places = self._by_workload.get(workload)
            if not places:
                return None
            chosen = choose_place(places.values(), taker, self.policy, self.now())
            if chosen is None:
                return None
            entry = str(chosen.job_id)
            before = places[entry]
            if before.taken_by == taker:
                return before
            path = f"/data/{escape_pointer(entry)}"
            ops = [
                {"op": "test", "path": path, "value": before.encode()},
                {"op": "replace", "path": path, "value": chosen.encode()},
            ]
            try:
                cm = await self.kube.patch(self._path(self._name(workload)), ops, "json")
            except NotFound:
                self._by_workload.pop(workload, None)
                return None
            except KubeError as e:
                if not isinstance(e, Conflict) and e.status != 422:
                    raise
                fresh = await self.kube.get(self._path(self._name(workload)))
                self._by_workload.pop(workload, None)
                if fresh is not None:
                    self._keep(fresh)
                continue
            self._by_workload.pop(workload, None)
            self._keep(cm)
            return chosen
        return None

    async def drop(self, place: Place) -> None:
        """The place is used (its new job has its priority): remove its entry, and the ConfigMap
        once empty. Best effort: an entry left over expires with the window."""
        entry = str(place.job_id)
        self._by_workload.get(place.workload, {}).pop(entry, None)
        await self._remove(place.workload, [entry])

    async def _prune(self, workload: str) -> None:
        places = self._by_workload.get(workload, {})
        old = [e for e, p in places.items() if expired(p, self.policy, self.now())]
        for e in old:
            places.pop(e, None)
        if old:
            await self._remove(workload, old)

    async def _remove(self, workload: str, entries: list[str]) -> None:
        name = self._name(workload)
        ops = [{"op": "remove", "path": f"/data/{escape_pointer(e)}"} for e in entries]
        try:
            cm = await self.kube.patch(self._path(name), ops, "json")
        except KubeError as e:  # gone, or an entry removed already: read what is left
            if not isinstance(e, NotFound | Conflict) and e.status != 422:
                log.info("removing places %s of %s failed: %s", entries, name, e)
                return
            cm = await self.kube.get(self._path(name)) or {}
        if cm and not cm.get("data"):
            try:
                await self.kube.delete(self._path(name), uid=objects.uid(cm))
            except KubeError as e:
                log.info("deleting the empty places %s failed: %s", name, e)
        if not self._by_workload.get(workload):
            self._by_workload.pop(workload, None)
