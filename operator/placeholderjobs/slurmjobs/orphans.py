"""Orphaned Slurm jobs: live bridge jobs whose PlaceholderJob is gone (deleted while the bridge
was down), and jobs marked as the bridge's only in ``comment`` (allocated as a tenant, and the
bridge stopped before it set their admin_comment: submit.Placer._mark). ``candidates`` is the pure
rule; ``OrphanSweeper`` confirms each with a GET and cancels, at most CHECKS_PER_SWEEP a sweep.
Every ~10 poll periods, never two sweeps at once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterator

from slurm_bridge.core import logs, metrics
from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import KubeError, phj_path
from slurm_bridge.kube.seams import KubeGets
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.runtime.store import ObjectStore
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, PhjRef
from slurm_bridge.slurm.errors import SlurmError

log = logging.getLogger(__name__)

# At most this many candidates are checked (one GET each) per sweep; the rest wait for the next.
# While a restarted operator's watch still lists its PlaceholderJobs, every live job looks like a
# candidate: with 10,000 that was thousands of GETs a sweep, all finding the PlaceholderJob
# (bench/log, run 8).
CHECKS_PER_SWEEP = 20


def candidates(
    snap: JobSnapshot, known: Collection[str], submitting: Callable[[str], bool], now: float, grace: float
) -> Iterator[tuple[int, PhjRef]]:
    """Live jobs whose PlaceholderJob uid is neither known nor just submitted for, and older than
    ``grace`` seconds (wall clock ``now``): each still needs a GET before it is cancelled.

    A heterogeneous job's component is left to its leader while the leader lives: cancelling the
    leader cancels every component (a component outliving its leader is cancelled on its own)."""
    for job_id, ref in list(snap.refs.items()):
        job = snap.by_id[job_id]
        if job.is_finished or ref.uid in known or submitting(ref.uid):
            continue
        leader = snap.by_id.get(job.het_job_id) if job.is_het_component else None
        if leader is not None and not leader.is_finished:
            continue
        if job.submit_time and now - job.submit_time.timestamp() < grace:
            continue
        yield job_id, ref


class OrphanSweeper:
    def __init__(
        self,
        config: Config,
        kube: KubeGets,
        phjs: ObjectStore,
        poller: SlurmPoller,
        cancel: Callable[[int, PhjRef], Awaitable[None]],
    ) -> None:
        self.config, self.kube, self.phjs, self.poller = config, kube, phjs, poller
        self._cancel = cancel
        self._last_sweep = 0.0
        self._sweeping: asyncio.Task[None] | None = None

    def on_poll(self, snap: JobSnapshot) -> None:
        """Start a sweep when one is due and none runs."""
        now = time.monotonic()
        if now - self._last_sweep >= max(10 * self.config.pollPeriodSeconds, 5.0) and (
            self._sweeping is None or self._sweeping.done()
        ):
            self._last_sweep = now
            self._sweeping = asyncio.create_task(self.sweep(snap))

    async def sweep(self, snap: JobSnapshot) -> None:
        """Cancel live bridge jobs whose PlaceholderJob is gone."""
        known = {p["metadata"]["uid"] for p in self.phjs.values()}
        found = candidates(
            snap, known, lambda uid: self.poller.side(uid).submitting, time.time(), self.config.orphanGraceSeconds
        )
        for job_id, ref in itertools.islice(found, CHECKS_PER_SWEEP):
            logs.bind(namespace=ref.namespace, name=ref.name, jobId=job_id)
            try:
                live = await self.kube.get(phj_path(ref.namespace, ref.name))
                if live is not None and live["metadata"]["uid"] == ref.uid:
                    self.phjs.upsert(live)
                    continue
                await self._cancel(job_id, ref)
                metrics.orphan_swept()
                log.warning(
                    "cancelled orphaned Slurm job %d (PlaceholderJob %s/%s is gone)", job_id, ref.namespace, ref.name
                )
            except (KubeError, SlurmError) as e:
                log.warning("orphan check of Slurm job %d failed: %s", job_id, e)
        await self._sweep_unmarked()

    async def _sweep_unmarked(self) -> None:
        """Cancel live jobs marked only in ``comment`` once older than the grace, when a GET says
        they still are (a placement that was marked meanwhile is the view's)."""
        now = time.time()
        grace = self.config.orphanGraceSeconds
        old = [
            (job_id, ref)
            for job_id, (job, ref) in self.poller.unmarked.items()
            if not (job.submit_time and now - job.submit_time.timestamp() < grace)
        ]
        for job_id, ref in old[:CHECKS_PER_SWEEP]:
            logs.bind(namespace=ref.namespace, name=ref.name, jobId=job_id)
            try:
                job = await self.poller.read_one(job_id)
                if job is None or job.is_finished or job.admin_comment:
                    self.poller.unmarked.pop(job_id, None)
                    continue
                await self._cancel(job_id, ref)
                self.poller.unmarked.pop(job_id, None)
                metrics.orphan_swept()
                log.warning(
                    "cancelled Slurm job %d of user %s: marked for PlaceholderJob %s/%s in its comment only "
                    "(an allocation as a tenant the bridge never finished, or a copied mark)",
                    job_id,
                    job.user_name,
                    ref.namespace,
                    ref.name,
                )
            except SlurmError as e:
                log.warning("check of unmarked Slurm job %d failed: %s", job_id, e)
