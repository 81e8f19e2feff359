"""Which workload event queues which PlaceholderJob's options (the slurmjob annotations its spec is
made from) to be looked at again (:class:`.workitems.OptionsItem`, :mod:`.reconfigure`).

The workloads whose annotations configure Slurm jobs (``slurm_bridge/rules/workloadkinds.py``: Jobs,
JobSets, LeaderWorkerSets, both PodGroups, Workloads, CompositePodGroups) are listed and watched
for their metadata only (PartialObjectMetadata, as Kubernetes' garbage collector reads every kind:
no spec or status is sent), and only their slurmjob annotations are kept. A kind the API server
does not serve (a CRD not installed, the Workload API off) is looked for again every 30 s. A change
of those annotations queues the PlaceholderJobs they configure: those whose ``spec.group`` is the
workload (found by its uid in the store's index), and, for a Workload, a Job, a JobSet or a
PodGroup, the namespace's PlaceholderJobs whose options merge several objects' (built-in PodGroup
gangs, CompositePodGroups). An object listed (at start-up, or after a 410) is compared with what
each PlaceholderJob recorded, so a change made while no operator watched is found too.

Bare pods are their own workload: the pod watch finds their changes (:mod:`.members`).
"""

from __future__ import annotations

import functools
from typing import Final

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.cache import Informer, key_of
from slurm_bridge.kube.client import METADATA_ONLY, resource_path
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.seams import KubeListWatch
from slurm_bridge.operator.placeholderjobs.grouping.groups import recorded_options
from slurm_bridge.operator.placeholderjobs.members import MERGED_OPTIONS, by_group, merged_in
from slurm_bridge.operator.placeholderjobs.workitems import OptionsItem, WorkItem
from slurm_bridge.operator.runtime.store import Key, ParsedStore
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from slurm_bridge.rules import workloadkinds
from slurm_bridge.rules.workloadkinds import GroupKind, WorkloadKind

# The versions watched of the kinds the bridge otherwise reads only as owners (any version an
# ownerReference names): the ones their controllers serve.
OWNER_VERSIONS: Final[dict[GroupKind, tuple[str, ...]]] = {
    workloadkinds.JOB.group_kind: ("v1",),
    workloadkinds.JOBSET.group_kind: ("v1alpha2",),
    workloadkinds.LWS.group_kind: ("v1",),
}
# Kinds whose annotations take part in a merged group's options (docs/workloads.md).
MERGE_PARTS: Final = frozenset(
    k.group_kind
    for k in (
        workloadkinds.JOB,
        workloadkinds.JOBSET,
        workloadkinds.WORKLOAD,
        workloadkinds.SCHED_PODGROUP,
        workloadkinds.COMPOSITE_PODGROUP,
    )
)


def watched() -> list[tuple[WorkloadKind, str]]:
    """(kind, version) of every collection watched: each version the bridge reads a kind at (both
    of the Workload API's: whichever is served; a change seen twice is looked at once)."""
    return [(k, v) for k in workloadkinds.CONFIGURING for v in k.versions or OWNER_VERSIONS.get(k.group_kind, ())]


class Annotated:
    """One collection's objects as watched: key -> (uid, slurmjob annotations)."""

    def __init__(self) -> None:
        self.objects: dict[Key, Obj] = {}

    def get(self, key: Key) -> Obj | None:
        return self.objects.get(key)

    def values(self) -> list[Obj]:
        return list(self.objects.values())


class OptionSources:
    """The informers of the configuring workloads, mapping their annotation changes to work items."""

    def __init__(self, kube: KubeListWatch, phjs: ParsedStore[PlaceholderJob], queue: WorkQueue[WorkItem]) -> None:
        self.phjs, self.queue = phjs, queue
        self.informers: list[Informer] = []
        for kind, version in watched():
            held = Annotated()
            api = f"{kind.group}/{version}" if kind.group else version
            self.informers.append(
                Informer(
                    kube,
                    resource_path(api, kind.plural, None),
                    f"{kind.plural}.{kind.group or 'core'} {version} (slurmjob annotations)",
                    functools.partial(self.on_event, kind, held),
                    held,
                    missing_ok=True,
                    accept=METADATA_ONLY,
                )
            )

    def start(self) -> None:
        for i in self.informers:
            i.start()

    async def stop(self) -> None:
        for i in self.informers:
            await i.stop()

    def on_event(self, kind: WorkloadKind, held: Annotated, etype: str, obj: Obj) -> None:
        key, meta = key_of(obj), objects.meta(obj)
        if etype == "DELETED":
            held.objects.pop(key, None)
            return
        uid = str(meta.get("uid") or "")
        new = workloadkinds.slurmjob_annotations(meta.get("annotations"))
        old = held.objects.get(key)
        stored = {"metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")}}
        held.objects[key] = {**stored, "options": new}
        if old is not None and objects.uid(old) == uid and old.get("options") == new:
            return  # nothing the bridge reads changed (a Job's status, say)
        listed = old is None  # first seen: a list, or a new object (its PlaceholderJobs are made after)
        for phj in self.phjs.indexed(by_group(uid)):
            self._maybe(phj, new, listed)
        if kind.group_kind in MERGE_PARTS:
            for phj in self.phjs.indexed(merged_in(key[0])):
                self._maybe(phj, None, listed)

    def _maybe(self, phj: Obj, options: dict[str, str] | None, listed: bool) -> None:
        """Queue the PlaceholderJob unless it ended or provably has ``options`` already (None: its
        options merge several objects', resolved by :mod:`.reconfigure`). One made before options
        were recorded is looked at on a change, not at every list."""
        typed = self.phjs.model_of(phj)
        if typed.deleted or typed.status.phase in names.TERMINAL_PHASES:
            return
        recorded = recorded_options(phj)
        if recorded is None and listed:
            return
        merged = typed.spec.group is not None and workloadkinds.group_kind(typed.spec.group.dump()) in MERGED_OPTIONS
        if options is not None and not merged and recorded == options:
            return
        self.queue.add(OptionsItem.of(phj))
