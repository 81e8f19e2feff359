"""The machinery every job shape joins pods with (I/O), and what the membership remembers of pods.

Gangs' and composites' pods join one shared PlaceholderJob. The join loop (:meth:`Joins.join_group`)
takes the shape's rules as an interface (:class:`GroupJoin`): it makes the PlaceholderJob through
the shape when there is none, and tries the shape's join again (10 times) while the
PlaceholderJob changes under it. Membership only changes with a resourceVersion test, so two
members joining at once cannot both win, and a group fenced for its submit
(``names.REASON_SUBMITTING``) is treated as submitted.

A terminating member keeps its place and node until it has ended, as a terminating pod keeps its
allocation: a newcomer waits (:meth:`Joins.await_place`), and the member's end wakes it
(:meth:`Joins.wake`; docs/workloads.md, "Late members").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol, TypeVar

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import Config
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import Conflict, Invalid, KubeError, phj_path, pod_path
from slurm_bridge.kube.placeholderjob import Component, GroupSource, PlaceholderJob
from slurm_bridge.kube.seams import MembershipKube
from slurm_bridge.operator.placeholderjobs.decisions.pods import pod_terminating
from slurm_bridge.operator.placeholderjobs.grouping.gangjoin import WAIT_SECONDS, JoinState, Vacancies
from slurm_bridge.operator.placeholderjobs.grouping.groups import Group, new_phj, same_group
from slurm_bridge.operator.placeholderjobs.places import Places
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.workitems import PhjItem, PodItem, WorkItem
from slurm_bridge.operator.runtime.store import Key, ObjectStore, ParsedStore
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from slurm_bridge.rules.podphase import pod_ended
from slurm_bridge.rules.resume import Place, workload_key
from slurm_bridge.rules.translate import job_request
from slurm_bridge.slurm.models import JobRequest

log = logging.getLogger(__name__)
G = TypeVar("G", bound=Group, contravariant=True)
Attempt = tuple[bool, float | None]  # (done, re-queue after); not done: the PlaceholderJob changed


class GroupJoin(Protocol[G]):
    """A shape whose pods join one shared PlaceholderJob (gangs, composites), as the join loop
    sees it."""

    async def create(self, pod: Obj, group: G, joins: Joins) -> float | None:
        """Make the group's PlaceholderJob with ``pod`` its first member."""
        ...

    async def join_once(self, pod: Obj, group: G, phj: Obj, joins: Joins) -> Attempt:
        """One attempt to make ``pod`` a member of ``phj``."""
        ...


class Joins:
    """The membership's stores, writes and memory, shared by every shape's ``join``."""

    def __init__(
        self,
        config: Config,
        kube: MembershipKube,
        pods: ObjectStore,
        phjs: ParsedStore[PlaceholderJob],
        queue: WorkQueue[WorkItem],
        poller: SlurmPoller,
        places: Places | None = None,
    ) -> None:
        self.config, self.kube = config, kube
        self.pods, self.phjs, self.queue, self.poller = pods, phjs, queue, poller
        # The places of preempted workloads a new PlaceholderJob takes (slurm_bridge/rules/resume.py).
        self.places = places
        # pod uid -> the group PlaceholderJob it joined, so pod events need no owner walk. A cache:
        # membership is read from the PlaceholderJob's spec.
        self.member_of: dict[str, Key] = {}
        # pod uid -> the last problem reported in an Event, so a retry does not repeat it.
        self._told: dict[str, tuple[str, str]] = {}
        # group PlaceholderJob -> {pod uid: pod key} of the pods that may wait there for a free
        # place, and pod uid -> that PlaceholderJob: a member's end wakes them (``wake``).
        self._waiting: dict[Key, dict[str, Key]] = {}
        self._waits_at: dict[str, Key] = {}
        # group PlaceholderJob -> (its lock, the joins holding or awaiting it): one member joins a
        # group at a time, so a burst of members makes one PlaceholderJob and patches it in turn
        # instead of racing to a 409 and a read again each (issue 39: writes per pod).
        self._turns: dict[Key, tuple[asyncio.Lock, int]] = {}

    # ---- what the membership remembers of pods ---------------------------------------------------
    def forget(self, uid: str) -> None:
        """The pod is gone."""
        self.member_of.pop(uid, None)
        self._told.pop(uid, None)
        self.unwait(uid)

    def await_place(self, key: Key, pod: Obj) -> None:
        """The pod may wait for a place in group ``key``: noted before the members are read, so a
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

    def wake(self, key: Key) -> None:
        """A member of group ``key`` ended: the pods waiting for a place there look again now."""
        for uid, pod_key in self._waiting.pop(key, {}).items():
            self._waits_at.pop(uid, None)
            self.queue.add(PodItem(*pod_key))

    async def tell(self, pod: Obj, reason: str, message: str) -> None:
        """A Warning Event on the pod, once per distinct problem (retries repeat nothing)."""
        uid = pod["metadata"]["uid"]
        if self._told.get(uid) == (reason, message):
            return
        self._told[uid] = (reason, message)
        log.info("pod %s/%s: %s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], reason, message)
        await self.kube.event(pod, reason, message, warning=True)

    # ---- the join loop ---------------------------------------------------------------------------
    async def join_group(self, shape: GroupJoin[G], pod: Obj, group: G) -> float | None:
        """Join the group's PlaceholderJob (a gang's or a composite's), made by the shape if there
        is none, trying again (10 times) while it changes under the resourceVersion-tested write."""
        if not self.poller.synced.is_set():
            return self.config.pollPeriodSeconds  # whether the group's job exists is not known yet
        key = (group.namespace, group.name)
        async with self._turn(key):
            for _ in range(10):
                phj = self.phjs.get(key)
                if phj is None:
                    return await shape.create(pod, group, self)
                done, delay = await shape.join_once(pod, group, phj, self)
                if done:
                    return delay
        return 1.0

    @contextlib.asynccontextmanager
    async def _turn(self, key: Key) -> AsyncIterator[None]:
        """This group's joins one at a time (in this process; the resourceVersion test still
        decides between processes). The lock is dropped with its last user."""
        lock, users = self._turns.get(key) or (asyncio.Lock(), 0)
        self._turns[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._turns[key]
            if users <= 1:
                del self._turns[key]
            else:
                self._turns[key] = (lock, users - 1)

    async def join_state(self, pod: Obj, group: Group, phj: Obj) -> JoinState | Attempt:
        """The start of a join, gangs' and composites' alike: what it decides on, or the attempt's
        end when the PlaceholderJob is an ended run being finalized or another group's."""
        typed = self.phjs.model_of(phj)
        if typed.deleted:
            return True, 1.0  # an ended run's PlaceholderJob is being finalized
        if not same_group(phj, group):
            return True, await self._name_taken(pod, group, typed.spec.group or GroupSource())
        submitted = self.is_submitted(phj)
        self.await_place((group.namespace, group.name), pod)
        return JoinState(typed, submitted, await self.vacancies(phj, exclude=pod["metadata"]["name"]))

    async def settle_join(
        self, action: str, pod: Obj, phj: Obj, key: Key, run_of: str, full: tuple[str, str]
    ) -> Attempt | None:
        """The join outcomes that write no membership (gangs and composites alike): already a
        ``member``; ``recycle`` an ended run's PlaceholderJob; ``wait`` for a free place (``full``:
        the Event's reason and message). None: the membership is to be written."""
        meta = pod["metadata"]
        if action != "wait":
            self.unwait(meta["uid"])
        if action == "member":
            self.member_of[meta["uid"]] = key
            self.queue.add(PhjItem(*key))
            return True, None
        if action == "recycle":
            await self.kube.event(
                phj,
                names.REASON_REPLACED,
                f"pod {meta['name']} starts a new run of the {run_of}; this ended PlaceholderJob is deleted and a "
                "new one made",
            )
            await self.kube.delete(phj_path(*key), uid=phj["metadata"]["uid"])
            return True, 1.0
        if action == "wait":
            await self.tell(pod, *full)
            return True, WAIT_SECONDS
        return None

    async def _name_taken(self, pod: Obj, group: Group, source: GroupSource) -> float:
        if source.kind == group.source["kind"] and source.name == group.source["name"]:
            # Left by an earlier workload of the same name: garbage collection removes it.
            await self.tell(
                pod,
                names.REASON_WAITING_FOR_OLD_PHJ,
                f"PlaceholderJob {group.name} still belongs to an earlier {source.kind} {source.name}; the pod "
                "waits until it is removed",
            )
            return 2.0
        return await self.name_taken(pod, group.name, source)

    async def name_taken(self, pod: Obj, name: str, source: GroupSource) -> float:
        """The pod's PlaceholderJob name belongs to another group: the pod waits until it is gone."""
        await self.tell(
            pod,
            names.REASON_PHJ_NAME_TAKEN,
            f"PlaceholderJob {name} belongs to {source.kind} {source.name}; the pod waits until it is gone",
        )
        return 30.0

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
        self.member_of[meta["uid"]] = key
        self._told.pop(meta["uid"], None)
        self.unwait(meta["uid"])
        if replaced is not None:
            await self.kube.event(updated, names.REASON_MEMBER_REPLACED, replaced)
        self.queue.add(PhjItem(*key))
        return True

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
        phj = new_phj(
            group,
            [meta["name"]],
            request,
            pod_uids={meta["name"]: meta["uid"]},
            components=components,
            min_components=min_components,
            resumes=await self.take_place(group, group.name),
        )
        try:
            created = await self.kube.create(phj_path(group.namespace), phj)
        except Invalid as e:
            await self.tell(
                pod, names.REASON_PHJ_REFUSED, f"the API server refused {what}'s PlaceholderJob: {e.message}"
            )
            return 30.0
        except Conflict:
            existing = await self.kube.get(phj_path(group.namespace, group.name))
            if existing is None or objects.deletion_timestamp(existing):
                return 1.0
            self.phjs.upsert(existing)
            return 0.05  # another member created it: join it
        self.phjs.upsert(created)
        self.member_of[meta["uid"]] = (group.namespace, group.name)
        self.queue.add(PhjItem(group.namespace, group.name))
        return created

    async def take_place(self, group: Group, slot: str) -> Place | None:
        """The preempted place of the group's workload its new PlaceholderJob takes (None: none,
        the common case, known without a read; slurm_bridge/rules/resume.py)."""
        if self.places is None:
            return None
        workload = workload_key(
            group.namespace, str(group.source.get("kind", "")), str(group.source.get("uid", "")), slot
        )
        try:
            return await self.places.take(workload, group.name)
        except KubeError as e:
            log.warning(
                "taking the place of %s for %s/%s failed: it queues anew: %s", workload, group.namespace, group.name, e
            )
            return None

    async def group_request(self, group: Group, members: list[str], pod: Obj) -> JobRequest:
        """The job for every member pod, sized for the whole group, with the root's options."""
        ns = group.namespace
        pods: list[Obj] = []
        for name in members:
            p = pod if name == pod["metadata"]["name"] else self.pods.get((ns, name))
            if p is None:
                p = await self.kube.get(pod_path(ns, name))
            if p is not None:
                pods.append(p)
        return job_request(
            pods, config=self.config, derived=group.derived_for(len(members)), annotations=group.annotations
        )

    def is_submitted(self, phj: Obj) -> bool:
        """Whether the group's job is (or may be) in Slurm: its size is then fixed."""
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
