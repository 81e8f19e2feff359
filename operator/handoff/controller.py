"""The handoff loop (leader only; docs/design/handoff.md, "The handoff loop"): one pass per poll period.

- **Reservations.** Lists the ``handoff-<job>_<bridge>_<node>`` reservations the project's
  EpilogSlurmctld made when Slurm ended a bridge job under its pods (one small ``GET
  reservations``; the client returns them all, :func:`slurm_bridge.rules.handoff.reservations_of` keeps
  this bridge's), deletes each once its job's containers stopped on its node (a vanished pod's
  after its grace period), tells the pods (once) that their cores are held, drains a node whose
  pod outlives its grace period and the margin, and undrains it when that pod stopped
  (:mod:`.decisions`). State lives in Slurm (the reservation's name, the drain's reason): a
  restart loses nothing (what it cannot know, it waits out: the longest grace).
- **Fail safe.** On start-up and every pass, a bridge pod that still runs on a node with a slurmd
  while its Slurm job ended, and no reservation of that job holds the node, gets the node drained
  at once, and undrained once its containers stopped. "Ended" is what the poller's snapshot shows
  twice, UNSETTLED_SECONDS apart (the script's reservation is made moments after the job ends),
  or a job a full list started after the loop missed it no longer has: a failed read changes no
  snapshot, so it is never taken for an end.
- **Preemption.** Reads again, a few per pass, the running bridge jobs of a QOS that another may
  preempt: a preempted job stays RUNNING, and only its ``preempt_time`` says so, which the state
  polls do not see (the 30 s full list would, later). A change queues its PlaceholderJob, whose
  decision ends the pods gracefully (lifecycle, ``decisions/handoff.py``).

Slurm's settings (which QOS may be preempted) come from the
:class:`~slurm_bridge.operator.views.slurmpolicy.PolicyHolder` that operator/slurmsettings/ keeps
current. The node drains are written by the node controller, the one writer of Slurm node states
(:class:`~slurm_bridge.operator.views.slurmnodes.NodeDrains`): its table shows them at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import Config
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.seams import KubeEvents
from slurm_bridge.operator.handoff.decisions import (
    Drain,
    Held,
    Release,
    Rules,
    Undrain,
    Unheld,
    decide,
    drain_key,
    preemption_checks,
    unheld,
)
from slurm_bridge.operator.runtime.departures import Departures, by_job, running_in
from slurm_bridge.operator.runtime.pollloop import PollLoop
from slurm_bridge.operator.runtime.store import ObjectStore
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, SlurmJobView
from slurm_bridge.operator.views.slurmnodes import NodeDrains
from slurm_bridge.operator.views.slurmpolicy import PolicyHolder
from slurm_bridge.rules.handoff import drain_of, drain_prefix, pod_grace_seconds, reservations_of
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import NodeInfo, ReservationRecord

log = logging.getLogger(__name__)


# A running job of a preemptable QOS is read again at least this often, at most
# PREEMPTION_CHECKS_PER_PASS jobs a pass (the longest unread first): a preemption is seen within
# this many seconds while few such jobs run, and within the full list's 30 s at worst.
PREEMPTION_CHECK_SECONDS = 5.0
PREEMPTION_CHECKS_PER_PASS = 4
# A pod counts as running with no hold only once it was seen so on passes this far apart: the
# script reserves moments after the job ends, which the job poll may see first.
UNSETTLED_SECONDS = 3.0


class SlurmHandoff(Protocol):
    """The Slurm calls the handoff loop makes itself."""

    async def list_reservations(self) -> list[ReservationRecord]: ...
    async def delete_reservation(self, name: str) -> bool: ...


class HandoffController:
    def __init__(
        self,
        config: Config,
        kube: KubeEvents,
        slurm: SlurmHandoff,
        pods: ObjectStore,
        poller: SlurmJobView,
        policy: PolicyHolder,
        drains: NodeDrains,
        departures: Departures | None = None,
    ) -> None:
        self.config = config
        self.kube = kube
        self.slurm = slurm
        self.pods = pods
        self.poller = poller
        self.policy = policy
        self.drains = drains
        self.departures = departures if departures is not None else Departures()
        self.rules = Rules(config.bridgeId, config.handoff.marginSeconds, config.handoff.maxGracePeriodSeconds)
        # When this process first saw each reservation (by name) and each of its drains
        # (decisions.drain_key): what it knows nothing of is held from then (fail safe).
        self._first_seen: dict[str, datetime] = {}
        # Fail safe: (pod uid, node) -> when first seen running with no hold (monotonic); job id ->
        # when first missing from the snapshot while its pods run.
        self._suspects: dict[tuple[str, str], float] = {}
        self._absent_since: dict[int, float] = {}
        self._checked: dict[int, float] = {}  # job id -> when last read for preempt_time
        self._told: set[str] = set()  # reservations whose pods were told they are held
        self.reservations_released = 0
        self.nodes_drained = 0
        self.unheld_drained = 0
        # Reads of running jobs for Slurm's preempt_time: a cost per second of a job's run, not per
        # pod (/stats: tests/e2e/test_costs.py leaves them out).
        self.preemption_reads = 0
        self._loop = PollLoop(
            "handoff",
            config.pollPeriodSeconds,
            self.pass_once,
            log=log,
            ok_message=lambda: "handoff loop OK",
            failed="the handoff loop",
            errors=(SlurmError,),
        )

    @property
    def healthy(self) -> bool:
        return self._loop.healthy

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def pass_once(self) -> None:
        await self.check_preemption(time.monotonic())
        await self.reservations()

    # ---- preemption -----------------------------------------------------------------------------
    async def check_preemption(self, now: float) -> None:
        snap, policy = self.poller.snapshot, self.policy.current
        if snap is None or not policy.known or not policy.preemption_on:
            return
        running: dict[int, str] = {}  # a heterogeneous job by its leader (read with every component)
        for job in snap.by_id.values():
            if job.is_running and job.preempt_time is None and policy.preemptable(job.qos):
                running[job.het_leader] = job.qos
        self._checked = {j: t for j, t in self._checked.items() if j in snap.by_id}
        due = preemption_checks(
            list(running.items()), self._checked, now, PREEMPTION_CHECK_SECONDS, PREEMPTION_CHECKS_PER_PASS
        )
        for job_id in due:
            self._checked[job_id] = now
            ref, leader = snap.refs.get(job_id), snap.by_id.get(job_id)
            if ref is not None and leader is not None:
                self.preemption_reads += 1
                await self.poller.refresh(job_id, ref, het=leader.het_job_id == job_id, notify=True)

    # ---- reservations and drains ----------------------------------------------------------------
    def _pods_by_job(self, job_ids: Iterable[int]) -> dict[int, list[Obj]]:
        out: dict[int, list[Obj]] = {}
        for job_id in job_ids:
            pods = self.pods.indexed(by_job(job_id))
            if pods:
                out[job_id] = pods
        return out

    async def reservations(self) -> None:
        snap = self.poller.snapshot  # taken before the reservations are: a job it shows ended was reserved for
        found = reservations_of(await self.slurm.list_reservations(), self.config.bridgeId)
        nodes = self.drains.slurm_nodes_now() or {}
        now = datetime.now(UTC)
        prefix = drain_prefix(self.config.bridgeId)
        drained = {n: i for n, i in nodes.items() if i.reason.startswith(prefix)}
        seen = {r.name for r in found} | {drain_key(n) for n in drained}
        self._first_seen = {k: self._first_seen.get(k, now) for k in seen}
        late = self._unheld(snap, {(r.job_id, r.node) for r in found}, nodes, now)
        if not found and not drained and not late:
            self._told.clear()
            return
        jobs = {r.job_id for r in found} | {u.job_id for u in late}
        for info in drained.values():
            d = drain_of(info.reason, self.config.bridgeId)
            if d is not None:
                jobs.add(d.job_id)
        steps = decide(
            found,
            self._pods_by_job(jobs),
            nodes,
            now,
            self.rules,
            departed=self.departures.by_job(jobs),
            first_seen=self._first_seen,
            unheld=late,
        )
        for step in steps:
            await self._apply(step)
        self._told &= {r.name for r in found}

    def _unheld(
        self, snap: JobSnapshot | None, held: set[tuple[int, str]], nodes: dict[str, NodeInfo], now: datetime
    ) -> list[Unheld]:
        """The fail safe's pods: running with no hold on a node with a slurmd while their job
        ended, seen so on two passes UNSETTLED_SECONDS apart (:func:`.decisions.unheld`)."""
        if snap is None or not self.poller.synced.is_set():
            return []  # nothing is known of the jobs yet: nothing is taken for ended
        ended = self._ended_jobs(snap)
        if not ended:
            self._suspects.clear()
            return []
        native = {n for n, i in nodes.items() if "EXTERNAL" not in i.states}
        pods = [p for j in ended for p in self.pods.indexed(running_in(j))]
        gone = [d for ds in self.departures.by_job(ended).values() for d in ds]
        found = unheld(pods, gone, ended, held, native, now, self.rules.margin)
        at = time.monotonic()
        keys = {(objects.uid(u.pod) or "", u.node) for u in found}
        self._suspects = {k: self._suspects.get(k, at) for k in keys}
        return [u for u in found if at - self._suspects[(objects.uid(u.pod) or "", u.node)] >= UNSETTLED_SECONDS]

    def _ended_jobs(self, snap: JobSnapshot) -> set[int]:
        """The jobs of bridge pods that ended for sure: finished in the snapshot, or missing from
        it and from a full list that started after the loop first missed them (asked for)."""
        ended: set[int] = set()
        absent: dict[int, float] = {}
        at = time.monotonic()
        for key in self.pods.index_values():
            if not (isinstance(key, tuple) and key[0] == "running"):
                continue
            value = int(key[1])
            job = snap.by_id.get(value)
            if job is not None:
                if job.is_finished:
                    ended.add(value)
                continue
            absent[value] = self._absent_since.get(value, at)
            if self.poller.last_full_at > absent[value]:
                ended.add(value)
        if any(v not in self._absent_since for v in absent):
            self.poller.poll_soon(full=True)
        self._absent_since = absent
        return ended

    async def _apply(self, step: Release | Held | Drain | Undrain) -> None:
        match step:
            case Release(reservation=r):
                if await self.slurm.delete_reservation(r.name):
                    self.reservations_released += 1
                    log.info(
                        "handoff: released reservation %s (Slurm job %d's pods stopped on %s)", r.name, r.job_id, r.node
                    )
            case Held(reservation=r, pods=pods):
                if r.name in self._told:
                    return
                self._told.add(r.name)
                until = f" until {r.end_time.isoformat()}" if r.end_time is not None else ""
                for pod in pods:
                    await self.kube.event(
                        pod,
                        names.REASON_HANDOFF_HELD,
                        f"Slurm job {r.job_id} ended under this pod: its CPUs on {r.node} are held by reservation "
                        f"{r.name}{until} at the latest, and released once its containers stop",
                    )
            case Drain(node=node, pod=pod, job_id=job_id, reason=reason, unheld=no_hold):
                await self.drains.set_drain(node, reason)
                self._first_seen.setdefault(drain_key(node), datetime.now(UTC))
                self.nodes_drained += 1
                self.unheld_drained += int(no_hold)
                meta = pod["metadata"]
                why = (
                    "and nothing holds its CPUs (no handoff reservation)"
                    if no_hold
                    else f"{pod_grace_seconds(pod)}s + {self.config.handoff.marginSeconds}s after it"
                )
                message = (
                    f"pod {meta['namespace']}/{meta['name']} still runs after Slurm job {job_id} ended, {why}: "
                    f"Slurm node {node} is drained until its containers stopped"
                )
                log.warning("handoff: %s", message)
                await self.kube.event(pod, names.REASON_HANDOFF_NODE_DRAINED, message, warning=True)
                await self.kube.event(_node_ref(node), names.REASON_HANDOFF_NODE_DRAINED, message, warning=True)
            case Undrain(node=node, drain=d):
                await self.drains.set_drain(node, None)
                message = f"pod {d.namespace}/{d.pod} of Slurm job {d.job_id} is gone: the handoff's drain is lifted"
                log.info("handoff: %s", message)
                await self.kube.event(_node_ref(node), names.REASON_HANDOFF_NODE_UNDRAINED, message)


def _node_ref(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
