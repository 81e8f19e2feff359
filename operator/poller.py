"""Reads Slurm with one job list per period and tells the controllers which PlaceholderJobs changed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from slurm_bridge.operator.jobref import PhjRef, decode_admin_comment

from slurm_bridge import names
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import JobInfo

log = logging.getLogger(__name__)

# After a submit the job is usually allocated within milliseconds; look again this soon rather
# than a whole period later. Many submits share one list, so calls stay amortised.
MIN_GAP_SECONDS = 0.4
# Incremental lists cannot show a job Slurm purged (after MinJobAge); a full list this often does.
FULL_RESYNC_SECONDS = 30.0


class JobSnapshot:
    """Slurm's jobs as of one poll, indexed the ways the controllers ask."""

    def __init__(self, jobs: dict[int, JobInfo], refs: dict[int, PhjRef], taken_at: float) -> None:
        self.taken_at = taken_at
        self.by_id = jobs
        self.refs = refs
        self.by_uid: dict[str, list[JobInfo]] = {}
        for job_id, ref in refs.items():
            self.by_uid.setdefault(ref.uid, []).append(jobs[job_id])

    def job_for_uid(self, uid: str) -> JobInfo | None:
        """The bridge's live job for a PlaceholderJob (newest first), else its newest ended one."""
        jobs = sorted(self.by_uid.get(uid, []), key=lambda j: j.job_id, reverse=True)
        for j in jobs:
            if not j.is_finished:
                return j
        # A job Slurm refused at submit stays listed as FAILED without nodes: it never held an
        # allocation, so it says nothing about the PlaceholderJob.
        ran = [j for j in jobs if j.nodes]
        return ran[0] if ran else None


def _fingerprint(j: JobInfo) -> tuple[object, ...]:
    return (j.states, j.reason, j.nodes)


class SlurmPoller:
    """One job list per period (sooner after submits); ``synced`` once the first full list arrived.

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
        self._jobs: dict[int, JobInfo] = {}
        self._refs: dict[int, PhjRef] = {}
        self._since: int | None = None
        self._last_full = 0.0
        self.last_duration = 0.0
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
        """One job list call.

        Slurm answers a list with ``update_time`` with *every* job as soon as anything changed,
        and with no job at all otherwise. So an answer with jobs replaces the view (jobs missing
        from it were purged), and an empty answer means nothing changed; a list without
        ``update_time`` every FULL_RESYNC_SECONDS guards against anything this misses.
        """
        started = time.monotonic()
        full = self._since is None or started - self._last_full >= FULL_RESYNC_SECONDS
        # One second of overlap: Slurm's clock has second resolution.
        jobs, last_update = await self._slurm.list_jobs_since(
            None if full else (self._since or 1) - 1, admin_comment_prefix=names.ADMIN_COMMENT_PREFIX
        )
        self.polls += 1
        self.last_duration = time.monotonic() - started
        if last_update is not None:
            self._since = last_update
        if full:
            self._last_full = started
        if not jobs and not full and self.snapshot is not None:
            self.snapshot.taken_at = started
            self.synced.set()
            return self.snapshot
        prev_jobs, prev_refs = self._jobs, self._refs
        self._jobs = {j.job_id: j for j in jobs}
        self._refs = {}
        for j in jobs:
            prev = prev_jobs.get(j.job_id)
            ref = prev_refs.get(j.job_id) if prev is not None and prev.admin_comment == j.admin_comment else None
            if ref is None:
                ref = decode_admin_comment(j.admin_comment)
                if ref is None or ref.bridge != self._bridge_id:
                    continue
            self._refs[j.job_id] = ref
            if prev is None or _fingerprint(prev) != _fingerprint(j):
                self._on_change(ref)
        for job_id, ref in prev_refs.items():
            if job_id not in self._jobs:
                self._on_change(ref)  # purged from Slurm
        snap = JobSnapshot(self._jobs, self._refs, started)
        self.snapshot = snap
        if self._on_poll is not None:
            self._on_poll(snap)
        self.synced.set()
        return snap

    async def _run(self) -> None:
        backoff = self._period
        while True:
            started = time.monotonic()
            try:
                await self.poll_once()
                if not self.healthy:
                    log.info("Slurm job list OK (%d bridge jobs)", len(self._refs))
                self.healthy, self.last_error, backoff = True, "", self._period
                delay = self._period
            except SlurmError as e:
                self.healthy, self.last_error = False, str(e)
                log.warning("listing Slurm jobs failed, retrying in %.1fs: %s", backoff, e)
                delay, backoff = backoff, min(backoff * 2, 10.0)
            # A submit wakes the poller early, but lists start at most every MIN_GAP_SECONDS (or
            # three times their own duration): under load one list serves many submits, and
            # slurmrestd, which serialises every job for each list, is not kept busy.
            earliest = started + max(MIN_GAP_SECONDS, 3 * self.last_duration)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(started + delay - time.monotonic(), 0))
            await asyncio.sleep(max(earliest - time.monotonic(), 0))
