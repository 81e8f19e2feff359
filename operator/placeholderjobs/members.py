"""Pods -> PlaceholderJobs (I/O): a pod's group (:mod:`.groups`, pure rules) gets its PlaceholderJob.

A pod that is its own group gets one named after it and owned by it; a gang's pods join one
PlaceholderJob named after the gang's root, with the membership rules of ``groups.plan_join``.
Membership only changes with a resourceVersion test, so two members joining at once cannot both
win, and a gang fenced for submission (``names.REASON_SUBMITTING``) is treated as submitted.
Ended pods are left to :mod:`.phjsync`, which decides whether the Slurm job ends with them.

A terminating member keeps its place and node until it has ended, as a terminating pod keeps its
allocation: a newcomer waits, and the member's end wakes it (docs/workloads.md, "Late members").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from slurm_bridge import names
from slurm_bridge.config import Config
from slurm_bridge.kube import Conflict, Invalid, KubeClient, KubeError, phj_path, pod_path
from slurm_bridge.operator.placeholderjobs.decisions.pods import Obj, pod_ended, pod_terminating
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import CompositeGroup
from slurm_bridge.operator.placeholderjobs.grouping.groups import (
    Group,
    GroupError,
    Join,
    new_phj,
    plan_join,
    same_group,
)
from slurm_bridge.operator.placeholderjobs.grouping.resolver import GroupResolver
from slurm_bridge.operator.placeholderjobs.grouping.vacancies import WAIT_SECONDS, JoinState, Vacancies, gang_full
from slurm_bridge.operator.placeholderjobs.shapes.composite import CompositeMembership
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.workitems import PhjItem, PodItem, WorkItem
from slurm_bridge.operator.runtime.store import Key, ObjectStore, ParsedStore
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from slurm_bridge.placeholderjob import Component, GroupSource, PlaceholderJob
from slurm_bridge.slurm.models import JobRequest
from slurm_bridge.translate import job_request

Creator = Callable[[], Awaitable[float | None]]
JoinOnce = Callable[[Obj], Awaitable[tuple[bool, float | None]]]  # (done, re-queue after)

log = logging.getLogger(__name__)


def member_pods(phj: Obj) -> list[Key]:
    """The (namespace, name) of each pod a PlaceholderJob lists: the PlaceholderJob store's index."""
    ns = phj.get("metadata", {}).get("namespace", "")
    pods = (phj.get("spec") or {}).get("pods") or []
    return [(ns, name) for name in pods if isinstance(name, str)]


class Membership:
    """reconcile(pod key): make the pod a member of its group's PlaceholderJob."""

    def __init__(
        self,
        config: Config,
        kube: KubeClient,
        pods: ObjectStore,
        phjs: ParsedStore[PlaceholderJob],
        queue: WorkQueue[WorkItem],
        poller: SlurmPoller,
    ) -> None:
        self.config, self.kube = config, kube
        self.pods, self.phjs, self.queue, self.poller = pods, phjs, queue, poller
        self.groups = GroupResolver(kube.get)
        self.composite = CompositeMembership(self)  # CompositePodGroups (operator/placeholderjobs/shapes/composite.py)
        # pod uid -> the gang PlaceholderJob it joined, so pod events need no owner walk. A cache:
        # membership is read from the PlaceholderJob's spec.
        self._member_of: dict[str, Key] = {}
        # pod uid -> the last problem reported in an Event, so a retry does not repeat it.
        self._told: dict[str, tuple[str, str]] = {}
        # gang PlaceholderJob -> {pod uid: pod key} of the pods that may wait there for a free
        # place, and pod uid -> that PlaceholderJob: a member's end wakes them (``_wake``).
        self._waiting: dict[Key, dict[str, Key]] = {}
        self._waits_at: dict[str, Key] = {}

    def forget(self, uid: str) -> None:
        """The pod is gone."""
        self._member_of.pop(uid, None)
        self._told.pop(uid, None)
        self.unwait(uid)

    def await_place(self, key: Key, pod: Obj) -> None:
        """The pod may wait for a place in gang ``key``: noted before the members are read, so a
        member that ends while the pod decides queues it again, and no end is missed."""
        meta = pod["metadata"]
        self.unwait(meta["uid"])
        self._waiting.setdefault(key, {})[meta["uid"]] = (meta["namespace"], meta["name"])
        self._waits_at[meta["uid"]] = key

    def unwait(self, uid: str) -> None:
        key = self._waits_at.pop(uid, None)
        if key is not None:
            waiting = self._waiting.get(key, {})
            waiting.pop(uid, None)
            if not waiting:
                self._waiting.pop(key, None)

    def _wake(self, key: Key) -> None:
        """A member of gang ``key`` ended: the pods waiting for a place there look again now."""
        for uid, pod_key in self._waiting.pop(key, {}).items():
            self._waits_at.pop(uid, None)
            self.queue.add(PodItem(*pod_key))

    def _requeue(self, phj: Obj) -> None:
        self.queue.add(PhjItem.of(phj))

    async def reconcile(self, key: Key) -> float | None:
        pod = self.pods.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp") or pod_ended(pod):
            # The PlaceholderJob decides whether the Slurm job must end with it; a member that
            # ended (not one still terminating) frees its place for a pod waiting for one.
            for phj in self._phjs_with_member(key):
                self._requeue(phj)
                if pod is None or pod_ended(pod):
                    self._wake(ObjectStore.key_of(phj))
            return None
        known = self._known_phj(pod)
        if known is not None:
            self._requeue(known)
            return None
        try:
            group = await self.groups.resolve(pod)
        except GroupError as e:
            await self._tell(pod, e.reason, e.message)
            return e.retry_after
        if isinstance(group, CompositeGroup):
            return await self.composite.join(pod, group)
        if group.gang:
            return await self._join_gang(pod, group)
        return await self._single(pod, group)

    def _known_phj(self, pod: Obj) -> Obj | None:
        """The PlaceholderJob the pod is already a member of, found without an owner walk."""
        meta = pod["metadata"]
        key = self._member_of.get(meta["uid"])
        if key is not None:
            phj = self.phjs.model(key)
            if phj is not None and not phj.deleted and meta["name"] in phj.spec.pods and phj.is_member(pod):
                return phj.raw
            self._member_of.pop(meta["uid"], None)
        own = self.phjs.model((meta["namespace"], meta["name"]))
        if own is not None and not own.is_gang() and own.pod_owner_uid() == meta["uid"]:
            return own.raw
        return None

    async def _tell(self, pod: Obj, reason: str, message: str) -> None:
        """A Warning Event on the pod, once per distinct problem (retries repeat nothing)."""
        uid = pod["metadata"]["uid"]
        if self._told.get(uid) == (reason, message):
            return
        self._told[uid] = (reason, message)
        log.info("pod %s/%s: %s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], reason, message)
        await self.kube.event(pod, reason, message, warning=True)

    async def _single(self, pod: Obj, group: Group) -> float | None:
        """A pod that is its own group: one PlaceholderJob named after it, owned by it."""
        existing = self.phjs.model((group.namespace, group.name))
        if existing is not None:
            if existing.pod_owner_uid() is None:
                source = existing.spec.group or GroupSource()
                await self._tell(pod, "PlaceholderJobNameTaken",
                                 f"PlaceholderJob {group.name} belongs to {source.kind} {source.name}; "
                                 "the pod waits until it is gone")  # fmt: skip
                return 30.0
            if not existing.owned_by_other_pod(pod):
                self.queue.add(PhjItem(group.namespace, group.name))
                return None
            if not existing.deleted:
                # A PlaceholderJob left by an earlier pod of the same name: it goes with that pod.
                await self.kube.delete(phj_path(group.namespace, group.name), uid=existing.metadata.uid)
            return 1.0
        try:
            request = job_request([pod], config=self.config, derived=group.derived, annotations=group.annotations)
        except ValueError as e:
            await self.kube.event(pod, "InvalidSlurmOptions", f"cannot build a Slurm job request: {e}", warning=True)
            return None
        phj = new_phj(group, [pod["metadata"]["name"]], request)
        try:
            created = await self.kube.create(phj_path(group.namespace), phj)
        except Invalid as e:
            await self._tell(pod, names.REASON_PHJ_REFUSED, f"the API server refused its PlaceholderJob: {e.message}")
            return None  # no job exists yet; the same object would be refused again
        except Conflict:
            found = await self.kube.get(phj_path(group.namespace, group.name))
            if found is None or found["metadata"].get("deletionTimestamp"):
                return 1.0  # an older incarnation is still being finalized
            created = found
        self.phjs.upsert(created)
        self.queue.add(PhjItem(group.namespace, group.name))
        return None

    # ---- gangs -------------------------------------------------------------------------------
    async def _join_gang(self, pod: Obj, group: Group) -> float | None:
        """Make the pod a member of its gang's PlaceholderJob (docs/workloads.md, "Late members")."""
        return await self.join_retrying(
            (group.namespace, group.name),
            lambda: self._create_gang(pod, group),
            lambda phj: self._join_once(pod, group, phj),
        )

    async def join_retrying(self, key: Key, create: Creator, join_once: JoinOnce) -> float | None:
        """Join a group's PlaceholderJob (a gang's or a composite's), made by ``create`` if there is
        none, trying again (10 times) while it changes under the resourceVersion-tested write."""
        if not self.poller.synced.is_set():
            return self.config.pollPeriodSeconds  # whether the group's job exists is not known yet
        for _ in range(10):
            phj = self.phjs.get(key)
            if phj is None:
                return await create()
            done, delay = await join_once(phj)
            if done:
                return delay
        return 1.0

    async def join_state(self, pod: Obj, group: Group, phj: Obj) -> JoinState | tuple[bool, float | None]:
        """The start of a join, gangs' and composites' alike: what it decides on, or the attempt's
        end when the PlaceholderJob is an ended run being finalized or another group's."""
        typed = self.phjs.model_of(phj)
        if typed.deleted:
            return True, 1.0  # an ended run's PlaceholderJob is being finalized
        if not same_group(phj, group):
            return True, await self._name_taken(pod, group, typed.spec.group or GroupSource())
        submitted = self._is_submitted(phj)
        self.await_place((group.namespace, group.name), pod)
        return JoinState(typed, submitted, await self.vacancies(phj, exclude=pod["metadata"]["name"]))

    async def _join_once(self, pod: Obj, group: Group, phj: Obj) -> tuple[bool, float | None]:
        """One attempt; (False, _): the PlaceholderJob changed meanwhile, read it again."""
        meta, key = pod["metadata"], (group.namespace, group.name)
        state = await self.join_state(pod, group, phj)
        if not isinstance(state, JoinState):
            return state
        spec, submitted, vacancies = state.phj.spec, state.submitted, state.vacancies
        plan = plan_join(
            spec.pods,
            spec.pod_uids or {},
            meta["name"],
            meta["uid"],
            submitted=submitted,
            terminal=state.phj.status.phase in names.TERMINAL_PHASES,
            ended=vacancies.free(submitted),
        )
        full = gang_full(len(spec.pods), vacancies)
        settled = await self.settle_join(plan.action, pod, phj, key, "gang", full)
        if settled is not None:
            return settled
        return await self._write_membership(pod, group, phj, plan, submitted)

    async def settle_join(
        self, action: str, pod: Obj, phj: Obj, key: Key, run_of: str, full: tuple[str, str]
    ) -> tuple[bool, float | None] | None:
        """The join outcomes that write no membership (gangs and composites alike): already a
        ``member``; ``recycle`` an ended run's PlaceholderJob; ``wait`` for a free place (``full``:
        the Event's reason and message). None: the membership is to be written."""
        meta = pod["metadata"]
        if action != "wait":
            self.unwait(meta["uid"])
        if action == "member":
            self._member_of[meta["uid"]] = key
            self.queue.add(PhjItem(*key))
            return True, None
        if action == "recycle":
            await self.kube.event(phj, "Replaced", f"pod {meta['name']} starts a new run of the {run_of}; this ended "
                                  "PlaceholderJob is deleted and a new one made")  # fmt: skip
            await self.kube.delete(phj_path(*key), uid=phj["metadata"]["uid"])
            return True, 1.0
        if action == "wait":
            await self._tell(pod, *full)
            return True, WAIT_SECONDS
        return None

    async def _name_taken(self, pod: Obj, group: Group, source: GroupSource) -> float:
        if source.kind == group.source["kind"] and source.name == group.source["name"]:
            # Left by an earlier workload of the same name: garbage collection removes it.
            await self._tell(pod, "WaitingForOldPlaceholderJob",
                             f"PlaceholderJob {group.name} still belongs to an earlier {source.kind} "
                             f"{source.name}; the pod waits until it is removed")  # fmt: skip
            return 2.0
        await self._tell(pod, "PlaceholderJobNameTaken",
                         f"PlaceholderJob {group.name} belongs to {source.kind} {source.name}; "
                         "the pod waits until it is gone")  # fmt: skip
        return 30.0

    async def _write_membership(
        self, pod: Obj, group: Group, phj: Obj, plan: Join, submitted: bool
    ) -> tuple[bool, float | None]:
        meta, key = pod["metadata"], (group.namespace, group.name)
        ops: list[Obj] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": phj["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/spec/pods", "value": list(plan.pods)},
            {"op": "add", "path": "/spec/podUIDs", "value": plan.uids},
        ]
        if not submitted:
            try:
                request = await self._gang_request(group, list(plan.pods), pod)
            except ValueError as e:
                await self._tell(pod, "InvalidSlurmOptions", f"cannot build a Slurm job request: {e}")
                return True, 30.0
            ops.append({"op": "add", "path": "/spec/slurm", "value": request.crd_dict()})
            ops.append({"op": "add", "path": "/spec/minMember", "value": group.min_member})
        replaced = f"pod {meta['name']} takes the place (and node) of ended member {plan.slot}"
        joined = await self.patch_join(
            key, phj, ops, meta, replaced if plan.slot and plan.slot != meta["name"] else None
        )
        return joined, None

    async def patch_join(self, key: Key, phj: Obj, ops: list[Obj], meta: Obj, replaced: str | None) -> bool:
        """Apply a member's join (``ops`` start with a resourceVersion test); False: another member
        joined first, and the PlaceholderJob is read again. ``replaced``: the MemberReplaced Event."""
        try:
            updated = await self.kube.patch(phj_path(*key), ops, "json")
        except KubeError as e:
            if not isinstance(e, Conflict) and e.status != 422:
                raise
            fresh = await self.kube.get(phj_path(*key))
            if fresh is None:
                self.phjs.delete(phj)
            else:
                self.phjs.upsert(fresh)
            return False
        self.phjs.upsert(updated)
        self._member_of[meta["uid"]] = key
        self._told.pop(meta["uid"], None)
        self.unwait(meta["uid"])
        if replaced is not None:
            await self.kube.event(updated, "MemberReplaced", replaced)
        self.queue.add(PhjItem(*key))
        return True

    async def _create_gang(self, pod: Obj, group: Group) -> float | None:
        meta = pod["metadata"]
        try:
            request = await self._gang_request(group, [meta["name"]], pod)
        except ValueError as e:
            await self._tell(pod, "InvalidSlurmOptions", f"cannot build a Slurm job request: {e}")
            return 30.0
        made = await self.create_for_group(pod, group, request, "the gang")
        if not isinstance(made, dict):
            return made
        for warning in group.warnings:
            await self.kube.event(made, "GangWillNotStart", warning, warning=True)
        return None

    async def create_for_group(
        self,
        pod: Obj,
        group: Group,
        request: JobRequest,
        what: str,
        components: list[Component] | None = None,
        min_components: int | None = None,
    ) -> Obj | float:
        """Create the group's PlaceholderJob (a gang's, or a composite's with its ``components``)
        with ``pod`` its first member: the object made, or when to look again (refused: the
        group's options may change; another member made it first: join that one)."""
        meta = pod["metadata"]
        phj = new_phj(group, [meta["name"]], request, pod_uids={meta["name"]: meta["uid"]}, components=components,
                      min_components=min_components)  # fmt: skip
        try:
            created = await self.kube.create(phj_path(group.namespace), phj)
        except Invalid as e:
            await self._tell(pod, names.REASON_PHJ_REFUSED,
                             f"the API server refused {what}'s PlaceholderJob: {e.message}")  # fmt: skip
            return 30.0
        except Conflict:
            existing = await self.kube.get(phj_path(group.namespace, group.name))
            if existing is None or existing["metadata"].get("deletionTimestamp"):
                return 1.0
            self.phjs.upsert(existing)
            return 0.05  # another member created it: join it
        self.phjs.upsert(created)
        self._member_of[meta["uid"]] = (group.namespace, group.name)
        self.queue.add(PhjItem(group.namespace, group.name))
        return created

    async def _gang_request(self, group: Group, members: list[str], pod: Obj) -> JobRequest:
        """The job for every member pod, sized for the whole gang, with the root's options."""
        ns = group.namespace
        pods: list[Obj] = []
        for name in members:
            p = pod if name == pod["metadata"]["name"] else self.pods.get((ns, name))
            if p is None:
                p = await self.kube.get(pod_path(ns, name))
            if p is not None:
                pods.append(p)
        return job_request(pods, config=self.config, derived=group.derived_for(len(members)),
                           annotations=group.annotations)  # fmt: skip

    def _is_submitted(self, phj: Obj) -> bool:
        """Whether the gang's job is (or may be) in Slurm: its size is then fixed."""
        typed = self.phjs.model_of(phj)
        status = typed.status
        return status.reason == names.REASON_SUBMITTING or self.poller.side(typed.metadata.uid, status.job_id).has_job

    async def vacancies(self, phj: Obj, exclude: str) -> Vacancies:
        """Members whose recorded pod ended or is gone, and those terminating (a pod missing from
        the cache is asked for)."""
        typed = self.phjs.model_of(phj)
        ns = typed.metadata.namespace
        ended: set[str] = set()
        terminating: set[str] = set()
        for name in typed.spec.pods:
            if name == exclude:
                continue
            pod = self.pods.get((ns, name))
            if pod is None:
                pod = await self.kube.get(pod_path(ns, name))
                if pod is not None and pod.get("spec", {}).get("schedulerName") == self.config.schedulerName:
                    self.pods.upsert(pod)
            if pod is None or not typed.is_member(pod) or pod_ended(pod):
                ended.add(name)
            elif pod_terminating(pod):
                terminating.add(name)
        return Vacancies(frozenset(ended), frozenset(terminating))

    def _phjs_with_member(self, pod_key: Key) -> list[Obj]:
        """From the store's member index (``member_pods``): a walk over every PlaceholderJob was
        5 ms a pod with 10,000 of them, and a restart reconciles every ended pod (performance.md,
        run 8: 2,000 ended pods held the event loop long enough to lose the Lease)."""
        ns, name = pod_key
        return [
            p for p in self.phjs.indexed(pod_key)
            if p["metadata"]["namespace"] == ns and name in p.get("spec", {}).get("pods", [])
        ]  # fmt: skip
