"""Reads Slurm once per period and tells the controllers which PlaceholderJobs changed.

Each poll asks for every job's *state* (``jobs/state``: about 80 bytes a job) and fetches the
details (nodes, reason, admin_comment) only of the bridge's jobs whose state changed; an answer
equal to the last one, with the view as it was then, is not compared job by job again. A full
job list -- about 8 KB a job, for every job Slurm holds -- is read at start-up, when asked for,
and when so many jobs changed that one list is cheaper than their GETs; every
FULL_RESYNC_SECONDS a list with ``update_time`` costs a few bytes when no job changed since the
last full list, and is that full list otherwise.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable
from typing import Protocol

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import PhjRef, decode_admin_comment
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import JobSnapshot as JobSnapshot
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide
from slurm_bridge.operator.runtime import heap
from slurm_bridge.operator.runtime.pollloop import PollLoop
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import JobInfo, JobStates
from slurm_bridge.tasks import cancel_and_wait

log = logging.getLogger(__name__)

# Polls start at most this often, however often they are asked for.
MIN_GAP_SECONDS = 0.4
# A full list this often adopts jobs the bridge did not see being made (another replica, a crash
# between submit and status) and catches anything the state polls could miss. It asks Slurm for
# the jobs changed since the last full list (``update_time``): an unchanged table answers with
# no jobs (a few bytes instead of about 8 KB a job), since the list would say what the view has.
# It runs beside the state polls, which never wait for it: with 10,000 jobs the list is 80 MB and
# took longer than the request timeout on a busy machine, and every poll waited for it.
FULL_RESYNC_SECONDS = 30.0
# ... and at most this share of the time (a list that takes 8 s runs every 80 s at most) ...
FULL_RESYNC_SHARE = 0.1
# ... but a full list without ``update_time`` runs at least this often, whatever Slurm says.
FULL_LIST_MAX_SECONDS = 300.0
# Pending jobs change reason (Priority, Resources, ...) without changing state: read them again
# this often, but at most PENDING_REFRESH_PER_POLL of them per poll (the longest unread first),
# so a deep queue costs a bounded number of GETs per period; the full list every
# FULL_RESYNC_SECONDS reads every reason anyway. (Measured: 300 pending jobs cost 20 GETs a
# second without the cap: docs/performance.md, run 3.)
PENDING_REFRESH_SECONDS = 10.0
PENDING_REFRESH_PER_POLL = 4
# Details are fetched job by job while that is cheaper than one full list: a GET costs about as
# much as listing this many jobs.
GET_COST_IN_LISTED_JOBS = 4
GET_CONCURRENCY = 4


def _fingerprint(j: JobInfo) -> tuple[object, ...]:
    # A pending job's start_time is Slurm's estimate of its start: the waiting pods are told
    # when it moves (lifecycle.pending), so a new estimate is a change of the view. A running job
    # Slurm preempts stays RUNNING with preempt_time set and end_time moved (the handoff ends its
    # pods), and a changed time limit moves end_time: both are changes too.
    running = j.is_running
    return (
        j.states,
        j.reason,
        j.nodes,
        j.start_time if j.is_pending else None,
        j.preempt_time,
        j.end_time if running else None,
    )


class SlurmJobReads(Protocol):
    """The Slurm calls the poller reads jobs with."""

    async def list_jobs_since(
        self, since: int | None, *, admin_comment_prefix: str | None = None
    ) -> tuple[list[JobInfo] | None, int | None]: ...
    async def job_states(self, previous: JobStates | None = None) -> JobStates: ...
    async def get_job(self, job_id: int) -> JobInfo | None: ...
    async def get_jobs(self, job_id: int) -> list[JobInfo]: ...


class SlurmPoller:
    """One cheap state poll per period (sooner when asked); ``synced`` once a full list arrived.

    Controllers must not submit before ``synced``: until then a job submitted before a restart
    would be invisible and submitted twice.
    """

    def __init__(
        self,
        slurm: SlurmJobReads,
        bridge_id: str,
        period: float,
        on_change: Callable[[PhjRef], None],
        on_poll: Callable[[JobSnapshot], None] | None = None,
    ) -> None:
        self._slurm = slurm
        self._bridge_id = bridge_id
        self.period = period
        self._on_change = on_change
        self._on_poll = on_poll
        self.snapshot: JobSnapshot | None = None
        # job id -> when its details were read (monotonic)
        self._read_at: dict[int, float] = {}
        # What the bridge made that this view may not show yet -- the one place for it:
        # job id -> ref: jobs whose details are not read yet (the GET after a submit failed);
        self._expected: dict[int, PhjRef] = {}
        # PlaceholderJob uid -> (job id, when): submits a poll has not shown yet; and uid -> when a
        # submit failed in a way that may still have made the job: nothing is submitted for it
        # again before a full list taken after that shows whether it did. Caches only: after a
        # restart the first full list finds every job by its admin_comment.
        self._made: dict[str, tuple[int, float]] = {}
        self._uncertain: dict[str, float] = {}
        self._full_wanted = True
        self.last_full_at = 0.0
        # Slurm's last_update of the last full list (for update_time), and when the last resync
        # ran, whether it listed or Slurm said nothing changed.
        self._full_update: int | None = None
        self._last_resync = 0.0
        self._list_seconds = 0.0  # how long the last full list took
        self._resyncing: asyncio.Task[None] | None = None
        # job id -> when a poll found it purged: an older list that still shows it must not bring
        # it back (kept until a list that began after that is applied).
        self._purged_at: dict[int, float] = {}
        # The last jobs/state answer, and (answer, view version) of the last poll that found
        # every job as the view has it: while both stay the same there is nothing to compare.
        self._states: JobStates | None = None
        self._settled: tuple[JobStates, int] | None = None
        self.resyncs_unchanged = 0
        self.last_duration = 0.0
        self.synced = asyncio.Event()
        self.polls = 0
        self.full_lists = 0
        self._loop = PollLoop(
            "slurm-poller",
            period,
            self.poll_once,
            log=log,
            ok_message=lambda: f"Slurm job poll OK ({len(self.snapshot.refs) if self.snapshot else 0} bridge jobs)",
            failed="polling Slurm jobs",
            errors=(SlurmError,),
            # A slow state poll means a busy slurmrestd: give it room. (Only state polls count: a
            # full list is slow because it is big.)
            min_gap=lambda: max(MIN_GAP_SECONDS, 3 * self.last_duration),
        )

    @property
    def healthy(self) -> bool:
        return self._loop.healthy

    @property
    def last_error(self) -> str:
        return self._loop.last_error

    def poll_soon(self, *, full: bool = False) -> None:
        """Poll early; ``full``: with a full list (to find a job only its admin_comment names)."""
        self._full_wanted |= full
        self._loop.wake()

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        await cancel_and_wait([self._resyncing])

    async def refresh(self, job_id: int, ref: PhjRef, *, het: bool = False, notify: bool = False) -> JobInfo | None:
        """Read one job the bridge just made, so its state is known without waiting for a poll;
        ``het``: a heterogeneous job's leader, read with every component; ``notify``: a change is
        told to the controllers (the handoff loop's reads of running jobs Slurm may preempt).

        When the read fails the next poll reads it. None: Slurm does not know the job (yet).
        """
        try:
            if het:
                found = await self._slurm.get_jobs(job_id)
            else:
                one = await self._slurm.get_job(job_id)
                found = [one] if one is not None else []
        except SlurmError as e:
            log.info("reading Slurm job %d failed, the next poll reads it: %s", job_id, e)
            self._expected[job_id] = ref
            self.poll_soon()
            return None
        job = next((j for j in found if j.job_id == job_id), None)
        if job is None:
            self._expected[job_id] = ref
            return None
        at = time.monotonic()
        for j in found:  # a heterogeneous job's leader answers with every component
            if j.job_id == job_id or (job.het_job_id and j.het_job_id == job.het_job_id):
                self._apply(j, ref, at, notify=notify)
        return job

    # ---- the bridge's own submits ----------------------------------------------------------------
    def submitted(self, uid: str, job_id: int) -> None:
        """Remember a submit until a poll shows its job (a refresh may not)."""
        self._made[uid] = (job_id, time.monotonic())

    def side(self, uid: str, job_id: int | None = None) -> SlurmSide:
        """The one answer to "does the PlaceholderJob ``uid`` have a Slurm job?", with
        ``job_id`` its status records: the job recorded, else found by the uid in the view (a
        crash between submit and status), else submitted by this process and not shown by a poll
        yet; what else the view holds for it; an uncertain submit. Not ``synced`` before the first
        full list: nothing may be submitted then."""
        made, snap = self._made.get(uid), self.snapshot
        if snap is None:
            snap = JobSnapshot({}, {}, 0.0)
        found = snap.by_id.get(job_id) if job_id else None
        found = found if found is not None else snap.job_for_uid(uid)
        job_id = job_id or (found.job_id if found else None) or (made[0] if made else None)
        return SlurmSide(
            synced=self.synced.is_set() and self.snapshot is not None,
            poll_period=self.period,
            job_id=job_id,
            job=found if found is not None and found.job_id == job_id else snap.by_id.get(job_id or -1),
            found=found,
            others=tuple(o.job_id for o in snap.by_uid.get(uid, []) if o.job_id != job_id and not o.is_finished),
            components=snap.components(job_id) if job_id is not None else (),
            submitted_at=made[1] if made else None,
            taken_at=snap.taken_at,
            uncertain_since=self._uncertain.get(uid),
            last_full_at=self.last_full_at,
        )

    def submit_failed(self, uid: str, *, maybe_applied: bool) -> None:
        """A submit failed; when it may still have made the job, a full list must say first."""
        self._made.pop(uid, None)
        if maybe_applied:
            self._uncertain[uid] = time.monotonic()
            self.poll_soon(full=True)

    def forget_uncertain(self, uid: str) -> None:
        self._uncertain.pop(uid, None)

    def forget(self, uid: str) -> None:
        """The PlaceholderJob is finalized: nothing of its submits is needed any more."""
        self._made.pop(uid, None)
        self._uncertain.pop(uid, None)

    def assume_cancelled(self, job_id: int) -> None:
        """Record a cancel the bridge itself just made, so the next poll does not read the job
        again to learn it (should Slurm report anything else, the states differ and it is read)."""
        snap = self.snapshot
        job = snap.by_id.get(job_id) if snap is not None else None
        if snap is None or job is None:
            return
        # Cancelling a heterogeneous job's leader cancels every component.
        for part in snap.components(job_id) if job.het_job_id == job_id else (job,):
            if not part.is_finished:
                snap.put(part.model_copy(update={"states": ("CANCELLED",)}), snap.refs[part.job_id])

    # ---- polls ---------------------------------------------------------------------------------
    async def poll_once(self) -> JobSnapshot:
        started = time.monotonic()
        if self._full_wanted or self.snapshot is None:
            await self._full(started)
        else:
            if started - self._last_resync >= self._resync_every() and (
                self._resyncing is None or self._resyncing.done()
            ):
                self._last_resync = started
                self._resyncing = asyncio.create_task(self._resync(started), name="slurm-full-list")
            await self._incremental(started)
            self.last_duration = time.monotonic() - started
        self.polls += 1
        snap = self.snapshot
        assert snap is not None
        snap.taken_at = started
        # Forget submits the view now shows.
        for uid in [u for u in self._made if u in snap.by_uid]:
            del self._made[uid]
        if self._on_poll is not None:
            self._on_poll(snap)
        self.synced.set()
        return snap

    async def _resync(self, started: float) -> None:
        """The periodic full list, beside the state polls: skipped (one small answer) when Slurm
        says no job changed since the last full list, which is then still what the list would
        show; without ``update_time`` at least every FULL_LIST_MAX_SECONDS. A failure waits for
        the next period: the state polls go on meanwhile."""
        since = self._full_update if started - self.last_full_at < FULL_LIST_MAX_SECONDS else None
        try:
            jobs, last_update = await self._slurm.list_jobs_since(
                since, admin_comment_prefix=names.ADMIN_COMMENT_PREFIX
            )
        except SlurmError as e:
            log.warning("the periodic full Slurm job list failed, trying again in %.0fs: %s", self._resync_every(), e)
            return
        if jobs is None:
            self.resyncs_unchanged += 1
            return
        self._list_seconds = time.monotonic() - started
        self._replace(started, jobs, last_update)

    def _resync_every(self) -> float:
        return max(FULL_RESYNC_SECONDS, self._list_seconds / FULL_RESYNC_SHARE)

    async def _full(self, started: float) -> None:
        """Replace the view with a full list: jobs missing from it were purged by Slurm."""
        self._full_wanted = False
        jobs, last_update = await self._slurm.list_jobs_since(None, admin_comment_prefix=names.ADMIN_COMMENT_PREFIX)
        self._list_seconds = time.monotonic() - started
        self._last_resync = max(self._last_resync, started)
        self._replace(started, jobs or [], last_update)

    def _replace(self, started: float, jobs: list[JobInfo], last_update: int | None) -> None:
        """Apply a full list taken at ``started``; reads and purges found since are newer."""
        # The answer (80 MB at 10,000 jobs) is freed by now; hand that memory back at once.
        heap.release_free_heap()
        self.full_lists += 1
        if started >= self.last_full_at:
            self.last_full_at = started
            self._full_update = last_update
        if self.snapshot is None:
            self.snapshot = JobSnapshot({}, {}, started)
        seen: set[int] = set()
        for job in jobs:
            ref = self._ref_for(job)
            if ref is None:
                continue
            seen.add(job.job_id)
            if self._purged_at.get(job.job_id, -1.0) >= started:
                continue  # a poll found it purged after this list began
            self._apply(job, ref, started, notify=True, listed=True)
        snap = self.snapshot
        assert snap is not None
        # Only jobs read before the list began can have been purged: one read (a refresh after a
        # submit, an incremental poll) while a slow list ran is newer than the list.
        for job_id in [j for j in snap.by_id if j not in seen and self._read_at.get(j, 0.0) < started]:
            self._forget(job_id)
        self._expected = {j: r for j, r in self._expected.items() if j not in seen}
        self._purged_at = {j: at for j, at in self._purged_at.items() if at >= started}

    async def _incremental(self, started: float) -> None:
        snap = self.snapshot
        assert snap is not None
        previous = self._states
        states = self._states = await self._slurm.job_states(previous)
        wanted: dict[int, PhjRef] = dict(self._expected)
        settled = self._settled
        if not (states.unchanged and settled is not None and settled[0] is previous and settled[1] == snap.version):
            for job_id, job in snap.by_id.items():
                state = states.of(job)
                if state is None or (state != job.states and set(state) != set(job.states)):
                    wanted[job_id] = snap.refs[job_id]
        # else: the same answer as the last poll's, which found every job as the view still has it
        self._settled = (states, snap.version) if not wanted else None
        stale = started - PENDING_REFRESH_SECONDS
        reasons: list[tuple[float, int]] = []  # (last read, job) of pending jobs read long ago
        for job_id in snap.pending:
            if job_id not in wanted and (read_at := self._read_at.get(job_id, 0.0)) < stale:
                reasons.append((read_at, job_id))
        for _, job_id in heapq.nsmallest(PENDING_REFRESH_PER_POLL, reasons):
            wanted[job_id] = snap.refs[job_id]
        if not wanted:
            return
        if len(wanted) * GET_COST_IN_LISTED_JOBS > max(len(states), 1):
            await self._full(started)
            return
        sem = asyncio.Semaphore(GET_CONCURRENCY)

        async def read(job_id: int) -> JobInfo | None:
            async with sem:
                return await self._slurm.get_job(job_id)

        found = await asyncio.gather(*(read(j) for j in wanted))
        for (job_id, ref), got in zip(wanted.items(), found, strict=True):
            if got is not None:
                self._apply(got, ref, started, notify=True)
                self._expected.pop(job_id, None)
            elif job_id in snap.by_id:
                self._forget(job_id)  # purged from Slurm
                self._purged_at[job_id] = started
            elif not states.knows(job_id):
                # An expected job Slurm does not know: the next full list decides.
                self._full_wanted = True

    def _ref_for(self, job: JobInfo) -> PhjRef | None:
        snap = self.snapshot
        known = snap.refs.get(job.job_id) if snap is not None else None
        old = snap.by_id.get(job.job_id) if snap is not None else None
        if known is not None and old is not None and old.admin_comment == job.admin_comment:
            return known
        ref = decode_admin_comment(job.admin_comment)
        return ref if ref is not None and ref.bridge == self._bridge_id else None

    def _apply(self, job: JobInfo, ref: PhjRef, at: float, *, notify: bool, listed: bool = False) -> None:
        """Take in ``job`` as read at ``at``. A list yields to a read begun at the same moment: a
        state poll running beside the list read that job after slurmctld took the list."""
        snap = self.snapshot
        if snap is None:
            snap = self.snapshot = JobSnapshot({}, {}, at)
        old = snap.by_id.get(job.job_id)
        read_at = self._read_at.get(job.job_id, 0.0)
        if old is not None and (read_at > at or (listed and read_at == at)):
            return  # read before the one the view has (a slow list): keep the newer
        self._read_at[job.job_id] = at
        if old is not None and _fingerprint(old) == _fingerprint(job):
            return
        snap.put(job, ref)
        if notify:
            self._on_change(ref)

    def _forget(self, job_id: int) -> None:
        snap = self.snapshot
        assert snap is not None
        ref = snap.refs.get(job_id)
        snap.drop(job_id)
        self._read_at.pop(job_id, None)
        if ref is not None:
            self._on_change(ref)
