"""Pods -> PlaceholderJobs (I/O): a pod's group (``grouping.resolver`` applying ``grouping.groups``'
pure rules) gets its PlaceholderJob, made and joined the way the group's job shape says
(``shapes.registry.shape_for``: a single pod's own, a gang's, a CompositePodGroup's). The shapes
join through the machinery in ``grouping.joining``, which also remembers which PlaceholderJob
each pod joined and which pods wait for a place.

Ended pods are left to ``sync.phjsync``, which decides whether the Slurm job ends with them; a
member's end wakes the pods waiting for its place (docs/workloads.md, "Late members").
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Final

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import Config
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.seams import MembershipKube
from slurm_bridge.operator.placeholderjobs.grouping.groups import GroupError, recorded_options
from slurm_bridge.operator.placeholderjobs.grouping.joining import Joins
from slurm_bridge.operator.placeholderjobs.grouping.resolver import GroupResolver
from slurm_bridge.operator.placeholderjobs.places import Places
from slurm_bridge.operator.placeholderjobs.shapes.registry import shape_for
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.workitems import OptionsItem, PhjItem, WorkItem
from slurm_bridge.operator.runtime.store import Key, ObjectStore, ParsedStore
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from slurm_bridge.rules import workloadkinds
from slurm_bridge.rules.namespaces import ManagedNamespaces
from slurm_bridge.rules.podphase import pod_ended

log = logging.getLogger(__name__)
# A pod whose namespace's labels are not read yet (managedNamespaceSelector) is looked at again.
NAMESPACES_WAIT_SECONDS: Final = 2.0


def member_pods(phj: Obj) -> list[Key]:
    """The (namespace, name) of each pod a PlaceholderJob lists."""
    ns = objects.namespace(phj) or ""
    pods = (phj.get("spec") or {}).get("pods") or []
    return [(ns, name) for name in pods if isinstance(name, str)]


# Groups whose options merge several objects' annotations (docs/workloads.md): a built-in PodGroup's
# (PodGroup, its Job or JobSet, the Workload) and a CompositePodGroup's.
MERGED_OPTIONS: Final = frozenset(
    {workloadkinds.SCHED_PODGROUP.group_kind, workloadkinds.COMPOSITE_PODGROUP.group_kind}
)


def by_group(uid: str) -> Hashable:
    """The index value of the PlaceholderJobs of the workload with ``uid`` (their ``spec.group``)."""
    return ("", "group", uid)


def merged_in(namespace: str) -> Hashable:
    """The index value of a namespace's PlaceholderJobs whose options merge several objects'."""
    return ("", "merged", namespace)


def phj_index(phj: Obj) -> list[Hashable]:
    """The PlaceholderJob store's index: its member pods (a pod's events find its PlaceholderJob),
    its workload's uid and, for merged options, its namespace (a workload's annotation change
    finds the PlaceholderJobs it configures: :mod:`.optionwatch`)."""
    keys: list[Hashable] = list(member_pods(phj))
    source = (phj.get("spec") or {}).get("group") or {}
    if isinstance(source, dict) and source.get("uid"):
        keys.append(by_group(str(source["uid"])))
        if workloadkinds.group_kind(source) in MERGED_OPTIONS:
            keys.append(merged_in(objects.namespace(phj) or ""))
    return keys


def own_options_changed(pod: Obj, phj: PlaceholderJob) -> bool:
    """A pod that is its own group (a bare pod: its PlaceholderJob's ``spec.group``) whose slurmjob
    annotations are not those its PlaceholderJob was made from."""
    source = phj.spec.group
    if source is None or source.kind != "Pod" or source.uid != objects.uid(pod):
        return False
    return recorded_options(phj.raw) != workloadkinds.slurmjob_annotations(objects.annotations(pod))


class Membership:
    """reconcile(pod key): make the pod a member of its group's PlaceholderJob."""

    def __init__(
        self,
        config: Config,
        kube: MembershipKube,
        pods: ObjectStore,
        phjs: ParsedStore[PlaceholderJob],
        queue: WorkQueue[WorkItem],
        poller: SlurmPoller,
        namespaces: ManagedNamespaces | None = None,
        places: Places | None = None,
    ) -> None:
        self.pods, self.phjs, self.queue = pods, phjs, queue
        # Only pods of managed namespaces get a PlaceholderJob (slurm_bridge/rules/namespaces.py). None:
        # the config's rule, with no labels known (a selector then waits).
        self.namespaces = namespaces or ManagedNamespaces(config)
        self.groups = GroupResolver(kube.get)
        self.joins = Joins(config, kube, pods, phjs, queue, poller, places)

    def forget(self, uid: str) -> None:
        """The pod is gone."""
        self.joins.forget(uid)

    async def reconcile(self, key: Key) -> float | None:
        pod = self.pods.get(key)
        if pod is None or objects.deletion_timestamp(pod) or pod_ended(pod):
            # The PlaceholderJob decides whether the Slurm job must end with it; a member that
            # ended (not one still terminating) frees its place for a pod waiting for one.
            for phj in self._phjs_with_member(key):
                self.queue.add(PhjItem.of(phj))
                if pod is None or pod_ended(pod):
                    self.joins.wake(ObjectStore.key_of(phj))
            return None
        known = self._known_phj(pod)
        if known is not None:
            self.queue.add(PhjItem.of(known))
            if own_options_changed(pod, self.phjs.model_of(known)):
                self.queue.add(
                    OptionsItem.of(known)
                )  # its annotations changed: operator/placeholderjobs/reconfigure.py
            return None
        managed = await self.namespaces.judge(pod["metadata"]["namespace"])
        if managed is None:
            return NAMESPACES_WAIT_SECONDS  # the namespaces' labels are not read yet
        if not managed:
            # The webhook never saw this pod: no PlaceholderJob, no Slurm job; one Event says why.
            message = self.namespaces.message(pod["metadata"]["namespace"])
            await self.joins.tell(pod, names.REASON_NAMESPACE_NOT_MANAGED, message)
            return None
        try:
            group = await self.groups.resolve(pod)
        except GroupError as e:
            await self.joins.tell(pod, e.reason, e.message)
            return e.retry_after
        return await shape_for(group).join(pod, group, self.joins)

    def _known_phj(self, pod: Obj) -> Obj | None:
        """The PlaceholderJob the pod is already a member of, found without an owner walk."""
        meta = pod["metadata"]
        key = self.joins.member_of.get(meta["uid"])
        if key is not None:
            phj = self.phjs.model(key)
            if phj is not None and not phj.deleted and meta["name"] in phj.spec.pods and phj.is_member(pod):
                return phj.raw
            self.joins.member_of.pop(meta["uid"], None)
        own = self.phjs.model((meta["namespace"], meta["name"]))
        if own is not None and not own.is_gang() and own.pod_owner_uid() == meta["uid"]:
            return own.raw
        return None

    def _phjs_with_member(self, pod_key: Key) -> list[Obj]:
        """From the store's member index (``member_pods``): a walk over every PlaceholderJob was
        5 ms a pod with 10,000 of them, and a restart reconciles every ended pod (bench/log,
        run 8: 2,000 ended pods held the event loop long enough to lose the Lease)."""
        ns, name = pod_key
        return [
            p
            for p in self.phjs.indexed(pod_key)
            if p["metadata"]["namespace"] == ns and name in p.get("spec", {}).get("pods", [])
        ]
