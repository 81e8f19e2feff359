"""The PlaceholderJob controller's wiring: watch caches, one work queue, the Slurm poller.

The work is in three modules, each with one concern:
- :mod:`.members` (I/O): pods -> their group's PlaceholderJob;
- :mod:`.phjsync` (I/O) around :mod:`.lifecycle` (pure ``decide``): PlaceholderJob <-> Slurm job;
- :mod:`.orphans`: Slurm jobs whose PlaceholderJob is gone.
Every step is idempotent and reads its state from Kubernetes objects and the poller's view of
Slurm, so a restart at any line neither duplicates nor leaks a Slurm job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, cast

from slurm_bridge import logs, metrics
from slurm_bridge.config import Config
from slurm_bridge.kube import KubeClient
from slurm_bridge.kubecache import TenantCache
from slurm_bridge.operator.placeholderjobs.members import Membership, member_pods
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import PhjRef
from slurm_bridge.operator.placeholderjobs.slurmjobs.orphans import OrphanSweeper
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.sync.phjsync import PlaceholderJobs
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore, WorkQueue
from slurm_bridge.placeholderjob import PlaceholderJob
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.tasks import cancel_and_wait

Obj = dict[str, Any]


def _rv(meta: Obj) -> int:
    try:
        return int(meta.get("resourceVersion") or 0)
    except ValueError:
        return 0


@dataclass(frozen=True)
class Stats:
    """What /stats reports about the controller (operator/wiring/app.py)."""

    slurm_requests: int
    slurm_requests_by_kind: dict[str, int]
    slurm_polls: int
    slurm_full_lists: int
    slurm_full_lists_skipped: int  # periodic ones Slurm answered "no job changed" (update_time)
    slurm_healthy: bool
    queue: int
    pods: int
    placeholderjobs: int


class Controller:
    def __init__(
        self, config: Config, kube: KubeClient, slurm: SlurmClient, tenants: TenantCache | None = None
    ) -> None:
        self.config = config
        self.tenants = tenants
        self.kube = kube
        self.slurm = slurm
        self.pods = ObjectStore()
        self.phjs = ParsedStore(PlaceholderJob.parse, index=member_pods)
        self.queue = WorkQueue(self._reconcile, workers=config.operatorWorkers)
        self.poller = SlurmPoller(slurm, config.bridgeId, config.pollPeriodSeconds, self._on_job_change, self._on_poll)
        self.jobs = PlaceholderJobs(config, kube, slurm, self.pods, self.phjs, self.poller, tenants)
        self.members = Membership(config, kube, self.pods, self.phjs, self.queue, self.poller)
        self.orphans = OrphanSweeper(config, kube, self.phjs, self.poller, self.jobs.cancel)
        # (uid, resourceVersion) of each object as its latest reconcile began to read it.
        self._read: dict[Hashable, tuple[str, int]] = {}
        # PlaceholderJobs whose reconcile came before the first Slurm job list: queued again by
        # ``_after_first_list`` once it is in (a timer each would spin: 10,000 a second at scale).
        self._parked: set[tuple[str, str]] = set()
        self._waiting: asyncio.Task[None] | None = None
        self._polling = self._started = False

    # ---- lifecycle ---------------------------------------------------------------------------
    def start_polling(self) -> None:
        """Start reading Slurm before the watches' first lists are in: at 10,000 PlaceholderJobs
        the first full job list takes as long as they do, and readiness waits for both."""
        if not self._polling:
            self._polling = True
            self.poller.start()

    def start(self) -> None:
        """Start the work, once the pod and PlaceholderJob stores hold their first lists."""
        self.start_polling()
        self._started = True
        self.queue.start()
        for obj in self.pods.values():
            self.queue.add(("pod", *ObjectStore.key_of(obj)))
        self._waiting = asyncio.create_task(self._after_first_list(), name="phjs-after-first-job-list")

    async def _after_first_list(self) -> None:
        """Every PlaceholderJob is decided once the poller's first full job list is in: before it,
        whether a job exists is not known, and nothing may be submitted (restart measured at
        10,000 PlaceholderJobs: the ones queued at once re-queued each second and kept the
        operator busy enough to delay that very list by minutes)."""
        await self.poller.synced.wait()
        keys = {ObjectStore.key_of(obj) for obj in self.phjs.values()} | self._parked
        self._parked.clear()
        for ns, name in keys:
            self.queue.add(("phj", ns, name))

    async def stop(self) -> None:
        await cancel_and_wait([self._waiting])
        await self.queue.stop()
        await self.poller.stop()

    def stats(self) -> Stats:
        return Stats(
            slurm_requests=self.slurm.request_count,
            slurm_requests_by_kind=self.slurm.requests_by_kind,
            slurm_polls=self.poller.polls,
            slurm_full_lists=self.poller.full_lists,
            slurm_full_lists_skipped=self.poller.resyncs_unchanged,
            slurm_healthy=self.poller.healthy,
            queue=len(self.queue),
            pods=len(self.pods),
            placeholderjobs=len(self.phjs),
        )

    # ---- watch events (operator/wiring/watches.py) -----------------------------------------
    def on_pod_event(self, etype: str, pod: Obj) -> None:
        metrics.pod_event(etype, pod, self.config.schedulerName)
        if pod.get("spec", {}).get("schedulerName") != self.config.schedulerName:
            return
        self._queue(("pod", *ObjectStore.key_of(pod)), self.pods, etype, pod)

    def on_phj_event(self, etype: str, phj: Obj) -> None:
        metrics.phj_event()
        self._queue(("phj", *ObjectStore.key_of(phj)), self.phjs, etype, phj)

    def _queue(self, item: Hashable, store: ObjectStore, etype: str, obj: Obj) -> None:
        """Store the event's object; queue its reconcile unless the event provably brings nothing
        new: a MODIFIED event that changes nothing the store keeps (``ObjectStore.observe``), or
        any event but DELETED at or below the resourceVersion a reconcile of that object already
        began with (the echo of the operator's own write read since, a stale event)."""
        meta = obj.get("metadata", {})
        if etype == "DELETED":
            store.delete(obj)
            self._read.pop(item, None)
            if item[0] == "pod":  # type: ignore[index]
                self.members.forget(meta.get("uid", ""))
        elif not store.observe(obj) and etype == "MODIFIED":
            return
        else:
            read = self._read.get(item)
            if read is not None and read[0] == meta.get("uid") and 0 < _rv(meta) <= read[1]:
                return
        self.queue.add(item)

    def _on_job_change(self, ref: PhjRef) -> None:
        self.queue.add(("phj", ref.namespace, ref.name))

    def _on_poll(self, snap: Any) -> None:
        if self._started:  # an orphan is judged against complete stores only
            self.orphans.on_poll(snap)

    # ---- dispatch ---------------------------------------------------------------------------
    @metrics.reconciled
    @logs.work_item
    async def _reconcile(self, item: Hashable) -> float | None:
        kind, ns, name = cast(tuple[str, str, str], item)
        if kind == "pod":
            self._note_read(item, self.pods)
            return await self.members.reconcile((ns, name))
        if not self.poller.synced.is_set():
            self._parked.add((ns, name))  # decided once the first job list is in
            return None
        if self.tenants is not None:
            await self.tenants.ensure_namespace(ns)  # a namespace created a moment ago
        self._note_read(item, self.phjs)
        return await self.jobs.reconcile((ns, name))

    def _note_read(self, item: Hashable, store: ObjectStore) -> None:
        obj = store.get(item[1:])  # type: ignore[index]
        if obj is None:
            self._read.pop(item, None)
        else:
            self._read[item] = (obj["metadata"].get("uid", ""), _rv(obj["metadata"]))
