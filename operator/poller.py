"""Reads Slurm with one job list per period and tells the controllers which PlaceholderJobs changed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from slurm_bridge.operator.jobref import PhjRef, decode_admin_comment

from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import JobInfo

log = logging.getLogger(__name__)

# After a submit the job is usually allocated within milliseconds; look again this soon rather
# than a whole period later. Many submits share one list, so calls stay amortised.
SOON_SECONDS = 0.15


class JobSnapshot:
    """Slurm's jobs as of one list call, indexed the ways the controllers ask."""

    def __init__(self, jobs: list[JobInfo], bridge_id: str, taken_at: float) -> None:
        self.taken_at = taken_at
        self.by_id: dict[int, JobInfo] = {j.job_id: j for j in jobs}
        self.refs: dict[int, PhjRef] = {}
        self.by_uid: dict[str, list[JobInfo]] = {}
        for j in jobs:
            ref = decode_admin_comment(j.admin_comment)
            if ref is None or ref.bridge != bridge_id:
                continue
            self.refs[j.job_id] = ref
            self.by_uid.setdefault(ref.uid, []).append(j)

    def job_for_uid(self, uid: str) -> JobInfo | None:
        """The bridge's live job for a PlaceholderJob (newest first), else its newest ended one."""
        jobs = sorted(self.by_uid.get(uid, []), key=lambda j: j.job_id, reverse=True)
        for j in jobs:
            if not j.is_finished:
                return j
        return jobs[0] if jobs else None


def _fingerprint(j: JobInfo) -> tuple[object, ...]:
    return (j.states, j.reason, j.nodes)


class SlurmPoller:
    """One ``list_jobs`` per period (sooner after submits); ``synced`` once the first list arrived.

    Controllers must not submit before ``synced``: until then a job submitted before a restart
    would be invisible and submitted twice.
    """

    def __init__(
        self,
        slurm: SlurmClient,
        bridge_id: str,
        period: float,
        on_change: Callable[[PhjRef], None],
        on_poll: Callable[[JobSnapshot], None] | None = None,
    ) -> None:
        self._slurm = slurm
        self._bridge_id = bridge_id
        self._period = period
        self._on_change = on_change
        self._on_poll = on_poll
        self.snapshot: JobSnapshot | None = None
        self.synced = asyncio.Event()
        self.healthy = False
        self.last_error = ""
        self.polls = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def poll_soon(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="slurm-poller")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def poll_once(self) -> JobSnapshot:
        taken_at = time.monotonic()
        jobs = await self._slurm.list_jobs()
        self.polls += 1
        snap = JobSnapshot(jobs, self._bridge_id, taken_at)
        old = self.snapshot
        self.snapshot = snap
        for job_id, ref in snap.refs.items():
            prev = old.by_id.get(job_id) if old else None
            if prev is None or _fingerprint(prev) != _fingerprint(snap.by_id[job_id]):
                self._on_change(ref)
        if old is not None:
            for job_id, ref in old.refs.items():
                if job_id not in snap.by_id:
                    self._on_change(ref)  # vanished from Slurm
        if self._on_poll is not None:
            self._on_poll(snap)
        self.synced.set()
        return snap

    async def _run(self) -> None:
        backoff = self._period
        while True:
            try:
                await self.poll_once()
                if not self.healthy:
                    log.info("Slurm job list OK (%d bridge jobs)", len(self.snapshot.refs) if self.snapshot else 0)
                self.healthy, self.last_error, backoff = True, "", self._period
                delay = self._period
            except SlurmError as e:
                self.healthy, self.last_error = False, str(e)
                log.warning("listing Slurm jobs failed, retrying in %.1fs: %s", backoff, e)
                delay, backoff = backoff, min(backoff * 2, 10.0)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                # A submit wakes the poller early, but never more often than SOON_SECONDS.
                await asyncio.wait_for(self._wake.wait(), timeout=max(delay - SOON_SECONDS, 0))
            await asyncio.sleep(SOON_SECONDS)
