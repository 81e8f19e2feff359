"""The PlaceholderJob controller's wiring: watch caches, one work queue, the Slurm poller.

The work is in three modules, each with one concern:
- :mod:`.members` (I/O): pods -> their group's PlaceholderJob;
- :mod:`.phjsync` (I/O) around :mod:`.lifecycle` (pure ``decide``): PlaceholderJob <-> Slurm job;
- :mod:`.orphans`: Slurm jobs whose PlaceholderJob is gone.
Every step is idempotent and reads its state from Kubernetes objects and the poller's view of
Slurm, so a restart at any line neither duplicates nor leaks a Slurm job.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, cast

from slurm_bridge.operator.placeholderjobs.jobref import PhjRef
from slurm_bridge.operator.placeholderjobs.members import Membership, member_pods
from slurm_bridge.operator.placeholderjobs.orphans import OrphanSweeper
from slurm_bridge.operator.placeholderjobs.phjsync import PlaceholderJobs
from slurm_bridge.operator.runtime.poller import SlurmPoller
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore, WorkQueue

from slurm_bridge import logs, metrics
from slurm_bridge.config import Config
from slurm_bridge.kube import KubeClient
from slurm_bridge.kubecache import TenantCache
from slurm_bridge.placeholderjob import PlaceholderJob
from slurm_bridge.slurm.client import SlurmClient

Obj = dict[str, Any]


@dataclass(frozen=True)
class Stats:
    """What /stats reports about the controller (operator/runtime/app.py)."""

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

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.poller.start()
        self.queue.start()
        for obj in self.phjs.values():
            self.queue.add(("phj", *ObjectStore.key_of(obj)))
        for obj in self.pods.values():
            self.queue.add(("pod", *ObjectStore.key_of(obj)))

    async def stop(self) -> None:
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

    # ---- watch events (from kopf) -----------------------------------------------------------
    def on_pod_event(self, etype: str, pod: Obj) -> None:
        metrics.pod_event(etype, pod, self.config.schedulerName)
        if pod.get("spec", {}).get("schedulerName") != self.config.schedulerName:
            return
        if etype == "DELETED":
            self.pods.delete(pod)
            self.members.forget(pod.get("metadata", {}).get("uid", ""))
        else:
            self.pods.upsert(pod)
        ns, name = ObjectStore.key_of(pod)
        self.queue.add(("pod", ns, name))

    def on_phj_event(self, etype: str, phj: Obj) -> None:
        metrics.phj_event()
        if etype == "DELETED":
            self.phjs.delete(phj)
        else:
            self.phjs.upsert(phj)
        self.queue.add(("phj", *ObjectStore.key_of(phj)))

    def _on_job_change(self, ref: PhjRef) -> None:
        self.queue.add(("phj", ref.namespace, ref.name))

    def _on_poll(self, snap: Any) -> None:
        self.orphans.on_poll(snap)

    # ---- dispatch ---------------------------------------------------------------------------
    @metrics.reconciled
    @logs.work_item
    async def _reconcile(self, item: Hashable) -> float | None:
        kind, ns, name = cast(tuple[str, str, str], item)
        if kind == "pod":
            return await self.members.reconcile((ns, name))
        if self.tenants is not None:
            await self.tenants.ensure_namespace(ns)  # a namespace created a moment ago
        return await self.jobs.reconcile((ns, name))
