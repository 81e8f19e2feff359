"""The PlaceholderJob controller's wiring: watch caches, one work queue of typed items
(:mod:`.workitems`, queued by :mod:`.events`), the Slurm poller, and the dispatch.

The work is in these places, each with one concern:
- :mod:`.members` (I/O): a pod -> its group's PlaceholderJob (the group's job shape joins it);
- :mod:`.reconfigure` (I/O): a group's changed slurmjob annotations -> its PlaceholderJob's spec
  (:mod:`.optionwatch` watches the workloads' annotations);
- ``sync.phjsync`` (I/O) around :mod:`.lifecycle` (pure ``decide``): PlaceholderJob <-> Slurm job;
- ``slurmjobs.orphans``: Slurm jobs whose PlaceholderJob is gone.
Every step is idempotent and reads its state from Kubernetes objects and the poller's view of
Slurm, so a restart at any line neither duplicates nor leaks a Slurm job.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slurm_bridge import names
from slurm_bridge.core import logs, metrics
from slurm_bridge.core.config import Config
from slurm_bridge.core.objects import Obj
from slurm_bridge.core.tasks import cancel_and_wait
from slurm_bridge.kube.cache import TenantCache
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.seams import PlaceholderJobsKube
from slurm_bridge.operator.placeholderjobs.events import EventHandlers
from slurm_bridge.operator.placeholderjobs.members import Membership, phj_index
from slurm_bridge.operator.placeholderjobs.optionwatch import OptionSources
from slurm_bridge.operator.placeholderjobs.places import Places, policy_of
from slurm_bridge.operator.placeholderjobs.reconfigure import Reconfigure
from slurm_bridge.operator.placeholderjobs.slurmjobs.hints import SlurmHints
from slurm_bridge.operator.placeholderjobs.slurmjobs.orphans import OrphanSweeper
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.sync.phjsync import DescribePreemptor, PlaceholderJobs
from slurm_bridge.operator.placeholderjobs.workitems import OptionsItem, PhjItem, PodItem, WorkItem
from slurm_bridge.operator.runtime.departures import Departures, pod_job_index
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore, project
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from slurm_bridge.operator.views.slurmnodes import NodeView
from slurm_bridge.operator.views.slurmpolicy import PolicyHolder
from slurm_bridge.rules.namespaces import ManagedNamespaces
from slurm_bridge.slurm.client import SlurmClient


@dataclass(frozen=True)
class Stats:
    """What /stats reports about the controller (operator/wiring/health.py)."""

    slurm_requests: int
    slurm_requests_by_kind: dict[str, int]
    slurm_polls: int
    slurm_full_lists: int
    slurm_full_lists_skipped: int  # periodic ones Slurm answered "no job changed" (update_time)
    slurm_healthy: bool
    slurm_state_polls_skipped: int  # polls that read nothing: Slurm's node table had not changed
    slurm_reason_reads: int  # pending jobs read again for Slurm's reason (per second waited)
    slurm_purge_reads: int  # ended jobs read once more when Slurm's list dropped them (MinJobAge)
    # running jobs read again on a node whose allocation changed (a job its owner moved changes no state)
    slurm_moved_reads: int
    slurm_hints: dict[str, int]  # slurmctld's notices of job starts and ends (slurmjobs/hints.py)
    slurm_cancels: dict[str, int]  # cancel calls and the jobs they cancelled (slurmjobs/cancels.py)
    queue: int
    pods: int
    placeholderjobs: int
    kube_writes_by_kind: dict[str, int]  # the operator's API writes, "VERB resource" (kube.client.write_kind)
    watch_events: dict[str, int]  # watch events handled, by resource


class Controller:
    """The PlaceholderJob controller's parts. ``nodes``: Slurm's nodes as the node controller knows
    them (views/slurmnodes.py), read by the shell at each submit; ``own_user``: the Slurm user of the
    bridge's token (a tenant's job's signed start waits for its read)."""

    def __init__(
        self,
        config: Config,
        kube: PlaceholderJobsKube,
        slurm: SlurmClient,
        tenants: TenantCache | None = None,
        *,
        nodes: NodeView,
        own_user: Callable[[], str],
        policy: PolicyHolder | None = None,
        describe_preemptor: DescribePreemptor | None = None,
        places_namespace: str | None = None,
    ) -> None:
        self.config, self.tenants, self.kube, self.slurm = config, tenants, kube, slurm
        self.watch_events: Counter[str] = Counter()  # by resource, for /stats
        self.pods = ObjectStore(index=pod_job_index)
        # How each bridge pod was last seen before its object went (a pod that vanished while it
        # ran holds its cores until its grace period passed: docs/colocation.md).
        self.departures = Departures()
        self.phjs = ParsedStore(PlaceholderJob.parse, index=phj_index)
        self.queue: WorkQueue[WorkItem] = WorkQueue(self._reconcile, workers=config.operatorWorkers)
        self.events = EventHandlers(config.schedulerName, self.pods, self.phjs, self.queue, self._pod_gone)
        # Slurm's preemption and time-limit settings, kept current by operator/slurmsettings.
        self.policy = policy or PolicyHolder()
        self.poller = SlurmPoller(
            slurm,
            config.bridgeId,
            config.pollPeriodSeconds,
            self.events.on_job_change,
            self._on_poll,
            own_user=own_user,
        )
        self.hints = SlurmHints(self.poller)
        # Preempted work comes back at its place: the places, kept in the operator's namespace
        # (operator/placeholderjobs/places.py); none without one (unit tests of other parts).
        self.places = (
            Places(kube, places_namespace, config.bridgeId, policy_of(config)) if places_namespace is not None else None
        )
        self.jobs = self._shell(nodes, describe_preemptor)
        managed = ManagedNamespaces(config, tenants.namespace_labels if tenants is not None else None)
        self.members = Membership(config, kube, self.pods, self.phjs, self.queue, self.poller, managed, self.places)
        self.reconfigure = Reconfigure(
            config, kube, self.pods, self.phjs, self.poller, self.members.groups, self.queue, tenants
        )
        # The workloads' slurmjob annotations (watched by the leader once it works).
        self.option_sources = OptionSources(kube, self.phjs, self.queue)
        self.orphans = OrphanSweeper(config, kube, self.phjs, self.poller, self.jobs.cancel)
        # PlaceholderJobs whose reconcile came before the first Slurm job list: queued again by
        # ``_after_first_list`` once it is in (a timer each would spin: 10,000 a second at scale).
        self._parked: set[PhjItem] = set()
        self._waiting: asyncio.Task[None] | None = None
        self._polling = self._started = False

    def _shell(self, nodes: NodeView, describe_preemptor: DescribePreemptor | None) -> PlaceholderJobs:
        """The PlaceholderJob shell over the controller's stores, poller, policy and places."""
        return PlaceholderJobs(
            self.config,
            self.kube,
            self.slurm,
            self.pods,
            self.phjs,
            self.poller,
            self.tenants,
            self.policy,
            describe_preemptor,
            nodes=nodes,
            departures=self.departures,
            places=self.places,
        )

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
        if self.places is not None:
            self.places.reset()  # another leader may have written places meanwhile
        self.queue.start()
        for obj in self.pods.values():
            self.queue.add(PodItem.of(obj))
        self._waiting = asyncio.create_task(self._after_first_list(), name="phjs-after-first-job-list")
        self.option_sources.start()  # after the PlaceholderJobs' first list: each listed workload finds its own

    async def _after_first_list(self) -> None:
        """Every PlaceholderJob is decided once the poller's first full job list is in: before it,
        whether a job exists is not known, and nothing may be submitted (restart measured at
        10,000 PlaceholderJobs: the ones queued at once re-queued each second and kept the
        operator busy enough to delay that very list by minutes)."""
        await self.poller.synced.wait()
        items = {PhjItem.of(obj) for obj in self.phjs.values()} | self._parked
        self._parked.clear()
        for item in items:
            self.queue.add(item)

    async def stop(self) -> None:
        await cancel_and_wait([self._waiting])
        await self.option_sources.stop()
        await self.queue.stop()
        await self.hints.stop()
        await self.poller.stop()

    def stats(self) -> Stats:
        return Stats(
            slurm_requests=self.slurm.request_count,
            slurm_requests_by_kind=self.slurm.requests_by_kind,
            slurm_polls=self.poller.polls,
            slurm_full_lists=self.poller.full_lists,
            slurm_full_lists_skipped=self.poller.resyncs_unchanged,
            slurm_healthy=self.poller.healthy,
            slurm_state_polls_skipped=self.poller.states_skipped,
            slurm_reason_reads=self.poller.reason_reads,
            slurm_purge_reads=self.poller.purge_reads,
            slurm_moved_reads=self.poller.moved_reads,
            slurm_hints={
                "received": self.hints.received,
                "read": self.hints.read,
                "failed": self.hints.failed,
                "signed_starts": self.hints.signed_starts,
            },
            slurm_cancels={"calls": self.jobs.cancels.calls, "jobs": self.jobs.cancels.jobs},
            queue=len(self.queue),
            pods=len(self.pods),
            placeholderjobs=len(self.phjs),
            kube_writes_by_kind=dict(self.kube.writes),
            watch_events=dict(self.watch_events),
        )

    # ---- watch events (operator/wiring/watches.py), mapped to work items by :mod:`.events` ----
    def on_pod_event(self, etype: str, pod: Obj) -> None:
        self.watch_events["pods"] += 1
        if etype == "DELETED" and pod.get("spec", {}).get("schedulerName") == self.config.schedulerName:
            self.departures.note(project(pod))
        self.events.on_pod_event(etype, pod)

    def on_phj_event(self, etype: str, phj: Obj) -> None:
        self.watch_events[names.PLURAL] += 1
        self.events.on_phj_event(etype, phj)

    def _pod_gone(self, uid: str) -> None:
        self.members.forget(uid)

    def _on_poll(self, snap: Any) -> None:
        if self._started:  # an orphan is judged against complete stores only
            self.orphans.on_poll(snap)

    # ---- dispatch ---------------------------------------------------------------------------
    @metrics.reconciled
    @logs.work_item
    async def _reconcile(self, item: WorkItem) -> float | None:
        match item:
            case PodItem():
                self.events.note_read(item)
                return await self.members.reconcile(item.key)
            case PhjItem():
                if not self.poller.synced.is_set():
                    self._parked.add(item)  # decided once the first job list is in
                    return None
                if self.tenants is not None:
                    await self.tenants.ensure_namespace(item.namespace)  # a namespace created a moment ago
                self.events.note_read(item)
                return await self.jobs.reconcile(item.key)
            case OptionsItem():
                if not self.poller.synced.is_set():
                    return self.config.pollPeriodSeconds  # where its job is is not known yet
                return await self.reconfigure.reconcile(item.key)
